"""Numbers quoted in the prose equal the values the cells computed.

A chapter writes a computed number as text followed by a comment naming it, ``2.39<!--layer_gib--> GiB``,
and a cell shows the value with ``attn_core.display.quote(layer_gib=...)``. ``make notebooks``
rewrites the text from the executed notebook (book/_ext/sync_notebooks.py); these tests fail when
a quoted number and its value differ, when a comment names no value, and when a value is quoted
but never shown. nbval, in turn, checks that re-executing a notebook gives the same values, so the
prose stays true by construction, in the book, JupyterLab and Colab alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from attn_core.display import QUOTE_MIME, quote

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from sync_notebooks import _unused_quotes, quote_problems, quoted_values, rewrite_quotes  # noqa: E402


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_quoted_numbers_equal_their_values(path):
    nb = nbformat.read(path, as_version=4)
    values = quoted_values(nb)
    problems = [f"cell {i}: {p}" for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                for p in quote_problems(c.source, values)]
    unused = _unused_quotes(nb)
    assert not problems and not unused, (
        "run `make notebooks` (or fix the marker):\n  " + "\n  ".join(
            problems + [f"{name!r} is quoted by a cell but the text never shows it" for name in unused]))


def test_markers_are_found_and_rewritten():
    """The checker and the rewriter on a synthetic text (not vacuous)."""
    values = {"gib": "2.39", "ratio": "1.5x", "word": "faster", "n": "4,096"}
    text = "keeps 2.40<!--gib--> GiB, 1.4x<!--ratio--> (slower<!--word-->), N=4,096<!--n-->."
    problems = quote_problems(text, values)
    assert len(problems) == 3 and all("the text says" in p for p in problems), problems
    fixed = rewrite_quotes(text, values)
    assert fixed == "keeps 2.39<!--gib--> GiB, 1.5x<!--ratio--> (faster<!--word-->), N=4,096<!--n-->."
    assert quote_problems(fixed, values) == []
    # a marker after a space, after markup, or naming no value is reported
    assert len(quote_problems("is 2.39 <!--gib-->, **3**<!--n-->, 7<!--nope-->", values)) == 3
    # a value glued to a longer token on its left is not taken apart: the whole token is compared
    assert "the text says 'v2.39'" in quote_problems("v2.39<!--gib-->", values)[0]


def test_quote_shows_and_validates(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell.display_pub.publish = lambda data, metadata=None, **kw: shown.append(data)
    quote(total=2_566_914_048, gib="2.39", word="faster")
    assert shown[0][QUOTE_MIME] == {"total": "2,566,914,048", "gib": "2.39", "word": "faster"}
    assert shown[0]["text/plain"] == "Quoted in the text: total = 2,566,914,048, gib = 2.39, word = faster"
    with pytest.raises(TypeError, match="formatted str"):
        quote(x=2.39)
    with pytest.raises(ValueError, match="one number or one word"):
        quote(x="Llama 3 8B")
