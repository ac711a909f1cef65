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
"""

from __future__ import annotations

from fractions import Fraction

from . import _checks

__all__ = [
    "layer_flops",
    "flops_crossover",
    "ffn_flops_coefficient",
    "FFN_MATRICES",
    "CAUSAL_FACTOR",
    "FLOPS_TERMS",
]

#: matrices in the FFN of each kind (the ``m_ffn`` switch of :data:`FLOPS_TERMS`)
FFN_MATRICES: dict[str, int] = {"mlp": 2, "swiglu": 3}

#: share of the N x N work a kernel does (the ``c_causal`` switch): causal skips half
CAUSAL_FACTOR: dict[bool, Fraction] = {False: Fraction(1), True: Fraction(1, 2)}

# The same ledger as data, for the widgets and the HTML book (attn_core.widgets.formula_spec):
# part -> terms, each (coefficient, {symbol: power}); FLOPs = sum of coeff * prod(sym ** power).
# Symbols: N, d; m_ffn = FFN_MATRICES[ffn]; f_ffn = ffn_mult; w_ffn = 1 with the FFN, 0 without;
# c_causal = CAUSAL_FACTOR[causal]. tests/test_widgets.py checks it equals layer_flops.
FLOPS_TERMS: dict[str, tuple[tuple[int, dict[str, int]], ...]] = {
    "linear": (
        (8, {"N": 1, "d": 2}),  # Q, K, V, O projections
        (2, {"N": 1, "d": 2, "m_ffn": 1, "f_ffn": 1, "w_ffn": 1}),  # FFN: m matrices d x f d
    ),
    "quadratic": ((4, {"N": 2, "d": 1, "c_causal": 1}),),  # Q K^T and P V
}


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
