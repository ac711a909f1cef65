"""The training step's memory beyond activations: weights, gradients, optimizer state, ZeRO.

Per parameter (Psi parameters), in bytes:

=====================  =======  =========  ==========================================
precision, optimizer   weights  gradients  optimizer state
=====================  =======  =========  ==========================================
fp32, AdamW            4        4          8  (two moments m, v)
bf16 mixed, AdamW      2        2          12 (fp32 master weights, m, v): 16 in all
fp32, SGD + momentum   4        4          4  (momentum)
bf16 mixed, SGD + mom. 2        2          8  (fp32 master weights, momentum)
fp32, SGD              4        4          0
bf16 mixed, SGD        2        2          4  (fp32 master weights)
=====================  =======  =========  ==========================================

ZeRO (Rajbhandari et al., 2020) shards these over ``dp_ranks`` data-parallel ranks: stage 1
the optimizer state, stage 2 also the gradients, stage 3 also the weights. Per rank, with
K optimizer bytes per parameter and 16-bit weights and gradients:

    stage 0: (2 + 2 + K) Psi,   1: (2 + 2) Psi + K Psi / N_d,
    stage 2: 2 Psi + (2 + K) Psi / N_d,   3: (2 + 2 + K) Psi / N_d.

The paper's Figure 1 (7.5B parameters, 64 ranks, K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
Written once in :func:`attn_core.formulas.training_state` (the "does it fit" widget evaluates it too).
"""

from __future__ import annotations

from fractions import Fraction

from . import _checks, formulas
from .symbols import SWITCHES

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "ZERO_STAGES",
    "bytes_per_param",
    "training_state_bytes",
]

#: precision -> (weight bytes, gradient bytes, master-weight bytes kept by the optimizer)
PRECISIONS: dict[str, tuple[int, int, int]] = {
    name: (v["w_b"], v["g_b"], v["o_master"]) for name, v in SWITCHES["precision"].items()}
#: optimizer -> fp32 state values per parameter (AdamW: m and v; SGD with momentum: one buffer)
OPTIMIZERS: dict[str, int] = {name: v["n_opt"] for name, v in SWITCHES["optimizer"].items()}
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)


def bytes_per_param(precision: str = "bf16_mixed", optimizer: str = "adamw") -> dict[str, int]:
    """{"weights", "gradients", "optimizer"}: bytes per parameter before any sharding."""
    return training_state_bytes(1, precision=precision, optimizer=optimizer)


def _exact(x: Fraction) -> int | Fraction:
    return int(x) if x.denominator == 1 else x


def training_state_bytes(num_params: int, *, precision: str = "bf16_mixed", optimizer: str = "adamw",
                         zero_stage: int = 0, dp_ranks: int = 1) -> dict[str, int | Fraction]:
    """Bytes one data-parallel rank holds for weights, gradients and optimizer state.

    ZeRO ``zero_stage`` 0-3 shards, over ``dp_ranks`` ranks: 1 the optimizer state, 2 also the
    gradients, 3 also the weights (an exact share Psi / N_d: an int when it divides, else a
    Fraction). Activations and temporary buffers are not included.
    """
    num_params = _checks.positive_int("num_params", num_params)
    dp_ranks = _checks.positive_int("dp_ranks", dp_ranks)
    if isinstance(zero_stage, bool) or zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be one of {list(ZERO_STAGES)}, got {zero_stage!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    switches = {**SWITCHES["precision"][precision], **SWITCHES["optimizer"][optimizer],
                **SWITCHES["zero"][str(zero_stage)]}
    switches.pop("b")  # the activations' bytes: not part of the training state
    state = formulas.training_state(P_w=num_params, N_d=dp_ranks, **switches)
    return {k: _exact(Fraction(state[k])) for k in ("weights", "gradients", "optimizer")}
