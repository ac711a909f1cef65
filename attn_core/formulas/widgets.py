"""What each widget shows, from the formulas, and the JavaScript the page runs (printed by SymPy)."""

from __future__ import annotations

import inspect
import pathlib

from ._core import _ratio, le, linear_and_quadratic, maximum, positive_root, symbols, where
from .attention import MHA, fused_bytes, kv_cache_bytes, layer_flops, linear_state_bytes, memory_items
from .training import block_items, per_rank_items, per_rank_params, training_state


# ------------------------------------------------------------------------ what each widget shows
def _take(fn, env: dict, **fixed):
    """Call a formula with the arguments it names, from ``fixed`` or else ``env``."""
    params = inspect.signature(fn.__wrapped__).parameters
    return fn(**{p: fixed[p] if p in fixed else env[p] for p in params})


def _flops_summary(lin, quad, lin1, quad1, key: str) -> dict:
    """The FLOPs values both FLOPs widgets show: the two parts, their total and share, the crossover."""
    return {"linear_flops": lin, "quadratic_flops": quad, "total_flops": lin + quad,
            "quadratic_share": lambda: quad / (lin + quad), key: lambda: lin1 / quad1}


def _memory_values(e: dict) -> dict:
    mha = MHA(e["d"], e["H"])

    def items_at(n):
        return _take(memory_items, e, **mha, N=n, c_mask=0)  # the widget's layer is not causal

    items = items_at(e["N"])
    a1, a2 = linear_and_quadratic(lambda n: sum(items_at(n).values()))
    lin, quad = a1 * e["N"], a2 * e["N"] ** 2
    fused = _take(fused_bytes, e, **mha)
    out = {f"item.{k}": v for k, v in items.items()}
    out.update({
        "linear_bytes": lin, "quadratic_bytes": quad, "total_bytes": lin + quad, "fused_bytes": fused,
        "eager_over_fused": lambda: (lin + quad) / fused, "quadratic_share": lambda: quad / (lin + quad),
        "n_star": lambda: a1 / a2,
    })
    return out


def _flops_values(e: dict) -> dict:
    # per-head K and V with H_kv heads (GQA), head dims d / H, the FFN of width F
    fixed = {**MHA(e["d"], e["H"]), "H_kv": e["H_kv"]}

    def at(n, w):
        return _take(layer_flops, e, **fixed, N=n, w_ffn=w)

    lin, quad = at(e["N"], 1)
    lin_a, _ = at(e["N"], 0)
    (lin1, quad1), (lin1_a, _) = at(1, 1), at(1, 0)
    return {
        **_flops_summary(lin, quad, lin1, quad1, "n_star"),
        "linear_flops_attention": lin_a,
        "total_flops_attention": lin_a + quad,
        "quadratic_share_attention": lambda: quad / (lin_a + quad),
        "n_star_attention": lambda: lin1_a / quad1,
        "d_head": lambda: _ratio(e["d"], e["H"]),
    }


def _explorer_values(e: dict) -> dict:
    def flops_at(n, w):
        return _take(layer_flops, e, N=n, w_ffn=w)

    lin, quad = flops_at(e["N"], 1)
    (lin1, quad1), (lin1_a, _) = flops_at(1, 1), flops_at(1, 0)

    def act_at(n):
        return sum(_take(memory_items, e, N=n, c_mask=0).values())

    a1, a2 = linear_and_quadratic(act_at)
    act_layer = act_at(e["N"])
    act_fused = _take(fused_bytes, e)
    kv = _take(kv_cache_bytes, e)
    kv_per_token = _take(kv_cache_bytes, e, N=1, B=1, W=0)
    state = _take(linear_state_bytes, e, D_k=e["D"])
    return {
        **_flops_summary(lin, quad, lin1, quad1, "n_star_flops"),
        "n_star_flops_attention": lambda: lin1_a / quad1,
        "act_layer_eager": act_layer,
        "act_layer_fused": act_fused,
        "act_eager": e["L"] * act_layer,
        "act_fused": e["L"] * act_fused,
        "eager_over_fused": lambda: act_layer / act_fused,
        "n_star_memory": lambda: a1 / a2,
        "kv_bytes_per_token": kv_per_token,
        "kv_cache_bytes": kv,
        "linear_state_bytes": state,
        "kv_over_state": lambda: kv / state,
        "n_star_kv_state": lambda: state / (e["B"] * kv_per_token),
    }


def _fit_values(e: dict) -> dict:
    fixed = {"u_mask": 1}  # 1-byte dropout masks, as on a CUDA accelerator

    def layer_items(n):
        items = _take(block_items, e, **fixed, N=n)
        return per_rank_items(items, e["t"], e["c"], e["s_sp"], e["e_fused"])

    items = layer_items(e["N"])
    layer = sum(items.values())
    params = _take(per_rank_params, e)
    state = _take(training_state, e, P_w=params, N_d=e["N_d"] * e["c"])  # ZeRO over the DP x CP ranks
    act = e["L"] * layer
    st = state["weights"] + state["gradients"] + state["optimizer"]
    total = st + act
    mem = e["M_gib"] * 2**30
    a1, a2 = linear_and_quadratic(lambda n: e["L"] * sum(layer_items(n).values()))
    out = {f"item.{k}": v for k, v in items.items()}
    out.update({
        "layer_bytes": layer,
        "weights_bytes": state["weights"],
        "gradients_bytes": state["gradients"],
        "optimizer_bytes": state["optimizer"],
        "activations_bytes": act,
        "total_bytes": total,
        "mem_bytes": mem,
        "fits": where(le(total, mem), 1, 0),
        "n_max": lambda: positive_root(a2, a1, maximum(0, mem - st)),
        "params_per_rank": params,
        "devices": e["N_d"] * e["t"] * e["c"],
    })
    return out


_WIDGETS = {"memory": _memory_values, "flops": _flops_values, "explorer": _explorer_values,
            "fit": _fit_values}


def widget_values(kind: str | None = None, env: dict | None = None) -> dict:
    """The numbers a widget of ``kind`` ("memory", "flops", "explorer", "fit") shows, key -> value.

    ``env`` maps symbol names to numbers (give ints or Fractions and the values stay exact, except
    a square root); a value that divides by zero is None. Without ``env``, the SymPy expressions in
    the widget's symbols; without ``kind``, every kind's, as {kind: {key: expression}}.
    """
    if kind is None:
        return {k: widget_values(k, env) for k in _WIDGETS}
    if kind not in _WIDGETS:
        raise ValueError(f"kind must be one of {list(_WIDGETS)}, got {kind!r}")
    symbolic = env is None
    env = symbols() if symbolic else env
    out = {}
    for key, value in _WIDGETS[kind](env).items():
        if callable(value):
            try:
                value = value()
            except ZeroDivisionError:
                value = None
        out[key] = value
    return out


# ------------------------------------------------------------------------ the generated file
_STATIC = pathlib.Path(__file__).parents[1] / "static"
GENERATED_JS = _STATIC / "formulas.js"


def _javascript_function(name: str, exprs: dict) -> str:
    import sympy as sp
    from sympy.printing.jscode import JavascriptCodePrinter

    printer = JavascriptCodePrinter()
    free = sorted({s.name for e in exprs.values() for s in sp.sympify(e).free_symbols})
    lines = [f"function {name}(env) {{", f"  const {{ {', '.join(free)} }} = env;", "  const out = {};",
             "  let v;"]
    for key, e in exprs.items():
        code = " ".join(printer.doprint(sp.sympify(e)).split()) if e is not None else "null"
        lines.append(f"  v = {code};")
        lines.append(f"  out[{key!r}] = Number.isFinite(v) ? v : null;")
    lines += ["  return out;", "}"]
    return "\n".join(lines)


def javascript() -> str:
    """The text of static/formulas.js: one JavaScript function per widget kind, printed by SymPy
    from :func:`widget_values` (env: symbol name -> number; a value that is not finite is null)."""
    head = ("// Generated by `make formulas` from attn_core/formulas.py: do not edit.\n"
            "// One function per widget kind: env (symbol name -> number) -> {value key: number or null}.\n"
            "// The widgets' module (ledger_widgets.js) is loaded after this file, in the same module.\n")
    funcs = [_javascript_function(f"{kind}Values", exprs) for kind, exprs in widget_values().items()]
    table = "const GENERATED = { " + ", ".join(f"{k}: {k}Values" for k in _WIDGETS) + " };"
    return head + "\n" + "\n\n".join(funcs) + "\n\n" + table + "\n"


def write_generated() -> None:
    """Write static/formulas.js."""
    GENERATED_JS.write_text(javascript())
