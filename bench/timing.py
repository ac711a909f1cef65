"""The timing helpers every bench script shares: interleaved medians, page faults, slopes, units.

Imported by the scripts next to it (``python bench/NAME.py`` puts this folder on the path).
"""

from __future__ import annotations

import os
import resource
import statistics
import time

from attn_core.display import loglog_slope as slope  # noqa: F401 - the one least-squares fit


def page_faults() -> int:
    """Minor page faults of this process so far (fresh pages handed over by the kernel)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def side_by_side(fns: dict, repeats: int, number: int = 1, warmup: int = 1,
                 faults: dict | None = None) -> dict[str, float]:
    """Median seconds per call of each zero-argument function, calls interleaved round-robin.

    Each sample times ``number`` back-to-back calls (for microsecond-scale functions). If a dict
    is given as ``faults``, it receives each function's median page faults per call.
    """
    for f in fns.values():
        for _ in range(warmup):
            f()
    samples = {name: [] for name in fns}
    minflt = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            before = page_faults()
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            samples[name].append((time.perf_counter() - t0) / number)
            minflt[name].append((page_faults() - before) / number)
    if faults is not None:
        faults.update({name: statistics.median(m) for name, m in minflt.items()})
    return {name: statistics.median(s) for name, s in samples.items()}


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def default_malloc_env() -> dict[str, str]:
    """This process's environment without anything that changes glibc's malloc (for a fresh process)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
