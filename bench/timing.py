"""The timing helpers every bench script shares: interleaved medians, page faults, slopes, units.

Imported by the scripts next to it (``python bench/NAME.py`` puts this folder on the path).
"""

from __future__ import annotations

import os

from attn_core.display import loglog_slope as slope  # noqa: F401 - the one least-squares fit
from attn_core.measure import page_faults  # noqa: F401 - the one counter
from attn_core.measure import time_interleaved as side_by_side  # noqa: F401 - the one interleaved timer


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
