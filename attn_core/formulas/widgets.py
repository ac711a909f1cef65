"""What each widget shows, from the formulas, and the JavaScript the page runs (printed by SymPy)."""

from __future__ import annotations

import inspect
import pathlib
import re

from ._core import (
    _is_number,
    _ratio,
    floor,
    le,
    linear_and_quadratic,
    maximum,
    minimum,
    positive_root,
    quadratic_coefficients,
    symbols,
    where,
)
from .attention import MHA, fused_bytes, kv_cache_bytes, layer_flops, linear_state_bytes, memory_items
from .model import model_params, step_model
from .step import PHASES, STEP_TOTAL_ITEMS, step_items


# ------------------------------------------------------------------------ what each widget shows
class _Names:
    """The named intermediate values of a widget's formulas.

    With numbers, a name is its value. With SymPy expressions, ``names(name, value)`` records the
    expression and returns a symbol ``_name`` in its place: the printed JavaScript computes it once, as a
    ``const``, and SymPy never builds (or compares) the whole nested expression. An expression named
    twice is one name.
    """

    def __init__(self):
        self.exprs: dict = {}
        self._seen: dict = {}

    def __call__(self, name: str, value):
        if value is None or _is_number(value):
            return value
        import sympy as sp

        if value.is_Symbol or value.is_Number:
            return value
        if value in self._seen:
            return self._seen[value]
        key = "_" + re.sub(r"\W", "_", name)
        if key in self.exprs:
            raise ValueError(f"the name {key} is given twice")
        self.exprs[key] = value
        self._seen[value] = sym = sp.Symbol(key)
        return sym

    def each(self, prefix: str, values: dict) -> dict:
        """Each value named ``prefix + key``."""
        return {k: self(f"{prefix}{k}", v) for k, v in values.items()}


def _take(fn, env: dict, **fixed):
    """Call a formula with the arguments it names, from ``fixed`` or else ``env``."""
    params = inspect.signature(fn.__wrapped__).parameters
    return fn(**{p: fixed[p] if p in fixed else env[p] for p, spec in params.items()
                 if p in fixed or p in env or spec.default is inspect.Parameter.empty})


def _flops_summary(lin, quad, lin1, quad1, key: str) -> dict:
    """The FLOPs values both FLOPs widgets show: the two parts, their total and share, the crossover."""
    return {"linear_flops": lin, "quadratic_flops": quad, "total_flops": lin + quad,
            "quadratic_share": lambda: quad / (lin + quad), key: lambda: lin1 / quad1}


def _memory_values(e: dict, names=None) -> dict:
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


def _flops_values(e: dict, names=None) -> dict:
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


def _explorer_values(e: dict, names=None) -> dict:
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
    # serving: the weights held once (model_params: the sliders' shape with the preset's vocabulary,
    # norms, biases and experts; MLA's latent rank R_kv = R - D_r; a dense FFN, and a mixture of
    # experts' dense blocks, F wide) + B users' KV caches, against the accelerator's memory
    # (named: the printed comparisons then read a few constants, not the piecewise sums)
    name = names or (lambda _key, value: value)
    r_kv = name("R_kv", maximum(0, e["R"] - e["D_r"]))
    params = name("params", _take(model_params, e, R_kv=r_kv, F_dense=e["F"])["P_w"])
    weights = name("weights", params * e["b"])
    kv_user = name("kv_user", _take(kv_cache_bytes, e, B=1))
    mem = name("mem", e["M_mem"] * e["u_mem"])
    usable = name("usable", _usable(mem, e))
    held = name("held", weights + kv)
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
        "params": params,
        "weights_bytes": weights,
        "kv_bytes_per_user": kv_user,
        "serving_bytes": held,
        "mem_bytes": mem,
        "usable_bytes": usable,
        "serving_fits": where(le(held, usable), 1, 0),
        "weights_fit": where(le(weights, usable), 1, 0),
        # the most users whose caches fit beside the weights in the usable memory (0 when the weights alone
        # do not fit)
        "users_max": where(le(weights, usable), floor(_ratio(usable - weights, kv_user)), 0),
    }


def _usable(mem, e: dict):
    """The memory the widgets count as usable: the accelerator's less the allowance for the allocator, p_alloc
    percent of it (the cache of freed blocks that PyTorch's allocator keeps reserved, which no count of
    tensors predicts)."""
    return mem * (1 - _ratio(e["p_alloc"], 100))


def _fit_values(e: dict, names) -> dict:
    """Does a training step fit? The busiest rank's bytes (:func:`step_items`, as
    :func:`attn_core.training.training_memory` computes them) against the accelerator's memory less the
    allowance for the allocator (:func:`_usable`)."""
    env = {**e, **names.each("model.", _take(step_model, e))}  # the model's parameters and shapes

    computed = {}

    def phases_at(n):
        if n not in computed:
            computed[n] = _take(step_items, env, N=n)
        return computed[n]

    at_n = phases_at(e["N"])
    s = names.each("", {f"{p}.{k}": at_n[f"{p}.{k}"] for p in PHASES for k in STEP_TOTAL_ITEMS})
    totals = [names(f"total.{p}", sum(s[f"{p}.{k}"] for k in STEP_TOTAL_ITEMS)) for p in PHASES]

    def pick(values):
        """Of one value per phase, the one of the first phase whose total is the peak (as training_memory)."""
        out = values[-1]
        for i in range(len(values) - 2, -1, -1):
            later = totals[i + 1]
            for t in totals[i + 2:]:
                later = maximum(later, t)
            out = where(le(later, totals[i]), values[i], out)
        return out

    peak = names("peak", pick(totals))
    mem = e["M_mem"] * e["u_mem"]
    usable = names("usable", _usable(mem, e))  # the peak is compared with the memory less the allowance
    # each phase's total is a_0 + a_1 N + a_2 N^2; a_0, the bytes at no token, is the training state and
    # its buffers: when their largest fits, N grows until the first phase that grows with N meets the memory
    coeffs = {p: names.each(f"{p}.a", dict(enumerate(quadratic_coefficients(
        lambda n, p=p: phases_at(n)[f"phase.{p}"], e["N"])))) for p in PHASES}
    state = coeffs[PHASES[0]][0]
    for p in PHASES[1:]:
        state = maximum(state, coeffs[p][0])
    state = names("state", state)

    def n_max():
        # the step's total has no N; the end of backward grows with N only through a recomputed block:
        # without one (a_1 = a_2 = 0) it gets a slope of 1 byte a token, so its root (the spare bytes,
        # as tokens) lies far beyond the forward's and is never the smallest
        roots = [positive_root(c[2], c[1] + where(le(c[1] + c[2], 0), 1, 0), maximum(0, usable - c[0]))
                 for c in (coeffs[p] for p in PHASES if p != "step")]
        n = roots[0]
        for r in roots[1:]:
            n = minimum(n, r)
        return where(le(state, usable), n, 0)

    shards = e["N_d"] * e["c"]  # ZeRO-3 shards the weights over the data- and context-parallel ranks
    stage = _ratio(env["P_w"] - env["P_io"], e["pp"]) + env["P_io"]  # the first stage's
    out = {f"{k}_bytes": pick([s[f"{p}.{k}"] for p in PHASES]) for k in STEP_TOTAL_ITEMS}
    out.update({f"phase.{p}": t for p, t in zip(PHASES, totals)})
    out.update({
        "total_bytes": peak,
        "peak_phase": pick(list(range(len(PHASES)))),
        "mem_bytes": mem,
        "usable_bytes": usable,
        "spare_bytes": usable - peak,
        "fits": where(le(peak, usable), 1, 0),
        "state_bytes": state,
        "n_max": n_max,
        "params": env["P_w"],
        "params_per_rank": _ratio(stage, e["t"]) * (1 - e["z_3"] + _ratio(e["z_3"], shards)),
        "devices": e["N_d"] * e["t"] * e["c"] * e["pp"],
    })
    return out


_WIDGETS = {"memory": _memory_values, "flops": _flops_values, "explorer": _explorer_values,
            "fit": _fit_values}


def widget_values(kind: str | None = None, env: dict | None = None) -> dict:
    """The numbers a widget of ``kind`` ("memory", "flops", "explorer", "fit") shows, key -> value.

    ``env`` maps symbol names to numbers (give ints or Fractions and the values stay exact, except
    a square root); a value that divides by zero is None. Without ``env``, the SymPy expressions in
    the widget's symbols (the "fit" widget's in named intermediate values, ``_<name>``: see
    :func:`widget_names`); without ``kind``, every kind's, as {kind: {key: expression}}.
    """
    if kind is None:
        return {k: widget_values(k, env) for k in _WIDGETS}
    return _evaluate(kind, env)[1]


def widget_names(kind: str) -> dict:
    """The intermediate values the symbolic :func:`widget_values` of ``kind`` names: {name: expression},
    in the order they are computed (each in the book's symbols and the names before it)."""
    return _evaluate(kind, None)[0]


def _evaluate(kind: str, env: dict | None) -> tuple[dict, dict]:
    if kind not in _WIDGETS:
        raise ValueError(f"kind must be one of {list(_WIDGETS)}, got {kind!r}")
    env = symbols() if env is None else env
    names = _Names()
    out = {}
    for key, value in _WIDGETS[kind](env, names).items():
        if callable(value):
            try:
                value = value()
            except ZeroDivisionError:
                value = None
        out[key] = value
    return names.exprs, out


# ------------------------------------------------------------------------ the generated file
_STATIC = pathlib.Path(__file__).parents[1] / "static"
GENERATED_JS = _STATIC / "formulas.js"


def _javascript_function(name: str, named: dict, exprs: dict) -> str:
    """One JavaScript function: the named values and the subexpressions they and the outputs share (SymPy's
    cse) as constants, each after the ones it reads, then each output (null where it is not finite)."""
    import sympy as sp
    from sympy.printing.jscode import JavascriptCodePrinter

    printer = JavascriptCodePrinter()
    keys = [k for k, e in exprs.items() if e is not None]
    shared, reduced = sp.cse([sp.sympify(e) for e in [*named.values(), *(exprs[k] for k in keys)]],
                             symbols=sp.numbered_symbols("_c"), order="none")
    consts = {str(x): e for x, e in shared}
    consts.update(zip(named, reduced[:len(named)]))
    outputs = dict(zip(keys, reduced[len(named):]))
    order: list[str] = []

    def emit(e) -> None:  # the constants e reads, each after the ones it reads
        for s in sorted(e.free_symbols, key=str):
            if str(s) in consts and str(s) not in order:
                emit(consts[str(s)])
                order.append(str(s))

    for e in [*(sp.Symbol(k) for k in named), *outputs.values()]:
        emit(e)

    def code(e) -> str:
        return " ".join(printer.doprint(e).split())

    every = [*consts.values(), *outputs.values()]
    free = sorted({s.name for e in every for s in e.free_symbols} - set(consts))
    lines = [f"function {name}(env) {{", f"  const {{ {', '.join(free)} }} = env;"]
    lines += [f"  const {k} = {code(consts[k])};" for k in order]
    lines += ["  const out = {};", "  let v;"]
    for key in exprs:
        lines.append(f"  v = {code(outputs[key]) if key in outputs else 'null'};")
        lines.append(f"  out[{key!r}] = Number.isFinite(v) ? v : null;")
    lines += ["  return out;", "}"]
    return "\n".join(lines)


def javascript() -> str:
    """The text of static/formulas.js: one JavaScript function per widget kind, printed by SymPy
    from :func:`widget_values` (env: symbol name -> number; a value that is not finite is null)."""
    head = ("// Generated by `make formulas` from attn_core/formulas/: do not edit.\n"
            "// One function per widget kind: env (symbol name -> number) -> {value key: number or null}.\n"
            "// The widgets' module (ledger_widgets.js) is loaded after this file, in the same module.\n")
    funcs = [_javascript_function(f"{kind}Values", *_evaluate(kind, None)) for kind in _WIDGETS]
    table = "const GENERATED = { " + ", ".join(f"{k}: {k}Values" for k in _WIDGETS) + " };"
    return head + "\n" + "\n\n".join(funcs) + "\n\n" + table + "\n"


def write_generated() -> None:
    """Write static/formulas.js."""
    GENERATED_JS.write_text(javascript())
