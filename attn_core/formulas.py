"""Every formula of the book, written once, as a plain Python function.

Each function here evaluates on numbers (ints and :class:`fractions.Fraction` stay exact) and on
SymPy symbols alike, so one definition serves every reader:

* the library's public functions (:func:`attn_core.ledger.block_ledger`,
  :func:`attn_core.flops.layer_flops`, :func:`attn_core.kv_cache.kv_cache_bytes`,
  :func:`attn_core.training.training_state_bytes`, ...) check their arguments, turn options into
  the switch values of :data:`attn_core.symbols.SWITCHES` and call these functions with ints;
* the widgets call :func:`widget_values` with exact Fractions (Python) and run the JavaScript
  that SymPy prints from the same call with symbols (``static/formulas.js``, written by
  ``make formulas``; tests/test_formulas.py checks it is current);
* a chapter calls a function without arguments and gets the SymPy expression in the book's
  symbols (``layer_flops()`` -> ``(2 N (...), 2 N**2 H (...))``), to print or to solve.

Switches are numbers too: 0/1 indicators (``k_drop`` dropout, ``n_rms`` RMSNorm, ...) or the value a
menu sets (``c_causal`` 1 or 1/2), so a branch is a product, and a choice that depends on the
architecture (a sliding window, MLA's latent) goes through :func:`where`. Symbols and switches are
listed, with their meaning, in :mod:`attn_core.symbols`. SymPy is imported only when a symbol
appears, so evaluating with numbers needs no SymPy.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import pathlib
from fractions import Fraction

from .symbols import ASSUMPTIONS, SYMBOLS

__all__ = [
    "formula",
    "symbols",
    "where",
    "eq",
    "le",
    "maximum",
    "minimum",
    "sqrt",
    "MHA",
    "TP_SPLIT_ITEMS",
    "memory_items",
    "fused_bytes",
    "attention_params",
    "layer_flops",
    "kv_cache_bytes",
    "linear_state_bytes",
    "block_items",
    "training_state",
    "per_rank_items",
    "per_rank_params",
    "linear_and_quadratic",
    "positive_root",
    "widget_values",
    "crossover",
    "split_in",
    "javascript",
    "write_generated",
]


# --------------------------------------------------------------------- numbers or symbols
def _is_number(*xs) -> bool:
    return all(isinstance(x, (numbers.Number, bool)) for x in xs)


@functools.cache
def symbols() -> dict:
    """name -> SymPy symbol, with the assumptions of :data:`attn_core.symbols.ASSUMPTIONS`."""
    import sympy as sp

    return {name: sp.Symbol(name, **ASSUMPTIONS[name]) for name in SYMBOLS}


def __getattr__(name: str):
    """``formulas.N``, ``formulas.d``, ...: the book's symbols (SymPy imported on first use)."""
    if name in SYMBOLS:
        return symbols()[name]
    raise AttributeError(f"module 'attn_core.formulas' has no attribute {name!r}")


def formula(fn):
    """A formula whose arguments are the book's symbols: called with none, it returns SymPy expressions.

    ``layer_flops(N=4096, d=3072, ...)`` (every argument) gives numbers, ``layer_flops()`` the expressions.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not args and not kwargs:
            sym = symbols()
            return fn(**{p: sym[p] for p in inspect.signature(fn).parameters})
        return fn(*args, **kwargs)

    return wrapper


def where(condition, if_true, if_false):
    """``if_true`` where ``condition`` holds, else ``if_false`` (a SymPy Piecewise for symbols)."""
    if isinstance(condition, bool):
        return if_true if condition else if_false
    import sympy as sp

    return sp.Piecewise((if_true, condition), (if_false, True))


def eq(a, b):
    """a == b: a bool for numbers, a SymPy Eq for expressions."""
    if _is_number(a, b):
        return a == b
    import sympy as sp

    return sp.Eq(a, b)


def le(a, b):
    """a <= b: a bool for numbers, a SymPy relation for expressions."""
    if _is_number(a, b):
        return a <= b
    import sympy as sp

    return sp.Le(a, b)


def maximum(a, b):
    if _is_number(a, b):
        return max(a, b)
    import sympy as sp

    return sp.Max(a, b)


def minimum(a, b):
    if _is_number(a, b):
        return min(a, b)
    import sympy as sp

    return sp.Min(a, b)


def sqrt(x):
    """The square root: a float for a number (exact roots are not needed), SymPy's for symbols."""
    if _is_number(x):
        return math.sqrt(x)
    import sympy as sp

    return sp.sqrt(x)


def _ratio(a, b):
    """a / b, exact for integers (a Fraction), a float for floats, an expression for symbols."""
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return Fraction(a, b)
    return a / b


# ------------------------------------------------------------------------ one attention layer
#: plain multi-head attention: every head its own K and V, head dims d / H, no MLA
def MHA(d, H) -> dict:
    """The symbol values of plain MHA for width d and H heads: H_kv = H, D = D_v = d / H, no MLA."""
    D = _ratio(d, H)
    return {"H_kv": H, "D": D, "D_v": D, "D_r": 0, "R": 0, "Q_r": 0}


@formula
def memory_items(B, N, d, H, H_kv, D, D_v, D_r, b, k_drop, a_saved, u_mask, c_mask) -> dict:
    """Activation bytes one eager attention layer keeps for backward, item by item.

    ``a_saved = 0`` is the teaching ledger (X, Q, K, V, S, P, dropout, ctx, O); ``a_saved = 1`` is
    what autograd saves for :func:`attn_core.attention.mha_forward`: no S (softmax's backward
    needs only its output P), the dropout mask in ``(1 - u_mask) b + u_mask`` bytes, P after
    dropout (saved by the P V matmul; without dropout that matmul saves P itself), the dense
    causal mask when one is materialized (``c_mask``), and no O (the next layer saves it).
    Q and K have D + D_r values per head (MLA's RoPE part; 0 elsewhere), V and ctx D_v.
    """
    quad = B * H * N**2
    mask_b = (1 - u_mask) * b + u_mask
    return {
        "X": B * N * d * b,
        "Q": B * N * H * (D + D_r) * b,
        "K": B * N * H_kv * (D + D_r) * b,
        "V": B * N * H_kv * D_v * b,
        "S": (1 - a_saved) * quad * b,
        "P": quad * b,
        "dropout": k_drop * quad * ((1 - a_saved) * b + a_saved * mask_b),
        "P_drop": a_saved * k_drop * quad * b,
        "ctx": B * N * H * D_v * b,
        "mask": a_saved * c_mask * N**2,
        "O": (1 - a_saved) * B * N * d * b,
    }


@formula
def fused_bytes(B, N, d, H, H_kv, D, D_v, D_r, b, a_saved):
    """A fused (FlashAttention-style) layer: no N x N tensor.

    Teaching ledger: six (B, N, d) tensors. As autograd saves it (PyTorch's fused SDPA): X, Q, K,
    V, the output and a float32 logsumexp per query row and head (4 B H N bytes).
    """
    linear = B * N * (d + H * (D + D_r) + H_kv * (D + D_r) + H_kv * D_v + H * D_v) * b
    return (1 - a_saved) * 6 * B * N * d * b + a_saved * (linear + 4 * B * H * N)


@formula
def attention_params(d, H, H_kv, D, D_v, D_r, R, Q_r):
    """Weights of the attention projections of one layer (matrices only, no norms or biases).

    Per-head K and V (``R = 0``): Q d x H D, K d x H_kv D, V d x H_kv D_v, O H D_v x d.
    MLA (``R > 0``, DeepSeek-V2): queries through a rank-``Q_r`` bottleneck (or direct when 0),
    keys and values from one latent of R values (D_r of them the shared RoPE key): d x R down,
    (R - D_r) x H (D + D_v) up, O as above.
    """
    standard = d * H * D + d * H_kv * D + d * H_kv * D_v
    q_mla = where(eq(Q_r, 0), d * H * (D + D_r), d * Q_r + Q_r * H * (D + D_r))
    mla = q_mla + d * R + (R - D_r) * H * (D + D_v)
    return where(eq(R, 0), standard, mla) + H * D_v * d


@formula
def layer_flops(N, d, H, H_kv, D, D_v, D_r, R, Q_r, F, m_ffn, w_ffn, c_causal):
    """(linear, quadratic) forward FLOPs of one layer, 2 FLOPs per multiply-accumulate.

    linear = 2 N (attention projections + w_ffn m_ffn d F); quadratic = 2 N^2 H (D + D_r + D_v)
    (Q K^T and P V), times c_causal (1/2 for a kernel that skips the masked half).
    """
    weights = attention_params(d, H, H_kv, D, D_v, D_r, R, Q_r) + w_ffn * m_ffn * d * F
    return 2 * N * weights, 2 * N**2 * H * (D + D_r + D_v) * c_causal


@formula
def kv_cache_bytes(B, N, L, H_kv, D, D_v, R, W, b):
    """KV cache of B sequences: per token and layer H_kv (D + D_v) values, or R for MLA's latent.

    A sliding window (W > 0) keeps min(N, W) tokens.
    """
    kept = where(eq(W, 0), N, minimum(N, W))
    return B * kept * L * where(eq(R, 0), H_kv * (D + D_v), R) * b


@formula
def linear_state_bytes(B, L, H_kv, D_k, D_v, b):
    """Linear attention's recurrent state: L H_kv D_k D_v values per sequence, whatever N.

    One state per key/value head: query heads that share a key and value head share its state
    M_t = sum k v^T.
    """
    return B * L * H_kv * D_k * D_v * b


# ----------------------------------------------------------------------------- a whole block
@formula
def block_items(B, N, d, H, H_kv, F, b, k_drop, u_mask, n_rms, g_swiglu, e_fused, r_sel, r_full) -> dict:
    """Bytes one pre-norm block keeps for backward, by item (:data:`attn_core.ledger.BLOCK_ITEMS`).

    MHA head dims D = d / H with H_kv K/V heads; the FFN of width F. Switches: ``n_rms``
    (RMSNorm: float32 input copy when b != 4, float32 normalized tensor, rstd; LayerNorm: the
    input, mean and rstd counted as float32 as on a GPU or on the meta device, where they are
    measured; the CPU kernel keeps them in a 16-bit weight's dtype), ``g_swiglu``, ``e_fused``
    (no N x N tensor, a float32 logsumexp), ``k_drop`` and ``u_mask`` (masks in the dtype or 1
    byte), ``r_sel`` (the attention core recomputed) and ``r_full`` (only X kept).
    """
    keep, core = 1 - r_full, (1 - r_full) * (1 - r_sel)
    tok = B * N
    mask_b = (1 - u_mask) * b + u_mask
    up = n_rms * where(eq(b, 4), 0, 1)  # RMSNorm's float32 copy of a 16-bit input
    quad = B * H * N**2
    D = _ratio(d, H)
    out = {"X": keep * (1 - up) * tok * d * b + r_full * tok * d * b}

    def norm(i: str) -> None:
        out[f"{i}.fp32_input"] = keep * up * tok * d * 4
        out[f"{i}.stats"] = keep * tok * maximum(b, 4) * (2 - n_rms)  # float32, or the dtype if wider
        out[f"{i}.normalized"] = keep * n_rms * tok * d * 4
        out[f"{i}.out"] = keep * tok * d * b

    norm("norm1")
    out.update({
        "Q": keep * tok * d * b,
        "K": keep * tok * H_kv * D * b,
        "V": keep * tok * H_kv * D * b,
        "P": core * (1 - e_fused) * quad * b,
        "attn_dropout.mask": core * (1 - e_fused) * k_drop * quad * mask_b,
        "P_drop": core * (1 - e_fused) * k_drop * quad * b,
        "attn.lse": core * e_fused * 4 * B * H * N,
        "ctx": keep * tok * d * b,
        "attn_resid.mask": keep * k_drop * tok * d * mask_b,
        "h": keep * (1 - up) * tok * d * b,
    })
    norm("norm2")
    out.update({
        "ffn.gate": keep * g_swiglu * tok * F * b,
        "ffn.silu": keep * g_swiglu * tok * F * b,
        "ffn.up": keep * tok * F * b,
        "ffn.act": keep * tok * F * b,
        "ffn_resid.mask": keep * k_drop * tok * d * mask_b,
    })
    return out


@formula
def training_state(P_w, w_b, g_b, o_master, n_opt, z_1, z_2, z_3, N_d) -> dict:
    """Bytes per data-parallel rank of weights, gradients, optimizer state (:mod:`attn_core.training`).

    P_w parameters; w_b, g_b bytes per weight and gradient; the optimizer keeps o_master bytes of
    master weights and n_opt float32 buffers per parameter. ZeRO shards over N_d ranks: z_1 the
    optimizer state, z_2 the gradients, z_3 the weights.
    """
    def share(z):
        return 1 - z + _ratio(z, N_d)

    return {"weights": P_w * w_b * share(z_3), "gradients": P_w * g_b * share(z_2),
            "optimizer": P_w * (o_master + 4 * n_opt) * share(z_1)}


# ------------------------------------------------------------------------- several devices
#: items of a block's ledger that tensor parallelism splits over its t ranks: they belong to the
#: rank's H/t heads (and H_kv/t key/value heads) or F/t FFN columns; the rest (norms, the residual
#: stream and its dropout masks) is split only by sequence parallelism
TP_SPLIT_ITEMS: frozenset[str] = frozenset({
    "Q", "K", "V", "P", "attn_dropout.mask", "P_drop", "attn.lse", "ctx",
    "ffn.gate", "ffn.silu", "ffn.up", "ffn.act",
})


def per_rank_items(items: dict, t, c, s_sp, e_fused) -> dict:
    """A block's items (:func:`block_items`) on one rank of t-way tensor and c-way context parallelism.

    Items of :data:`TP_SPLIT_ITEMS` are divided by t; the rest by t only with sequence parallelism
    (``s_sp = 1``). A rank of c-way context parallelism keeps its N/c tokens: every item / c (N/c
    rows of each N x N item), except K and V under eager attention (``e_fused = 0``), whose N tokens
    its queries' backward needs; a ring with a fused kernel keeps only its own N/c.
    """
    out = {}
    for name, value in items.items():
        tp = t if name in TP_SPLIT_ITEMS else 1 + s_sp * (t - 1)
        cp = 1 + e_fused * (c - 1) if name in ("K", "V") else c
        out[name] = _ratio(value, tp * cp)
    return out


@formula
def per_rank_params(P_w, P_rep, t):
    """Parameters one tensor-parallel rank holds: each matrix (embeddings included) split t ways,
    as Megatron-LM splits them, and P_rep (norms, row-parallel biases, positions) whole."""
    return _ratio(P_w - P_rep, t) + P_rep


# ----------------------------------------------------------------------- linear vs quadratic
def linear_and_quadratic(f):
    """(a_1, a_2) of a function of N that is a_1 N + a_2 N^2, from its values at N = 1 and 2."""
    f1, f2 = f(1), f(2)
    a2 = (f2 - 2 * f1) / 2 if not _is_number(f1, f2) else Fraction(f2 - 2 * f1, 2)
    return f1 - a2, a2


def positive_root(a2, a1, z):
    """The N > 0 with a_2 N^2 + a_1 N = z (a_1 > 0, a_2 >= 0, z >= 0): 2 z / (a_1 + sqrt(a_1^2 + 4 a_2 z)).

    This form of the root holds at a_2 = 0 too (N = z / a_1), with no division by zero; a negative
    discriminant (coefficients outside that range) is read as 0, so the value stays real.
    """
    return 2 * z / (a1 + sqrt(maximum(0, a1 * a1 + 4 * a2 * z)))


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


# ----------------------------------------------------------------------------- SymPy tools
def crossover(low, high, var=None):
    """The positive ``var`` (default N) where ``low`` (linear in var) equals ``high`` (quadratic).

    Solved by sympy.solve: an independent derivation of the crossovers the widgets compute as a_1 / a_2.
    """
    import sympy as sp

    var = symbols()["N"] if var is None else var
    roots = [r for r in sp.solve(sp.Eq(low, high), var) if r != 0]
    if len(roots) != 1:
        raise ValueError(f"expected one nonzero crossover in {var}, got {roots}")
    return sp.simplify(roots[0])


def split_in(total, var=None):
    """(linear in var, quadratic in var) parts of a SymPy sum, e.g. of a ledger's items."""
    import sympy as sp

    var = symbols()["N"] if var is None else var
    total = sp.expand(total)
    quad = sp.expand(total.coeff(var, 2) * var**2)
    return sp.expand(total - quad), quad


# ------------------------------------------------------------------------ the generated file
_STATIC = pathlib.Path(__file__).parent / "static"
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
