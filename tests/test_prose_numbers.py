"""The numbers rule: no number typed by hand in the prose.

Every digit in a markdown cell of a notebook in notebooks/ (and in the prose pages book/*.md) must be
one of these, or the test names it with its context:

* inside math: ``$...$``, ``$$...$$``, ``\\begin{env}...\\end{env}``, a ``{math}`` role or directive;
* inside a myst-nb glue role (``{glue:text}`name` ``, ``{glue}`name` ``, ``{glue:}`name` ``, ...);
* inside inline code or a code fence;
* inside a link target ``[text](target)``, an autolink or bare URL, or a role's target: ``{cite}``,
  ``{ref}``, ``{numref}``, ``{doc}``, ``{eq}`` (for ``{doc}`text <target>` `` only the target), a
  footnote label ``[^1]``, a ``(label)=`` target;
* an ordered-list marker or a bold exercise label at the start of a line (``1.``, ``**1.**``), a
  directive's option line (``:class: x``);
* digits that follow a letter directly, as part of a name: ``float32``, ``bf16``, ``DeepSeek-V2``
  (a number with a unit after it, ``128K``, ``70B``, is not a name: it is scanned);
* in the page's allowlist ``tests/prose_numbers/<page stem>.txt``: one entry per line,
  ``phrase | why``; the phrase is the exact text of the page (line breaks may fall anywhere a space
  is) and contains the digits it allows; ``why`` says why it is a definition, an input, a name or a
  reference and not a result. Blank lines and ``#`` comments are allowed. An entry that allows
  nothing on its page fails the test: stale entries rot.

A computed number belongs in a glue role, never in the allowlist.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOW_DIR = ROOT / "tests" / "prose_numbers"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MD_PAGES = sorted((ROOT / "book").glob("*.md"))
PAGES = NOTEBOOKS + MD_PAGES

# roles whose whole content is a name, a key or math: never prose
OPAQUE_ROLES = re.compile(r"(glue(:\w*)?|math|cite(:\w+)?|footcite(:\w+)?|eq|code|sub-ref)$")
# roles whose content is `target` or `text <target>`: the target is exempt, the text is prose
TARGET_ROLES = re.compile(r"(doc|ref|numref|term|download|any|external(:[\w:+-]+)?)$")
# directives whose body is not prose (code or math) and whose argument is a path or a name
CODE_DIRECTIVES = re.compile(r"(code|code-block|code-cell|sourcecode|math|literalinclude|raw|glue(:\w+)?)$")
PATH_ARGUMENT = re.compile(r"(figure|image|include|literalinclude|glue(:\w+)?|bibliography)$")

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*(?P<info>.*?)[ \t]*$")
OPTION_LINE = re.compile(r"^[ \t]*:[A-Za-z][\w-]*:(?:[ \t].*)?$")
LIST_MARKER = re.compile(r"^[ \t>]*(\d+)[.)](?=[ \t]|$)", re.M)
BOLD_LABEL = re.compile(r"^[ \t>]*\*\*(\d+)\.?\*\*", re.M)  # an exercise label: **1.**
IDENTIFIER_DIGITS = re.compile(r"(?<=[A-Za-z])[0-9]+")  # part of a name: float32, bf16, DeepSeek-V2
TARGET_LINE = re.compile(r"^[ \t]*\([^()\s]+\)=[ \t]*$", re.M)
LINK_DEFINITION = re.compile(r"^[ \t]{0,3}\[[^\]]+\]:[ \t]*\S.*$", re.M)
ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:+.-]*)\}(?P<ticks>`+)")
TEXT_TARGET = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]*)>\s*$", re.S)
SIMPLE_SPANS = [
    re.compile(r"<!--.*?-->", re.S),  # comment: not rendered
    re.compile(r"<(?:https?|ftp|mailto):[^>\s]*>"),  # autolink
    re.compile(r"https?://[^\s)>\]]+"),  # bare URL
    re.compile(r"\[\^[^\]\s]+\]"),  # footnote label
    re.compile(r"\{\{.*?\}\}", re.S),  # substitution name
]


def _is_digit(ch: str) -> bool:
    return unicodedata.category(ch) in ("Nd", "No", "Nl")


def _front_matter_end(text: str) -> int:
    """Length of a leading YAML front matter block (--- ... ---), 0 if none."""
    m = re.match(r"---[ \t]*\n.*?\n---[ \t]*(\n|$)", text, re.S)
    return m.end() if m else 0


def _block_pass(text: str, exempt: bytearray) -> list[tuple[int, int]]:
    """Mark fenced code/math, fence lines and directive options exempt; return the prose segments.

    A segment is a run of lines between two fence lines: inline math and code spans may cross lines
    inside a segment, never a fence.
    """
    lines = text.splitlines(keepends=True)
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line)
    segments: list[tuple[int, int]] = []
    seg_start = 0
    stack: list[tuple[str, int]] = []  # open directives with a prose body: (fence char, length)
    i = 0

    def mark(a: int, b: int) -> None:
        exempt[a:b] = b"\x01" * (b - a)

    def close_segment(at: int, resume: int) -> None:
        nonlocal seg_start
        if at > seg_start:
            segments.append((seg_start, at))
        seg_start = resume

    while i < len(lines):
        line, start = lines[i], starts[i]
        m = FENCE.match(line.rstrip("\n"))
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info")
        char, length = fence[0], len(fence)
        # a closing fence of the innermost open directive
        if not info and stack and stack[-1][0] == char and length >= stack[-1][1]:
            stack.pop()
            close_segment(start, start + len(line))
            mark(start, start + len(line))
            i += 1
            continue
        if char == ":" and not info.startswith("{"):
            i += 1  # a line of colons that opens nothing: prose
            continue
        directive = re.match(r"\{([^}]*)\}[ \t]*(.*)$", info)
        name = directive.group(1).strip() if directive else None
        close_segment(start, start + len(line))
        if directive is None or CODE_DIRECTIVES.match(name):
            # code (or math) fence: everything up to the closing fence is exempt
            j = i + 1
            while j < len(lines):
                c = FENCE.match(lines[j].rstrip("\n"))
                closes = c and c.group("fence")[0] == char and len(c.group("fence")) >= length
                if closes and not c.group("info"):
                    break
                j += 1
            end = starts[j] + len(lines[j]) if j < len(lines) else len(text)
            mark(start, end)
            seg_start = end
            i = j + 1
            continue
        # a directive whose body is prose: the fence and name are exempt, the argument is prose
        argument = directive.group(2)
        arg_at = start + len(line.rstrip("\n")) - len(argument) if argument else start + len(line)
        if PATH_ARGUMENT.match(name) or not argument:
            mark(start, start + len(line))
        else:
            mark(start, arg_at)
            segments.append((arg_at, start + len(line.rstrip("\n"))))
        stack.append((char, length))
        i += 1
        # its option lines (`:key: value`) follow the opening line
        while i < len(lines) and OPTION_LINE.match(lines[i].rstrip("\n")):
            mark(starts[i], starts[i] + len(lines[i]))
            i += 1
        seg_start = starts[i] if i < len(lines) else len(text)
    close_segment(len(text), len(text))
    return segments


def _closing(text: str, at: int, token: str, stop: int) -> int:
    """Index just past the first unescaped `token` at or after `at` (before `stop`), or -1."""
    j = at
    while True:
        j = text.find(token, j, stop)
        if j < 0:
            return -1
        if j > 0 and text[j - 1] == "\\":
            j += 1
            continue
        return j + len(token)


def _inline_pass(text: str, a: int, b: int, exempt: bytearray) -> None:
    """Mark inline code, math, roles and link targets exempt inside text[a:b]."""

    def mark(x: int, y: int) -> None:
        exempt[x:y] = b"\x01" * (y - x)

    for pattern in SIMPLE_SPANS:
        for m in pattern.finditer(text, a, b):
            mark(m.start(), m.end())
    i = a
    while i < b:
        ch = text[i]
        if exempt[i]:
            i += 1
            continue
        if ch == "\\":
            env = re.compile(r"\\begin\{([^}]+)\}").match(text, i, b)
            if env:
                end = text.find("\\end{" + env.group(1) + "}", env.end(), b)
                if end >= 0:
                    stop = end + len(env.group(1)) + 6
                    mark(i, stop)
                    i = stop
                    continue
            i += 2  # an escaped character
            continue
        if ch == "{":
            role = ROLE.match(text, i, b)
            if role:
                ticks = role.group("ticks")
                close = text.find(ticks, role.end(), b)
                if close >= 0:
                    name, body_at = role.group("name"), role.end()
                    mark(i, body_at)
                    mark(close, close + len(ticks))
                    body = text[body_at:close]
                    if OPAQUE_ROLES.match(name):
                        mark(body_at, close)
                    elif TARGET_ROLES.match(name):
                        tt = TEXT_TARGET.match(body)
                        if tt:
                            mark(body_at + tt.start("target"), body_at + tt.end("target"))
                        else:
                            mark(body_at, close)
                    i = close + len(ticks)
                    continue
        if ch == "`":
            run = re.compile(r"`+").match(text, i, b).group()
            close = re.compile(r"(?<!`)" + run + r"(?!`)").search(text, i + len(run), b)
            if close:
                mark(i, close.end())
                i = close.end()
            else:
                i += len(run)
            continue
        if ch == "$":
            token = "$$" if text.startswith("$$", i) else "$"
            # inline math ends within its paragraph
            para = re.compile(r"\n[ \t]*\n").search(text, i, b)
            stop = b if token == "$$" or para is None else para.start()
            end = _closing(text, i + len(token), token, stop)
            if end > 0:
                mark(i, end)
                i = end
            else:
                i += len(token)
            continue
        if ch == "]" and text.startswith("](", i):
            depth, j = 0, i + 1
            while j < b:
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            mark(i, j + 1)
            i = j + 1
            continue
        if ch == "]" and text.startswith("][", i):
            end = text.find("]", i + 2, b)
            if end > 0:
                mark(i, end + 1)
                i = end + 1
                continue
        i += 1


def exempt_mask(text: str) -> bytearray:
    """One byte per character of `text`: 1 where a digit there may stand (see the module docstring)."""
    exempt = bytearray(len(text))
    head = _front_matter_end(text)
    exempt[:head] = b"\x01" * head
    for a, b in _block_pass(text, exempt):
        _inline_pass(text, max(a, head), b, exempt)
    for pattern in (LIST_MARKER, BOLD_LABEL, IDENTIFIER_DIGITS, TARGET_LINE, LINK_DEFINITION):
        for m in pattern.finditer(text):
            span = m.span(1) if pattern in (LIST_MARKER, BOLD_LABEL) else m.span()
            exempt[span[0]:span[1]] = b"\x01" * (span[1] - span[0])
    return exempt


# ----------------------------------------------------------------------------- allowlists
@dataclass
class Entry:
    line: int
    phrase: str
    why: str
    used: bool = False

    def pattern(self) -> re.Pattern:
        words = self.phrase.split()
        return re.compile(r"\s+".join(re.escape(w) for w in words))


def read_allowlist(path: Path) -> tuple[list[Entry], list[str]]:
    """The entries of an allowlist file and the problems with its lines."""
    entries, problems = [], []
    if not path.exists():
        return entries, problems
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        phrase, sep, why = line.rpartition(" | ")
        if not sep:
            problems.append(f"{path.name}:{n}: not `phrase | why`: {line!r}")
        elif not why.strip():
            problems.append(f"{path.name}:{n}: says no why: {line!r}")
        elif not any(_is_digit(c) for c in phrase):
            problems.append(f"{path.name}:{n}: the phrase has no digit to allow: {phrase!r}")
        else:
            entries.append(Entry(n, phrase.strip(), why.strip()))
    return entries, problems


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


def scan(text: str, entries: list[Entry], where: str = "") -> list[Offender]:
    """The bare numbers of one markdown text; marks the allowlist entries that allowed something."""
    exempt = exempt_mask(text)
    bare = [_is_digit(c) and not exempt[k] for k, c in enumerate(text)]
    for entry in entries:
        for m in entry.pattern().finditer(text):
            if any(bare[m.start():m.end()]):
                entry.used = True
                bare[m.start():m.end()] = [False] * (m.end() - m.start())
    offenders = []
    for a, b in _numbers(text, bare):
        line = text.count("\n", 0, a) + 1
        before = text[max(0, a - 40):a].replace("\n", " ")
        after = text[b:b + 40].replace("\n", " ")
        context = f"{before}\u27e8{text[a:b]}\u27e9{after}"
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
    """Every number in the prose is math, glued, code, a target, or allowlisted with a reason."""
    allow = ALLOW_DIR / f"{path.stem}.txt"
    entries, problems = read_allowlist(allow)
    offenders = [o for where, text in markdown_texts(path) for o in scan(text, entries, where)]
    stale = [f"{allow.name}:{e.line}: allows nothing on the page: {e.phrase!r}"
             for e in entries if not e.used]
    report = [str(o) for o in offenders] + problems + stale
    assert not report, (
        f"{len(offenders)} bare number(s) in {path.relative_to(ROOT)}: glue each computed one "
        f"({{glue:text}}`name`), put symbols in $...$, or allowlist a definition/input/name in "
        f"{allow.relative_to(ROOT)} as `phrase | why`:\n  " + "\n  ".join(report)
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
(sec-2)=
# Title with the glued {glue:text}`n_tokens:,` and {glue}`ratio` and {glue:}`x3`

1. The math $N = 4096$ and $$2 N d^2$$ and \\begin{align} a_1 &= 2 \\end{align} stay.
2. Code `fp16` and ``x[0]`` and {math}`2^{10}`; a [link](https://arxiv.org/abs/2205.14135)
   and {cite:p}`vaswani2017` and {doc}`the chapter <05_memory_ledger>` and {numref}`fig-3`.
3. A footnote[^4] and <https://example.org/v2> and {ref}`sec-2`.

```python
x = 12345
```

:::{admonition} Solution
:class: dropdown 2
Allowed by the list: Llama 3 8B.
:::

$$
\\sqrt{D} = 8
$$

**3.** An exercise label, the names float32, bf16 and DeepSeek-V2.

The one bare number is 32,768 tokens.

[^4]: A footnote body.
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
    # text of a {doc} role is prose (only its target is exempt); so is an admonition's title
    assert [o.number for o in scan("See {doc}`chapter 5 <05_memory_ledger>`.", [])] == ["5"]
    assert [o.number for o in scan(":::{admonition} Exercise 2\nBody.\n:::\n", [])] == ["2"]
    # a number with a unit is not a name
    assert [o.number for o in scan("at 128K tokens, Llama 3 70B", [])] == ["128", "3", "70"]
    # an unclosed `$` is not math
    assert [o.number for o in scan("costs $5 per\n\nmonth $", [])] == ["5"]


def test_allowlist_lines_are_checked(tmp_path):
    """An entry needs a why and a digit; malformed lines are reported."""
    path = tmp_path / "page.txt"
    path.write_text("# comment\n\nN = 4096 | the input\nno digits | why\nLlama 3 | \nplain line\n")
    entries, problems = read_allowlist(path)
    assert [e.phrase for e in entries] == ["N = 4096"]
    assert len(problems) == 3, problems
