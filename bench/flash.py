"""FlashAttention from scratch against PyTorch's fused SDPA on this CPU, and what autograd saves.

Targets (for the developers; not tests, timings are never asserted):
* forward at N = 8192, D = 64 (fp32, B = 1, H = 4) within 3x of
  ``torch.nn.functional.scaled_dot_product_attention``, causal and not;
* saved memory at N = 32768 under 1% of the eager attention's (meta device, no allocation).

The two calls being compared are interleaved, each keeps its median, so a busy machine slows
both alike. Prints the load average with the table. About a minute on 2 cores.

    .venv/bin/python bench/flash.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
from timing import side_by_side

from attn_core.attention import causal_mask, scaled_dot_product_attention
from attn_core.flash import flash_attention
from attn_core.measure import saved_tensor_bytes

B, H, D = 1, 4, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    rows, results = [], {"load_before": os.getloadavg(), "threads": torch.get_num_threads()}
    g = torch.Generator().manual_seed(0)
    n = 8192
    q, k, v = (torch.randn(B, H, n, D, generator=g) for _ in range(3))
    # the loop of tiles runs thousands of small ops; on a loaded machine each op's thread barrier
    # waits for a descheduled thread, so the table also measures both calls on one thread
    default_threads = torch.get_num_threads()
    for threads in dict.fromkeys((default_threads, 1)):
        torch.set_num_threads(threads)  # a benchmark script may; the library never does
        for causal in (False, True):
            t = side_by_side({"flash": lambda c=causal: flash_attention(q, k, v, causal=c),
                              "sdpa": lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c)},
                             args.repeats)
            t_flash, t_sdpa = t["flash"], t["sdpa"]
            ratio = t_flash / t_sdpa
            kind = "causal" if causal else "full"
            results[f"forward_{kind}_{threads}_threads"] = dict(flash_s=t_flash, sdpa_s=t_sdpa, ratio=ratio)
            measured = f"{t_flash * 1e3:.0f} ms / {t_sdpa * 1e3:.0f} ms = {ratio:.2f}x"
            rows.append((f"forward N={n} D={D} {kind}, {threads} thread(s): flash / SDPA",
                         measured, "<= 3x", ratio <= 3))
    torch.set_num_threads(default_threads)
    meta = torch.device("meta")
    n = 32768
    qm, km, vm = (torch.empty(B, H, n, D, device=meta, requires_grad=True) for _ in range(3))
    flash = saved_tensor_bytes(flash_attention, qm, km, vm, causal=True).total
    mask = causal_mask(n, device=meta)
    eager = saved_tensor_bytes(scaled_dot_product_attention, qm, km, vm, mask=mask).total
    share = flash / eager
    results["saved_32k"] = dict(flash_bytes=flash, eager_bytes=eager, share=share)
    rows.append((f"saved N={n} causal: flash / eager", f"{flash / 2**20:.0f} MiB / {eager / 2**30:.1f} GiB "
                 f"= {share:.2%}", "< 1%", share < 0.01))
    results["load_after"] = os.getloadavg()
    w = max(len(r[0]) for r in rows) + 2
    print(f"{'figure':<{w}}{'measured':<44}{'target':<8}met")
    for name, measured, target, met in rows:
        print(f"{name:<{w}}{measured:<44}{target:<8}{'yes' if met else 'NO'}")
    print(f"load average before {results['load_before'][0]:.2f}, after {results['load_after'][0]:.2f}; "
          f"{results['threads']} threads, {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
