"""The training-side memory ledger of one multi-head attention layer.

A deliberately explicit model (the 3.6B worked example of chapter 5): count the tensors an
eager attention layer keeps for backward, in bytes. Two versions, chosen by ``saved``:

* ``"teaching"``: six (B, N, d) tensors linear in N (X, Q, K, V, the context ctx = P V and
  the output O) and three (B, H, N, N) tensors quadratic in N (the scores S, the softmax
  weights P and a floating-point dropout multiplier):

      one layer ~ 6 B N d b + 3 B H N^2 b bytes, equal at N* = 2d / H (256 for d = 3072, H = 24);

* ``"autograd"``: what autograd really saves for :func:`attn_core.attention.mha_forward`,
  measured with :func:`attn_core.measure.saved_tensor_bytes` in ``tests/test_ledger.py``:
  no S (softmax's backward needs only its output P), no O (the next layer saves it as its X),
  the dropout mask in ``mask_bytes`` per element, P after dropout (saved by the P V matmul,
  which without dropout saves P itself), and the dense (N, N) bool causal mask that
  ``masked_fill`` keeps when ``causal=True``. Without dropout one N x N tensor is left and
  the crossover moves to 5d / H.

The same items are SymPy expressions in :mod:`attn_core.formulas` (the widgets evaluate
those); ``tests/test_formulas.py`` checks the two agree.
"""

from __future__ import annotations

from . import _checks

__all__ = [
    "DTYPE_BYTES",
    "ITEM_SHAPES",
    "SAVED_MODELS",
    "activation_ledger",
    "fused_activation_bytes",
    "memory_crossover",
    "dtype_bytes",
]

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

ITEM_SHAPES: dict[str, str] = {
    "X": "input X [B, N, d]",
    "Q": "queries Q [B, N, H D]",
    "K": "keys K [B, N, H_kv D]",
    "V": "values V [B, N, H_kv D_v]",
    "S": "scores S [B, H, N, N]",
    "P": "softmax weights P [B, H, N, N]",
    "dropout": "dropout mask [B, H, N, N]",
    "P_drop": "P after dropout [B, H, N, N]",
    "ctx": "context P V [B, N, H D_v]",
    "mask": "causal mask [N, N], bool",
    "O": "output O [B, N, d]",
}

#: the two versions of the ledger (``saved=``)
SAVED_MODELS: tuple[str, ...] = ("teaching", "autograd")


def dtype_bytes(dtype: str) -> int:
    """Bytes per value of a dtype name in :data:`DTYPE_BYTES`."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


def activation_ledger(B: int, N: int, d_model: int, H: int, dtype: str = "bf16",
                      dropout: bool = True, *, saved: str = "teaching", mask_bytes: int | None = None,
                      causal: bool = False, num_kv_heads: int | None = None, d_head: int | None = None,
                      d_v: int | None = None) -> dict[str, int]:
    """Bytes of each tensor one eager attention layer keeps for backward, by item name.

    ``saved="teaching"`` (default): items X, Q, K, V, S, P, dropout, ctx, O (see
    :data:`ITEM_SHAPES`); with ``dropout=False`` the dropout item is 0.
    ``saved="autograd"``: items X, Q, K, V, P, dropout (the mask, ``mask_bytes`` per element:
    None = the dtype's bytes, as PyTorch's CPU dropout saves a multiplier; 1 = a bool mask, as
    a fused CUDA dropout keeps), P_drop (P after dropout; 0 without dropout), ctx, mask (the
    (N, N) bool causal mask, N^2 bytes, when ``causal``) and O (0: not saved by its own layer).

    Heads: Q and ctx are (B, N, H D), K (B, N, H_kv D) and V (B, N, H_kv D_v), with
    ``d_head`` D (default d/H), ``num_kv_heads`` H_kv (default H), ``d_v`` (default D).
    Weights, gradients, optimizer state, the FFN and workspace are not counted.
    """
    B = _checks.positive_int("B", B)
    N = _checks.positive_int("N", N)
    d = _checks.positive_int("d_model", d_model)
    H = _checks.positive_int("H", H)
    if d_head is None:
        _checks.divisible("d_model", d_model, "H", H)
        D = d // H
    else:
        D = _checks.positive_int("d_head", d_head)
    H_kv = H if num_kv_heads is None else _checks.positive_int("num_kv_heads", num_kv_heads)
    _checks.divisible("H", H, "num_kv_heads", H_kv)
    D_v = D if d_v is None else _checks.positive_int("d_v", d_v)
    if saved not in SAVED_MODELS:
        raise ValueError(f"saved must be one of {list(SAVED_MODELS)}, got {saved!r}")
    b = dtype_bytes(dtype)
    m = b if mask_bytes is None else _checks.positive_int("mask_bytes", mask_bytes)
    nn = B * H * N * N  # values in one (B, H, N, N) tensor
    autograd = saved == "autograd"
    drop = bool(dropout)
    return {
        "X": B * N * d * b,
        "Q": B * N * H * D * b,
        "K": B * N * H_kv * D * b,
        "V": B * N * H_kv * D_v * b,
        **({} if autograd else {"S": nn * b}),
        "P": nn * b,
        "dropout": nn * (m if autograd else b) if drop else 0,
        **({"P_drop": nn * b if drop else 0} if autograd else {}),
        "ctx": B * N * H * D_v * b,
        **({"mask": N * N if causal else 0} if autograd else {}),
        "O": 0 if autograd else B * N * d * b,
    }


def fused_activation_bytes(B: int, N: int, d_model: int, dtype: str = "bf16") -> int:
    """The fused (FlashAttention) side of the teaching model: six (B, N, d) tensors.

    A fused kernel never stores the N x N matrices; it keeps the same linear tensors plus a
    per-row logsumexp (B H N values), which the teaching model leaves out.
    """
    return 6 * _checks.positive_int("B", B) * _checks.positive_int("N", N) \
        * _checks.positive_int("d_model", d_model) * dtype_bytes(dtype)


def memory_crossover(d_model: int, H: int, *, saved: str = "teaching", dropout: bool = True,
                     dtype: str = "bf16", mask_bytes: int | None = None, num_kv_heads: int | None = None,
                     d_head: int | None = None, d_v: int | None = None) -> float:
    """N* where the quadratic items of :func:`activation_ledger` equal the linear ones.

    Plain MHA (D = d/H): the teaching ledger's 3 B H N^2 b = 6 B N d b gives N* = 2d/H (256 for
    d = 3072, H = 24), and 3d/H without dropout (S and P only). As autograd saves it: five linear
    tensors (no O) against P alone without dropout, N* = 5d/H; with dropout P, the mask (m bytes)
    and P after dropout, N* = 5 d b / ((2 b + m) H). The causal mask is left out (it does not
    scale with B). With ``num_kv_heads``, ``d_head`` or ``d_v`` (GQA, MLA's head dims) N* is the
    ratio of the ledger's linear to its quadratic bytes per token, as :func:`activation_ledger`
    counts them.
    """
    d_model = _checks.positive_int("d_model", d_model)
    H = _checks.positive_int("H", H)
    if saved not in SAVED_MODELS:
        raise ValueError(f"saved must be one of {list(SAVED_MODELS)}, got {saved!r}")
    b = dtype_bytes(dtype)
    m = b if mask_bytes is None else _checks.positive_int("mask_bytes", mask_bytes)
    if (num_kv_heads, d_head, d_v) != (None, None, None):
        items = activation_ledger(1, 1, d_model, H, dtype, dropout, saved=saved, mask_bytes=mask_bytes,
                                  num_kv_heads=num_kv_heads, d_head=d_head, d_v=d_v)
        quadratic = sum(items.get(k, 0) for k in ("S", "P", "dropout", "P_drop"))  # B H N^2 items at N = 1
        return (sum(items.values()) - quadratic) / quadratic
    if saved == "teaching":
        linear, quadratic = 6 * b, (3 if dropout else 2) * b
    else:
        linear, quadratic = 5 * b, (2 * b + m) if dropout else b
    return linear * d_model / (quadratic * H)
