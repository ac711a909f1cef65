"""The FLOPs ledger of one transformer layer (forward pass).

Convention: a matmul [M, K] @ [K, N] costs 2 M K N FLOPs (one multiply and
one add per multiply-accumulate), the convention of PyTorch's
``FlopCounterMode``; element-wise work (softmax, norms, activations) is not
counted.

* four d x d projections (Q, K, V, O):         8 N d^2
* FFN d -> 4d -> d (two matrices):             16 N d^2
* the two N x N matmuls Q K^T and P V:          4 N^2 d

Linear 24 N d^2 against quadratic 4 N^2 d: the ratio is N / (6 d), so the
quadratic term passes the linear one at N* = 6d (18432 for d = 3072), and
inside the attention block alone (no FFN) at N* = 2d.

The assumptions are switches: ``ffn="swiglu"`` (three matrices of
``ffn_mult * d``), ``ffn_mult``, and ``causal=True`` (a kernel that skips the
masked upper triangle does half the quadratic work).

Real models share K and V between heads (GQA), use head dims other than d/H
and low-rank projections (MLA): :func:`model_layer_flops` counts a
:class:`~attn_core.kv_cache.ModelConfig` as it is built,

    linear = 2 N (attention projection weights + FFN weights),
    quadratic = 2 N^2 H (D_qk + D_v),

so Llama 3 8B's crossover is 26,624 tokens: not the 24,576 (6 d) of 24 N d^2, nor the 29,696
of the same projections counted as d x d (MHA) with its SwiGLU FFN.
The same formulas are SymPy expressions in :mod:`attn_core.formulas`.
"""

from __future__ import annotations

from fractions import Fraction

from . import _checks
from .kv_cache import ModelConfig

__all__ = [
    "layer_flops",
    "flops_crossover",
    "ffn_flops_coefficient",
    "FFN_MATRICES",
    "CAUSAL_FACTOR",
    "model_layer_flops",
    "model_flops_crossover",
]

#: matrices in the FFN of each kind (the ``m_ffn`` switch of :data:`FLOPS_TERMS`)
FFN_MATRICES: dict[str, int] = {"mlp": 2, "swiglu": 3}

#: share of the N x N work a kernel does (the ``c_causal`` switch): causal skips half
CAUSAL_FACTOR: dict[bool, Fraction] = {False: Fraction(1), True: Fraction(1, 2)}

def ffn_flops_coefficient(ffn: str = "mlp", ffn_mult: float = 4) -> Fraction:
    """FFN FLOPs per N d^2: 2 * matrices * ffn_mult (16 for the 4d MLP)."""
    if ffn not in FFN_MATRICES:
        raise ValueError(f"ffn must be one of {sorted(FFN_MATRICES)}, got {ffn!r}")
    if not ffn_mult > 0:
        raise ValueError(f"ffn_mult must be positive, got {ffn_mult!r}")
    return 2 * FFN_MATRICES[ffn] * Fraction(ffn_mult).limit_denominator(1000)


def layer_flops(N: int, d: int, with_ffn: bool = True, *, ffn: str = "mlp", ffn_mult: float = 4,
                causal: bool = False) -> tuple[int, int]:
    """Forward FLOPs of one layer, split into (linear, quadratic) in N.

    linear = 8 N d^2 (+ FFN, 16 N d^2 for the default 4d MLP);
    quadratic = 4 N^2 d, halved with ``causal=True``.
    """
    N = _checks.positive_int("N", N)
    d = _checks.positive_int("d", d)
    linear = 8 * N * d * d
    if with_ffn:
        linear += int(ffn_flops_coefficient(ffn, ffn_mult) * N * d * d)
    quadratic = int(4 * N * N * d * CAUSAL_FACTOR[bool(causal)])
    return linear, quadratic


def flops_crossover(d: int, with_ffn: bool = True, *, ffn: str = "mlp", ffn_mult: float = 4,
                    causal: bool = False) -> float:
    """N* where the quadratic FLOPs equal the linear ones.

    4 N^2 d = 24 N d^2 gives N* = 6d with the FFN, 2d without; in general
    N* = (8 + c_ffn) d / 4, doubled when causal halves the quadratic work.
    """
    d = _checks.positive_int("d", d)
    linear_coeff = Fraction(8)
    if with_ffn:
        linear_coeff += ffn_flops_coefficient(ffn, ffn_mult)
    quad_coeff = 4 * CAUSAL_FACTOR[bool(causal)]
    n_star = linear_coeff * d / quad_coeff
    return float(n_star)


def model_layer_flops(model: ModelConfig, N: int, *, causal: bool = False,
                      with_ffn: bool = True) -> tuple[int, int]:
    """Forward FLOPs of one layer of a real model, split into (linear, quadratic) in N.

    linear = 2 N (``model.attention_params()`` + ``model.ffn_params()``): every projection as
    built (GQA's d x H_kv D keys and values, MLA's low-rank factors, the FFN a token passes
    through); quadratic = 2 N^2 H (D_qk + D_v) for Q K^T and P V, with D_qk the query/key
    head dim (MLA: d_head + rope_dim), halved with ``causal=True``. Norms, the router of a
    mixture of experts, softmax and the embeddings are not counted.
    """
    N = _checks.positive_int("N", N)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    weights = model.attention_params() + (model.ffn_params() if with_ffn else 0)
    linear = 2 * N * weights
    d_qk = model.d_head + (model.rope_dim or 0)
    quadratic = int(2 * N * N * model.num_heads * (d_qk + (model.d_v or model.d_head))
                    * CAUSAL_FACTOR[bool(causal)])
    return linear, quadratic


def model_flops_crossover(model: ModelConfig, *, causal: bool = False, with_ffn: bool = True) -> float:
    """N* where :func:`model_layer_flops`' quadratic term equals its linear one.

    2 N W = 2 N^2 H (D_qk + D_v) c gives N* = W / (H (D_qk + D_v) c), W the layer's weights.
    """
    lin1, quad1 = model_layer_flops(model, 1, causal=False, with_ffn=with_ffn)
    return float(Fraction(lin1, quad1) / CAUSAL_FACTOR[bool(causal)])
