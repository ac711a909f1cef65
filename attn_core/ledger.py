"""The training-side memory ledger of one multi-head attention layer.

A deliberately explicit teaching model (seed 003, section 3.4): count the
tensors an eager attention layer keeps for backward, in bytes.

* linear in N: X, Q, K, V, the context ctx = P V and the output O,
  six (B, N, d) tensors;
* quadratic in N: the scores S, the softmax weights P and a floating-point
  dropout multiplier, three (B, H, N, N) tensors.

    one layer ~ 6 B N d b + 3 B H N^2 b bytes

The two terms are equal at N* = 2d / H (256 for d = 3072, H = 24). What a
real eager layer saves is measured against this in chapter 5 and in
``tests/test_ledger.py`` with :func:`attn_core.measure.saved_tensor_bytes`.

The ledger is also exported as data (:data:`LEDGER_TERMS`): each item is a
coefficient times powers of B, N, d, H, times bytes per value, so the HTML
book can evaluate the same formula in the browser.
"""

from __future__ import annotations

from . import _checks

__all__ = [
    "DTYPE_BYTES",
    "LEDGER_TERMS",
    "FUSED_TERMS",
    "DROPOUT_ITEMS",
    "ITEM_SHAPES",
    "activation_ledger",
    "fused_activation_bytes",
    "memory_crossover",
    "dtype_bytes",
    "evaluate_term",
]

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

# item -> (coefficient, {symbol: power}); bytes = coeff * prod(sym ** power) * b
LEDGER_TERMS: dict[str, tuple[int, dict[str, int]]] = {
    "X": (1, {"B": 1, "N": 1, "d": 1}),
    "Q": (1, {"B": 1, "N": 1, "d": 1}),
    "K": (1, {"B": 1, "N": 1, "d": 1}),
    "V": (1, {"B": 1, "N": 1, "d": 1}),
    "S": (1, {"B": 1, "H": 1, "N": 2}),
    "P": (1, {"B": 1, "H": 1, "N": 2}),
    "dropout": (1, {"B": 1, "H": 1, "N": 2}),
    "ctx": (1, {"B": 1, "N": 1, "d": 1}),
    "O": (1, {"B": 1, "N": 1, "d": 1}),
}

# the fused (FlashAttention) side as data, same convention: fused_activation_bytes
FUSED_TERMS: dict[str, tuple[int, dict[str, int]]] = {
    "fused": (6, {"B": 1, "N": 1, "d": 1}),
}

#: items that ``dropout=False`` sets to 0
DROPOUT_ITEMS: tuple[str, ...] = ("dropout",)

ITEM_SHAPES: dict[str, str] = {
    "X": "input X [B, N, d]",
    "Q": "queries Q [B, N, d]",
    "K": "keys K [B, N, d]",
    "V": "values V [B, N, d]",
    "S": "scores S [B, H, N, N]",
    "P": "softmax weights P [B, H, N, N]",
    "dropout": "dropout multiplier [B, H, N, N]",
    "ctx": "context P V [B, N, d]",
    "O": "output O [B, N, d]",
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per value of a dtype name in :data:`DTYPE_BYTES`."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


def evaluate_term(term: tuple[int, dict[str, int]], values: dict[str, int], b: int) -> int:
    """coefficient * prod(values[s] ** p) * b for one :data:`LEDGER_TERMS` entry."""
    coeff, powers = term
    out = coeff * b
    for sym, p in powers.items():
        out *= values[sym] ** p
    return out


def activation_ledger(B: int, N: int, d_model: int, H: int, dtype: str = "bf16",
                      dropout: bool = True) -> dict[str, int]:
    """Bytes of each tensor one eager MHA layer keeps, by item name.

    Items (in this order): X, Q, K, V, S, P, dropout, ctx, O; see
    :data:`ITEM_SHAPES`. With ``dropout=False`` the dropout item is 0.
    Weights, gradients, optimizer state, the FFN and workspace are not counted.
    """
    values = {
        "B": _checks.positive_int("B", B),
        "N": _checks.positive_int("N", N),
        "d": _checks.positive_int("d_model", d_model),
        "H": _checks.positive_int("H", H),
    }
    _checks.divisible("d_model", d_model, "H", H)
    b = dtype_bytes(dtype)
    items = {name: evaluate_term(term, values, b) for name, term in LEDGER_TERMS.items()}
    if not dropout:
        items["dropout"] = 0
    return items


def fused_activation_bytes(B: int, N: int, d_model: int, dtype: str = "bf16") -> int:
    """The fused (FlashAttention) side of the teaching model: six (B, N, d) tensors.

    A fused kernel never stores the N x N matrices; it keeps the same linear
    tensors plus a per-row logsumexp (B H N values), ignored here as in seed 003.
    """
    return 6 * _checks.positive_int("B", B) * _checks.positive_int("N", N) \
        * _checks.positive_int("d_model", d_model) * dtype_bytes(dtype)


def memory_crossover(d_model: int, H: int) -> float:
    """N* where 3 B H N^2 b = 6 B N d b, i.e. N* = 2 d / H (256 for d=3072, H=24)."""
    d_model = _checks.positive_int("d_model", d_model)
    H = _checks.positive_int("H", H)
    return 2 * d_model / H
