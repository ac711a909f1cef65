"""The numbers rule: no number typed by hand in the prose.

The prose is read as tokens by markdown-it-py, configured as MyST reads it for the book (the same
parser, so nothing is re-parsed by regular expressions). Every digit in the text of a markdown cell
of a notebook in notebooks/ (and of the prose pages book/*.md) must be one of these, or the test
names it with its context:

* a **quoted value**: the token right before a ``<!--name-->`` comment, written there from the cell
  that computed it (``attn_core.display.quote``; tests/test_quotes.py checks that they agree);
* inside math (``$...$``, ``$$...$$``, ``\\begin{env}``), inline code or a code fence;
* a link's target, or the text of a citation (a link to ``references.md#key``);
* an ordered-list marker, or a bold exercise label opening a paragraph (``**1.**``);
* digits that follow a letter directly, as part of a name: ``float32``, ``bf16``, ``DeepSeek-V2``
  (a number with a unit after it, ``128K``, ``70B``, is not a name: it is scanned);
* in the page's allowlist ``tests/prose_numbers/<page stem>.txt``: one entry per line,
  ``phrase | why``; the phrase is the text as it reads (line breaks may fall anywhere a space is)
  and contains the digits it allows; ``why`` says why it is a definition, an input, a name or a
  reference and not a result. Blank lines and ``#`` comments are allowed. An entry that allows
  nothing on its page fails the test: stale entries rot.

A computed number is quoted, never allowlisted. The book's own pages (book/*.md, read only in the
book) may use MyST roles and directives; their prose is scanned the same way.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from attn_core.display import VALUE

ROOT = Path(__file__).resolve().parents[1]
ALLOW_DIR = ROOT / "tests" / "prose_numbers"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MD_PAGES = sorted((ROOT / "book").glob("*.md"))
PAGES = NOTEBOOKS + MD_PAGES

MD = create_md_parser(
    MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence", "deflist"}), RendererHTML)
MARKER = re.compile(r"<!--\s*[A-Za-z_]\w*\s*-->")
TRAILING_VALUE = re.compile(r"(?<![\w.,%+\-\u2212])" + VALUE + r"$")
IDENTIFIER_DIGITS = re.compile(r"(?<=[A-Za-z])[0-9]+")  # part of a name: float32, bf16, DeepSeek-V2
EXERCISE_LABEL = re.compile(r"\d+\.?")
CITATION = re.compile(r"(^|/)references\.(md|html)#")
# MyST roles whose content is a name, a key or math; for the rest only a `text <target>` text is prose
OPAQUE_ROLES = re.compile(r"(glue(:\w*)?|math|cite(:\w+)?|footcite(:\w+)?|eq|code|sub-ref)$")
# directives whose body is prose (scanned as markdown); any other fence is code or math
PROSE_DIRECTIVES = re.compile(r"(admonition|note|tip|hint|important|warning|caution|attention|seealso|"
                              r"epigraph|margin|sidebar|dropdown|div|topic)$")
OPTION_LINE = re.compile(r"^[ \t]*:[A-Za-z][\w-]*:.*$", re.M)
TAG = re.compile(r"<!--.*?-->|<[^>]*>", re.S)
SEP = "\x00"  # stands for markup between two runs of prose: no phrase or number spans it


def _is_digit(ch: str) -> bool:
    return unicodedata.category(ch) in ("Nd", "No", "Nl")


# --------------------------------------------------------------------------- the allowlist
@dataclass
class Entry:
    line: int
    phrase: str
    why: str
    used: bool = False

    def pattern(self) -> re.Pattern:
        words = self.phrase.split()
        return re.compile(r"(?<![\w.])" + r"\s+".join(re.escape(w) for w in words) + r"(?![\w])")


def read_allowlist(path: Path) -> tuple[list[Entry], list[str]]:
    """Entries of an allowlist file, and problems with its lines."""
    if not path.exists():
        return [], []
    entries, problems = [], []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        phrase, sep, why = line.partition("|")
        if not sep or not why.strip():
            problems.append(f"{path.name}:{n}: expected `phrase | why`: {raw!r}")
        elif not any(_is_digit(c) for c in phrase):
            problems.append(f"{path.name}:{n}: the phrase has no digit to allow: {phrase!r}")
        else:
            entries.append(Entry(n, phrase.strip(), why.strip()))
    return entries, problems


# -------------------------------------------------------------------------- prose as runs
def _inline_runs(children) -> tuple[str, list[bool]]:
    """The prose of one inline token: its text, and for each character whether it counts (bare)."""
    text: list[str] = []
    bare: list[bool] = []

    def add(s: str, counts: bool) -> None:
        text.append(s)
        bare.extend([counts] * len(s))

    link_stack: list[bool] = []  # for each open link: is it a citation?
    first = next((k for k, c in enumerate(children) if c.type != "text" or c.content.strip()), None)
    for k, c in enumerate(children):
        in_citation = any(link_stack)
        if c.type == "text":
            s, counts = c.content, [not in_citation] * len(c.content)
            nxt = children[k + 1] if k + 1 < len(children) else None
            if nxt is not None and nxt.type == "html_inline" and MARKER.fullmatch(nxt.content.strip()):
                m = TRAILING_VALUE.search(s)
                if m:
                    counts[m.start():] = [False] * (len(s) - m.start())
            prev = children[k - 1] if k else None
            if (prev is not None and prev.type == "strong_open" and k - 1 == first
                    and EXERCISE_LABEL.fullmatch(s)):
                counts = [False] * len(s)
            text.append(s)
            bare.extend(counts)
        elif c.type in ("softbreak", "hardbreak"):
            add(" ", False)
        elif c.type in ("strong_open", "strong_close", "em_open", "em_close"):
            continue
        elif c.type == "link_open":
            link_stack.append(bool(CITATION.search(c.attrGet("href") or "")))
        elif c.type == "link_close":
            if link_stack:
                link_stack.pop()
        elif c.type == "myst_role":
            name = c.meta.get("name", "")
            m = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]*)>\s*$", c.content, re.S)
            if not OPAQUE_ROLES.match(name) and m and m.group("text"):
                add(SEP, False)
                add(m.group("text"), True)
            add(SEP, False)
        else:  # code, math, html, images: not prose
            add(SEP, False)
    return "".join(text), bare


def prose_runs(markdown: str) -> list[tuple[int, str, list[bool]]]:
    """(line, text, bare mask) for every run of prose in a markdown text, read as MyST reads it."""
    runs = []
    for tok in MD.parse(markdown):
        line = tok.map[0] + 1 if tok.map else 0
        if tok.type == "inline":
            text, bare = _inline_runs(tok.children or [])
            runs.append((line, text, bare))
        elif tok.type in ("fence", "colon_fence"):
            m = re.match(r"\{([^}]*)\}\s*(.*)$", tok.info.strip())
            if m and PROSE_DIRECTIVES.match(m.group(1).strip()):
                if m.group(2):
                    runs.append((line, m.group(2), [True] * len(m.group(2))))
                body = OPTION_LINE.sub("", tok.content)
                runs += [(line + r[0], r[1], r[2]) for r in prose_runs(body)]
        elif tok.type == "html_block":
            text = TAG.sub(SEP, tok.content)
            runs.append((line, text, [True] * len(text)))
    return runs


# ----------------------------------------------------------------------------- the scan
@dataclass
class Offender:
    where: str
    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.where}: {self.number!r} in \u2026{self.context}\u2026"


def _numbers(text: str, bare: list[bool]) -> list[tuple[int, int]]:
    """Spans of numbers with at least one bare digit: digits joined by `,` `.` (32,768, 0.5)."""
    spans, i = [], 0
    while i < len(text):
        if _is_digit(text[i]):
            j = i + 1
            while j < len(text) and (_is_digit(text[j]) or (
                    text[j] in ",." and j + 1 < len(text) and _is_digit(text[j + 1]))):
                j += 1
            if any(bare[i:j]):
                spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


def scan(markdown: str, entries: list[Entry], where: str = "") -> list[Offender]:
    """The bare numbers of one markdown text; marks the allowlist entries that allowed something."""
    offenders = []
    for line, text, bare in prose_runs(markdown):
        bare = [b and _is_digit(ch) for ch, b in zip(text, bare)]
        for m in IDENTIFIER_DIGITS.finditer(text):
            bare[m.start():m.end()] = [False] * (m.end() - m.start())
        for entry in entries:
            for m in entry.pattern().finditer(text):
                if any(bare[m.start():m.end()]):
                    entry.used = True
                    bare[m.start():m.end()] = [False] * (m.end() - m.start())
        for a, b in _numbers(text, bare):
            clean = text.replace(SEP, " ")
            context = f"{clean[max(0, a - 40):a]}\u27e8{text[a:b]}\u27e9{clean[b:b + 40]}"
            offenders.append(Offender(f"{where}line {line}", text[a:b], context))
    return offenders


def markdown_texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) for each markdown cell of a notebook, or the whole text of a .md page."""
    if path.suffix == ".md":
        return [("", path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        (f"cell {k} ({c.get('id', '?')}) ", "".join(c["source"]))
        for k, c in enumerate(cells) if c["cell_type"] == "markdown"
    ]


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).with_suffix("").as_posix()


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_no_bare_numbers_in_prose(path):
    """Every number in the prose is quoted, math, code, a target or citation, or allowlisted with a reason."""
    allow = ALLOW_DIR / f"{path.stem}.txt"
    entries, problems = read_allowlist(allow)
    offenders = [o for where, text in markdown_texts(path) for o in scan(text, entries, where)]
    stale = [f"{allow.name}:{e.line}: allows nothing on the page: {e.phrase!r}"
             for e in entries if not e.used]
    report = [str(o) for o in offenders] + problems + stale
    assert not report, (
        f"{len(offenders)} bare number(s) in {path.relative_to(ROOT)}: quote each computed one "
        f"(2.39<!--name--> with attn_core.display.quote(name=...)), put symbols in $...$, or allowlist "
        f"a definition/input/name in {allow.relative_to(ROOT)} as `phrase | why`:\n  " + "\n  ".join(report)
    )


def test_every_allowlist_has_a_page():
    """An allowlist named after no page is a leftover."""
    stems = {p.stem for p in PAGES}
    orphans = [p.name for p in ALLOW_DIR.glob("*.txt") if p.stem not in stems]
    assert not orphans, f"allowlists with no page: {orphans}"


SYNTHETIC = """\
---
jupytext: {version: 1.16}
---
# Title with the quoted 4,096<!--n_tokens--> and 1.5x<!--ratio--> and {glue:text}`x3`

1. The math $N = 4096$ and $$2 N d^2$$ stay, and so does a list marker.
2. Code `fp16` and ``x[0]``; a [link](https://arxiv.org/abs/2205.14135), a citation
   [Dao et al., 2022](../book/references.md#dao2022flashattention) and {doc}`the chapter <05_ledger>`.

```python
x = 12345
```

<details>
<summary>Solution</summary>

Allowed by the list: Llama 3 8B.

</details>

$$
\\sqrt{D} = 8
$$

**3.** An exercise label, the names float32, bf16 and DeepSeek-V2.

The one bare number is 32,768 tokens.
"""


def test_scanner_finds_exactly_the_bare_number():
    """Each exemption holds, the allowlist works, and the one bare number is found (not vacuous)."""
    entries = [Entry(1, "Llama 3 8B", "a model's name"), Entry(2, "Llama 4 9B", "stale")]
    found = scan(SYNTHETIC, entries)
    assert [o.number for o in found] == ["32,768"], [str(o) for o in found]
    assert "\u27e832,768\u27e9 tokens" in found[0].context
    assert entries[0].used and not entries[1].used
    # without its allowlist entry, the model name is reported too
    assert [o.number for o in scan(SYNTHETIC, [])] == ["3", "8", "32,768"]
    # the text of a link that is not a citation is prose, and so is a role's text
    assert [o.number for o in scan("See [chapter 5](05_ledger.ipynb).", [])] == ["5"]
    assert [o.number for o in scan("See {doc}`chapter 5 <05_ledger>`.", [])] == ["5"]
    assert [o.number for o in scan(":::{admonition} Exercise 2\nBody 3.\n:::\n", [])] == ["2", "3"]
    # a number with a unit is not a name
    assert [o.number for o in scan("at 128K tokens, Llama 3 70B", [])] == ["128", "3", "70"]
    # a value needs its marker right after it; a marker exempts only the token before it
    assert [o.number for o in scan("keeps 2.39 <!--gib--> GiB and 7<!--n-->", [])] == ["2.39"]
    assert [o.number for o in scan("ratio 1.5 x2<!--r-->", [])] == ["1.5"]
    # an unclosed `$` is not math
    assert [o.number for o in scan("costs $5 per\n\nmonth $", [])] == ["5"]


def test_allowlist_lines_are_checked(tmp_path):
    """An entry needs a why and a digit; malformed lines are reported."""
    path = tmp_path / "page.txt"
    path.write_text("# comment\n\nN = 4096 | the input\nno digits | why\nLlama 3 | \nplain line\n")
    entries, problems = read_allowlist(path)
    assert [e.phrase for e in entries] == ["N = 4096"]
    assert len(problems) == 3, problems
