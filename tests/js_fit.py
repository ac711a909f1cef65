"""The "does it fit" page's own logic (attn_core/static/ledger_widgets.js), run in Node.js for the tests.

The page's evaluator (static/formulas.js, static/hf_config.js and the block between the evaluator markers)
and its advice (the block between the fit-advice markers: the verdict in words, the longest N, the search
for the cheapest single change) are written once, in the page's module; the tests ask them for answers
through :func:`values`, :func:`verdict`, :func:`longest_n`, :func:`cheapest_change` and :func:`off` (the
settings the page greys), and check those against Python (:func:`attn_core.training.training_memory`, the
widget's values).
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "attn_core" / "static"
NODE = shutil.which("node")


def _block(text: str, name: str) -> str:
    m = re.search(rf"// <{name}>\n(.*?)// </{name}>", text, re.S)
    assert m, f"{name} markers missing in ledger_widgets.js"
    return m.group(1)


def page_source() -> str:
    """The generated formulas, the config reader, the evaluator and the advice: pure JavaScript, no page."""
    page = (STATIC / "ledger_widgets.js").read_text()
    return "\n".join([(STATIC / "formulas.js").read_text(), (STATIC / "hf_config.js").read_text(),
                      _block(page, "evaluator"), _block(page, "fit-advice")])


_SERVER = """
const rl = require("readline").createInterface({ input: process.stdin });
let spec = null;
rl.on("line", (line) => {
  const [what, a, b] = JSON.parse(line);
  let out;
  try {
    if (what === "spec") out = (spec = a, true);
    else if (what === "values") out = computeValues(spec, a, b);
    else if (what === "verdict") out = fitVerdict(computeValues(spec, "fit", a), a, spec);
    else if (what === "longest") out = fitLongestN(computeValues(spec, "fit", a), a);
    else if (what === "advice") out = cheapestChange(spec, a);
    else if (what === "off") out = fitOff(a, spec);
    else if (what === "fmt") out = fmtMem(a, b, spec);
  } catch (err) {
    out = { error: err.message };
  }
  process.stdout.write(JSON.stringify(out) + "\\n");
});
"""


@functools.cache
def _page():
    """One Node.js process running the page's logic over the widgets' spec, one JSON line per request."""
    from attn_core.widgets import formula_spec

    proc = subprocess.Popen([NODE, "-e", page_source() + _SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    atexit.register(proc.kill)
    _ask(proc, ["spec", formula_spec()])
    return proc


def _ask(proc, call: list):
    proc.stdin.write(json.dumps(call) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _node(call: list):
    return _ask(_page(), call)


def values(kind: str, state: dict) -> dict:
    """What the page computes for a widget of ``kind`` in ``state`` (trait name -> value)."""
    return _node(["values", kind, state])


def verdict(state: dict) -> dict:
    """The page's verdict for a "does it fit" state: {kind: "fits" | "over" | "state", text}."""
    return _node(["verdict", state])


def longest_n(state: dict) -> int:
    """The longest N the page says fits (whole tokens, a multiple of cp; 0 when none)."""
    return _node(["longest", state])


def cheapest_change(state: dict) -> dict:
    """The page's search: {tried: [{label, cost, change, fits, peak}], best: the first that fits or None}."""
    return _node(["advice", state])


def off(state: dict) -> dict:
    """The settings the page greys in ``state`` (they change nothing there): {trait: the reason in words}."""
    return _node(["off", state])


#: bytes per unit; the unit the page writes bytes in for a memory typed in each (nvidia-smi's MiB: GiB)
UNIT_BYTES = {"GB": 10**9, "GiB": 2**30, "MiB": 2**20}
SHOWN_UNIT = {"GB": "GB", "GiB": "GiB", "MiB": "GiB"}


def verdict_kind(v: dict) -> str:
    """The verdict Python's values give: "fits", "state" (the training state alone is over the usable memory)
    or "over"."""
    return "fits" if v["fits"] else "state" if v["state_bytes"] > v["usable_bytes"] else "over"


def assert_verdict_names(state: dict, v: dict, text: str) -> None:
    """The verdict's words name Python's numbers: the peak (or the state alone), what is spare or over, and
    the usable memory after the allowance (the whole memory when there is none), in the page's unit."""
    import pytest

    shown = SHOWN_UNIT[state["mem_unit"]]
    numbers = [float(x) for x in re.findall(rf"(-?[\d.]+(?:e-?\d+)?) {shown}\b", text)]
    kind = verdict_kind(v)
    named = {"fits": [v["total_bytes"], v["spare_bytes"]], "state": [v["state_bytes"]],
             "over": [v["total_bytes"], -v["spare_bytes"]]}[kind]
    allowance = Fraction(state["allowance"])
    against = v["usable_bytes"] if allowance else v["mem_bytes"]
    for x in [*named, against]:
        assert any(n == pytest.approx(x / UNIT_BYTES[shown], rel=5e-3, abs=0.05) for n in numbers), (x, text)
    if allowance:
        assert f"usable after a {float(allowance):g}% allowance" in text, text
