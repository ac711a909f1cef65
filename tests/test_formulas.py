"""attn_core.formulas: one definition per formula, the same with numbers and with symbols.

The formulas are checked against independent references where they are used (the ledgers against
what autograd saves in tests/test_ledger.py and tests/test_block_ledger.py, FLOPs against
FlopCounterMode in tests/test_flops.py, caches and parameter counts against transformers in
tests/test_hf_cache.py, ZeRO against its paper in tests/test_training.py). Here: the generated
JavaScript is what the formulas print today; a formula called with symbols and then given numbers
equals the same formula called with the numbers; sympy.solve derives the book's crossovers from
the ledgers; and the fit widget's longest N is where its total meets the memory.
"""

from fractions import Fraction

import pytest
import sympy as sp

from attn_core import formulas
from attn_core.symbols import ASSUMPTIONS, SWITCHES, SYMBOLS

S = formulas.symbols()


def test_generated_javascript_is_current():
    """static/formulas.js is what widget_values prints now."""
    assert formulas.GENERATED_JS.read_text() == formulas.javascript(), "run `make formulas`"


def test_every_symbol_is_documented_and_assumed():
    assert set(SYMBOLS) == set(ASSUMPTIONS)
    for options in SWITCHES.values():
        for values in options.values():
            assert set(values) <= set(SYMBOLS)


def test_formulas_read_the_book_symbols():
    """formulas.N is the symbol N; a formula called with no arguments is an expression in the symbols."""
    assert formulas.N is S["N"] and formulas.d is S["d"]
    lin, quad = formulas.layer_flops()
    assert S["N"] in lin.free_symbols and sp.degree(quad, S["N"]) == 2
    with pytest.raises(AttributeError):
        formulas.not_a_symbol  # noqa: B018


def test_helpers_on_numbers_and_symbols():
    assert formulas.where(True, 1, 2) == 1 and formulas.where(False, 1, 2) == 2
    assert formulas.minimum(3, Fraction(5, 2)) == Fraction(5, 2) and formulas.maximum(3, 4) == 4
    assert isinstance(formulas.where(formulas.eq(S["W"], 0), S["N"], S["W"]), sp.Piecewise)
    assert formulas.linear_and_quadratic(lambda n: 3 * n + 5 * n * n) == (3, 5)
    assert formulas.linear_and_quadratic(lambda n: 7 * n) == (7, 0)
    # the root of 2 N^2 + 3 N = 27 is 3; with a_2 = 0 it is z / a_1, without dividing by zero
    assert formulas.positive_root(2, 3, 27) == pytest.approx(3.0)
    assert formulas.positive_root(0, 4, 10) == pytest.approx(2.5)
    # a_0 + a_1 n + a_2 n^2: from three values for numbers, from derivatives at 0 for a symbol
    def f(n):
        return 7 + S["B"] * n + S["d"] * n * n / 3
    half = Fraction(5, 2)
    assert formulas.quadratic_coefficients(lambda n: 7 + 3 * n + half * n * n, 4) == (7, 3, half)
    assert formulas.quadratic_coefficients(f, S["N"]) == (7, S["B"], S["d"] / 3)


def _env(names, rng):
    """Numbers for the symbols a formula names: positive ints, 0/1 switches, a fraction for c_causal."""
    env = {}
    for n in names:
        if n in ("k_drop", "a_saved", "u_mask", "c_mask", "w_ffn", "n_rms", "g_swiglu", "e_fused", "z_1",
                 "z_2", "z_3", "s_sp"):
            env[n] = rng.choice((0, 1))
        elif n == "c_causal":
            env[n] = rng.choice((1, Fraction(1, 2)))
        elif n in ("r_sel", "r_full"):
            env[n] = 0
        elif n in ("D_r", "R", "Q_r", "W", "P_rep"):
            env[n] = rng.choice((0, 3, 64))
        elif n == "b":
            env[n] = rng.choice((1, 2, 4))
        else:
            env[n] = rng.choice((1, 7, 24, 4096))
    return env


FORMULAS = [formulas.memory_items, formulas.fused_bytes, formulas.attention_params, formulas.layer_flops,
            formulas.kv_cache_bytes, formulas.linear_state_bytes, formulas.block_items,
            formulas.training_state, formulas.per_rank_params, formulas.cp_saved, formulas.cp_sent,
            formulas.ulysses_sent, formulas.ring_step, formulas.model_params, formulas.step_model]


@pytest.mark.parametrize("fn", FORMULAS, ids=lambda f: f.__name__)
def test_symbols_then_numbers_equal_numbers(fn):
    """One definition, two ways: the expression with numbers substituted equals the numeric call."""
    import inspect
    import random

    rng = random.Random(0)
    names = list(inspect.signature(fn.__wrapped__).parameters)
    expr = fn()
    for _ in range(25):
        env = _env(names, rng)
        numeric = fn(**env)
        subs = {S[n]: sp.Rational(v) for n, v in env.items()}

        def at(e, subs=subs):
            return sp.sympify(e).subs(subs).doit()

        if isinstance(expr, dict):
            assert {k: at(e) for k, e in expr.items()} == {k: sp.Rational(v) for k, v in numeric.items()}
        elif isinstance(expr, tuple):
            assert tuple(at(e) for e in expr) == tuple(sp.Rational(v) for v in numeric)
        else:
            assert at(expr) == sp.Rational(numeric)


def test_solve_derives_the_book_crossovers():
    """sympy.solve on the ledgers gives N* = 2d/H, 3d/H, 5d/H (memory) and 6d, 2d (FLOPs), and the
    widgets' crossovers (a_1 / a_2 of the ledgers) agree."""
    d, H, N = S["d"], S["H"], S["N"]
    mha = formulas.MHA(d, H)
    env = {**S, **mha, "c_mask": 0, "B": 1}
    items = formulas.memory_items(**{k: env[k] for k in SYMBOLS if k in
                                     ("B", "N", "d", "H", "H_kv", "D", "D_v", "D_r", "b", "k_drop", "a_saved",
                                      "u_mask", "c_mask")})
    lin, quad = formulas.split_in(sum(items.values()))
    solved = formulas.crossover(lin, quad)
    widget = formulas.widget_values("memory")["n_star"]
    teaching = {S["a_saved"]: 0, S["b"]: 2, S["u_mask"]: 0}
    cases = (({**teaching, S["k_drop"]: 1}, 2 * d / H), ({**teaching, S["k_drop"]: 0}, 3 * d / H),
             ({S["a_saved"]: 1, S["k_drop"]: 0, S["b"]: 2, S["u_mask"]: 0}, 5 * d / H))
    for switches, expected in cases:
        assert sp.simplify(solved.subs(switches) - expected) == 0
        assert sp.simplify(widget.subs(switches) - expected) == 0
    fl = formulas.widget_values("flops")
    mlp = {S["m_ffn"]: 2, S["F"]: 4 * d, S["H_kv"]: H, S["c_causal"]: 1}
    assert sp.simplify(fl["n_star"].subs(mlp) - 6 * d) == 0
    assert sp.simplify(fl["n_star_attention"].subs(mlp) - 2 * d) == 0
    assert sp.simplify(fl["n_star"].subs({**mlp, S["c_causal"]: sp.Rational(1, 2)}) - 12 * d) == 0
    assert N not in fl["n_star"].free_symbols


def test_per_rank_items_split_by_tp_sp_and_cp():
    """Tensor parallelism splits the heads' and columns' items, SP the rest, CP every item but eager K, V."""
    items = dict.fromkeys(("Q", "K", "h", "ffn.up"), 48)
    tp = formulas.per_rank_items(items, t=4, c=1, s_sp=0, e_fused=1)
    assert tp == {"Q": 12, "K": 12, "h": 48, "ffn.up": 12}
    sp_ = formulas.per_rank_items(items, t=4, c=1, s_sp=1, e_fused=1)
    assert set(sp_.values()) == {12}
    eager_cp = formulas.per_rank_items(items, t=1, c=3, s_sp=0, e_fused=0)
    assert eager_cp == {"Q": 16, "K": 48, "h": 16, "ffn.up": 16}


@pytest.mark.parametrize("attention, recompute",
                         [("eager", "none"), ("fused", "selective"), ("eager", "full")])
def test_fit_n_max_is_where_the_total_meets_the_memory(attention, recompute):
    """n_max solves total(N) = the usable memory: the total at n_max equals the memory less the allowance."""
    from attn_core.widgets import FitWidget
    from attn_core.widgets._spec import _SPEC, build_env

    w = FitWidget(attention=attention, recompute=recompute, mem_gib=80)
    n = w.values["n_max"]
    assert n and n > 1
    env = build_env(_SPEC["widgets"]["fit"], {**w.state(), "N": Fraction(n)}, _SPEC)
    total = formulas.widget_values("fit", env)["total_bytes"]
    assert w.values["usable_bytes"] == 80 * 2**30 * 0.9  # the default allowance, 10%
    assert abs(float(total) / w.values["usable_bytes"] - 1) < 1e-9


def test_widget_values_without_env_are_expressions_and_zero_division_is_none():
    exprs = formulas.widget_values()
    assert set(exprs) == {"memory", "flops", "explorer", "fit"}
    assert all(isinstance(sp.sympify(e), sp.Expr) for e in exprs["memory"].values())
    env = {n: Fraction(1) for n in SYMBOLS}
    env.update(F=Fraction(4), m_ffn=Fraction(2))
    assert formulas.widget_values("flops", env)["n_star"] == Fraction(24, 4)  # 6d at d = 1
    assert formulas.widget_values("flops", {**env, "c_causal": 0})["n_star"] is None  # no quadratic term
    with pytest.raises(ValueError, match="kind"):
        formulas.widget_values("nope", env)

