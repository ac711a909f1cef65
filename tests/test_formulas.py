"""attn_core.formulas: one SymPy source, its generated code up to date, equal to the plain functions.

The widgets' grids (tests/test_widgets.py) check the generated code against the library
end to end; here: the generated files are what the expressions print today, sympy.solve
derives the book's crossovers, and the general expressions (GQA, MLA head dims, the causal
mask) equal the plain integer functions of attn_core.ledger, attn_core.flops and kv_cache.
"""

import itertools
from fractions import Fraction

import pytest
import sympy as sp

from attn_core import _generated, _tables, flops, formulas, kv_cache, ledger, training

S = formulas  # the symbols live in the module: S.N, S.d, ...


@pytest.fixture(scope="module")
def values():
    return formulas.widget_values()


def test_generated_files_are_up_to_date():
    """attn_core/_generated.py and the block in ledger_widgets.js are what the expressions print now."""
    assert formulas.GENERATED_PY.read_text() == formulas.generated_python(), "run `make formulas`"
    js = formulas.WIDGETS_JS.read_text()
    block = js[js.index(formulas.JS_BEGIN):js.index(formulas.JS_END) + len(formulas.JS_END)]
    assert block == formulas.generated_javascript(), "run `make formulas`"
    assert set(_generated.FUNCTIONS) == {"memory", "flops", "explorer", "fit"}


def test_solve_derives_the_book_crossovers(values):
    """sympy.solve on the ledgers gives N* = 2d/H, 3d/H, 5d/H (memory) and 6d, 2d (FLOPs)."""
    d, H = S.d, S.H
    mem = values["memory"]["n_star"]
    teaching = {S.a_saved: 0, S.b: 2, S.u_mask: 0}
    assert sp.simplify(mem.subs({**teaching, S.k_drop: 1}) - 2 * d / H) == 0
    assert sp.simplify(mem.subs({**teaching, S.k_drop: 0}) - 3 * d / H) == 0
    assert sp.simplify(mem.subs({S.a_saved: 1, S.k_drop: 0, S.b: 2, S.u_mask: 0}) - 5 * d / H) == 0
    fl = values["flops"]
    mlp = {S.m_ffn: 2, S.f_ffn: 4, S.c_causal: 1}
    assert sp.simplify(fl["n_star"].subs(mlp) - 6 * d) == 0
    assert sp.simplify(fl["n_star_attention"].subs(mlp) - 2 * d) == 0
    assert sp.simplify(fl["n_star"].subs({**mlp, S.c_causal: sp.Rational(1, 2)}) - 12 * d) == 0


GRID = list(itertools.product((1, 3), (7, 64, 4096), ((64, 4, 4, 16, 16), (4096, 32, 8, 128, 128),
                                                       (5120, 128, 128, 192, 128), (60, 6, 2, 7, 9)),
                              ("teaching", "autograd"), (True, False), (False, True), (None, 1)))


@pytest.mark.parametrize("B, N, dims, saved, dropout, causal, mask_bytes", GRID, ids=str)
def test_memory_items_equal_activation_ledger(B, N, dims, saved, dropout, causal, mask_bytes):
    d, H, H_kv, D_qk, D_v = dims
    env = {S.B: B, S.N: N, S.d: d, S.H: H, S.H_kv: H_kv, S.D: D_qk, S.D_r: 0, S.D_v: D_v, S.b: 2,
           S.k_drop: int(dropout), S.a_saved: int(saved == "autograd"), S.u_mask: int(mask_bytes == 1),
           S.c_mask: int(causal)}
    book = ledger.activation_ledger(B, N, d, H, "bf16", dropout, saved=saved, mask_bytes=mask_bytes,
                                    causal=causal, num_kv_heads=H_kv, d_head=D_qk, d_v=D_v)
    for name, expr in formulas.memory_items().items():
        assert expr.subs(env) == book.get(name, 0), name


@pytest.mark.parametrize("name", list(kv_cache.MODELS))
def test_model_expressions_equal_model_config(name):
    """Attention weights, layer FLOPs and the KV cache of each preset, expression against ModelConfig."""
    m = kv_cache.MODELS[name]
    mla = m.is_mla
    env = {S.d: m.d_model, S.H: m.num_heads, S.H_kv: m.num_kv_heads, S.D: m.d_head, S.D_v: m.d_v or m.d_head,
           S.D_r: m.rope_dim or 0, S.R: (m.kv_lora_rank + m.rope_dim) if mla else 0,
           S.Q_r: m.q_lora_rank or 0,
           S.F: m.ffn_dim, S.m_ffn: {"mlp": 2, "swiglu": 3}[m.ffn], S.w_ffn: 1, S.L: m.num_layers,
           S.W: m.window or 0, S.B: 2, S.b: 2}
    assert formulas.attention_params().subs(env) == m.attention_params()
    lin, quad = formulas.layer_flops()
    for N, causal in itertools.product((1, 4096, 100_000), (False, True)):
        at = {**env, S.N: N, S.c_causal: Fraction(1, 2) if causal else 1}
        assert (lin.subs(at), quad.subs(at)) == flops.model_layer_flops(m, N, causal=causal)
        assert formulas.kv_cache_bytes().subs(at) == m.kv_bytes(N, batch=2)


def test_plain_layer_flops_and_fused_bytes():
    """The MHA special case (H_kv = H, D = D_v = d/H) is the 24 N d^2 + 4 N^2 d ledger and six (B, N, d)."""
    lin, quad = formulas.layer_flops()
    for N, d, H in ((63, 60, 5), (4096, 3072, 24)):
        D = Fraction(d, H)
        env = {S.N: N, S.d: d, S.H: H, S.H_kv: H, S.D: D, S.D_v: D, S.D_r: 0, S.R: 0,
               S.Q_r: 0, S.F: 4 * d, S.m_ffn: 2, S.w_ffn: 1, S.c_causal: 1, S.B: 2, S.b: 2, S.a_saved: 0}
        assert (lin.subs(env), quad.subs(env)) == flops.layer_flops(N, d)
        assert formulas.fused_bytes().subs(env) == ledger.fused_activation_bytes(2, N, d, "bf16")


def test_python_and_javascript_printers():
    """The printers keep 1/2 exact in Python and give null for a division by zero."""
    x = sp.Symbol("x")
    fn = formulas.python_function({"half": x / 2, "inv": 1 / x})
    assert fn({"x": Fraction(3)}) == {"half": Fraction(3, 2), "inv": Fraction(1, 3)}
    assert fn({"x": Fraction(0)})["inv"] is None
    js = formulas.javascript_source("f", {"half": x / 2})
    assert "Number.isFinite" in js and "function f(env)" in js


BLOCK_GRID = list(itertools.product(
    (1, 3), (7, 4096), ((24, 4, 2, 40), (4096, 32, 8, 14336)), ("layernorm", "rmsnorm"), ("gelu", "swiglu"),
    ("eager", "fused"), ("none", "selective", "full"), ((True, None), (True, 1), (False, None)),
    ("fp32", "bf16")))


@pytest.fixture(scope="module")
def block_items_fn():
    items = formulas.block_items()
    return list(items), formulas.python_function(items)


@pytest.mark.parametrize("B, N, dims, norm, ffn, attention, recompute, drop_mask, dtype", BLOCK_GRID, ids=str)
def test_block_items_equal_block_ledger(block_items_fn, B, N, dims, norm, ffn, attention, recompute,
                                        drop_mask, dtype):
    """The SymPy block ledger (what the "does it fit" page evaluates) equals ledger.block_ledger.

    Evaluated exactly through the same printer that writes attn_core/_generated.py.
    """
    d, H, H_kv, F_ = dims
    dropout, mask_bytes = drop_mask
    env = {"B": B, "N": N, "d": d, "H": H, "H_kv": H_kv, "F": F_, "b": ledger.DTYPE_BYTES[dtype],
           "k_drop": int(dropout), "u_mask": int(mask_bytes == 1)}
    for sw, opt in (("norm", norm), ("ffn_kind", ffn), ("attention", attention), ("recompute", recompute)):
        env.update(_tables.SWITCHES[sw][opt])
    book = ledger.block_ledger(B, N, d, H, num_kv_heads=H_kv, ffn=ffn, ffn_dim=F_, norm=norm, dropout=dropout,
                               attention=attention, mask_bytes=mask_bytes, recompute=recompute, dtype=dtype)
    names, fn = block_items_fn
    assert names == list(book)
    assert fn({k: Fraction(v) for k, v in env.items()}) == book


def test_block_items_subs_at_one_point():
    """The same through sympy's subs, at one point (the grid above uses the generated printer)."""
    env = {S.B: 2, S.N: 7, S.d: 24, S.H: 4, S.H_kv: 2, S.F: 40, S.b: 2, S.k_drop: 1, S.u_mask: 0,
           S.n_rms: 1, S.g_swiglu: 1, S.e_fused: 0, S.r_sel: 0, S.r_full: 0}
    book = ledger.block_ledger(2, 7, 24, 4, num_kv_heads=2, ffn="swiglu", ffn_dim=40, norm="rmsnorm")
    assert {k: e.subs(env) for k, e in formulas.block_items().items()} == book


@pytest.mark.parametrize("precision, optimizer, stage, ranks", list(itertools.product(
    training.PRECISIONS, training.OPTIMIZERS, training.ZERO_STAGES, (1, 7, 64))))
def test_training_state_equals_training(precision, optimizer, stage, ranks):
    env = {S.P_w: 7_500_000_001, S.N_d: ranks}
    for sw, opt in (("precision", precision), ("optimizer", optimizer), ("zero", str(stage))):
        env.update({getattr(S, k): v for k, v in _tables.SWITCHES[sw][opt].items()})
    book = training.training_state_bytes(7_500_000_001, precision=precision, optimizer=optimizer,
                                         zero_stage=stage, dp_ranks=ranks)
    assert {k: e.subs(env) for k, e in formulas.training_state().items()} == book


def test_fit_n_max_is_where_the_total_meets_the_memory():
    """n_max solves total(N) = memory: the total at n_max equals the memory (eager, quadratic, and fused)."""
    fn = formulas.python_function(formulas.fit_values())
    from attn_core.widgets import FitWidget
    for attention, recompute in (("eager", "none"), ("fused", "selective"), ("eager", "full")):
        w = FitWidget(attention=attention, recompute=recompute, mem_gib=80)
        n = w.values["n_max"]
        assert n and n > 1
        from attn_core.widgets._spec import _SPEC, build_env
        env = build_env(_SPEC["widgets"]["fit"], {**w.state(), "N": Fraction(n)}, _SPEC)
        total = fn(env)["total_bytes"]
        assert abs(float(total) / w.values["mem_bytes"] - 1) < 1e-9
