"""How the chapters show results: numbers quoted in the prose, tables, unit formats and a slope.

One home for what several notebooks (and the widgets) need to *show* a result, so that no chapter
carries its own copy:

* :func:`quote`: the numbers a chapter's prose quotes, shown under the cell that computed them.
  ``make notebooks`` writes each one into the markdown after the value it annotates
  (``2.39<!--layer_gib--> GiB``), and a test fails when a quoted number and its value differ, so
  the text reads the same in the book, JupyterLab and Colab and stays true by construction.
* :func:`table`: a small table that renders as HTML (scrolling inside its own box on a phone) and
  as aligned text where HTML is not shown.
* :func:`fmt_bytes`, :func:`fmt_flops`, :func:`fmt_tokens`: the units the book and its widgets print.
* :func:`loglog_slope`: the exponent of a power law fitted to measurements.
"""

from __future__ import annotations

import html
import math
import numbers
import re

__all__ = [
    "QUOTE_MIME",
    "COLORS",
    "UNITS",
    "VALUE",
    "quote",
    "table",
    "Table",
    "fmt_bytes",
    "fmt_flops",
    "fmt_tokens",
    "loglog_slope",
]

# ------------------------------------------------------------------------------ quoted numbers
#: the MIME type under which :func:`quote` stores the values in a cell's output
QUOTE_MIME = "application/vnd.attn-ledger.quote+json"
#: what a quoted value may look like: one token, a number (with separators, a sign, a suffix such
#: as %, x or K) or one word; the prose shows it followed by ``<!--name-->``
VALUE = r"[+\-\u2212]?[0-9A-Za-z](?:[\w.,%+\-]*[\w%])?"
_VALUE = re.compile(VALUE)
_NAME = re.compile(r"[A-Za-z_]\w*")


def _text(name: str, value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
        raise TypeError(f"quote({name}=...): give an int or a formatted str such as f'{{x:.2f}}', "
                        f"got {type(value).__name__}")
    text = value if isinstance(value, str) else f"{int(value):,}"
    if not _VALUE.fullmatch(text):
        raise ValueError(f"quote({name}={text!r}): a quoted value is one number or one word")
    return text


def quote(**values) -> None:
    """Show the values the prose quotes, as ``name = value`` under the cell that computed them.

    Give each value as it should read: an int (printed with thousands separators) or a string you
    formatted (``f"{x:.2f}"``, ``f"{r:.1f}x"``, ``"faster"``). The markdown writes the value followed
    by an HTML comment naming it, ``2.39<!--layer_gib--> GiB``: invisible in the book, JupyterLab and
    Colab alike. ``make notebooks`` rewrites those values from the executed notebook, and
    ``tests/test_quotes.py`` fails when one differs from its value.
    """
    from IPython.display import display

    out = {}
    for name, value in values.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"quote: {name!r} is not a name")
        out[name] = _text(name, value)
    plain = "Quoted in the text: " + ", ".join(f"{k} = {v}" for k, v in out.items())
    display({"text/plain": plain, QUOTE_MIME: out}, raw=True)


# ------------------------------------------------------------------------------------ tables
#: the space around every cell of a table, so that numbers in neighbouring columns never touch
_CELL_PADDING = "padding:0.2em 0.8em"


class Table:
    """Rows under a header, shown as an HTML table or as aligned text (``repr``)."""

    def __init__(self, header, rows, align=None, caption: str = ""):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in row] for row in rows]
        if any(len(r) != len(self.header) for r in self.rows):
            raise ValueError("table: every row needs one cell per header column")
        self.align = align or "l" + "r" * (len(self.header) - 1)
        if len(self.align) != len(self.header) or set(self.align) - {"l", "r"}:
            raise ValueError("table: align is one 'l' or 'r' per column")
        self.caption = caption

    def _repr_html_(self) -> str:
        # the padding is inline so that neighbouring columns stay apart where the book's stylesheet
        # does not reach (JupyterLab, Colab); book/_static/course.css sets the same padding
        def row(cells, tag):
            return "<tr>" + "".join(
                f'<{tag} style="text-align:{"left" if a == "l" else "right"};{_CELL_PADDING}">'
                f"{html.escape(c)}</{tag}>"
                for c, a in zip(cells, self.align)) + "</tr>"

        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        body = "".join(row(r, "td") for r in self.rows)
        return (f'<div class="al-table" style="overflow-x:auto"><table>{cap}<thead>{row(self.header, "th")}'
                f"</thead><tbody>{body}</tbody></table></div>")

    def __repr__(self) -> str:
        widths = [max(len(r[i]) for r in [self.header, *self.rows]) for i in range(len(self.header))]

        def line(cells):
            return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                             for c, w, a in zip(cells, widths, self.align)).rstrip()

        lines = ([self.caption] if self.caption else []) + [line(self.header)]
        return "\n".join(lines + [line(r) for r in self.rows])


def table(header, rows, align=None, caption: str = "") -> Table:
    """A table to show as a cell's result: ``table(["item", "bytes"], [["X", "25,165,824"]])``.

    ``align``: one ``l`` or ``r`` per column (default: the first left, the rest right).
    """
    return Table(header, rows, align, caption)


# ----------------------------------------------------------------------------------- formats
_BINARY_UNITS = (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
_FLOP_UNITS = (("PFLOPs", 10**15), ("TFLOPs", 10**12), ("GFLOPs", 10**9), ("MFLOPs", 10**6))
#: the unit tables of fmt_bytes and fmt_flops; the widgets' page formats with the same tables
UNITS = {"bytes": [list(u) for u in _BINARY_UNITS], "flops": [list(u) for u in _FLOP_UNITS]}

#: the colours of the book's charts: a ledger's items and the series the widgets draw (the page
#: receives this table in the widgets' spec, and matplotlib figures read it here)
COLORS: dict[str, str] = {
    "X": "#1b4965", "Q": "#2e86ab", "K": "#5fa8d3", "V": "#89c2d9", "ctx": "#62b6cb", "O": "#a9d6e5",
    "S": "#d1495b", "P": "#edae49", "dropout": "#f4a259", "P_drop": "#b5838d", "mask": "#6d597a",
    "eager": "#d1495b", "fused": "#2e86ab", "kv": "#6a4c93", "state": "#3a7d44", "attn": "#f4a259",
    "now": "#111111", "mark": "#6c757d", "weights": "#1b4965", "gradients": "#5fa8d3", "optimizer": "#edae49",
    "activations": "#d1495b", "memory": "#adb5bd", "logits": "#8e6c8a", "buffers": "#7d8f69",
}


def fmt_bytes(x: float) -> str:
    """Binary units with two decimals, as the book and its widgets print them: ``2.39 GiB``."""
    for unit, scale in _BINARY_UNITS:
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B"


def fmt_flops(x: float) -> str:
    """Decimal units with two decimals: ``927.71 GFLOPs``."""
    for unit, scale in _FLOP_UNITS:
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} FLOPs"


def fmt_tokens(n: float) -> str:
    """A length in tokens: ``256``, ``4K``, ``128K``, ``1M`` (powers of 1024), else ``18,432``."""
    n = round(n)
    for suffix, scale in (("M", 1024**2), ("K", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return f"{n:,}"


# ------------------------------------------------------------------------------------- fits
def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): the exponent k of y ~ x^k."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    if len(lx) < 2 or len(set(lx)) < 2:
        raise ValueError("loglog_slope needs at least two distinct x")
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
