"""Argument checks shared by the attn_core modules.

Every public function validates its inputs and raises ``ValueError`` with a
message that names the offending argument and says what was expected.
"""

from __future__ import annotations

import numbers

import torch


def positive_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise if it is not an integer > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by != 0:
        raise ValueError(f"{name} ({value}) must be divisible by {by_name} ({by})")


def tensor(name: str, value, min_dim: int = 1) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dims, got shape {tuple(value.shape)}")
    return value


def qkv(q, k, v) -> tuple[int, int, int]:
    """Check q, k ``(..., N, D_k)`` and v ``(..., N, D_v)`` share N and D_k.

    Returns ``(N, D_k, D_v)``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        tensor(name, t, min_dim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dim D_k, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length N, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"q and k must have the same length N, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if q.shape[-2] == 0:
        raise ValueError("q, k, v must hold at least one token (N >= 1), got N = 0")
    return q.shape[-2], q.shape[-1], v.shape[-1]
