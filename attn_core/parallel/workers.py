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
from .ulysses import ulysses_attention


def ring_inputs(spec: dict):
    """The full q, k, v and output gradient of a context-parallel experiment (same on every rank).

    spec: B, H, N, D, and optionally H_kv (key/value heads, default H), D_v, dtype, seed.
    """
    g = torch.Generator().manual_seed(spec.get("seed", 0))
    dtype = spec.get("dtype", torch.float64)
    h_kv, d_v = spec.get("H_kv", spec["H"]), spec.get("D_v", spec["D"])
    shapes = ((spec["B"], spec["H"], spec["N"], spec["D"]), (spec["B"], h_kv, spec["N"], spec["D"]),
              (spec["B"], h_kv, spec["N"], d_v), (spec["B"], spec["H"], spec["N"], d_v))
    return tuple(torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes)


def _peak_bytes(fn, *args) -> tuple[int, int]:
    """Run ``fn(*args)`` (a forward), then its backward, under PyTorch's own memory tracker.

    ``torch.distributed._tools.mem_tracker.MemTracker`` on real tensors counts every tensor created
    while it runs (not the inputs, which exist before): returns the peak of the bytes alive during
    the forward pass, and during forward and backward together (bytes on the CPU).
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    def peak(mt):
        return mt.get_tracker_snapshot("peak").get(torch.device("cpu"), {}).get("Total", 0)

    mt = MemTracker()
    with mt:
        out = fn(*args)
        forward = peak(mt)
        out.sum().backward()
        both = peak(mt)
    return forward, both


def worker_ring(rank: int, size: int, spec: dict, group=None) -> dict:
    """Ring attention on this rank's shard: output, gradients, bytes saved and sent, work done.

    spec: B, H, H_kv, N, D (D_v), causal, layout, dtype, seed; ``measure_saved`` (default True) also
    runs one forward under :func:`attn_core.measure.saved_tensor_bytes`; ``measure_peak`` (default
    False) one forward and backward under PyTorch's memory tracker: ``peak_forward`` and ``peak``
    (forward and backward) are the bytes of the rank's q, k, v shards plus the peak of everything
    the call creates. ``sends_bwd``: the backward's sends in the order they were posted.
    """
    from ..measure import saved_tensor_bytes

    causal, layout = spec.get("causal", True), spec.get("layout", "contiguous")
    rank, size = _group(group)

    def inputs():
        return [shard_sequence(x, size, layout)[rank].clone().requires_grad_(i < 3)
                for i, x in enumerate(ring_inputs(spec))]

    q, k, v, dout = inputs()
    saved = peak = None
    if spec.get("measure_saved", True):
        saved = saved_tensor_bytes(ring_attention, q, k, v, causal, group, layout=layout)
        saved = sum(t.nbytes for t in saved)  # q, k, v, out, lse of this rank
    if spec.get("measure_peak", False):  # the inputs are held before the call: add them
        pq, pk, pv, _ = inputs()
        held = pq.nbytes + pk.nbytes + pv.nbytes
        tracked = _peak_bytes(lambda: ring_attention(pq, pk, pv, causal, group, layout=layout))
        peak = [held + x for x in tracked]
    with record_comm() as fwd:
        t0 = time.perf_counter()
        out = ring_attention(q, k, v, causal, group, layout=layout)
        t_fwd = time.perf_counter() - t0
    with record_comm() as bwd:
        (out * dout).sum().backward()  # (out.backward(dout) would import SymPy on its first call)
    stats = ring_attention_stats()
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad, saved=saved, stats=stats,
                sent_fwd=fwd.by_op(), sent_bwd=bwd.by_op(), sends_bwd=list(bwd.sends), forward_s=t_fwd,
                peak_forward=None if peak is None else peak[0], peak=None if peak is None else peak[1])


def worker_ulysses(rank: int, size: int, spec: dict, group=None) -> dict:
    """All-to-all context parallelism on this rank's contiguous shard: output, gradients, bytes sent.

    spec: B, H, H_kv, N, D (D_v), causal, dtype, seed (as :func:`worker_ring`, contiguous layout).
    """
    rank, size = _group(group)
    causal = spec.get("causal", True)
    q, k, v, dout = (shard_sequence(x, size)[rank].clone().requires_grad_(i < 3)
                     for i, x in enumerate(ring_inputs(spec)))
    with record_comm() as fwd:
        out = ulysses_attention(q, k, v, causal, group)
    with record_comm() as bwd:
        (out * dout).sum().backward()
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad, sent_fwd=fwd.by_op(), sent_bwd=bwd.by_op())


def worker_ring_timing(rank: int, size: int, spec: dict, group=None) -> dict:
    """How much of each ring transfer the compute hides on this machine, forward and backward.

    spec: B, H, H_kv, N, D, layout (default "zigzag": the same work on every rank, so a wait is the
    transfer's, not a slower neighbour's), dtype (default float32), repeats (default 3). Runs one
    untimed forward and backward, then ``repeats`` timed ones (:func:`ring_attention_stats`), then
    the same transfers with nothing to hide them: the K, V block and the dK, dV accumulator, each
    sent around the ring alone after a barrier. Returns the stats of every timed run and the median
    seconds of each transfer alone. Timings, not results: they depend on the machine and its load.
    """
    import statistics

    from .comm import _exchange, _wait
    from .ring import _acc_dtype

    rank, size = _group(group)
    layout = spec.get("layout", "zigzag")
    spec = {"dtype": torch.float32, **spec}
    q, k, v, dout = (shard_sequence(x, size, layout)[rank].clone().requires_grad_(i < 3)
                     for i, x in enumerate(ring_inputs(spec)))
    runs = []
    for i in range(1 + spec.get("repeats", 3)):
        dist.barrier(group)
        out = ring_attention(q, k, v, True, group, layout=layout)
        (out * dout).sum().backward()
        if i:  # the first run warms up (allocator, threads)
            runs.append(ring_attention_stats())
    kv = torch.cat([k.detach(), v.detach()], dim=-1)
    alone = {}
    for name, block in (("K, V", kv), ("dK, dV", kv.to(_acc_dtype(kv.dtype)))):
        times = []
        for step in range(3):
            dist.barrier(group)
            buf = torch.empty_like(block)
            t0 = time.perf_counter()
            nxt, prv = (rank + 1) % size, (rank - 1) % size
            reqs = _exchange("alone", block, nxt, buf, prv, group, tag=1000 + step)
            _wait(reqs)
            times.append(time.perf_counter() - t0)
        alone[name] = statistics.median(times)
    acc_bytes = kv.numel() * _acc_dtype(kv.dtype).itemsize
    return dict(runs=runs, alone_s=alone, block_bytes={"K, V": kv.nbytes, "dK, dV": acc_bytes})


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
