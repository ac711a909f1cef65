"""Answer boxes for the exercises: the reader types a value, the page says right, close or wrong.

``AnswerBox(expected, unit="bytes", label="Exercise 2: the KV cache, in bytes", slips={...}, hint="...")``

One component everywhere the book is read: an ``anywidget`` whose front end
(``static/answer_box.js``) grades in the browser, so it works in the static HTML book with no
kernel, in JupyterLab and in Colab. In a live kernel the typed answer is also synced back
(``answer``), and Python grades it again into ``verdict``.

The expected value comes from the library, computed in the cell that makes the box; it is
never typed. The grade is a pure function of the box's ``spec`` and the typed text, written
twice: :func:`grade` here and ``gradeAnswer`` in the page's module, and ``tests/test_answer.py``
runs both (the page's in Node.js) over a table of inputs and checks that they agree.

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

from ._spec import _STATIC, fmt_bytes, fmt_flops

ANSWER_FORMAT = "attn_core.answer/1"
DEFAULT_REL_TOL = 0.01  # right within 1 %: a value typed to three significant digits passes
DEFAULT_CLOSE_TOL = 0.1  # close within 10 %
_SLIP_REL = 1e-9  # how near a slip's value counts as that slip when the box asks for exactness
_RIGHT_REL = 1e-12  # float noise of a typed expression (ln 9, 2^30) against the exact value

# ----------------------------------------------------------------------------- parsing
_BYTES = {"b": 1, "byte": 1, "bytes": 1}
for _k, _p in enumerate("kmgtp", start=1):
    _BYTES[_p + "b"] = 1000**_k
    _BYTES[_p + "ib"] = 1024**_k
_FLOPS = {"flop": 1, "flops": 1}
for _k, _p in enumerate("kmgtp", start=1):
    _FLOPS[_p + "flop"] = 1000**_k
    _FLOPS[_p + "flops"] = 1000**_k
_SUFFIX = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}  # the power of 1000 (or 1024) a suffix means
_FUNCS = ("ln", "log", "log2", "log10", "sqrt", "exp")
_EXP = r"(?:[eE][+-]?[0-9]+)?"
_NUMBER = rf"[0-9]{{1,3}}(?:,[0-9]{{3}})+(?:\.[0-9]*)?{_EXP}|[0-9]+(?:\.[0-9]*)?{_EXP}|\.[0-9]+{_EXP}"
_TOKEN = re.compile(rf"[ \t\n\r]*(?:(?P<num>{_NUMBER})|(?P<id>log2|log10|[A-Za-z]+)|(?P<op>[-+*/^()%]))")
KINDS = ("bytes", "FLOPs", None)  # and any plural count noun ("tokens", "layers", ...)


class AnswerParseError(ValueError):
    """The text is not a number, an expression or a unit this box can read."""


def _strip(text: str) -> str:
    return text.strip(" \t\n\r")


def _normalize(text: str) -> str:
    t = _strip(str(text))
    for a, b in (("\u2212", "-"), ("\u2013", "-"), ("\u00d7", " x "), ("\u22c5", "*"), ("\u00b7", "*"),
                 ("**", "^"), ("\u00a0", " "), ("\u202f", " "), ("\u2009", " ")):
        t = t.replace(a, b)
    return t


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = _strip(text)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise AnswerParseError(f"cannot read {text[pos:]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _unit_kind(unit) -> str | None:
    """'bytes', 'FLOPs', None (a plain number) or 'count' (a count noun such as 'tokens')."""
    if unit is None or unit in ("bytes", "FLOPs"):
        return unit
    return "count"


def _count_words(unit: str) -> set[str]:
    word = unit.lower()
    return {word, word[:-1]} if word.endswith("s") else {word, word + "s"}


def parse_answer(text: str, unit: str | None = None) -> dict:
    """Read a typed answer: ``{"values": [...], "kind": ..., "bare": bool, "base": ...}``.

    ``values`` are the candidate values in the box's base unit (bytes, FLOPs, a count): one,
    or two for a ``K``/``M`` suffix in a box of tokens (1000 or 1024). ``kind`` is the unit the
    text gave (``"bytes"``, ``"FLOPs"``, ``"count"``, ``"percent"``, ``"ratio"``) or None; ``bare`` is
    True when it gave none; ``base`` is ``"decimal"`` or ``"binary"`` for a prefixed byte unit,
    ``power`` the prefix's power (3 for GB and GiB).
    Raises :class:`AnswerParseError` when the text cannot be read.
    """
    toks = _tokens(_normalize(text))
    kind, scale, base, prefixed, power = None, 1.0, None, False, 0
    if toks and toks[-1] == ("op", "%"):
        toks.pop()
        kind, scale = "percent", 0.01
    elif toks and toks[-1][0] == "id":
        word = toks[-1][1]
        low = word.lower()
        if low in _BYTES:
            kind, scale = "bytes", float(_BYTES[low])
            prefixed = len(low) > 1 and low not in ("byte", "bytes")
            base = ("binary" if "ib" in low else "decimal") if prefixed else None
            power = "kmgtp".index(low[0]) + 1 if prefixed else 0
        elif low in _FLOPS:
            kind, scale = "FLOPs", float(_FLOPS[low])
            prefixed = low not in ("flop", "flops")
        elif low == "x":
            kind = "ratio"
        elif _unit_kind(unit) == "count" and low in _count_words(unit):
            kind = "count"
        if kind is not None:
            toks.pop()
    suffix = 0
    if not prefixed and toks and toks[-1][0] == "id" and toks[-1][1] in _SUFFIX and kind != "percent":
        suffix = _SUFFIX[toks.pop()[1]]
    if not toks:
        raise AnswerParseError("no number")
    value = _Parser(toks).parse()
    if suffix:
        if _unit_kind(unit) == "count" and "token" in _count_words(unit):
            values = [value * 1024.0**suffix * scale, value * 1000.0**suffix * scale]
        else:
            values = [value * 1000.0**suffix * scale]
    else:
        values = [value * scale]
    if not all(math.isfinite(v) for v in values):
        raise AnswerParseError("not a finite number")
    return {"values": values, "kind": kind, "bare": kind is None, "base": base, "power": power}


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise AnswerParseError("not a finite number")
    return x


class _Parser:
    """expr: term (+|- term)*; term: unary (*|/|x unary)*; unary: -unary | power;
    power: primary (^ unary)?; primary: number | ( expr ) | func power."""

    def __init__(self, toks):
        self.toks, self.i = toks, 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def parse(self) -> float:
        v = self.expr()
        if self.i != len(self.toks):
            raise AnswerParseError(f"unexpected {self.peek()[1]!r}")
        return v

    def expr(self) -> float:
        v = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            w = self.term()
            v = v + w if op == "+" else v - w
        return v

    def term(self) -> float:
        v = self.unary()
        while self.peek() in (("op", "*"), ("op", "/"), ("id", "x")):
            op = self.take()[1]
            w = self.unary()
            if op == "/":
                if w == 0:
                    raise AnswerParseError("division by zero")
                v = v / w
            else:
                v = v * w
        return v

    def unary(self) -> float:
        if self.peek() == ("op", "-"):
            self.take()
            return -self.unary()
        if self.peek() == ("op", "+"):
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> float:
        v = self.primary()
        if self.peek() == ("op", "^"):
            self.take()
            w = self.unary()
            try:
                v = _finite(math.pow(v, w))
            except (OverflowError, ValueError) as err:
                raise AnswerParseError("not a finite number") from err
        return v

    def primary(self) -> float:
        kind, tok = self.take()
        if kind == "num":
            return _finite(float(tok.replace(",", "")))
        if (kind, tok) == ("op", "("):
            v = self.expr()
            if self.take() != ("op", ")"):
                raise AnswerParseError("missing )")
            return v
        if kind == "id" and tok in _FUNCS:
            a = self.power()
            try:
                if tok == "sqrt":
                    return _finite(math.sqrt(a))
                if tok == "exp":
                    return _finite(math.exp(a))
                if a <= 0:
                    raise AnswerParseError("logarithm of a number that is not positive")
                logs = {"ln": math.log, "log": math.log, "log2": math.log2, "log10": math.log10}
                return _finite(logs[tok](a))
            except (OverflowError, ValueError) as err:
                raise AnswerParseError("not a finite number") from err
        raise AnswerParseError(f"unexpected {tok!r}")


# ----------------------------------------------------------------------------- grading
_EXAMPLES = {
    "bytes": "2.4 GiB, 26.6 GB or 2^30 B",
    "FLOPs": "5.2e11, 515 GFLOPs or 4*4096^2*3072",
    None: "18432, 18,432, 1.2e9, 43% or ln 9",
    "count": "18432, 18,432 or 1.2e9",
}
_PHRASE = {"bytes": "a number of bytes", "FLOPs": "a number of FLOPs", None: "a plain number"}
_FACTORS = (  # (ratio typed / expected, what that slip says, the most rel_tol it may use), in this order
    [(2.0, "Twice the answer: is something counted twice?", math.inf),
     (0.5, "Half the answer: is a factor 2 missing?", math.inf),
     (1.024, "Off by the ratio of 1024 to 1000: 4096 (a 4K context) where 4000 was meant?", 0.002),
     (1 / 1.024, "Off by the ratio of 1000 to 1024: 4000 where 4096 (a 4K context) was meant?", 0.002)]
    + [(1000.0**k, f"A factor 10^{3 * k} too high: check the unit prefix (K, M, G, T).", math.inf)
       for k in range(1, 5)]
    + [(1000.0**-k, f"A factor 10^{3 * k} too low: check the unit prefix (K, M, G, T).", math.inf)
       for k in range(1, 5)]
    + [(1024.0**k, f"A factor 2^{10 * k} too high: check the unit prefix (KiB, MiB, GiB).", math.inf)
       for k in range(1, 5)]
    + [(1024.0**-k, f"A factor 2^{10 * k} too low: check the unit prefix (KiB, MiB, GiB).", math.inf)
       for k in range(1, 5)]
)


def _tenths(x: float) -> str:
    """x rounded to one decimal, written the same way in Python and JavaScript."""
    t = math.floor(x * 10 + 0.5)
    return f"{t // 10}.{t % 10}"


def _near(v: float, target: float, tol: float) -> bool:
    return abs(v - target) <= tol


def _verdict(status: str, message: str, spec: dict, value=None) -> dict:
    hint = spec.get("hint", "") if status not in ("right", "empty", "invalid") else ""
    return {"status": status, "message": message, "hint": hint, "value": value}


def grade(spec: dict, text: str) -> dict:
    """Grade ``text`` against an AnswerBox ``spec``: ``{"status", "message", "hint", "value"}``.

    The page's ``gradeAnswer(spec, text)`` (static/answer_box.js) gives the same verdict.
    """
    e = float(spec["expected"])
    unit = spec.get("unit")
    ukind = _unit_kind(unit)
    rel, abs_tol, close = float(spec["rel_tol"]), float(spec["abs_tol"]), float(spec["close_tol"])
    if not _strip(_normalize(text)):
        return _verdict("empty", "Type an answer, then press Enter.", spec)
    try:
        p = parse_answer(text, unit)
    except AnswerParseError:
        return _verdict("invalid", f"Not a number I can read: try e.g. {_EXAMPLES[ukind]}.", spec)
    k = p["kind"]
    allowed = {"bytes": ("bytes",), "FLOPs": ("FLOPs",), None: ("percent", "ratio"),
               "count": ("count",)}[ukind]
    if k is not None and k not in allowed:
        phrase = _PHRASE.get(ukind) or f"a number of {unit}"
        return _verdict("unit", f"The unit does not fit: the answer is {phrase}.", spec)
    values = p["values"]
    right_tol = max(rel * abs(e), abs_tol, _RIGHT_REL * abs(e))
    for v in values:
        if _near(v, e, right_tol):
            text_e = spec.get("expected_text") or ""
            return _verdict("right", f"Right: {text_e}." if text_e else "Right.", spec, v)
    v = min(values, key=lambda x: abs(x - e))
    for target, message in spec.get("slips", []):
        target = float(target)
        if any(_near(x, target, max(rel * abs(target), abs_tol, _SLIP_REL * abs(target))) for x in values):
            return _verdict("slip", message, spec, v)
    if ukind == "bytes" and p["base"] is not None:
        # the same digits in the other base: GB typed for GiB, or GiB for GB
        n = p["power"]
        alt = [x * (1.024**-n if p["base"] == "binary" else 1.024**n) for x in values]
        if any(_near(x, e, max(right_tol, _SLIP_REL * abs(e))) for x in alt):
            return _verdict("slip", "Right digits, wrong unit: GB, MB... are powers of 1000 "
                                    "(1 GB = 10^9 bytes); GiB, MiB... powers of 1024 (1 GiB = 2^30 bytes).",
                            spec, v)
    if ukind in ("bytes", "FLOPs") and p["bare"]:
        scales = [1000.0**n for n in range(1, 6)]
        if ukind == "bytes":
            scales += [1024.0**n for n in range(1, 6)]
        if any(_near(v * s, e, max(right_tol, _SLIP_REL * abs(e))) for s in scales):
            return _verdict("unit", f"Add the unit: a bare number is read as {unit}.", spec, v)
    if e != 0 and v / e > 0:
        r = v / e
        for factor, message, cap in _FACTORS:
            if _near(r, factor, max(min(rel, cap) * factor, _SLIP_REL * factor)):
                return _verdict("slip", message, spec, v)
    if e != 0:
        diff = abs(v - e)
        way = "high" if v > e else "low"
        if diff <= close * abs(e):
            if spec.get("exact") and float(v).is_integer() and float(e).is_integer():
                return _verdict("close", f"Close: {int(diff)} too {way}.", spec, v)
            pct = 100 * diff / abs(e)
            amount = "under 0.1%" if pct < 0.05 else f"{_tenths(pct)}%"
            return _verdict("close", f"Close: {amount} {way}.", spec, v)
        r = v / e
        if v == 0:
            return _verdict("wrong", "Not quite: the answer is not zero.", spec, v)
        if r < 0:
            return _verdict("wrong", "Not quite: the sign is wrong.", spec, v)
        if 0.5 <= r <= 2:
            return _verdict("wrong", f"Not quite: {_tenths(100 * diff / abs(e))}% too {way}.", spec, v)
        times = r if r > 2 else 1 / r
        if times >= 1e6:
            return _verdict("wrong", f"Not quite: over a million times too {way}.", spec, v)
        amount = _tenths(times) if times < 100 else str(math.floor(times + 0.5))
        return _verdict("wrong", f"Not quite: about {amount} times too {way}.", spec, v)
    return _verdict("wrong", "Not quite.", spec, v)


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

    ``check(text)`` grades like the page; ``answer`` (synced) is the last text the reader
    submitted, ``verdict`` its grade in Python.
    """

    _esm = _STATIC / "answer_box.js"
    _css = _STATIC / "answer_box.css"

    spec = traitlets.Dict(read_only=True).tag(sync=True)
    answer = traitlets.Unicode("", help="the text the reader last submitted").tag(sync=True)
    verdict = traitlets.Dict(read_only=True, help="grade(spec, answer), in Python")

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
        self.set_trait("verdict", {})
        self.observe(self._on_answer, names=["answer"])

    def check(self, text: str) -> dict:
        """The verdict for ``text``, as the page gives it."""
        return grade(self.spec, text)

    @property
    def expected(self) -> float:
        return self.spec["expected"]

    def _on_answer(self, change) -> None:
        self.set_trait("verdict", grade(self.spec, change["new"]))

    def __repr__(self) -> str:  # never the answer: the text/plain of the notebook shows this
        return f"AnswerBox(label={self.spec['label']!r}, unit={self.spec['unit']!r})"


_PLACEHOLDER = {"bytes": "e.g. 2.4 GiB", "FLOPs": "e.g. 5.2e11", None: "a number", "count": "a number"}
