"""How long `make test` takes, stage by stage, and nbval notebook by notebook.

Targets (issue 6): the whole of `make test` (after install) within 5 minutes, nbval over all
notebooks within 2 minutes. Runs the same commands as the Makefile's test stages, timing
each; the per-notebook times come from one nbval run (pytest --durations, summed by file).
Not part of `make bench` (it takes minutes).

    .venv/bin/python bench/test_times.py [--skip-book]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the Makefile's `test` target, stage by stage: the same commands, from the one place they are written
STAGES = ["lint", "unit", "nbval", "book-strict", "browser"]
DURATION = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(notebooks/[^:]+\.ipynb)::")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-book", action="store_true", help="leave out the book build and browser tests")
    args = parser.parse_args()
    seconds, per_notebook, failed = {}, collections.Counter(), []
    for stage in STAGES:
        if stage in ("book-strict", "browser") and args.skip_book:
            continue
        cmd = ["make", "--no-print-directory", stage]
        if stage == "nbval":
            cmd.append("PYTEST_ARGS=--durations=0")  # per-cell times, summed by notebook below
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        seconds[stage] = time.perf_counter() - t0
        if done.returncode != 0:
            failed.append(stage)
        if stage == "nbval":
            for line in done.stdout.splitlines():
                m = DURATION.match(line)
                if m:
                    per_notebook[m.group(3)] += float(m.group(1))
    print(f"{'stage':<46}{'seconds':>9}  target")
    for stage, s in seconds.items():
        target = {"nbval": "<= 120 s"}.get(stage, "")
        print(f"{stage:<46}{s:>9.1f}  {target}{'  (FAILED)' if stage in failed else ''}")
    for nb, s in sorted(per_notebook.items()):
        print(f"  {nb:<44}{s:>9.1f}")
    total = sum(seconds.values())
    print(f"{'make test (these stages)':<46}{total:>9.1f}  <= 300 s: {'yes' if total <= 300 else 'NO'}")


if __name__ == "__main__":
    main()
