"""The chunked linear-attention forms under glibc's default malloc, in a fresh process.

A reader's notebook runs with the allocator as it comes: no ``mallopt``, no ``MALLOC_*``
variables, no preloaded allocator. This script measures the chunked forms that way: ``main``
starts a fresh Python process with those variables removed and measures there. Every ratio is
measured side by side (the calls compared are interleaved and each keeps its median), so a busy
machine slows both sides alike; the load average is printed with the table.
Shapes follow the book: fp32, B = 1, H = 4, D = 64.

    .venv/bin/python bench/linear_forms.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import partial

import torch
import torch.nn.functional as F
from timing import default_malloc_env, fmt_time, side_by_side, slope

from attn_core import linear
from attn_core.measure import count_flops

B, H, D = 1, 4, 64
NS = [1024, 2048, 4096, 8192, 16384, 32768]
FIT = [4096, 8192, 16384, 32768]  # the time-growth exponent is fitted over these N
DELTA_N = 4096
TARGETS = {"speedup": 20.0, "exponent": 1.15, "fraction": 0.40, "gated_ratio": 1.5, "delta_speedup": 10.0}


def inputs(n: int):
    """q, k, v (B, H, N, D), unit-length keys for the delta rule, beta in (0, 1), gates near 1."""
    q, k, v = (torch.randn(B, H, n, D) for _ in range(3))
    gamma = torch.sigmoid(torch.randn(B, H, n) + 3.0)
    beta = torch.sigmoid(torch.randn(B, H, n))
    return q, k, v, gamma, beta


def measure() -> dict:
    """Everything, in this process (run by main in a fresh one)."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    out = {"load_start": os.getloadavg()[0], "threads": torch.get_num_threads(), "torch": torch.__version__,
           "N": NS, "chunked": [], "gated": [], "sdpa": [], "faults": []}
    for n in NS:
        q, k, v, gamma, _ = inputs(n)
        fns = {"chunked": partial(linear.causal_linear_attention_chunked, q, k, v),
               "gated": partial(linear.gated_linear_attention_chunked, q, k, v, gamma)}
        if n <= 16384:  # causal SDPA at 32K takes seconds; the speedup is read at 8K
            fns["sdpa"] = partial(F.scaled_dot_product_attention, q, k, v, is_causal=True)
        f = {}
        t = side_by_side(fns, repeats=9 if n <= 8192 else 5, faults=f)
        for name in ("chunked", "gated", "sdpa"):
            out[name].append(t.get(name))
        out["faults"].append(f)
    i8k = NS.index(8192)
    out["speedup"] = out["sdpa"][i8k] / out["chunked"][i8k]
    out["exponent"] = slope(FIT, [out["chunked"][NS.index(n)] for n in FIT])
    out["gated_ratio"] = max(out["gated"][NS.index(n)] / out["chunked"][NS.index(n)] for n in FIT)

    # FLOP/s at 32K against a square matmul of about the same FLOPs, interleaved
    n = NS[-1]
    meta = torch.empty(B, H, n, D, device="meta")
    flops = count_flops(linear.causal_linear_attention_chunked, meta, meta, meta)
    m = max(64, round((flops / 2) ** (1 / 3) / 64) * 64)  # 2 m^3 ~ flops
    a, b = torch.randn(m, m), torch.randn(m, m)
    q, k, v, _, _ = inputs(n)
    t = side_by_side({"chunked": partial(linear.causal_linear_attention_chunked, q, k, v),
                      "mm": partial(torch.mm, a, b)}, repeats=7)
    out["flops"], out["mm_size"] = flops, m
    out["achieved"], out["dense"] = flops / t["chunked"], 2 * m**3 / t["mm"]
    out["fraction"] = out["achieved"] / out["dense"]

    # the delta rule: chunked (WY / UT) against its recurrent form
    q, k, v, gamma, beta = inputs(DELTA_N)
    k = F.normalize(k, dim=-1)
    fns = {"delta_chunked": partial(linear.delta_rule_chunked, q, k, v, beta),
           "delta_recurrent": partial(linear.delta_rule_recurrent, q, k, v, beta),
           "gated_delta_chunked": partial(linear.gated_delta_rule_chunked, q, k, v, beta, gamma)}
    t = side_by_side(fns, repeats=3)
    out.update(t)
    out["delta_speedup"] = t["delta_recurrent"] / t["delta_chunked"]
    out["load_end"] = os.getloadavg()[0]
    return out


def in_fresh_process() -> dict:
    """Run :func:`measure` in a new Python process with glibc's malloc at its defaults."""
    done = subprocess.run([sys.executable, __file__, "--measure"], capture_output=True, text=True,
                          env=default_malloc_env(),
                          timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(r: dict) -> None:
    print(f"Chunked linear attention, glibc default malloc, fresh process: fp32, B = {B}, H = {H}, D = {D}, "
          f"{r['threads']} torch threads, torch {r['torch']}, "
          f"load average {r['load_start']:.2f} at the start, {r['load_end']:.2f} at the end")
    for i, n in enumerate(r["N"]):
        sdpa = "-" if r["sdpa"][i] is None else fmt_time(r["sdpa"][i])
        f = r["faults"][i]
        print(f"  N = {n:>5}: chunked {fmt_time(r['chunked'][i]):>9} / gated {fmt_time(r['gated'][i]):>9} / "
              f"fused causal SDPA {sdpa:>9}; page faults a call: {f['chunked']:.0f} / {f['gated']:.0f}")
    rows = [
        ("chunked speedup over fused causal SDPA, N = 8192", f"{r['speedup']:.1f}x", ">= 20x",
         r["speedup"] >= TARGETS["speedup"]),
        ("time-growth exponent, chunked, N = 4K..32K", f"{r['exponent']:.2f}", "<= 1.15",
         r["exponent"] <= TARGETS["exponent"]),
        (f"chunked FLOP/s / dense {r['mm_size']}^2 matmul FLOP/s, N = 32K",
         f"{r['fraction']:.0%} ({r['achieved'] / 1e9:.0f} / {r['dense'] / 1e9:.0f} GFLOP/s)", ">= 40%",
         r["fraction"] >= TARGETS["fraction"]),
        ("gated / plain chunked time, worst of N = 4K..32K", f"{r['gated_ratio']:.2f}x", "<= 1.5x",
         r["gated_ratio"] <= TARGETS["gated_ratio"]),
        (f"delta rule: recurrent / chunked time, N = {DELTA_N}",
         f"{r['delta_speedup']:.0f}x ({fmt_time(r['delta_recurrent'])} / {fmt_time(r['delta_chunked'])}; "
         f"gated chunked {fmt_time(r['gated_delta_chunked'])})", ">= 10x",
         r["delta_speedup"] >= TARGETS["delta_speedup"]),
    ]
    w1, w2, w3 = (max(len(row[i]) for row in rows) for i in range(3))
    print(f"  {'figure':<{w1}}  {'measured':<{w2}}  {'target':<{w3}}  met")
    for figure, measured, target, met in rows:
        print(f"  {figure:<{w1}}  {measured:<{w2}}  {target:<{w3}}  {'yes' if met else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the measurements to this JSON file")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure()))
        return
    r = in_fresh_process()
    print_table(r)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(r, fh, indent=1)


if __name__ == "__main__":
    main()
