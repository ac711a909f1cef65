"""How long `make test` takes, stage by stage, and nbval notebook by notebook.

Target (issue 20): the whole of `make test` (after install) under 6 minutes on a 2-core machine.
By default runs the Makefile's stages one after another, timing each (the per-notebook times come
from one nbval run: pytest --durations, summed by file); ``--whole`` times `make test` itself, which
runs the stages side by side (see the Makefile). Not part of `make bench` (it takes minutes).

    .venv/bin/python bench/test_times.py [--skip-book] [--whole]
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
    parser.add_argument("--whole", action="store_true", help="time `make test` itself (stages side by side)")
    args = parser.parse_args()
    if args.whole:
        t0 = time.perf_counter()
        cmd = ["make", "--no-print-directory", "test"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        total = time.perf_counter() - t0
        status = "passed" if done.returncode == 0 else "FAILED"
        print(f"make test {status} in {total:.1f} s (target < 360 s: {'yes' if total < 360 else 'NO'})")
        return
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
    print(f"{'the stages one after another':<46}{total:>9.1f}")


if __name__ == "__main__":
    main()
