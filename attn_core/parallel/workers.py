"""The experiments of chapter 11, tests/test_parallel.py and bench: importable, so spawn can run them.

Each ``worker_*(rank, size, spec, group=None)`` runs on every rank of a process group started by
:func:`attn_core.parallel.launch` and returns what the caller checks against one process.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .comm import _group, record_comm
from .ring import ring_attention, ring_attention_stats, shard_sequence
from .tensor import ReferenceBlock, TensorParallelBlock


def ring_inputs(spec: dict):
    """The full q, k, v and output gradient of a ring-attention experiment (same on every rank)."""
    g = torch.Generator().manual_seed(spec.get("seed", 0))
    dtype = spec.get("dtype", torch.float64)
    shape_qk = (spec["B"], spec["H"], spec["N"], spec["D"])
    shape_v = (spec["B"], spec["H"], spec["N"], spec.get("D_v", spec["D"]))
    return (torch.randn(shape_qk, generator=g, dtype=dtype), torch.randn(shape_qk, generator=g, dtype=dtype),
            torch.randn(shape_v, generator=g, dtype=dtype), torch.randn(shape_v, generator=g, dtype=dtype))


def worker_ring(rank: int, size: int, spec: dict, group=None) -> dict:
    """Ring attention on this rank's shard: output, gradients, bytes saved and sent, work done.

    spec: B, H, N, D (D_v), causal, layout, dtype, seed; ``measure_saved`` (default True) also
    runs one forward under :func:`attn_core.measure.saved_tensor_bytes`.
    """
    from ..measure import saved_tensor_bytes

    causal, layout = spec.get("causal", True), spec.get("layout", "contiguous")
    rank, size = _group(group)
    q, k, v, dout = (shard_sequence(x, size, layout)[rank].clone().requires_grad_(i < 3)
                     for i, x in enumerate(ring_inputs(spec)))
    saved = None
    if spec.get("measure_saved", True):
        saved = saved_tensor_bytes(ring_attention, q, k, v, causal, group, layout=layout)
        saved = sum(t.nbytes for t in saved)  # q, k, v, out, lse of this rank
    with record_comm() as fwd:
        t0 = time.perf_counter()
        out = ring_attention(q, k, v, causal, group, layout=layout)
        t_fwd = time.perf_counter() - t0
    stats = ring_attention_stats()
    with record_comm() as bwd:
        (out * dout).sum().backward()  # (out.backward(dout) would import SymPy on its first call)
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad, saved=saved, stats=stats,
                sent_fwd=fwd.by_op(), sent_bwd=bwd.by_op(), forward_s=t_fwd)


def worker_tp(rank: int, size: int, spec: dict, group=None) -> dict:
    """A :class:`TensorParallelBlock` against the single-process :class:`ReferenceBlock`.

    spec: B, N, d, H, F (ffn_dim), sequence_parallel, dtype, seed. Returns this rank's output,
    input gradient and parameter gradients beside the reference's slices of them, the saved
    tensors of the rank (bytes by item label) and the bytes it sent, forward and backward.
    """
    from ..measure import saved_tensor_bytes

    sp = spec.get("sequence_parallel", False)
    dtype = spec.get("dtype", torch.float64)
    ref = ReferenceBlock(spec["d"], spec["H"], spec.get("F"), dtype=dtype, seed=spec.get("seed", 0))
    rank, size = _group(group)
    block = TensorParallelBlock(ref, sequence_parallel=sp, group=group)
    g = torch.Generator().manual_seed(spec.get("seed", 0) + 1)
    x_full = torch.randn(spec["B"], spec["N"], spec["d"], generator=g, dtype=dtype)
    g_full = torch.randn(spec["B"], spec["N"], spec["d"], generator=g, dtype=dtype)
    pick = (lambda t: t.chunk(size, dim=-2)[rank]) if sp else (lambda t: t)
    x = pick(x_full).clone().requires_grad_(True)

    def run(x):
        return block(x.clone())  # the clone: the block's input is an activation, as in a real model

    saved = saved_tensor_bytes(run, x)
    weights = sum(t.nbytes for t in saved if t.is_leaf)
    with record_comm() as fwd:
        out = run(x)
    with record_comm() as bwd:
        (out * pick(g_full)).sum().backward()
    x_ref = x_full.clone().requires_grad_(True)
    (ref(x_ref) * g_full).sum().backward()
    grads = {name: p.grad for name, p in block.named_parameters()}
    return dict(out=out.detach(), ref_out=pick(ref(x_full).detach()), dx=x.grad, ref_dx=pick(x_ref.grad),
                grads=grads, ref_grads=block.reference_grads(ref), saved=[(t.shape, t.nbytes, t.saved_by)
                                                                        for t in saved if not t.is_leaf],
                saved_activations=saved.activations, weights=weights, sent_fwd=fwd.by_op(),
                sent_bwd=bwd.by_op())


def worker_suite(rank: int, size: int, jobs: list) -> dict:
    """Several experiments in one process group (one start-up instead of many).

    jobs: [(name, worker, spec, ranks)]: the worker (a function, or the name ``<w>`` of
    ``worker_<w>`` here) runs on the first ``ranks`` ranks, in a subgroup when ranks < size; the
    other ranks skip it (their entry is None).
    """
    groups, out = {}, {}
    for name, worker, spec, ranks in jobs:
        if ranks not in groups:  # every rank creates every subgroup, in the same order
            groups[ranks] = None if ranks == size else dist.new_group(list(range(ranks)))
        fn = worker if callable(worker) else globals()[f"worker_{worker}"]
        out[name] = fn(rank, ranks, spec, group=groups[ranks]) if rank < ranks else None
    return out
