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

The items are written once, in :func:`attn_core.formulas.memory_items` and
:func:`attn_core.formulas.block_items` (which the widgets evaluate too); the functions here check
their arguments, turn options into switch values and evaluate them exactly.

:func:`block_ledger` counts a whole pre-norm transformer block the same way (norms, projections,
the attention core, the FFN, the dropouts, with recomputation); the block itself and its
measurement are in :mod:`attn_core.block`.
"""

from __future__ import annotations

from fractions import Fraction

from . import _checks, formulas
from .symbols import SWITCHES

__all__ = [
    "DTYPE_BYTES",
    "ITEM_SHAPES",
    "SAVED_MODELS",
    "activation_ledger",
    "fused_activation_bytes",
    "memory_crossover",
    "dtype_bytes",
    "BLOCK_ITEMS",
    "FFN_KINDS",
    "NORMS",
    "ATTENTION_KINDS",
    "RECOMPUTE_POLICIES",
    "block_ledger",
    "korthikanti_bytes",
]

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

ITEM_SHAPES: dict[str, str] = {
    "X": "input X [B, N, d]",
    "Q": "queries Q [B, N, H D]",
    "K": "keys K [B, N, H_kv D]",
    "V": "values V [B, N, H_kv D_v]",
    "S": "scores S [B, H, N, N]",
    "P": "softmax weights P [B, H, N, N]",
    "dropout": "dropout mask or multiplier [B, H, N, N]",
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
    if m not in (1, b):
        raise ValueError(f"mask_bytes must be None (the dtype's {b}) or 1 (a bool mask), got {mask_bytes!r}")
    items = formulas.memory_items(B=B, N=N, d=d, H=H, H_kv=H_kv, D=D, D_v=D_v, D_r=0, b=b,
                                  k_drop=int(bool(dropout)), a_saved=SAVED_MODELS.index(saved),
                                  u_mask=int(m == 1), c_mask=int(bool(causal)))
    keys = _TEACHING_ITEMS if saved == "teaching" else _AUTOGRAD_ITEMS
    return {k: _int(items[k]) for k in keys}


_TEACHING_ITEMS = ("X", "Q", "K", "V", "S", "P", "dropout", "ctx", "O")
_AUTOGRAD_ITEMS = ("X", "Q", "K", "V", "P", "dropout", "P_drop", "ctx", "mask", "O")


def _int(x):
    """An exact value as an int when it is whole."""
    x = Fraction(x)
    if x.denominator != 1:
        raise ValueError(f"expected a whole number of bytes, got {x}")
    return int(x)


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
    if d_head is None:
        d, h = _checks.positive_int("d_model", d_model), _checks.positive_int("H", H)
        _checks.divisible("d_model", d, "H", h)

    def total(n: int) -> int:  # the ledger at B = 1 without the causal mask (it does not scale with B)
        return sum(activation_ledger(1, n, d_model, H, dtype, dropout, saved=saved, mask_bytes=mask_bytes,
                                     num_kv_heads=num_kv_heads, d_head=d_head, d_v=d_v).values())

    linear, quadratic = formulas.linear_and_quadratic(total)
    return float(Fraction(linear) / quadratic)


# ------------------------------------------------------------- the whole block (attn_core.block)
# The pre-norm block these items count, and its measurement, are in attn_core.block.

_BLOCK_DTYPE_BYTES = {k: v for k, v in DTYPE_BYTES.items() if k != "fp8"}  # the block's dtypes
FFN_KINDS: tuple[str, ...] = ("gelu", "swiglu")
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")
ATTENTION_KINDS: tuple[str, ...] = ("eager", "fused")
RECOMPUTE_POLICIES: tuple[str, ...] = ("none", "selective", "full")

#: item -> what it is (shapes in the book's symbols; F the FFN width)
BLOCK_ITEMS: dict[str, str] = {
    "X": "block input X [B, N, d] (norm1's input; with full recomputation the only item)",
    "norm1.fp32_input": "RMSNorm: X upcast to float32 [B, N, d] (16-bit dtypes only)",
    "norm1.stats": "norm1 statistics per token, float32 (LayerNorm: mean and rstd; RMSNorm: rstd)",
    "norm1.normalized": "RMSNorm: the float32 normalized X before the weight [B, N, d]",
    "norm1.out": "norm1's output, the projections' input [B, N, d]",
    "Q": "queries [B, H, N, D]",
    "K": "keys [B, H_kv, N, D]",
    "V": "values [B, H_kv, N, D]",
    "P": "eager: softmax weights P [B, H, N, N]",
    "attn_dropout.mask": "eager: dropout mask on P [B, H, N, N]",
    "P_drop": "eager: P after dropout, saved by the P V matmul [B, H, N, N]",
    "attn.lse": "fused: logsumexp per query row and head, float32 [B, H, N]",
    "ctx": "attention output, the O projection's input [B, N, H D]",
    "attn_resid.mask": "dropout mask on the attention branch [B, N, d]",
    "h": "the residual stream after attention [B, N, d] (norm2's input)",
    "norm2.fp32_input": "RMSNorm: h upcast to float32 [B, N, d] (16-bit dtypes only)",
    "norm2.stats": "norm2 statistics per token, float32",
    "norm2.normalized": "RMSNorm: the float32 normalized h [B, N, d]",
    "norm2.out": "norm2's output, the FFN's input [B, N, d]",
    "ffn.gate": "SwiGLU: the gate projection, silu's input [B, N, F]",
    "ffn.silu": "SwiGLU: silu(gate) [B, N, F]",
    "ffn.up": "GeLU: the first projection, GeLU's input; SwiGLU: the up projection [B, N, F]",
    "ffn.act": "the second (down) projection's input: GeLU(up) or silu(gate) * up [B, N, F]",
    "ffn_resid.mask": "dropout mask on the FFN branch [B, N, d]",
}

def _choice(name: str, value, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def _check_block_args(B, N, d_model, H, num_kv_heads, ffn, ffn_dim, norm, attention, mask_bytes,
                      recompute, dtype):
    B = _checks.positive_int("B", B)
    N = _checks.positive_int("N", N)
    d = _checks.positive_int("d_model", d_model)
    H = _checks.positive_int("H", H)
    _checks.divisible("d_model", d, "H", H)
    H_kv = H if num_kv_heads is None else _checks.positive_int("num_kv_heads", num_kv_heads)
    _checks.divisible("H", H, "num_kv_heads", H_kv)
    _choice("ffn", ffn, FFN_KINDS)
    Fw = 4 * d if ffn_dim is None else _checks.positive_int("ffn_dim", ffn_dim)
    _choice("norm", norm, NORMS)
    _choice("attention", attention, ATTENTION_KINDS)
    _choice("recompute", recompute, RECOMPUTE_POLICIES)
    if dtype not in _BLOCK_DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(_BLOCK_DTYPE_BYTES)}, got {dtype!r}")
    b = _BLOCK_DTYPE_BYTES[dtype]
    m = b if mask_bytes is None else _checks.positive_int("mask_bytes", mask_bytes)
    if m not in (1, b):
        raise ValueError(f"mask_bytes must be None (the dtype's {b}) or 1 (a bool mask), got {mask_bytes!r}")
    return B, N, d, H, H_kv, Fw, b, m


def block_ledger(B: int, N: int, d_model: int, H: int, *, num_kv_heads: int | None = None,
                 ffn: str = "gelu", ffn_dim: int | None = None, norm: str = "layernorm",
                 dropout: bool = True, attention: str = "eager", mask_bytes: int | None = None,
                 recompute: str = "none", dtype: str = "bf16") -> dict[str, int]:
    """Bytes of each tensor one pre-norm transformer block keeps for backward, by item.

    Items are the keys of :data:`BLOCK_ITEMS`, always all of them, in that order (0 where an
    option leaves an item out). D = d/H; the FFN width is ``ffn_dim`` (default 4d). Weights,
    gradients, optimizer state and the block's output (the next block's X) are not counted.
    ``dtype`` in {"fp32", "fp16", "bf16"}; the norms' statistics are float32 whatever it is.
    """
    B, N, d, H, H_kv, Fw, b, _ = _check_block_args(B, N, d_model, H, num_kv_heads, ffn, ffn_dim, norm,
                                                   attention, mask_bytes, recompute, dtype)
    switches = {**SWITCHES["norm"][norm], **SWITCHES["ffn_kind"][ffn], **SWITCHES["attention"][attention],
                **SWITCHES["recompute"][recompute]}
    switches.pop("r_op")  # torchtitan's per-op policy is a training step's (formulas.step), not the block's
    items = formulas.block_items(B=B, N=N, d=d, H=H, H_kv=H_kv, F=Fw, b=b, k_drop=int(bool(dropout)),
                                 u_mask=int(mask_bytes == 1), **switches)
    return {k: _int(items[k]) for k in BLOCK_ITEMS}


def korthikanti_bytes(B: int, N: int, d_model: int, H: int, recompute: str = "none") -> int:
    """Korthikanti et al. (2022), activations of one layer: 34 s b h + 5 a s^2 b bytes ("none"),
    34 s b h ("selective"), 2 s b h ("full"); s = N, b = B (the paper's batch), h = d, a = H."""
    args = (("N", N), ("B", B), ("d_model", d_model), ("H", H))
    s, bb, h, a = (_checks.positive_int(n, v) for n, v in args)
    _choice("recompute", recompute, RECOMPUTE_POLICIES)
    return {"none": 34 * s * bb * h + 5 * a * s * s * bb, "selective": 34 * s * bb * h,
            "full": 2 * s * bb * h}[recompute]
