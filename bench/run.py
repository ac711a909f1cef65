"""`make bench`: what linear attention costs on this machine, against the project's performance targets.

Prints one table (figure, measured, target, met) and writes bench/results.json, which
notebooks/99_measured_on_this_machine.ipynb turns into the book page "Measured on this machine".
The targets and the met column are for the developers and stay here: the book page reads only the
measurements.
Shapes follow the book: fp32, B = 1, H = 4, D = 64. Every ratio is measured side by side in
this run: the calls being compared are interleaved and each keeps its median, so a busy
machine slows both sides alike. Under a minute on 2 cores.

Memory allocator. glibc's malloc hands every allocation of 32 MiB or more, and, as its
thresholds move, many smaller ones, fresh pages from the kernel and gives them back on free; on
this kind of virtual machine a fresh page costs about a microsecond. The table is measured as a
reader's notebook runs, with glibc's defaults: the chunked forms process long inputs block by
block into reused buffers, so beyond their output they ask for few fresh pages. The lines under
the table give the chunked figures again from a fresh process with freed memory kept for reuse
(``mallopt(M_MMAP_MAX, 0)``, ``mallopt(M_TRIM_THRESHOLD, 1 GiB)``, what jemalloc, tcmalloc or
PyTorch's own GPU allocator do anyway), page faults counted. ``--keep-freed`` measures the whole
table that way, and the lines under it with the defaults.

    .venv/bin/python bench/run.py [--keep-freed]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import inspect
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import default_malloc_env, fmt_time, page_faults, side_by_side, slope
from torch.profiler import ProfilerActivity, profile

from attn_core import linear
from attn_core.attention import mha_forward
from attn_core.measure import count_flops, saved_tensor_bytes

B, H, D = 1, 4, 64
NS = [1024, 2048, 4096, 8192, 16384, 32768]
FIT = [4096, 8192, 16384, 32768]  # the time-growth exponent is fitted over these N
SWEEP_NS = [2048, 8192, 32768]  # the chunk size is chosen over these N
CHUNKS = [16, 32, 64, 128]
RESULTS = Path(__file__).with_name("results.json")
GEMMS = ("aten::mm", "aten::bmm", "aten::baddbmm", "aten::baddbmm_")
FORMS = {"chunked": linear.causal_linear_attention_chunked, "gated": linear.gated_linear_attention_chunked}


def qkv(n: int, d_k: int = D):
    """Random q, k, v, each (B, H, N, D), and gates gamma (B, H, N) near 1, as a gated model has."""
    q, k, v = (torch.randn(B, H, n, d_k) for _ in range(3))
    gamma = torch.sigmoid(torch.randn(B, H, n) + 3.0)
    return q, k, v, gamma


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# --------------------------------------------------------------------------- measurements
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def growth() -> dict:
    """Chunked, gated chunked and fused causal SDPA at N = 1K ... 32K, interleaved per N."""
    out = {"N": NS, "chunked": [], "gated": [], "sdpa": [], "page_faults": []}
    for n in NS:
        torch.manual_seed(n)
        q, k, v, gamma = qkv(n)
        faults = {}
        t = side_by_side(
            {
                "chunked": partial(linear.causal_linear_attention_chunked, q, k, v),
                "gated": partial(linear.gated_linear_attention_chunked, q, k, v, gamma),
                "sdpa": partial(sdpa_causal, q, k, v),
            },
            repeats=11 if n <= 8192 else 3,
            faults=faults,
        )
        for name in ("chunked", "gated", "sdpa"):
            out[name].append(t[name])
        out["page_faults"].append(faults)
    return out


def flops_fraction(n: int = 32768) -> dict:
    """Chunked FLOP/s at N = n against a square fp32 matmul of about the same FLOPs, interleaved."""
    torch.manual_seed(0)
    meta = torch.empty(B, H, n, D, device="meta")
    flops = count_flops(linear.causal_linear_attention_chunked, meta, meta, meta)
    m = max(64, round((flops / 2) ** (1 / 3) / 64) * 64)  # 2 m^3 ~ flops
    a, b = torch.randn(m, m), torch.randn(m, m)
    q, k, v, _ = qkv(n)
    t = side_by_side({"chunked": partial(linear.causal_linear_attention_chunked, q, k, v),
                      "mm": partial(torch.mm, a, b)}, repeats=7)
    achieved, dense = flops / t["chunked"], 2 * m**3 / t["mm"]
    return {"N": n, "flops": flops, "seconds": t["chunked"], "achieved": achieved,
            "mm_size": m, "dense": dense, "fraction": achieved / dense}


def fresh_pages(n: int = 32768) -> dict:
    """What fresh pages cost here: filling a new (B, H, N, D) float32 tensor, the size of a chunked
    call's output, against filling one allocated once; interleaved, page faults counted."""
    shape = (B, H, n, D)
    buf = torch.empty(shape)
    faults = {}
    t = side_by_side({"fresh": lambda: torch.empty(shape).fill_(1.0), "reused": lambda: buf.fill_(1.0)},
                     repeats=9, faults=faults)
    nbytes = B * H * n * D * 4
    return {"N": n, "bytes": nbytes, "pages": nbytes // resource.getpagesize(), "fresh": t["fresh"],
            "reused": t["reused"], "faults": faults["fresh"]}


def chunk_sweep() -> dict:
    """Time of each chunked form for each chunk size; a form's best C has the least geometric mean."""
    times = {form: {c: [] for c in CHUNKS} for form in ("plain", "gated")}
    for n in SWEEP_NS:
        torch.manual_seed(n)
        q, k, v, gamma = qkv(n)
        fns = {}
        for c in CHUNKS:
            fns[("plain", c)] = partial(linear.causal_linear_attention_chunked, q, k, v, c)
            fns[("gated", c)] = partial(linear.gated_linear_attention_chunked, q, k, v, gamma, c)
        for (form, c), s in side_by_side(fns, repeats=5 if n < 32768 else 3).items():
            times[form][c].append(s)
    out = {"N": SWEEP_NS, "chunks": CHUNKS}
    for form, by_chunk in times.items():
        geo = {c: math.exp(statistics.fmean(math.log(s) for s in ts)) for c, ts in by_chunk.items()}
        best = min(geo, key=geo.get)
        out[form] = {"times": {str(c): ts for c, ts in by_chunk.items()},
                     "relative": {str(c): geo[c] / geo[best] for c in CHUNKS}, "best": best}
    return out


def decode() -> dict:
    """One decode step with a fixed (D x D per head) state vs fused softmax over a KV cache of N tokens."""
    torch.manual_seed(0)
    state = torch.randn(B, H, D, D)
    q, k, v = (torch.randn(B, H, D) for _ in range(3))
    out, steps = {"N": NS, "softmax": []}, []
    for n in NS:
        cache_k, cache_v = torch.randn(B, H, n, D), torch.randn(B, H, n, D)
        t = side_by_side(
            {
                "step": partial(linear.linear_attention_step, state, q, k, v),
                "softmax": partial(F.scaled_dot_product_attention, q[:, :, None], cache_k, cache_v),
            },
            repeats=15,
            number=10,
        )
        out["softmax"].append(t["softmax"])
        steps.append(t["step"])
    out["step"] = statistics.median(steps)
    return out


def meta_ledger(n: int = 131072, d: int = 8192, heads: int = 64) -> dict:
    """saved_tensor_bytes of the eager attention layer on the meta device (bf16, dropout on)."""
    with torch.device("meta"):
        x = torch.empty(1, n, d, dtype=torch.bfloat16)
        w = [torch.empty(d, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(4)]

    def run():
        return saved_tensor_bytes(mha_forward, x, *w, heads, dropout_p=0.1)

    t0 = time.perf_counter()
    total = run().total
    first = time.perf_counter() - t0
    t = side_by_side({"ledger": run}, repeats=20)["ledger"]
    return {"N": n, "d": d, "H": heads, "seconds": t, "first_call": first, "bytes": total}


def _slider_callbacks(module) -> dict:
    """For each widget class of the module: a function that moves its N slider once.

    Setting a synced trait runs the widget's Python observer, the callback that recomputes what
    the page shows. A module-level ``bench_callback()``, if there is one, is used instead.
    """
    if callable(getattr(module, "bench_callback", None)):
        return {"bench_callback": module.bench_callback}
    import ipywidgets

    out = {}
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if name.startswith("_") or cls.__module__ != module.__name__:
            continue
        if not issubclass(cls, ipywidgets.DOMWidget):
            continue
        widget = cls()
        if "N" not in widget.trait_names():
            continue
        values = iter([widget.N * 2, widget.N] * 1000)
        out[name] = lambda widget=widget, values=values: setattr(widget, "N", next(values))
    return out


def widget_callback() -> dict:
    """Worst median latency of a slider move over the widgets of attn_core.widgets."""
    try:
        from attn_core import widgets
    except ImportError:
        return {"seconds": None, "note": "n/a (attn_core.widgets not built yet)"}
    except Exception as e:  # being written: report, do not fail the bench
        return {"seconds": None, "note": f"n/a (attn_core.widgets does not import: {type(e).__name__})"}
    callbacks = _slider_callbacks(widgets)
    if not callbacks:
        return {"seconds": None, "note": "n/a (no widget with an N slider in attn_core.widgets)"}
    t = side_by_side(callbacks, repeats=21)
    worst = max(t, key=t.get)
    return {"seconds": t[worst], "per_widget": t, "worst": worst, "note": f"worst of {len(t)} widgets"}


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse: no mmap'ed blocks, no trimming of the heap."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-4, 0) and libc.mallopt(-1, 2**30))  # M_MMAP_MAX, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


def profile_chunked(dense: float, calls: int = 5) -> list[dict]:
    """Where the chunked forms spend their time (torch.profiler over a few calls, per call).

    gemm_share: fraction of the operator time in GEMMs (mm, bmm, baddbmm); gemm_fraction: the
    FLOP/s of those GEMMs against the dense square matmul measured in this run; gemm_seconds:
    the GEMM time alone, a floor for the whole call.
    """
    out = []
    for form, n in (("chunked", 8192), ("chunked", 32768), ("gated", 32768)):
        torch.manual_seed(n)
        q, k, v, gamma = qkv(n)
        args = (q, k, v) if form == "chunked" else (q, k, v, gamma)
        fn = FORMS[form]
        flops = count_flops(fn, *args)  # on the real inputs: the gates choose the path the call takes
        fn(*args)
        before = page_faults()
        fn(*args)
        faults = page_faults() - before
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn(*args)
        ops = {e.key: e.self_cpu_time_total * 1e-6 / calls for e in prof.key_averages()}
        total = sum(ops.values())
        gemm = sum(t for op, t in ops.items() if op in GEMMS)
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:4]
        out.append({"form": form, "N": n, "page_faults": faults, "seconds": total, "gemm_seconds": gemm,
                    "gemm_share": gemm / total, "gemm_fraction": flops / gemm / dense,
                    "top": [(op.removeprefix("aten::"), t / total) for op, t in top]})
    return out


def probe(keep_freed: bool) -> dict:
    """The chunked-form figures with one allocator setting (run in a fresh process by main)."""
    kept = keep_freed and keep_freed_memory()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    out = {"N": FIT, "chunked": [], "page_faults": [],
           "malloc": "freed memory kept (mallopt)" if kept else "glibc defaults"}
    for n in FIT:
        q, k, v, _ = qkv(n)
        fns = {"chunked": partial(linear.causal_linear_attention_chunked, q, k, v)}
        if n == 8192:
            fns["sdpa"] = partial(sdpa_causal, q, k, v)
        faults = {}
        t = side_by_side(fns, repeats=5, faults=faults)
        out["chunked"].append(t["chunked"])
        out["page_faults"].append(round(faults["chunked"]))
        if n == 8192:
            out["speedup"] = t["sdpa"] / t["chunked"]
    meta = torch.empty(B, H, FIT[-1], D, device="meta")
    flops = count_flops(linear.causal_linear_attention_chunked, meta, meta, meta)
    m = max(64, round((flops / 2) ** (1 / 3) / 64) * 64)
    a, b = torch.randn(m, m), torch.randn(m, m)
    t = side_by_side({"chunked": fns["chunked"], "mm": partial(torch.mm, a, b)}, repeats=5)
    out["fraction"] = (flops / t["chunked"]) / (2 * m**3 / t["mm"])
    out["exponent"] = slope(FIT, out["chunked"])
    return out


def other_malloc(keep_freed: bool) -> dict | None:
    """Run :func:`probe` in a fresh Python process with the other allocator setting than the table's:
    freed memory kept (``keep_freed``) or glibc's malloc at its defaults."""
    env = default_malloc_env()
    args = [sys.executable, __file__, "--probe"] + (["--keep-freed"] if keep_freed else [])
    try:
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- the table
def rows(r: dict) -> list[dict]:
    g, f, s, dec, led, w = r["growth"], r["flops"], r["sweep"], r["decode"], r["ledger"], r["widget"]
    i8k, i32k = NS.index(8192), NS.index(32768)
    fit = [NS.index(n) for n in FIT]
    out = []

    def row(figure, measured, target="", met=None):
        out.append({"figure": figure, "measured": measured, "target": target, "met": met})

    for i, n in enumerate(NS):
        row(f"time at N = {n}: chunked / gated / fused SDPA",
            f"{fmt_time(g['chunked'][i])} / {fmt_time(g['gated'][i])} / {fmt_time(g['sdpa'][i])}")
    speedup = g["sdpa"][i8k] / g["chunked"][i8k]
    row("chunked speedup over fused causal SDPA, N = 8192", f"{speedup:.1f}x", ">= 20x", speedup >= 20)
    e_chunked = slope(FIT, [g["chunked"][i] for i in fit])
    e_sdpa = slope(FIT, [g["sdpa"][i] for i in fit])
    row("time-growth exponent, chunked, N = 4K..32K", f"{e_chunked:.2f}", "<= 1.15", e_chunked <= 1.15)
    row("time-growth exponent, fused SDPA, N = 4K..32K", f"{e_sdpa:.2f}", "(2 for N^2)")
    row(f"chunked FLOP/s / dense {f['mm_size']}^2 matmul FLOP/s, N = 32K",
        f"{f['fraction']:.0%} ({f['achieved'] / 1e9:.0f} / {f['dense'] / 1e9:.0f} GFLOP/s)",
        ">= 40%", f["fraction"] >= 0.40)
    worst = max(g["gated"][i] / g["chunked"][i] for i in fit)
    chunks = f"{linear.DEFAULT_GATED_CHUNK} / {linear.DEFAULT_CHUNK}"
    row(f"gated / ungated chunked time (default C = {chunks}), worst of N = 4K..32K",
        f"{worst:.2f}x", "<= 1.5x", worst <= 1.5)
    for form, name in (("plain", "DEFAULT_CHUNK"), ("gated", "DEFAULT_GATED_CHUNK")):
        default, rel = getattr(linear, name), s[form]["relative"]
        by_chunk = ", ".join(f"{c}: {rel[str(c)]:.2f}" for c in CHUNKS)
        row(f"fastest chunk C, {form} chunked (geo-mean over N = 2K, 8K, 32K)",
            f"C = {s[form]['best']} (time / best: {by_chunk})", f"{name} = {default} within 5%",
            rel[str(default)] <= 1.05)
    row("decode: softmax over a KV cache of N = 1K..32K (fused SDPA)",
        " / ".join(fmt_time(t) for t in dec["softmax"]))
    row("decode: one step with the fixed D x D state (linear_attention_step)", fmt_time(dec["step"]))
    ratio = dec["softmax"][i32k] / dec["step"]
    row("decode speedup of the state step over softmax, N = 32K", f"{ratio:.0f}x", ">= 10x", ratio >= 10)
    row(f"saved_tensor_bytes on meta, N = {led['N']}, d = {led['d']} (eager MHA, H = {led['H']}, bf16)",
        f"{fmt_time(led['seconds'])} ({led['bytes'] / 2**40:.1f} TiB saved)", "<= 50 ms",
        led["seconds"] <= 0.050)
    if w["seconds"] is None:
        row("widget callback latency", w["note"], "<= 100 ms")
    else:
        latency = w["seconds"]
        row(f"widget callback: one N-slider move ({w['note']})", f"{fmt_time(latency)} ({w['worst']})",
            "<= 100 ms", latency <= 0.100)
    return out


def print_table(r: dict) -> None:
    m, table, prof, dm = r["machine"], r["rows"], r["profile"], r["other_malloc"]
    print(f"The Attention Ledger bench, {m['date']}: {m['cpu']}, {m['cores']} cores, "
          f"{m['threads']} torch threads, torch {m['torch']}, load {m['load_average'][0]}")
    print(f"fp32, B = {B}, H = {H}, D = {D}; medians of interleaved runs; malloc: {m['malloc']}")
    w1, w2, w3 = (max(len(row[key]) for row in table) for key in ("figure", "measured", "target"))
    line = "-" * (w1 + w2 + w3 + 11)
    print(line)
    print(f"{'figure':<{w1}}  {'measured':<{w2}}  {'target':<{w3}}  met")
    print(line)
    for row in table:
        met = "" if row["met"] is None else ("yes" if row["met"] else "NO")
        print(f"{row['figure']:<{w1}}  {row['measured']:<{w2}}  {row['target']:<{w3}}  {met}")
    print(line)
    for p in prof:
        top = ", ".join(f"{op} {share:.0%}" for op, share in p["top"])
        gemm = f"GEMMs {p['gemm_share']:.0%} ({fmt_time(p['gemm_seconds'])})"
        print(f"profile, {p['form']} at N = {p['N']}: {fmt_time(p['seconds'])} of ops, {gemm} at "
              f"{p['gemm_fraction']:.0%} of the dense matmul's FLOP/s; top: {top}; "
              f"{p['page_faults']} page faults a call")
    i8k = NS.index(8192)
    gemm_8k = next(p["gemm_seconds"] for p in prof if p["form"] == "chunked" and p["N"] == 8192)
    print(f"GEMM floor: fused SDPA at N = 8192 / chunked GEMM time alone = "
          f"{r['growth']['sdpa'][i8k] / gemm_8k:.1f}x, the speedup if nothing but its GEMMs took time")
    fp = r["fresh_pages"]
    print(f"fresh pages: filling a new {fp['bytes'] // 2**20} MiB tensor {fmt_time(fp['fresh'])} "
          f"({fp['faults']:.0f} page faults), one allocated once {fmt_time(fp['reused'])}")
    if dm:
        faults = " / ".join(str(f) for f in dm["page_faults"])
        times = " / ".join(fmt_time(t) for t in dm["chunked"])
        print(f"{dm['malloc']}, fresh process: chunked {times} "
              f"at N = 4K / 8K / 16K / 32K with {faults} page faults a call: speedup at 8K "
              f"{dm['speedup']:.1f}x, exponent {dm['exponent']:.2f}, FLOP/s fraction {dm['fraction']:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-freed", action="store_true",
                        help="keep freed memory for reuse (mallopt) instead of glibc's defaults")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.keep_freed)))
        return
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    results = {"machine": machine()}
    results["other_malloc"] = other_malloc(keep_freed=not args.keep_freed)
    kept = args.keep_freed and keep_freed_memory()
    results["machine"]["malloc"] = "freed memory kept (mallopt)" if kept else "glibc defaults"
    sections = {"growth": growth, "flops": flops_fraction, "fresh_pages": fresh_pages, "sweep": chunk_sweep,
                "decode": decode,
                "ledger": meta_ledger, "widget": widget_callback}
    seconds = {}
    for name, measure in sections.items():
        t1 = time.perf_counter()
        results[name] = measure()
        seconds[name] = round(time.perf_counter() - t1, 1)
    results["profile"] = profile_chunked(results["flops"]["dense"])
    results["rows"] = rows(results)
    results["machine"]["section_seconds"] = seconds
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results["machine"]["bench_seconds"] = round(time.perf_counter() - t0, 1)
    print_table(results)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote bench/results.json in {results['machine']['bench_seconds']:.0f} s; "
          "re-execute notebooks/99_measured_on_this_machine.ipynb to update the book page")


if __name__ == "__main__":
    main()
