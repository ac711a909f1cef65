"""Workers for the process-group tests: bad inputs, a failing rank and a hanging one.

Test fixtures, not library code: :func:`attn_core.parallel.launch` runs them on spawned processes,
which import this module by name (pytest puts tests/ on the path, and spawn passes the path on).
"""

from __future__ import annotations

import time

import torch

from attn_core.parallel import (
    ReferenceBlock,
    TensorParallelBlock,
    ring_attention,
    shard_sequence,
    ulysses_attention,
)
from attn_core.parallel.comm import _group


def worker_errors(rank: int, size: int, spec: dict | None = None, group=None) -> dict:
    """Bad input, each case on every rank: the ValueError message each rank got (None: no error).

    Afterwards one correct ring-attention call and one Ulysses call show the group still works (no
    rank is stuck).
    """
    rank, size = _group(group)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4 * size + 2, 4, generator=g, dtype=torch.float64)  # N = 4 size + 2
    cases = {
        "zigzag, N not divisible by 2 size": lambda: ring_attention(
            *[shard_sequence(x, size)[rank]] * 3, group=group, layout="zigzag"),
        "mismatched shards (head dim)": lambda: ring_attention(
            *[x[..., : 4 - (rank == size - 1)].chunk(size, -2)[0]] * 3, group=group),
        "mismatched shards (batch)": lambda: ring_attention(
            *[torch.cat([x] * (1 + (rank == 0)))[..., :2, :]] * 3, group=group),
        "layout differs across ranks": lambda: ring_attention(
            *[x[..., :4, :]] * 3, group=group, layout="zigzag" if rank == 0 else "contiguous"),
        "q not a tensor on the last rank": lambda: ring_attention(
            x[..., :4, :].tolist() if rank == size - 1 else x[..., :4, :], x[..., :4, :], x[..., :4, :],
            group=group),
        "t does not divide H": lambda: TensorParallelBlock(
            ReferenceBlock(4 * (size + 1), size + 1, dtype=torch.float64), group=group),
        "GQA, H not a multiple of H_kv": lambda: ring_attention(
            x[:, :2, :4, :], torch.cat([x] * 3, dim=1)[:, :3, :4, :], torch.cat([x] * 3, dim=1)[:, :3, :4, :],
            group=group),
        "Ulysses, c does not divide H": lambda: ulysses_attention(
            *[torch.cat([x] * size, dim=1)[:, : size + 1].tensor_split(size, -2)[rank]] * 3, group=group),
        "Ulysses, c does not divide H_kv": lambda: ulysses_attention(
            torch.cat([x] * size, dim=1)[:, : 2 * size].tensor_split(size, -2)[rank],
            *[x[:, :1].tensor_split(size, -2)[rank]] * 2, group=group),
        "SP, N not divisible by t": lambda: TensorParallelBlock(
            ReferenceBlock(8, size, dtype=torch.float64), sequence_parallel=True, group=group)(
            torch.randn(1, size + 1, 8, dtype=torch.float64).tensor_split(size, -2)[rank]),
    }
    out = {}
    for name, call in cases.items():
        try:
            call()
            out[name] = None
        except ValueError as e:
            out[name] = str(e)
    y = ring_attention(*[shard_sequence(x, size)[rank]] * 3, group=group)
    out["then a correct call"] = y.shape
    heads = torch.cat([x] * size, dim=1)  # (1, 2 size, N, 4): c divides H
    out["then a correct Ulysses call"] = ulysses_attention(*[shard_sequence(heads, size)[rank]] * 3,
                                                           group=group).shape
    return out


def worker_fail(rank: int, size: int) -> None:
    """The last rank raises while the others wait for it in a ring: launch() must not hang."""
    if rank == size - 1:
        raise RuntimeError("this rank fails on purpose")
    x = torch.zeros(1, 1, 4, 4)
    ring_attention(x, x, x)


def worker_hang(rank: int, size: int) -> None:
    """Never returns: launch() must kill it when its time is up."""
    while True:
        time.sleep(1)
