"""Ring attention on 4 ranks at N = 8192, D = 64, H = 4 (gloo on this machine's CPU): does it finish,
does it match one process, and how much of each K, V transfer hides behind the compute.

Each rank is its own process with one thread (launch() sets it), so 4 ranks want 4 cores; on a
machine with fewer the ranks take turns and the times say so. Per ring step a rank starts
sending its K, V block and receiving the next, computes with the block it holds, then waits for
the transfer: ``wait`` is the part of the transfer the compute did not hide, plus any time spent
waiting for a slower neighbour to start its send (the causal imbalance of contiguous shards: a
rank with nothing to compute at a step waits for the ranks that have; compare ``--layout zigzag``).
``alone`` is the same transfer timed with nothing to hide behind. Backward, each dK, dV accumulator
is posted after a step's compute and waited on after the next step's compute; the last one (each
rank's own accumulator coming home) has no compute left to hide it. Not a test: the numbers depend
on the machine and its load (printed with them).

    .venv/bin/python bench/parallel.py [--n 8192] [--ranks 4] [--layout contiguous|zigzag]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist

from attn_core import parallel as par
from attn_core.parallel.comm import _exchange, _wait


def worker(rank: int, size: int, spec: dict) -> dict:
    """Forward and backward of ring attention on this rank's shard, plus one bare K, V transfer."""
    g = torch.Generator().manual_seed(0)
    shape = (1, spec["H"], spec["N"], spec["D"])
    q, k, v, dout = (par.shard_sequence(torch.randn(shape, generator=g), size, spec["layout"])[rank]
                     .clone().requires_grad_(i < 3) for i in range(4))
    dist.barrier()
    t0 = time.perf_counter()
    out = par.ring_attention(q, k, v, True, layout=spec["layout"])
    t_fwd = time.perf_counter() - t0
    dist.barrier()
    t0 = time.perf_counter()
    (out * dout).sum().backward()
    t_bwd = time.perf_counter() - t0
    stats = par.ring_attention_stats()  # forward and backward steps
    kv = torch.cat([k.detach(), v.detach()], dim=-1)
    alone = []
    for step in range(3):  # the same block transfer with no compute to hide it
        dist.barrier()
        buf = torch.empty_like(kv)
        t0 = time.perf_counter()
        _wait(_exchange("bare", kv, (rank + 1) % size, buf, (rank - 1) % size, None, tag=100 + step))
        alone.append(time.perf_counter() - t0)
    return dict(out=out.detach(), dq=q.grad, forward_s=t_fwd, backward_s=t_bwd, stats=stats,
                alone_s=statistics.median(alone), block_bytes=kv.numel() * kv.element_size())


def reference(spec: dict, rows: int = 1024):
    """Causal attention of the full sequence in float64, computed in slices of query rows."""
    g = torch.Generator().manual_seed(0)
    shape = (1, spec["H"], spec["N"], spec["D"])
    q, k, v, dout = (torch.randn(shape, generator=g).double().requires_grad_(i < 3) for i in range(4))
    outs = []
    for start in range(0, spec["N"], rows):
        stop = min(start + rows, spec["N"])
        s = q[..., start:stop, :] @ k[..., :stop, :].transpose(-2, -1) / math.sqrt(spec["D"])
        visible = torch.arange(stop)[None, :] <= torch.arange(start, stop)[:, None]
        outs.append(torch.softmax(s.masked_fill(~visible, float("-inf")), -1) @ v[..., :stop, :])
    out = torch.cat(outs, dim=-2)
    (out * dout).sum().backward()
    return out.detach(), q.grad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-head", type=int, default=64)
    ap.add_argument("--layout", default="contiguous", choices=par.LAYOUTS)
    args = ap.parse_args()
    spec = dict(N=args.n, H=args.heads, D=args.d_head, layout=args.layout)
    print(f"ring attention, causal, fp32, B = 1, H = {args.heads}, D = {args.d_head}, N = {args.n}, "
          f"{args.ranks} ranks ({args.layout}); {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    runs = par.launch(worker, args.ranks, spec, timeout=590)
    wall = time.perf_counter() - t0
    ref_out, ref_dq = reference(spec)
    out = par.unshard_sequence([r["out"] for r in runs], args.layout)
    dq = par.unshard_sequence([r["dq"] for r in runs], args.layout)
    err_out = (out.double() - ref_out).abs().max().item()
    err_dq = (dq.double() - ref_dq).abs().max().item()
    print(f"max |out - reference| = {err_out:.2e}, max |dq - reference| = {err_dq:.2e} (float64 reference)")
    print(f"launch to results: {wall:.1f} s (process start-up included)")
    print(f"{'rank':>4}{'scores':>14}{'forward s':>11}{'backward s':>12}{'block MiB':>11}"
          f"{'alone ms':>10}   per step: compute ms / wait ms")
    for rank, r in enumerate(runs):
        st = r["stats"]
        steps = " ".join(f"{c * 1e3:.0f}/{w * 1e3:.1f}" for c, w in zip(st["compute_s"], st["wait_s"]))
        print(f"{rank:>4}{st['scores']:>14,}{r['forward_s']:>11.2f}{r['backward_s']:>12.2f}"
              f"{r['block_bytes'] / 2**20:>11.2f}{r['alone_s'] * 1e3:>10.2f}   {steps}")
    waits = [w for r in runs for w in r["stats"]["wait_s"][:-1]]  # steps that had a transfer
    alone = statistics.median(r["alone_s"] for r in runs)
    hidden = max(0.0, 1 - statistics.median(waits) / alone) if waits and alone > 0 else float("nan")
    print(f"forward: median wait after compute {statistics.median(waits) * 1e3:.2f} ms against "
          f"{alone * 1e3:.2f} ms for the transfer alone: about {hidden:.0%} of each K, V transfer hidden")
    print(f"{'rank':>4}   backward per step: compute ms / wait for the dK, dV accumulator ms; last wait ms")
    for rank, r in enumerate(runs):
        bw = r["stats"]["backward"]
        cells = []
        for step in bw["steps"]:
            wait = "-" if step["wait_dkv_s"] is None else f"{step['wait_dkv_s'] * 1e3:.1f}"
            cells.append(f"{step['compute_s'] * 1e3:.0f}/{wait}")
        print(f"{rank:>4}   {' '.join(cells)}; {bw['final_wait_s'] * 1e3:.1f}")
    dkv = [step["wait_dkv_s"] for r in runs for step in r["stats"]["backward"]["steps"]
           if step["wait_dkv_s"] is not None]
    if dkv:  # the accumulator has the K, V block's shape and, in float32, its bytes: the same transfer
        hidden_b = max(0.0, 1 - statistics.median(dkv) / alone)
        last = statistics.median(r["stats"]["backward"]["final_wait_s"] for r in runs)
        print(f"backward: median wait for a dK, dV accumulator sent during the step's compute "
              f"{statistics.median(dkv) * 1e3:.2f} ms (about {hidden_b:.0%} hidden); the last one, "
              f"with no compute left to hide it, {last * 1e3:.2f} ms")
    assert err_out < 1e-4 and err_dq < 1e-3, "ring attention does not match the reference"


if __name__ == "__main__":
    main()
