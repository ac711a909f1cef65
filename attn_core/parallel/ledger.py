"""The per-rank ledger: what each rank saves for backward and sends per layer, as SymPy expressions.

Symbols as in :mod:`attn_core.formulas` (B, N, d, H, F, D, D_v, b), plus the degrees t (tensor and
sequence parallelism) and c (context parallelism). SymPy is imported inside the functions only, so
``import attn_core.parallel`` stays light; the plain functions (:func:`tp_ledger`,
:func:`cp_ledger`, :func:`comm_bytes`) evaluate the expressions exactly.
"""

from __future__ import annotations

import inspect

from .. import _checks, formulas


def _sym():
    import sympy as sp

    from .. import formulas

    return sp, formulas, formulas.t, formulas.c


#: the items of one rank of a TensorParallelBlock, by the block ledger's item they are
#: (:data:`attn_core.ledger.BLOCK_ITEMS`; the causal mask is the block's own, not a ledger item)
TP_ITEM_NAMES: dict[str, str] = {
    "X": "norm 1 input", "norm1.stats": "norm 1 mean, 1/std", "norm1.out": "Q, K, V input", "Q": "Q",
    "K": "K", "V": "V", "P": "P", "mask": "causal mask", "ctx": "ctx", "h": "norm 2 input",
    "norm2.stats": "norm 2 mean, 1/std", "norm2.out": "FFN input", "ffn.up": "GeLU input",
    "ffn.act": "GeLU output",
}


def tp_ledger_exprs(sequence_parallel: bool = False) -> dict:
    """What one rank of a :class:`TensorParallelBlock` saves for backward, item by item (bytes).

    SymPy expressions in B, N, d, H, F, b and t, as autograd saves it (checked in
    tests/test_parallel.py with :func:`attn_core.measure.saved_tensor_bytes` on every rank). They
    are the block ledger's items (:func:`attn_core.formulas.block_items` of an MHA block with
    LayerNorm, a GeLU MLP, eager attention and no dropout) on one rank
    (:func:`attn_core.formulas.per_rank_items`): inside the tensor-parallel region (Q, K, V, P,
    ctx, the FFN's hidden activations) a rank holds its H/t heads or F/t columns, 1/t of each; the
    rest (the norms' inputs and statistics, the inputs of the column-parallel matmuls) is whole on
    every rank under TP alone and a 1/t shard along N under sequence parallelism. The block adds a
    dense (N, N) bool causal mask (1 byte a value). The norms' mean and 1/std are float32 for 16-bit
    values and the values' dtype otherwise (max(b, 4) bytes). Weights are not activations.
    """
    sp, f, t, _ = _sym()
    s = f.symbols()
    B, N, d, H, F_, b = s["B"], s["N"], s["d"], s["H"], s["F"], s["b"]
    items = f.block_items(B=B, N=N, d=d, H=H, H_kv=H, F=F_, b=b, k_drop=0, u_mask=0, n_rms=0, g_swiglu=0,
                          e_fused=0, r_sel=0, r_full=0)
    per = f.per_rank_items(items, t, 1, int(bool(sequence_parallel)), 0)
    per["mask"] = N**2
    return {name: per[item] for item, name in TP_ITEM_NAMES.items()}


def tp_weight_exprs() -> dict:
    """Weights one rank of a :class:`TensorParallelBlock` holds (bytes): 1/t of each matrix, whole norms."""
    _, f, t, _ = _sym()
    d, F_, b = f.d, f.F, f.b
    return {"W_q, W_k, W_v, W_o": 4 * d * d * b / t, "W_1, W_2": 2 * d * F_ * b / t, "norms": 4 * d * b}


def cp_ledger_exprs() -> dict:
    """What one rank saves for the backward of :func:`ring_attention` with c ranks (bytes).

    :func:`attn_core.formulas.cp_saved` with symbols: its shards of q, k, v and the output, N/c
    tokens each (k and v with H_kv heads), and one logsumexp per query row and head, kept as an
    accumulator (float32 for 16-bit values: max(b, 4) bytes). Nothing N x N is saved; what a rank
    holds at its peak (the score blocks of a step, the K, V block on its way) is transient and is
    measured, not in this ledger.
    """
    return formulas.cp_saved()


def kv_cache_shard_exprs() -> dict:
    """Bytes of one layer's KV cache a rank holds (MHA): TP keeps H/t heads, CP N/c tokens."""
    _, f, t, c = _sym()
    B, N, H, D, D_v, b = f.B, f.N, f.H, f.D, f.D_v, f.b
    return {"TP": B * N * H * (D + D_v) * b / t, "CP": B * N * H * (D + D_v) * b / c}


def comm_exprs(scheme: str) -> dict:
    """Bytes one rank sends per layer, forward and backward, by collective.

    scheme "TP": two all-reduces of (B, N, d) forward (after W_o and W_2) and two backward
    (before the Q, K, V and W_1 matmuls), each 2 (t - 1)/t B N d b (ring algorithms).
    "TP+SP": all-gather before and reduce-scatter after each of the two column/row pairs
    forward; backward the reduce-scatter's all-gather, the re-gather of the saved shard and the
    reduce-scatter of the input gradient, each (t - 1)/t B N d b; plus the all-reduce of the
    norms' weight gradients, 2 (t - 1)/t 4 d b.
    "CP" (ring attention, :func:`attn_core.formulas.cp_sent`): the K, V shards (H_kv heads) pass
    c - 1 times forward and c - 1 times backward, B H_kv (N/c)(D + D_v) b each, and the dK, dV
    accumulators c - 1 times at max(b, 4) bytes a value.
    "Ulysses" (all-to-all, :func:`attn_core.formulas.ulysses_sent`): (c - 1)/c of q, k, v and of
    the output forward, of their gradients backward.
    """
    sp, f, t, c = _sym()
    B, N, d, b = f.B, f.N, f.d, f.b
    x = B * N * d * b
    if scheme == "TP":
        ar = 2 * (t - 1) * x / t
        return {"all-reduce (TP, forward)": 2 * ar, "all-reduce (TP, backward)": 2 * ar}
    if scheme == "TP+SP":
        one = (t - 1) * x / t
        return {"all-gather (SP, forward)": 2 * one, "reduce-scatter (SP, forward)": 2 * one,
                "all-gather (SP, backward)": 2 * one, "all-gather (SP, backward re-gather)": 2 * one,
                "reduce-scatter (SP, backward)": 2 * one,
                "all-reduce (norm weights, backward)": 2 * (t - 1) * 4 * d * b / t}
    if scheme == "CP":
        return f.cp_sent()
    if scheme == "Ulysses":
        return f.ulysses_sent()
    raise ValueError(f"scheme must be 'TP', 'TP+SP', 'CP' or 'Ulysses', got {scheme!r}")


def korthikanti_exprs(tensor_parallel: bool = True, sequence_parallel: bool = True) -> dict:
    """Korthikanti et al.'s activation count of one transformer layer, per rank, in the book's symbols.

    Their items (section 4 of the paper), with b bytes per value and 1-byte dropout masks
    (their 16-bit case is b = 2): attention: Q, K, V input, Q and K, V, the softmax output P, its
    dropout mask, P after dropout, the output projection's input, the output dropout mask; FFN
    (F = 4d): its input, the GeLU input, the second matrix's input, the dropout mask; two norm
    inputs. Tensor parallelism divides the items inside attention and the FFN by t; sequence
    parallelism divides the rest by t too. At b = 2 the total is N B d (34 + 5 H N / d) without
    parallelism, N B d (10 + 24/t + 5 H N / (d t)) with TP, and N B d (34 + 5 H N / d) / t with both.
    """
    sp, f, t, _ = _sym()
    B, N, d, H, b = f.B, f.N, f.d, f.H, f.b
    x, nn_ = N * B * d, B * H * N**2
    tp = t if tensor_parallel else sp.Integer(1)
    rest = t if sequence_parallel else sp.Integer(1)
    return {
        "Q, K, V input": x * b / rest,
        "Q and K": 2 * x * b / tp,
        "V": x * b / tp,
        "softmax output P": nn_ * b / tp,
        "softmax dropout mask": nn_ / tp,
        "P after dropout": nn_ * b / tp,
        "output projection input": x * b / tp,
        "attention dropout mask": x / rest,
        "FFN input": x * b / rest,
        "GeLU input": 4 * x * b / tp,
        "second FFN matrix input": 4 * x * b / tp,
        "FFN dropout mask": x / rest,
        "two norm inputs": 2 * x * b / rest,
    }


#: Korthikanti et al.'s letters and the book's symbols they stand for (their b is the batch)
KORTHIKANTI_LETTERS: dict[str, str] = {"s": "N", "b": "B", "h": "d", "a": "H", "t": "t"}


def to_paper_letters(expr):
    """An expression in the book's symbols rewritten in the paper's letters, 16-bit (b = 2)."""
    sp, f, t, _ = _sym()
    s_, b_, h_, a_ = sp.symbols("s b h a", positive=True, integer=True)
    return sp.sympify(expr).subs(f.b, 2).subs({f.N: s_, f.B: b_, f.d: h_, f.H: a_})


def evaluate(exprs: dict, env: dict) -> dict:
    """Exact values of ledger expressions, ``env`` mapping symbol names (B, N, d, H, H_kv, F, D, D_v, b,
    t, c) to integers: ints where integral, Fractions otherwise."""
    from fractions import Fraction

    import sympy as sp

    _, f, t, c = _sym()
    names = {"B": f.B, "N": f.N, "d": f.d, "H": f.H, "H_kv": f.H_kv, "F": f.F, "D": f.D, "D_v": f.D_v,
             "b": f.b, "t": t, "c": c}
    subs = {names[k]: sp.Integer(v) for k, v in env.items() if k in names}
    out = {}
    for key, e in exprs.items():
        val = sp.nsimplify(sp.sympify(e).subs(subs))
        if not val.is_Rational:
            raise ValueError(f"{key}: the values given do not fix it ({val})")
        out[key] = int(val) if val.is_Integer else Fraction(int(val.p), int(val.q))
    return out


def tp_ledger(B: int, N: int, d_model: int, H: int, t: int, *, ffn_dim: int | None = None,
              sequence_parallel: bool = False, bytes_per_value: int = 2) -> dict:
    """:func:`tp_ledger_exprs` evaluated: bytes each rank of a t-way TP (or TP+SP) block saves, by item."""
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N),
               d=_checks.positive_int("d_model", d_model), H=_checks.positive_int("H", H),
               t=_checks.positive_int("t", t), b=_checks.positive_int("bytes_per_value", bytes_per_value))
    env["F"] = 4 * env["d"] if ffn_dim is None else _checks.positive_int("ffn_dim", ffn_dim)
    _checks.divisible("H", env["H"], "t", env["t"])
    _checks.divisible("ffn_dim", env["F"], "t", env["t"])
    if sequence_parallel:
        _checks.divisible("N", env["N"], "t", env["t"])
    return evaluate(tp_ledger_exprs(sequence_parallel), env)


def cp_ledger(B: int, N: int, H: int, D: int, c: int, *, D_v: int | None = None, H_kv: int | None = None,
              bytes_per_value: int = 2) -> dict:
    """:func:`attn_core.formulas.cp_saved` evaluated: bytes each of c ring-attention ranks saves (N
    divisible by c); H_kv key/value heads (default H)."""
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N), H=_checks.positive_int("H", H),
               D=_checks.positive_int("D", D), c=_checks.positive_int("c", c),
               b=_checks.positive_int("bytes_per_value", bytes_per_value))
    env["D_v"] = env["D"] if D_v is None else _checks.positive_int("D_v", D_v)
    env["H_kv"] = env["H"] if H_kv is None else _checks.positive_int("H_kv", H_kv)
    _checks.divisible("N", env["N"], "c", env["c"])
    _checks.divisible("H", env["H"], "H_kv", env["H_kv"])
    return _exact(formulas.cp_saved(**env))


def _exact(items: dict) -> dict:
    """Fractions that are whole as ints."""
    return {k: int(v) if getattr(v, "denominator", 1) == 1 else v for k, v in items.items()}


def comm_bytes(scheme: str, *, B: int, N: int, degree: int, d_model: int | None = None, H: int | None = None,
               D: int | None = None, D_v: int | None = None, H_kv: int | None = None,
               bytes_per_value: int = 2) -> dict:
    """:func:`comm_exprs` evaluated: bytes one rank sends per layer, by collective.

    degree is t for "TP" and "TP+SP" (needs d_model), c for "CP" and "Ulysses" (need H and D; H_kv
    defaults to H). Exact when the tensors split evenly over the ranks (N divisible by the degree).
    """
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N),
               b=_checks.positive_int("bytes_per_value", bytes_per_value))
    degree = _checks.positive_int("degree", degree)
    if scheme in ("CP", "Ulysses"):
        env.update(H=_checks.positive_int("H", H), D=_checks.positive_int("D", D), c=degree)
        env["D_v"] = env["D"] if D_v is None else _checks.positive_int("D_v", D_v)
        env["H_kv"] = env["H"] if H_kv is None else _checks.positive_int("H_kv", H_kv)
        fn = formulas.cp_sent if scheme == "CP" else formulas.ulysses_sent
        names = inspect.signature(fn.__wrapped__).parameters
        return _exact(fn(**{k: env[k] for k in names}))
    env.update(d=_checks.positive_int("d_model", d_model), t=degree)
    return evaluate(comm_exprs(scheme), env)


#: items of :func:`attn_core.ledger.block_ledger` that tensor parallelism splits over its t ranks
TP_SPLIT_ITEMS = formulas.TP_SPLIT_ITEMS


def per_rank_activations(items: dict, *, t: int = 1, sequence_parallel: bool = False, c: int = 1,
                         attention: str = "fused") -> dict:
    """One rank's share of a block's activation items under TP (degree t), SP and CP (degree c).

    ``items``: bytes by item name, as :func:`attn_core.ledger.block_ledger` returns them. Items in
    :data:`TP_SPLIT_ITEMS` are divided by t; the others (norm inputs, outputs and statistics, the
    residual stream, its dropout masks) by t only with ``sequence_parallel``. Context parallelism
    splits the tokens, so every item is divided by c: a rank's N/c queries keep (N/c) x N of each
    N x N item, and a ring that recomputes the weights from the logsumexp, as fused attention does
    (:func:`attn_core.parallel.ring_attention`, ``attention="fused"``), saves none (while it runs, each
    step still builds (N/c) x (N/c) blocks: transient, not saved). With ``attention="eager"`` a rank
    keeps the keys and values of all N tokens (its queries' backward needs them), so K and V are not
    divided by c.
    Exact when the degrees divide N, H, H_kv and F (then the values are integers); otherwise
    Fractions. The per-rank ledger of Korthikanti et al. is this rule applied to their
    items (``tests/test_parallel.py`` checks it against :func:`korthikanti_exprs`).
    """
    from fractions import Fraction

    t = _checks.positive_int("t", t)
    c = _checks.positive_int("c", c)
    if attention not in ("fused", "eager"):
        raise ValueError(f"attention must be 'fused' or 'eager', got {attention!r}")
    out = {}
    for name, nbytes in items.items():
        cp = 1 if attention == "eager" and name in ("K", "V") else c
        share = Fraction(nbytes, cp * (t if name in TP_SPLIT_ITEMS or sequence_parallel else 1))
        out[name] = int(share) if share.denominator == 1 else share
    return out
