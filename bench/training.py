"""How fast the training-step ledger is, against the targets of the training-step chapter.

* the whole ledger of an 80-layer model (Llama 3 70B) at N = 131072: block_ledger for one block
  times L, plus weights, gradients and optimizer state (target: under 10 ms);
* the "does it fit" widget's update in the page: its values and 97 more states (as many as its search
  for the cheapest change may evaluate), run by Node.js from the generated JavaScript (target: under
  one frame, 16 ms);
* measuring one block on the meta device at N = 32768 (target: under one second).

Timings are medians on a shared machine; they are printed, never asserted.

    .venv/bin/python bench/training.py
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from timing import side_by_side

from attn_core import block, kv_cache, ledger, training
from attn_core.widgets import FitWidget, formula_spec
from attn_core.widgets._spec import _STATIC


def _median(fn, repeats: int = 7) -> float:
    return side_by_side({"fn": fn}, repeats, warmup=0)["fn"]


def whole_ledger() -> dict:
    m = kv_cache.MODELS["Llama 3 70B"]

    def run():
        items = ledger.block_ledger(1, 131072, m.d_model, m.num_heads, num_kv_heads=m.num_kv_heads,
                                    ffn="swiglu", ffn_dim=m.ffn_dim, norm="rmsnorm", attention="fused",
                                    recompute="selective")
        state = training.training_state_bytes(m.num_params(), zero_stage=3, dp_ranks=64)
        return m.num_layers * sum(items.values()) + sum(state.values())

    return {"figure": "whole ledger, 80 layers, N = 131072", "seconds": _median(run), "target_s": 0.010}


def widget_update() -> dict | None:
    node = shutil.which("node")
    if node is None:
        return None
    text = (_STATIC / "ledger_widgets.js").read_text()
    evaluator = re.search(r"// <evaluator>\n(.*?)// </evaluator>", text, re.S).group(1)
    state = FitWidget(model="Llama 3 70B").state()
    script = (_STATIC / "formulas.js").read_text() + (_STATIC / "hf_config.js").read_text() + evaluator + """
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const times = [];
for (let r = 0; r < 31; r++) {
  const t0 = process.hrtime.bigint();
  computeValues(input.spec, "fit", input.state);
  for (let i = 0; i < 97; i++) {
    computeValues(input.spec, "fit", { ...input.state, N: Math.round(2 ** (8 + i / 8)) });
  }
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
process.stdout.write(JSON.stringify(times[15]));
"""
    out = subprocess.run([node, "-e", script], input=json.dumps({"spec": formula_spec(), "state": state}),
                         capture_output=True, text=True, timeout=120, check=True)
    return {"figure": "fit widget: values + 97 other states (Node.js)", "seconds": float(out.stdout),
            "target_s": 0.016}


def measure_meta() -> dict:
    def run():
        block.measure_block(1, 32768, 3072, 24, dtype="bf16")

    return {"figure": "measure_block on meta, N = 32768, d = 3072", "seconds": _median(run, 3),
            "target_s": 1.0}


def main() -> None:
    rows = [r for r in (whole_ledger(), widget_update(), measure_meta()) if r is not None]
    print(f"{'figure':<52}{'measured':>12}{'target':>10}  met")
    for r in rows:
        met = "yes" if r["seconds"] < r["target_s"] else "no"
        print(f"{r['figure']:<52}{r['seconds'] * 1e3:>9.2f} ms{r['target_s'] * 1e3:>7.0f} ms  {met}")


if __name__ == "__main__":
    main()
