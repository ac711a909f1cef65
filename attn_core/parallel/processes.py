"""Start several processes on this machine, join them in a gloo process group, run a function on each."""

from __future__ import annotations

import socket
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _checks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, size, port, fn, args, results, timeout_s):
    """What each spawned process runs: join the group, call fn, report (result or traceback)."""
    import io

    # one thread per rank: this is a process launch() created, and all the ranks share the cores
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=timedelta(seconds=timeout_s))
        out = fn(rank, size, *args)
        buf = io.BytesIO()
        torch.save(out, buf)  # plain bytes: nothing in the queue depends on this process staying alive
        results.put((rank, "ok", buf.getvalue()))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(fn, size: int, *args, timeout: float = 120.0) -> list:
    """Run ``fn(rank, size, *args)`` on ``size`` new processes joined in a gloo process group.

    The processes are spawned (``torch.multiprocessing``, so ``fn`` must be importable, e.g. a
    ``worker_*`` function of this module) and meet at a free TCP port on 127.0.0.1. Returns the
    ranks' results in rank order. If a rank raises, or the whole run takes longer than
    ``timeout`` seconds, every process still alive is killed and RuntimeError says which rank
    failed and how: nothing is left running, nothing waits forever. If the free port was taken
    by someone else before rank 0 could listen on it, the run starts once more on another port.
    """
    size = _checks.positive_int("size", size)
    for attempt in (1, 2):
        try:
            return _launch_once(fn, size, args, timeout, _free_port())
        except RuntimeError as e:
            if attempt == 2 or not any(s in str(e) for s in ("EADDRINUSE", "Address already in use")):
                raise
    raise AssertionError("unreachable")


def _launch_once(fn, size: int, args: tuple, timeout: float, port: int) -> list:
    import io
    import queue as queue_mod

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(r, size, port, fn, args, results, timeout), daemon=True)
             for r in range(size)]
    deadline = time.monotonic() + timeout
    got: dict[int, bytes] = {}
    try:
        for p in procs:
            p.start()
        while len(got) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(size) if r not in got]
                raise RuntimeError(f"ranks {missing} did not finish within {timeout} s; all were killed")
            try:
                rank, status, payload = results.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode}) "
                                       "without a result; all were killed") from None
                continue
            if status == "error":
                raise RuntimeError(f"rank {rank} of {size} failed:\n{payload}")
            got[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=0 if len(got) < size else 10)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        results.close()
    return [torch.load(io.BytesIO(got[r]), weights_only=False) for r in range(size)]
