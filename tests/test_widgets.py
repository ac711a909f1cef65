"""attn_core.widgets: the generated formulas equal the library, the widgets show them, the page computes them.

* The widgets' values (attn_core.formulas.widget_values) equal the library's public functions
  (ledger, flops, kv_cache, training) over a grid of inputs.
* Each widget's ``values`` follow its traits and equal the library; bad traits are rejected
  with an error naming the trait.
* The front end is one local ES module with no network access; with Node.js, its evaluator
  (static/formulas.js and the block between the evaluator markers) gives Python's numbers over the grid.
"""

import itertools
import json
import math
import re
import shutil
import subprocess
import time
from fractions import Fraction

import pytest
import traitlets

from attn_core import flops, formulas, kv_cache, ledger, training
from attn_core import widgets as W

STATIC = formulas.GENERATED_JS.parent
JS = STATIC / "ledger_widgets.js"


def memory_state(B=1, N=4096, d=3072, H=24, dtype="bf16", dropout=True, saved="teaching", mask="dtype"):
    return {"B": B, "N": N, "d": d, "H": H, "dtype": dtype, "dropout": dropout, "saved": saved, "mask": mask}


def flops_state(N=4096, d=3072, H=24, ffn="mlp", causal=False, F=None, H_kv=None):
    return {"N": N, "d": d, "H": H, "H_kv": H if H_kv is None else H_kv, "F": 4 * d if F is None else F,
            "ffn": ffn, "causal": causal}


def explorer_state(model=None, N=4096, dtype="bf16", causal=False, dropout=True, B=1, saved="teaching",
                   mask="dtype", **arch):
    base = W.model_traits(kv_cache.MODELS[model or W.DEFAULT_MODEL])
    return {**base, **arch, "N": N, "dtype": dtype, "causal": causal, "dropout": dropout, "B": B,
            "saved": saved, "mask": mask}


def config_of(state) -> kv_cache.ModelConfig:
    """The ModelConfig an Explorer state describes (the inverse of model_traits)."""
    mla = state["kv_latent"] > 0
    return kv_cache.ModelConfig(
        "state", state["L"], state["d"], state["H"], state["H_kv"], state["D"], state["F"], ffn=state["ffn"],
        window=state["window"] or None, d_v=state["D_v"],
        kv_lora_rank=state["kv_latent"] - state["rope_dim"] if mla else None,
        rope_dim=state["rope_dim"] if mla else None, q_lora_rank=state["q_lora"] or None)


# ------------------------------------------------------------------------- grids (readable ids)
MEMORY_GRID = [
    memory_state(B, N, d, H, dtype, dropout, saved, mask)
    for B, N, (d, H), dtype, dropout, (saved, mask) in itertools.product(
        (1, 3), (1, 63, 256, 4096, 131072), ((64, 4), (60, 5), (3072, 24), (8192, 64)),
        ("fp32", "bf16", "fp8"), (True, False),
        (("teaching", "dtype"), ("autograd", "dtype"), ("autograd", "bool")))
]
FLOPS_GRID = [
    flops_state(N, d, H, ffn, causal, F=round(mult * d), H_kv=H // g)
    for N, (d, H), ffn, causal, mult, g in itertools.product(
        (1, 63, 4096, 18432, 1048576), ((64, 4), (768, 12), (3072, 24), (5120, 128)),
        ("mlp", "swiglu"), (False, True), (4.0, 3.5, 2.6875), (1, 4))
]
EXPLORER_GRID = [
    explorer_state(model, N, dtype, causal, dropout, saved=saved)
    for model, N, dtype, causal, (dropout, saved) in itertools.product(
        kv_cache.MODELS, (1, 256, 4096, 131072, 1048576), ("fp32", "bf16"), (False, True),
        ((True, "teaching"), (False, "autograd")))
] + [  # custom shapes: GQA, MQA, windows, odd sizes, batches
    explorer_state(None, N, "fp8", False, False, B=B, d=d, H=H, H_kv=H_kv, L=L, D=d // H, D_v=d // H,
                   F=F, ffn=ffn, window=window, kv_latent=0, rope_dim=0, q_lora=0, mask="bool")
    for N, B, (d, H, H_kv), L, F, ffn, window in [
        (63, 1, (60, 5, 1), 3, 240, "mlp", 0),
        (5000, 2, (4096, 32, 8), 32, 11008, "swiglu", 4096),
        (100, 4, (2048, 16, 4), 24, 5632, "swiglu", 4096),
        (1048576, 1, (16384, 128, 8), 126, 53248, "swiglu", 0),
    ]
]


def fit_state(model="Llama 3 8B", N=4096, B=1, precision="bf16_mixed", optimizer="adamw", zero_stage=1,
              dp_ranks=8, recompute="selective", attention="fused", dropout=False, mem_gib=80, tp=1,
              sequence_parallel=False, cp=1, **arch):
    base = W._spec.fit_traits(kv_cache.MODELS[model])
    return {**base, **arch, "N": N, "B": B, "precision": precision, "optimizer": optimizer,
            "zero_stage": zero_stage, "dp_ranks": dp_ranks, "recompute": recompute, "attention": attention,
            "dropout": dropout, "mem_gib": mem_gib, "tp": tp, "sequence_parallel": sequence_parallel,
            "cp": cp}


# (tp, sequence_parallel, cp), taken in turn along the grid; a tp the preset's H, H_kv, F do not
# allow falls back to 2 (every preset's H, H_kv and F are even)
PARALLEL = [(1, False, 1), (2, False, 1), (4, True, 1), (8, True, 2), (1, True, 4), (2, False, 8),
            (4, False, 2)]


def _with_parallel(i, state):
    tp, sp_, cp = PARALLEL[i % len(PARALLEL)]
    if any(state[k] % tp for k in ("H", "H_kv", "F")):
        tp = 2
    return {**state, "tp": tp, "sequence_parallel": sp_, "cp": cp}


FIT_GRID = [
    _with_parallel(i, fit_state(model, N, B, precision, optimizer, zero, dp, recompute, attention, dropout,
                                mem))
    for i, (model, (N, B), precision, (optimizer, zero, dp), recompute, (attention, dropout), mem)
    in enumerate(itertools.product(
        ("Llama 3 8B", "GPT-2 small", "Llama 2 70B", W.DEFAULT_MODEL), ((1, 1), (4096, 2), (131072, 1)),
        ("fp32", "bf16_mixed"), (("adamw", 0, 1), ("sgd_momentum", 2, 64), ("adamw", 3, 1024)),
        ("none", "selective", "full"), (("eager", True), ("fused", False)), (16, 80.0, 141.5)))
]


def _id(state):
    return ",".join(f"{k}={v}" for k, v in state.items() if k in ("B", "N", "d", "H", "H_kv", "L", "dtype",
                                                                    "dropout", "ffn", "causal", "F",
                                                                    "window", "saved", "mask"))


# ------------------------------------------------------------------------- values == library
def test_spec_is_json_and_names_every_symbol():
    spec = W.formula_spec()
    assert json.loads(json.dumps(spec)) == spec  # JSON-able as it is
    assert spec["format"] == W.SPEC_FORMAT
    assert spec["dtype_bytes"] == ledger.DTYPE_BYTES
    assert {k: v["b"] for k, v in spec["switches"]["dtype"].items()} == ledger.DTYPE_BYTES
    for kind in ("memory", "flops", "explorer", "fit"):
        recipe = spec["widgets"][kind]
        set_by_page = set(recipe["inputs"]) | {s for sw in recipe["switches"]
                                               for opt in spec["switches"][sw].values() for s in opt}
        env = {name: Fraction(2) for name in set_by_page}
        formulas.widget_values(kind, env)  # every symbol the formulas need is set by a slider or a menu
        assert set_by_page <= set(spec["symbols"]), "every symbol is documented"


@pytest.mark.parametrize("state", MEMORY_GRID, ids=_id)
def test_memory_values_equal_ledger(state):
    """Each item, the total, the fused side and N* equal attn_core.ledger for the same inputs."""
    v = W.compute_values("memory", state, exact=True)
    B, N, d, H, dtype, dropout = (state[k] for k in ("B", "N", "d", "H", "dtype", "dropout"))
    autograd = state["saved"] == "autograd"
    mask_bytes = 1 if state["mask"] == "bool" else None
    items = ledger.activation_ledger(B, N, d, H, dtype, dropout=dropout, saved=state["saved"],
                                     mask_bytes=mask_bytes)
    for name, nbytes in items.items():
        assert v[f"item.{name}"] == nbytes, name
    for name in set(ledger.ITEM_SHAPES) - set(items):
        assert v[f"item.{name}"] == 0, name
    assert v["total_bytes"] == sum(items.values())
    quad = sum(items[k] for k in ("S", "P", "dropout", "P_drop") if k in items)
    assert v["quadratic_bytes"] == quad
    if not autograd:
        fused = ledger.fused_activation_bytes(B, N, d, dtype)
        assert v["fused_bytes"] == fused
        assert v["eager_over_fused"] == Fraction(sum(items.values()), fused)
    crossover = ledger.memory_crossover(d, H, saved=state["saved"], dropout=dropout, dtype=dtype,
                                        mask_bytes=mask_bytes)
    assert float(v["n_star"]) == pytest.approx(crossover, rel=1e-15)
    # at N* the two parts are equal (exactly, the crossover is rational)
    at = W.compute_values("memory", {**state, "N": 1}, exact=True)
    assert at["linear_bytes"] * v["n_star"] == at["quadratic_bytes"] * v["n_star"] ** 2


@pytest.mark.parametrize("state", FLOPS_GRID, ids=_id)
def test_flops_values_equal_layer_flops(state):
    """The widget's numbers are those of a model of the same shape (flops.model_layer_flops), and for
    MHA those of the 24 N d^2 + 4 N^2 d ledger (flops.layer_flops)."""
    v = W.compute_values("flops", state, exact=True)
    N, d, H, H_kv, F_, ffn, causal = (state[k] for k in ("N", "d", "H", "H_kv", "F", "ffn", "causal"))
    model = kv_cache.ModelConfig("state", 1, d, H, H_kv, d // H, F_, ffn=ffn)
    linear, quadratic = flops.model_layer_flops(model, N, causal=causal)
    assert (v["linear_flops"], v["quadratic_flops"]) == (linear, quadratic)
    lin_attn, quad_attn = flops.model_layer_flops(model, N, causal=causal, with_ffn=False)
    assert v["linear_flops_attention"] == lin_attn
    assert v["total_flops_attention"] == lin_attn + quad_attn
    assert float(v["n_star"]) == flops.model_flops_crossover(model, causal=causal)
    assert float(v["n_star_attention"]) == flops.model_flops_crossover(model, causal=causal, with_ffn=False)
    assert v["d_head"] == Fraction(d, H)
    if H_kv == H and F_ == 4 * d and ffn == "mlp":
        assert (linear, quadratic) == flops.layer_flops(N, d, causal=causal)


@pytest.mark.parametrize("state", EXPLORER_GRID, ids=_id)
def test_explorer_values_equal_library(state):
    v = W.compute_values("explorer", state, exact=True)
    N, H, L, D, dtype = (state[k] for k in ("N", "H", "L", "D", "dtype"))
    b = ledger.DTYPE_BYTES[dtype]
    B = state["B"]
    model = config_of(state)
    # FLOPs of one layer of the model as built (GQA, MLA, its FFN)
    linear, quadratic = flops.model_layer_flops(model, N, causal=state["causal"])
    assert (v["linear_flops"], v["quadratic_flops"]) == (linear, quadratic)
    assert float(v["n_star_flops"]) == flops.model_flops_crossover(model, causal=state["causal"])
    assert float(v["n_star_flops_attention"]) == flops.model_flops_crossover(
        model, causal=state["causal"], with_ffn=False)
    # activations: one layer and L layers, with the model's head dims
    d_qk = D + state["rope_dim"]
    items = ledger.activation_ledger(B, N, state["d"], H, dtype, dropout=state["dropout"],
                                     saved=state["saved"], num_kv_heads=state["H_kv"], d_head=d_qk,
                                     d_v=state["D_v"], mask_bytes=1 if state["mask"] == "bool" else None)
    eager = sum(items.values())
    assert v["act_layer_eager"] == eager and v["act_eager"] == L * eager
    # KV cache and the linear-attention state
    assert v["kv_cache_bytes"] == model.kv_bytes(N, batch=B, bytes_per_value=b)
    assert v["kv_bytes_per_token"] == model.kv_bytes_per_token(b)
    # one state per key/value head: query heads that share K and V share the state sum k v^T
    assert v["linear_state_bytes"] == kv_cache.linear_state_bytes(L, state["H_kv"], D, state["D_v"], batch=B,
                                                                  bytes_per_value=b)
    # the KV cache (without a window) equals the state at n_star_kv_state
    assert v["n_star_kv_state"] * v["kv_bytes_per_token"] * B == v["linear_state_bytes"]


@pytest.mark.parametrize("state", FIT_GRID[::7], ids=_id)
def test_fit_values_equal_library(state):
    """The "does it fit" widget's items, state and total equal block_ledger and training_state_bytes,
    shared out over the TP and CP ranks by parallel.per_rank_activations (itself checked against
    Korthikanti et al.'s count and, for CP, against the ring's ledger in test_parallel.py)."""
    from attn_core import parallel

    v = W.compute_values("fit", state, exact=True)
    whole = ledger.block_ledger(state["B"], state["N"], state["d"], state["H"], num_kv_heads=state["H_kv"],
                                ffn=state["ffn"], ffn_dim=state["F"], norm=state["norm"],
                                dropout=state["dropout"],
                                attention=state["attention"], mask_bytes=1, recompute=state["recompute"],
                                dtype="fp32" if state["precision"] == "fp32" else "bf16")
    items = parallel.per_rank_activations(whole, t=state["tp"], sequence_parallel=state["sequence_parallel"],
                                          c=state["cp"], attention=state["attention"])
    for name, nbytes in items.items():
        assert v[f"item.{name}"] == nbytes, name
    assert v["layer_bytes"] == sum(items.values())
    assert v["activations_bytes"] == state["L"] * sum(items.values())
    # a TP rank holds 1/t of every split parameter, and the replicated ones whole
    rep_params = state["params_replicated"]
    per_rank = Fraction(state["params"] - rep_params, state["tp"]) + rep_params
    assert v["params_per_rank"] == per_rank
    assert v["devices"] == state["dp_ranks"] * state["tp"] * state["cp"]
    # the training state is linear in the parameters: the split ones' share plus the replicated ones'
    def state_of(n):
        return training.training_state_bytes(n, precision=state["precision"], optimizer=state["optimizer"],
                                             zero_stage=state["zero_stage"],
                                             dp_ranks=state["dp_ranks"] * state["cp"])  # DP x CP ranks

    split, rep = state_of(state["params"] - state["params_replicated"]), state_of(state["params_replicated"])
    st = {k: Fraction(split[k]) / state["tp"] + rep[k] for k in split}
    assert (v["weights_bytes"], v["gradients_bytes"], v["optimizer_bytes"]) == (
        st["weights"], st["gradients"], st["optimizer"])
    assert v["total_bytes"] == sum(st.values()) + v["activations_bytes"]
    assert v["fits"] == (v["total_bytes"] <= Fraction(state["mem_gib"]) * 2**30)


def test_fit_n_max_is_the_longest_n():
    """The longest N fits and one more token does not (whole tokens, Python's exact evaluation)."""
    for state in FIT_GRID[::37]:
        n = W.compute_values("fit", state)["n_max"]
        if not n or n < 2:
            continue
        assert W.compute_values("fit", {**state, "N": int(n)})["fits"] == 1, state
        assert W.compute_values("fit", {**state, "N": int(n) + 1})["fits"] == 0, state


def test_fit_widget_presets_and_traits():
    w = W.FitWidget()
    assert w.model == "Llama 3 8B" and w.params == kv_cache.MODELS["Llama 3 8B"].num_params()
    w.model = "GPT-2 small"
    assert (w.d, w.H, w.H_kv, w.norm, w.ffn) == (768, 12, 12, "layernorm", "gelu")
    before = w.values["total_bytes"]
    w.recompute = "full"
    assert w.values["total_bytes"] < before
    assert "DeepSeek-V2" not in W.fit.FIT_MODELS


def test_fit_widget_parallel_degrees():
    """TP, SP and CP shrink a rank's share; a preset keeps the TP degree only where it divides H, H_kv, F."""
    w = W.FitWidget(model="Llama 3 70B", N=32768)
    one = w.values
    w.tp = 8
    tp = w.values
    assert tp["weights_bytes"] < one["weights_bytes"] / 7
    assert tp["activations_bytes"] < one["activations_bytes"]
    w.sequence_parallel = True
    assert w.values["activations_bytes"] < tp["activations_bytes"]
    assert w.values["weights_bytes"] == tp["weights_bytes"]  # SP splits activations, not weights
    before = w.values
    w.cp = 4
    assert w.values["activations_bytes"] == before["activations_bytes"] / 4
    assert w.values["devices"] == 8 * 8 * 4 and w.values["n_max"] > before["n_max"]
    with pytest.raises(traitlets.TraitError, match="tp"):
        w.H_kv = 4 * 1  # 8 does not divide 4
    w.model = "Llama 2 7B"  # H = H_kv = 32, F = 11008: 8 divides all three
    assert w.tp == 8
    w.model = "GPT-2 small"  # H = 12: 8 does not divide it
    assert (w.tp, w.H) == (1, 12)


@pytest.mark.parametrize("name", list(kv_cache.MODELS))
def test_presets_match_model_configs(name):
    """Each preset's KV cache and FLOPs equal its ModelConfig (window, GQA and MLA included)."""
    m = kv_cache.MODELS[name]
    assert config_of(explorer_state(name)).attention_params() == m.attention_params()
    for N in (1, 4096, 131072):
        v = W.compute_values("explorer", explorer_state(name, N))
        assert v["kv_cache_bytes"] == m.kv_bytes(N)
        assert v["kv_bytes_per_token"] == m.kv_bytes_per_token()
        assert (v["linear_flops"], v["quadratic_flops"]) == flops.model_layer_flops(m, N)


def test_worked_example_through_the_widgets():
    """The 3.6B worked example: 2,566,914,048 bytes at N = 4096, 17x fused, N* = 256; FLOPs N* 18432, 6144."""
    v = W.MemoryLedgerWidget().values
    assert (v["total_bytes"], v["eager_over_fused"], v["n_star"]) == (2_566_914_048, 17, 256)
    assert round(100 * v["quadratic_share"], 1) == 94.1
    f = W.FlopsWidget().values
    assert (f["n_star"], f["n_star_attention"]) == (18432, 6144)
    assert round(100 * f["quadratic_share"], 1) == 18.2
    # as autograd saves it, without dropout: one N x N tensor against five linear ones, N* = 5d/H
    a = W.MemoryLedgerWidget(saved="autograd", dropout=False).values
    assert a["n_star"] == 640


# ------------------------------------------------------------------------- widgets: traits -> values
def test_memory_widget_values_follow_traits():
    w = W.MemoryLedgerWidget()
    seen = []
    w.observe(lambda ch: seen.append(ch["new"]["total_bytes"]), names="values")
    w.N = 8192
    assert w.values["total_bytes"] == sum(ledger.activation_ledger(1, 8192, 3072, 24).values())
    with w.hold_trait_notifications():  # d and H together: 4096 / 24 alone would be rejected
        w.d, w.H = 4096, 32
    w.dtype, w.dropout = "fp32", False
    items = ledger.activation_ledger(1, 8192, 4096, 32, "fp32", dropout=False)
    assert w.values == W.compute_values("memory", w.state())
    shown = {k[5:]: v for k, v in w.values.items() if k.startswith("item.")}
    assert {k: v for k, v in shown.items() if k in items} == items
    assert all(v == 0 for k, v in shown.items() if k not in items)  # the autograd-only items
    assert w.values["n_star"] == 3 * 4096 / 32  # without dropout: 4 B N d b... 6 B N d = 2 B H N^2
    assert len(seen) >= 4
    with pytest.raises(traitlets.TraitError):
        w.values = {}  # read-only


def test_flops_widget_values_follow_traits():
    w = W.FlopsWidget(model="custom", d=4096, H=32, H_kv=32, F=16384, ffn="swiglu", causal=True, N=131072)
    lin, quad = flops.layer_flops(131072, 4096, ffn="swiglu", causal=True)
    assert (w.values["linear_flops"], w.values["quadratic_flops"]) == (lin, quad)
    w.causal = False
    assert w.values["n_star"] == flops.flops_crossover(4096, ffn="swiglu")
    w.ffn = "mlp"
    assert w.values["n_star"] == 6 * 4096
    w.H_kv = 8
    w.H = 8  # H changes D, not the FLOPs
    assert w.values["d_head"] == 512 and w.values["n_star"] == 6 * 4096
    with pytest.raises(traitlets.TraitError, match="H_kv"):
        w.H = 4  # H_kv = 8 key/value heads cannot serve 4 query heads


def test_flops_widget_presets_give_the_models_crossover():
    """Llama 3 8B's preset (GQA, a SwiGLU FFN of 14,336) gives its N* = 26,624, not 6d."""
    w = W.FlopsWidget(model="Llama 3 8B")
    assert (w.d, w.H, w.H_kv, w.F, w.ffn) == (4096, 32, 8, 14336, "swiglu")
    assert w.values["n_star"] == flops.model_flops_crossover(kv_cache.MODELS["Llama 3 8B"]) == 26624
    w.H_kv = 32  # a slider move makes it custom
    assert w.model == "custom" and w.values["n_star"] > 26624
    w.model = "GPT-2 small"
    assert (w.d, w.H, w.H_kv, w.F, w.ffn) == (768, 12, 12, 3072, "mlp") and w.model == "GPT-2 small"
    assert W.FlopsWidget.compute_values(model="Llama 3 8B")["n_star"] == 26624


def test_explorer_presets_and_custom():
    e = W.Explorer()
    assert e.model == W.DEFAULT_MODEL and e.values["n_star_flops"] == 18432
    e.model = "Llama 3 70B"
    m = kv_cache.MODELS["Llama 3 70B"]
    assert (e.d, e.H, e.H_kv, e.L, e.D, e.F, e.ffn) == (8192, 64, 8, 80, 128, 28672, "swiglu")
    e.N = 131072
    assert e.values["kv_cache_bytes"] == m.kv_bytes(131072) == 40 * 1024**3
    e.L = 40  # an architecture slider: the model becomes custom, the rest stays
    assert e.model == "custom" and e.values["kv_cache_bytes"] == m.with_(num_layers=40).kv_bytes(131072)
    with e.hold_trait_notifications():
        e.d, e.H, e.H_kv = 4096, 16, 4
    assert e.D == 256  # D follows d / H for a custom model
    e.model = "DeepSeek-V2"  # MLA: D = 128 although d / H = 40
    assert (e.D, e.kv_latent) == (128, 576)
    assert e.values["kv_bytes_per_token"] == kv_cache.MODELS["DeepSeek-V2"].kv_bytes_per_token()
    e2 = W.Explorer(model="Mistral 7B", N=65536)
    assert e2.model == "Mistral 7B" and e2.window == 4096
    assert e2.values["kv_cache_bytes"] == kv_cache.MODELS["Mistral 7B"].kv_bytes(65536)
    e3 = W.Explorer(model="Llama 3 8B", d=2048)  # a preset changed at construction is custom
    assert e3.model == "custom" and e3.D == 2048 // 32


@pytest.mark.parametrize("cls", [W.MemoryLedgerWidget, W.FlopsWidget, W.Explorer, W.FitWidget],
                         ids=lambda c: c.__name__)
def test_classmethod_compute_values_from_synced_state(cls):
    """cls.compute_values(**synced state) is what the page of a built book must show (browser test)."""
    w = cls(N=65536)
    state = json.loads(json.dumps(w.get_state(), default=str))  # as embedded in the page
    assert state["_anywidget_id"] == f"{cls.__module__}.{cls.__name__}"
    assert cls.__module__.startswith("attn_core.widgets.")
    assert cls.compute_values(**state) == w.values
    assert cls.compute_values() == cls().values  # defaults
    assert cls.compute_values(N=1024, layout="IPY_MODEL_x") == cls(N=1024).values


def test_presets_cover_models():
    spec = W.formula_spec()
    assert list(spec["models"]) == list(kv_cache.MODELS)
    assert list(W.Explorer.model.values) == [*kv_cache.MODELS, "custom"]
    for name, m in kv_cache.MODELS.items():
        e = W.Explorer(model=name)
        assert e.model == name
        assert {k: getattr(e, k) for k in W.model_traits(m)} == W.model_traits(m)
        assert {k: spec["models"][name][k] for k in W.model_traits(m)} == W.model_traits(m)


@pytest.mark.parametrize(
    "make, trait",
    [
        (lambda: W.MemoryLedgerWidget(N=0), "N"),
        (lambda: W.MemoryLedgerWidget(N=16.5), "N"),
        (lambda: W.MemoryLedgerWidget(dtype="int3"), "dtype"),
        (lambda: W.MemoryLedgerWidget(H=7), "H"),
        (lambda: W.MemoryLedgerWidget(d=3010), "d"),
        (lambda: W.FlopsWidget(ffn="moe"), "ffn"),
        (lambda: W.FlopsWidget(d=-1), "d"),
        (lambda: W.FlopsWidget(F=0), "F"),
        (lambda: W.Explorer(model="GPT-5"), "model"),
        (lambda: W.Explorer(H_kv=5), "H_kv"),
        (lambda: W.Explorer(L=0), "L"),
        (lambda: W.Explorer(window=-1), "window"),
        (lambda: W.FitWidget(zero_stage=4), "zero_stage"),
        (lambda: W.FitWidget(model="DeepSeek-V2"), "model"),
        (lambda: W.FitWidget(precision="fp8"), "precision"),
        (lambda: W.FitWidget(dp_ranks=0), "dp_ranks"),
        (lambda: W.FitWidget(recompute="half"), "recompute"),
        (lambda: W.FitWidget(tp=3), "tp"),
        (lambda: W.FitWidget(cp=0), "cp"),
    ],
    ids=["N=0", "N float", "dtype", "H does not divide d", "d not divisible", "ffn", "d<0", "F=0",
         "model", "H_kv does not divide H", "L=0", "window<0", "zero_stage=4", "fit model", "precision",
         "dp_ranks=0", "recompute", "tp does not divide H", "cp=0"],
)
def test_bad_traits_rejected(make, trait):
    with pytest.raises((ValueError, traitlets.TraitError), match=rf"\b{trait}\b"):
        make()


def test_bad_trait_on_a_live_widget_keeps_the_old_values():
    w = W.MemoryLedgerWidget()
    before = dict(w.values)
    with pytest.raises(traitlets.TraitError, match="H"):
        w.H = 7
    assert w.H == 24 and w.values == before


def test_observer_latency():
    """A slider move costs the kernel well under a millisecond (no torch in observers)."""
    e = W.Explorer()
    t0 = time.perf_counter()
    for i in range(200):
        e.N = 1000 + i
    per_move = (time.perf_counter() - t0) / 200
    assert per_move < 0.01, f"{per_move * 1e3:.2f} ms per trait change"


def test_explorer_figure_has_labelled_axes():
    """The one figure a chapter draws with matplotlib (chapter 7's static view of the Explorer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for w in (W.Explorer(model="Mistral 7B"), W.Explorer(causal=True)):
        fig = w.figure()
        for ax in fig.axes:
            assert ax.get_title() and ax.get_ylabel()
            assert ax.get_xlabel() or ax.get_xticklabels()
        assert any("N (tokens" in ax.get_xlabel() for ax in fig.axes)
        plt.close(fig)


def test_time_crossover_helper():
    ns = [256, 512, 1024, 2048]
    # ratios 0.8 then 4/3 around N = 512..1024: interpolated on log N and log ratio
    expected = 2 ** (9 + math.log(1.25) / math.log(1.25 * 4 / 3))
    assert W.time_crossover(ns, [1, 2, 4, 8], [2, 2.5, 3, 4]) == pytest.approx(expected)
    assert W.time_crossover(ns, [3, 3, 3, 3], [1, 1, 1, 1]) == 256.0
    assert W.time_crossover(ns, [1, 1, 1, 1], [2, 2, 2, 2]) is None
    # noisy: the last crossing from below counts
    last = 2 ** (10 + math.log(2) / math.log(3))
    assert W.time_crossover(ns, [1, 3, 1, 3], [2, 2, 2, 2]) == pytest.approx(last)


def test_measure_time_crossover_small():
    e = W.Explorer(model="GPT-2 small")
    out = e.measure_time_crossover(ns=(32, 64), heads=1, repeats=1)
    assert out["N"] == [32, 64] and len(out["softmax_s"]) == len(out["linear_s"]) == 2
    assert out["D"] == 64 and e.measured == out
    assert out["crossover_N"] is None or 32 <= out["crossover_N"] <= 64


def test_measure_message_from_the_page(monkeypatch):
    e = W.Explorer()
    statuses = []
    e.observe(lambda ch: statuses.append(ch["new"]), names="measure_status")
    monkeypatch.setattr(e, "measure_time_crossover", lambda: {"N": [1]})
    e._on_msg(e, {"type": "measure"}, [])
    assert statuses == ["running", "done"]
    e._on_msg(e, {"type": "something else"}, [])
    assert statuses == ["running", "done"]


# ------------------------------------------------------------------------- the front end
def test_front_end_is_local():
    """One ES module and one stylesheet, shipped as package data, that load nothing from the network."""
    assert JS.is_file() and (STATIC / "ledger_widgets.css").is_file()
    for path in STATIC.iterdir():
        text = path.read_text()
        assert not re.search(r"https?://", text), f"{path.name} names a URL"
        for call in ("fetch(", "XMLHttpRequest", "import(", "WebSocket", "<script"):
            assert call not in text, f"{path.name} uses {call}"
        assert not re.search(r"^\s*import\s", text, re.M), f"{path.name} imports a module"
    text = formulas.GENERATED_JS.read_text() + "\n" + JS.read_text()
    assert "export default" in text
    for cls in (W.MemoryLedgerWidget, W.FlopsWidget, W.Explorer, W.FitWidget):
        assert cls()._esm == text  # the generated formulas, then the views: one module


def _evaluator_source() -> str:
    """The generated formulas and the hand-written lookup of inputs and menus (the evaluator block)."""
    text = JS.read_text()
    m = re.search(r"// <evaluator>\n(.*?)// </evaluator>", text, re.S)
    assert m, "evaluator markers missing"
    return formulas.GENERATED_JS.read_text() + m.group(1)


def test_hand_written_js_has_no_formulas():
    """The page's hand-written module only looks up inputs and menus; every formula is generated."""
    hand = JS.read_text()
    for pattern in (r"Math\.pow", r"\* b \*", r"\b24 \*", r"(?<![\d.])6 \*", r"\b3072\b"):
        assert not re.search(pattern, hand), pattern


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's evaluator is not run here")
def test_js_evaluator_equals_python():
    """The page's evaluator (run in Node.js) gives Python's numbers for every grid point; report its speed."""
    cases = ([("memory", s) for s in MEMORY_GRID] + [("flops", s) for s in FLOPS_GRID]
             + [("explorer", s) for s in EXPLORER_GRID] + [("fit", s) for s in FIT_GRID])
    script = _evaluator_source() + """
const fs = require("fs");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const out = input.cases.map(([kind, state]) => computeValues(input.spec, kind, state));
// latency: one slider move recomputes the values and a 97-point curve of the explorer
const st = input.cases.filter((c) => c[0] === "explorer").pop()[1];
const t0 = process.hrtime.bigint();
const reps = 50;
for (let r = 0; r < reps; r++) {
  for (let i = 0; i < 97; i++) {
    computeValues(input.spec, "explorer", { ...st, N: Math.round(2 ** (8 + i / 8)) });
  }
}
const ms = Number(process.hrtime.bigint() - t0) / 1e6 / reps;
process.stdout.write(JSON.stringify({ out, ms }));
"""
    spec = W.formula_spec()
    proc = subprocess.run([NODE, "-e", script], input=json.dumps({"spec": spec, "cases": cases}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    worst = 0.0
    for (kind, state), js in zip(cases, result["out"]):
        py = W.compute_values(kind, state, spec)
        assert set(js) == set(py), kind
        for key, pv in py.items():
            jv = js[key]
            if pv is None:
                assert jv is None, (kind, key, state)
                continue
            rel = abs(jv - pv) / max(abs(pv), 1e-300)
            worst = max(worst, rel)
            assert rel < 1e-12, (kind, key, state, pv, jv)
    print(f"\nJS evaluator: {len(cases)} states, max relative difference {worst:.1e}; "
          f"values + a 97-point curve in {result['ms']:.2f} ms")


def test_explorer_d_slider_keeps_the_ffn_ratio_as_the_page_does():
    """Moving d rescales F to keep F / d (the page's onArch does the same), and sets D = D_v = d / H."""
    e = W.Explorer(model="Llama 3 8B")
    e.d = 2048
    assert e.model == "custom" and e.F == 14336 // 2 and e.D == e.D_v == 2048 // 32
    e.d = 3072
    assert e.F == math.floor(7168 / 2048 * 3072 + 0.5)
