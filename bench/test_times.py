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
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/sanitize.cfg"]
STAGES = {  # the Makefile's `test` target: lint unit nbval book-strict
    "lint": [str(BIN / "ruff"), "check", "."],
    "unit": [str(BIN / "pytest"), "-q", "tests"],
    "nbval": [str(BIN / "pytest"), "-q", *NBVAL, "--durations=0", "notebooks"],
    "book-strict": [str(BIN / "jupyter-book"), "build", ".", "-W", "-n", "--keep-going"],
}
DURATION = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(notebooks/[^:]+\.ipynb)::")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-book", action="store_true", help="leave out the strict book build")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "2"}
    seconds, per_notebook, failed = {}, collections.Counter(), []
    for stage, cmd in STAGES.items():
        if stage == "book-strict" and args.skip_book:
            continue
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
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
