"""Answer boxes for the exercises: the reader types a value, the page says right, close or wrong.

``AnswerBox(expected, unit="bytes", label="Exercise 2: the KV cache, in bytes", slips={...}, hint="...")``

One component everywhere the book is read: an ``anywidget`` whose front end
(``static/answer_box.js``) reads and grades the answer in the browser, so it works in the static
HTML book with no kernel, in JupyterLab and in Colab. The grader is written once, in that module;
Python only builds the question's ``spec`` (the expected value, computed by the library in the
cell that makes the box, never typed; the tolerances; the slips; the hint). In a live kernel the
page also sends the typed text (``answer``) and its grade (``verdict``) back to Python.
``tests/test_answer.py`` runs the grader in Node.js over a table of inputs and verdicts.

**What a reader may type.** A number (``18432``, ``18,432``, ``1.2e9``, ``.5``), a short
expression (``2^30``, ``6*3072``, ``1.2 x 10^9``, ``ln 9``, ``sqrt(16)``), a suffix (``4K``,
``2.5M``: powers of 1000, except for tokens, where ``K`` may also mean 1024, as in a 4K
context), a percentage (``43%``), a ratio (``1.22x``) and a unit where one matters: bytes
(``B``, ``KB``, ``MB``, ``GB``, ``TB`` in powers of 1000; ``KiB``, ``MiB``, ``GiB``, ``TiB`` in
powers of 1024), FLOPs (``FLOPs``, ``GFLOPs``, ``TFLOPs``...) or the count a box names (``tokens``,
``layers``...). A bare number in a box of bytes is read as bytes.

**Verdicts** (``status``): ``right`` (within ``rel_tol`` / ``abs_tol``), ``slip`` (a common wrong
answer: one of the box's ``slips``, GB against GiB, a factor 2, 1000 against 1024, a factor of a
unit prefix), ``unit`` (a missing or wrong unit), ``close`` (within ``close_tol``, with how close),
``wrong`` (with how far), ``invalid`` (not readable) and ``empty``. A ``hint`` goes with every
verdict that is not right; the worked solution stays in its toggle.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import anywidget
import traitlets

from ..display import fmt_bytes, fmt_flops
from ._spec import _STATIC

ANSWER_FORMAT = "attn_core.answer/1"
DEFAULT_REL_TOL = 0.01  # right within 1 %: a value typed to three significant digits passes
DEFAULT_CLOSE_TOL = 0.1  # close within 10 %
KINDS = ("bytes", "FLOPs", None)  # and any plural count noun ("tokens", "layers", ...)


def _unit_kind(unit) -> str | None:
    if unit is None or unit in ("bytes", "FLOPs"):
        return unit
    return "count"


# ----------------------------------------------------------------------------- the widget
def _as_float(x) -> float:
    if isinstance(x, bool):
        raise TypeError("an expected answer must be a number, not a bool")
    if hasattr(x, "item") and not isinstance(x, (int, float, Fraction)):
        x = x.item()  # a 0-d tensor or numpy scalar
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"an expected answer must be finite, got {x!r}")
    return v


def _int_text(x: float) -> str | None:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 2**53 else None


def format_expected(value: float, unit: str | None = None) -> str:
    """How the verdict ``Right: ...`` writes the exact answer: ``960.00 GiB (1,030,792,151,040 bytes)``."""
    whole = _int_text(value)
    if unit == "bytes":
        return f"{fmt_bytes(value)} ({whole or value} bytes)" if value >= 1024 else f"{whole or value} bytes"
    if unit == "FLOPs":
        return f"{fmt_flops(value)} ({whole} FLOPs)" if whole and value >= 1e6 else fmt_flops(value)
    number = whole or f"{value:.6g}"
    return f"{number} {unit}" if unit else number


class AnswerBox(anywidget.AnyWidget):
    """An answer box: a labelled input, a Check button (or Enter) and a verdict (``role="status"``).

    ``expected``: the answer in the base unit (bytes, FLOPs, tokens, a plain number), computed
    by the library in the cell that makes the box. ``unit``: ``"bytes"``, ``"FLOPs"``, None (a
    plain number) or a plural count noun (``"tokens"``, ``"layers"``, ``"sequences"``).
    ``rel_tol`` / ``abs_tol``: how near is right (default 1 %, or exactly with ``exact=True``,
    for counts that must be exact); ``close_tol``: how near is close (10 %). ``slips``: common
    wrong answers, ``{value: message}`` (values from the library, in the base unit). ``hint``:
    shown with every verdict that is not right. ``label``: the input's label. A slip nearer to
    the answer than ``rel_tol`` narrows it to half the gap, so that the slip is never graded right;
    a slip equal to the answer is dropped.

    ``answer`` and ``verdict`` (synced from the page) are the last text the reader submitted and
    the page's grade of it: ``{"status", "message", "hint", "value"}``.
    """

    _esm = _STATIC / "answer_box.js"
    _css = _STATIC / "answer_box.css"

    spec = traitlets.Dict(read_only=True).tag(sync=True)
    answer = traitlets.Unicode("", help="the text the reader last submitted").tag(sync=True)
    verdict = traitlets.Dict(help="the page's grade of answer").tag(sync=True)

    def __init__(self, expected, *, unit: str | None = None, label: str = "Your answer",
                 rel_tol: float | None = None, abs_tol: float = 0.0, exact: bool = False,
                 close_tol: float = DEFAULT_CLOSE_TOL, slips=None, hint: str = "",
                 expected_text: str | None = None, **kwargs):
        e = _as_float(expected)
        if unit is not None and (not isinstance(unit, str) or not re.fullmatch(r"[A-Za-z]+", unit)):
            raise ValueError(f"unit must be 'bytes', 'FLOPs', None or a count noun ('tokens'), got {unit!r}")
        if rel_tol is None:
            rel_tol = 0.0 if exact else DEFAULT_REL_TOL
        for name, tol in (("rel_tol", rel_tol), ("abs_tol", abs_tol), ("close_tol", close_tol)):
            if not (math.isfinite(tol) and tol >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {tol!r}")
        pairs = list(slips.items()) if isinstance(slips, dict) else list(slips or [])
        # a slip that equals the answer is no slip here (e.g. two conventions that agree at these sizes)
        slip_list = [[_as_float(v), str(msg)] for v, msg in pairs if _as_float(v) != e]
        if e != 0 and slip_list:  # a slip is never graded right: keep right narrower than half the gap
            rel_tol = min(rel_tol, min(abs(v - e) for v, _ in slip_list) / abs(e) / 2)
        super().__init__(**kwargs)
        self.set_trait("spec", {
            "format": ANSWER_FORMAT,
            "expected": e,
            "expected_text": expected_text if expected_text is not None else format_expected(e, unit),
            "unit": unit,
            "rel_tol": float(rel_tol),
            "abs_tol": float(abs_tol),
            "close_tol": float(close_tol),
            "exact": bool(exact),
            "slips": slip_list,
            "hint": str(hint),
            "label": str(label),
            "placeholder": _PLACEHOLDER.get(_unit_kind(unit), "a number"),
        })

    @property
    def expected(self) -> float:
        return self.spec["expected"]

    def __repr__(self) -> str:  # never the answer: the text/plain of the notebook shows this
        return f"AnswerBox(label={self.spec['label']!r}, unit={self.spec['unit']!r})"


_PLACEHOLDER = {"bytes": "e.g. 2.4 GiB", "FLOPs": "e.g. 7.3e9", None: "a number", "count": "a number"}
