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
Both count through the one definition, :func:`attn_core.formulas.layer_flops`.
"""

from __future__ import annotations

from fractions import Fraction

from . import _checks, formulas
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


def _mha_layer(N, d, with_ffn, ffn, ffn_mult, causal) -> tuple:
    """formulas.layer_flops for plain MHA (D = d / H, any H: the FLOPs do not depend on it)."""
    ffn_dim = Fraction(ffn_mult).limit_denominator(1000) * d
    ffn_flops_coefficient(ffn, ffn_mult)  # checks ffn and ffn_mult
    return formulas.layer_flops(N=N, d=d, H=1, **formulas.MHA(d, 1), F=ffn_dim, m_ffn=FFN_MATRICES[ffn],
                                w_ffn=int(bool(with_ffn)), c_causal=CAUSAL_FACTOR[bool(causal)])


def layer_flops(N: int, d: int, with_ffn: bool = True, *, ffn: str = "mlp", ffn_mult: float = 4,
                causal: bool = False) -> tuple[int, int]:
    """Forward FLOPs of one layer, split into (linear, quadratic) in N.

    linear = 8 N d^2 (+ FFN, 16 N d^2 for the default 4d MLP);
    quadratic = 4 N^2 d, halved with ``causal=True``.
    """
    N = _checks.positive_int("N", N)
    d = _checks.positive_int("d", d)
    linear, quadratic = _mha_layer(N, d, with_ffn, ffn, ffn_mult, causal)
    return int(linear), int(quadratic)


def flops_crossover(d: int, with_ffn: bool = True, *, ffn: str = "mlp", ffn_mult: float = 4,
                    causal: bool = False) -> float:
    """N* where the quadratic FLOPs equal the linear ones.

    4 N^2 d = 24 N d^2 gives N* = 6d with the FFN, 2d without; in general
    N* = (8 + c_ffn) d / 4, doubled when causal halves the quadratic work.
    """
    d = _checks.positive_int("d", d)
    linear, quadratic = _mha_layer(1, d, with_ffn, ffn, ffn_mult, causal)  # the coefficients of N and N^2
    return float(Fraction(linear) / quadratic)


def _model_args(model: ModelConfig) -> dict:
    """The symbols of formulas.layer_flops for a model as built."""
    a = model.formula_args()
    return {k: a[k] for k in ("d", "H", "H_kv", "D", "D_v", "D_r", "R", "Q_r", "F", "m_ffn")}


def model_layer_flops(model: ModelConfig, N: int, *, causal: bool = False,
                      with_ffn: bool = True) -> tuple[int, int]:
    """Forward FLOPs of one layer of a real model, split into (linear, quadratic) in N.

    linear = 2 N (the attention projections as built + the FFN a token passes through): GQA's
    d x H_kv D keys and values, MLA's low-rank factors, the FFN's 2 or 3 matrices of d x F;
    quadratic = 2 N^2 H (D_qk + D_v) for Q K^T and P V, with D_qk the query/key head dim
    (MLA: d_head + rope_dim), halved with ``causal=True``. Norms, the router of a mixture of
    experts, softmax and the embeddings are not counted.
    """
    N = _checks.positive_int("N", N)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    linear, quadratic = formulas.layer_flops(N=N, **_model_args(model), w_ffn=int(bool(with_ffn)),
                                             c_causal=CAUSAL_FACTOR[bool(causal)])
    return int(linear), int(quadratic)


def model_flops_crossover(model: ModelConfig, *, causal: bool = False, with_ffn: bool = True) -> float:
    """N* where :func:`model_layer_flops`' quadratic term equals its linear one.

    2 N W = 2 N^2 H (D_qk + D_v) c gives N* = W / (H (D_qk + D_v) c), W the layer's weights.
    """
    lin1, quad1 = model_layer_flops(model, 1, causal=causal, with_ffn=with_ffn)
    return float(Fraction(lin1, quad1))
