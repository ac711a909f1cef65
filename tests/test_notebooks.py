"""The chapter notebooks as committed: in the table of contents, executed, and following the book's rules.

nbval (run by `make nbval`) re-executes them and compares outputs; these checks cover what nbval
cannot see: a notebook missing from the book, cells never executed, the Colab cell out of sync with
_config.yml, and cells that skip nbval's comparison without being timings or widgets.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from sync_notebooks import CELL_ID, TITLE, colab_cell_source, collapsed_metadata  # noqa: E402

# a cell may skip nbval's comparison only if it times something (or shows a bench run's times) or a widget
IGNORE_OK = re.compile(r"time_fn|time_interleaved|perf_counter|timeit|measure_time|bench\[|Widget\("
                       r"|Explorer\(")


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [ch["file"] for part in toc["parts"] for ch in part["chapters"]]


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_toc_and_notebooks_agree():
    """Every notebook is in the book, and every toc entry exists."""
    toc = _toc_files()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.stem}" in toc, f"{path.name} is not in _toc.yml"
    for entry in toc:
        assert (ROOT / f"{entry}.md").exists() or (ROOT / f"{entry}.ipynb").exists(), entry


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_colab_cell_first_and_in_sync(path):
    """The first cell installs attn_core in Colab only, from the repository named in _config.yml."""
    first = _load(path)["cells"][0]
    assert first.get("id") == CELL_ID and "remove-cell" in first["metadata"].get("tags", [])
    assert "".join(first["source"]) == colab_cell_source(), "run `make notebooks` to sync it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_executed_with_outputs_and_no_errors(path):
    """Committed executed: every code cell has run, in order, and none raised."""
    cells = [c for c in _load(path)["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in cells]
    assert None not in counts, f"unexecuted cells in {path.name}"
    assert counts == sorted(counts), f"{path.name} was not run top to bottom in one kernel"
    for c in cells:
        assert all(o["output_type"] != "error" for o in c["outputs"]), "".join(c["source"])[:200]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_only_timings_and_widgets_skip_nbval(path):
    """Cells tagged nbval-ignore-output (or nbval-skip) time something or display a widget."""
    for c in _load(path)["cells"]:
        tags = c.get("metadata", {}).get("tags", [])
        if {"nbval-ignore-output", "nbval-skip"} & set(tags):
            source = "".join(c["source"])
            assert IGNORE_OK.search(source), f"{path.name}: a cell skips comparison, no timing:\n{source}"


def _is_chapter(path: Path) -> bool:
    return path.stem[:2].isdigit() and int(path.stem[:2]) < 90


CHAPTERS = [p for p in NOTEBOOKS if _is_chapter(p)]
EXERCISES = re.compile(r"^## Exercises\s*$", re.M)
COLLAPSED = re.compile(r"(hide|remove)-(input|cell)$")
SOLUTION_WORD = re.compile(r"\b(Solutions?|Answers?)\b")
DETAILS = re.compile(r"<details>\s*<summary>(?P<summary>.*?)</summary>(?P<body>.*?)</details>", re.S)
EXERCISE_LABEL = re.compile(r"^\*\*(\d+)\.\*\*", re.M)
ANSWER_BOX = re.compile(r"\bAnswerBox\(")
# the reader's path of a chapter: code a reader meets without opening a toggle (DEVELOPERS.md goals)
MAX_VISIBLE_LINES, MAX_CELL_LINES, MAX_VISIBLE_ASSERTS = 150, 25, 3


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _title(cell: dict) -> str:
    m = TITLE.match("".join(cell["source"]))
    return m.group("label") if m else ""


def _visible_code(cells: list[dict]) -> list[str]:
    """Sources of the code cells a reader sees without opening a toggle."""
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"
            and not any(COLLAPSED.match(t) for t in _tags(c)) and "".join(c["source"]).strip()]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_reader_path_is_light(path):
    """What a reader meets without opening a toggle: at most 150 lines of code in all, no cell over 25
    lines, at most 3 asserts (only where the assert is the lesson), no glue plumbing."""
    visible = _visible_code(_load(path)["cells"])
    lines = [sum(1 for line in src.splitlines() if line.strip()) for src in visible]
    asserts = sum(len(re.findall(r"\bassert\b", src)) for src in visible)
    longest = max(lines, default=0)
    assert sum(lines) <= MAX_VISIBLE_LINES and longest <= MAX_CELL_LINES and asserts <= MAX_VISIBLE_ASSERTS, (
        f"{path.name}: {sum(lines)} lines in sight (<= {MAX_VISIBLE_LINES}), longest cell {longest} "
        f"(<= {MAX_CELL_LINES}), {asserts} asserts (<= {MAX_VISIBLE_ASSERTS}): move checks into "
        "'# @title How we know: ...' cells tagged hide-cell")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_glue(path):
    """Numbers reach the prose through attn_core.display.quote, never myst-nb's glue."""
    glued = [i for i, c in enumerate(_load(path)["cells"]) if c["cell_type"] == "code"
             and re.search(r"\bglue\(|from myst_nb import", "".join(c["source"]))]
    assert not glued, f"{path.name}: cells {glued} glue values; quote them instead"


MYST_ONLY = {"myst_role": "a MyST role", "myst_target": "a (label)= target",
             "myst_line_comment": "a % comment", "myst_block_break": "a +++ block break"}


def myst_only_syntax(markdown: str) -> list[str]:
    """What in a markdown text JupyterLab and Colab would show raw (MyST roles, directives, targets)."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    md = create_md_parser(MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence"}),
                          RendererHTML)
    found = []

    def walk(tokens):
        for tok in tokens:
            if tok.type in MYST_ONLY:
                found.append(f"{MYST_ONLY[tok.type]}: {tok.content[:60]!r}")
            elif tok.type in ("fence", "colon_fence") and tok.info.strip().startswith("{"):
                found.append(f"a directive: {tok.info.strip()[:60]!r}")
            elif tok.type == "colon_fence":
                found.append(f"a ::: fence: {tok.info.strip()[:60]!r}")
            walk(tok.children or [])

    walk(md.parse(markdown))
    if "{{" in markdown:
        found.append("a {{ substitution }}")
    return found


def test_myst_only_syntax_is_found():
    """The checker of the next test (not vacuous)."""
    text = ("See {doc}`x` and [y](y.ipynb).\n\n(sec)=\n## H\n\n:::{admonition} Solution\n:class: dropdown\n"
            "A\n:::\n\n```{note}\nB\n```\n\n```python\nC\n```\n\n<details><summary>Solution</summary>\n\nD\n\n"
            "</details>\n")
    found = myst_only_syntax(text)
    assert len(found) == 4, found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_renders_in_jupyterlab_and_colab(path):
    """Markdown cells use what the book, JupyterLab 4 and Colab all render: CommonMark, $ math, plain
    links, HTML <details> for solutions. No MyST role, directive or target (they show raw there)."""
    found = [f"cell {i}: {f}" for i, c in enumerate(_load(path)["cells"]) if c["cell_type"] == "markdown"
             for f in myst_only_syntax("".join(c["source"]))]
    assert not found, f"{path.name}: MyST-only syntax:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_collapsed_cells_are_labelled_everywhere(path):
    """A cell tagged hide-input or hide-cell starts with '# @title <label>', and carries the label in
    the book (mystnb.code_prompt_show) and its collapsed state in JupyterLab and Colab."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            want = collapsed_metadata(cell)  # raises for a collapsed cell without a title
            for key in ("mystnb", "jupyter", "cellView"):
                assert cell.metadata.get(key) == want.get(key), (
                    f"{path.name}: run `make notebooks`: {key} of\n{cell.source[:120]}")


def exercise_events(cells: list[dict]) -> list[tuple[str, str]]:
    """The exercises as events, in order: ("question", n), ("box", title), ("solution", where),
    ("check", title), and ("misplaced", why) for what breaks the rules."""
    events = []
    for c, text in _after_exercises(cells):
        if c["cell_type"] == "markdown":
            spans = [(m.start(), ("question", m.group(1))) for m in EXERCISE_LABEL.finditer(text)]
            spans += [(m.start(), ("solution", m.group("summary").strip())) for m in DETAILS.finditer(text)]
            outside = DETAILS.sub("", text)
            spans += [(0, ("misplaced", f"'{w}' outside a <details> solution"))
                      for w in SOLUTION_WORD.findall(EXERCISE_LABEL.sub("", outside))]
            events += [e for _, e in sorted(spans, key=lambda s: s[0])]
        elif c["cell_type"] == "code" and text.strip():
            title = _title(c)
            if is_answer_box_cell(c):
                events.append(("box", title))
            elif "hide-cell" in _tags(c) and title.startswith("Solution"):
                events.append(("solution", title))
            elif "hide-cell" in _tags(c) and title.startswith("Check"):
                events.append(("check", title))
            elif "remove-cell" not in _tags(c):
                events.append(("misplaced", f"a code cell not a box, a Solution or a Check: {text[:80]!r}"))
    return events


def exercise_order_problems(events: list[tuple[str, str]]) -> list[str]:
    """Each exercise reads: the question, its answer boxes, then its solution(s), then checks."""
    problems, state, current = [], "start", None
    for kind, what in events:
        if kind == "misplaced":
            problems.append(what)
        elif kind == "question":
            if state in ("question", "box"):
                problems.append(f"exercise {current} has no solution before exercise {what}")
            state, current = "question", what
        elif state == "start":
            problems.append(f"a {kind} before the first exercise label")
        elif kind == "box" and state in ("solution", "check"):
            problems.append(f"an answer box of exercise {current} after its solution")
        elif kind == "check" and state in ("question", "box"):
            problems.append(f"a check of exercise {current} before its solution")
        elif kind in ("box", "solution", "check"):
            state = kind if not (kind == "solution" and state == "check") else "check"
    if state in ("question", "box"):
        problems.append(f"exercise {current} has no solution")
    return problems


def test_exercise_order_checker():
    """The checker of the next test: one order passes, each kind of disorder is named."""
    q, b, s, c = ("question", "1"), ("box", "Answer box"), ("solution", "Solution"), ("check", "Check")
    assert exercise_order_problems([q, b, s, c, ("question", "2"), s]) == []
    assert exercise_order_problems([q, ("question", "2"), b, s, s]) != []  # both questions, then boxes
    assert exercise_order_problems([q, s, b]) != []
    assert exercise_order_problems([q, c, s]) != []
    assert exercise_order_problems([q, b]) != []
    text = ("## Exercises\n\n**1.** Q?\n\nThe answer is 3.\n\n<details>\n<summary>Solution</summary>\n\n"
            "A.\n\n</details>\n")
    events = exercise_events([{"cell_type": "markdown", "source": text, "metadata": {}}])
    assert ("misplaced", "'answer' outside a <details> solution") not in events  # case-sensitive words
    text2 = text.replace("The answer", "Answer:")
    assert any(k == "misplaced" for k, _ in exercise_events([{"cell_type": "markdown", "source": text2,
                                                               "metadata": {}}]))


def is_answer_box_cell(cell: dict) -> bool:
    """A cell that only builds and shows answer boxes: it makes an AnswerBox, is tagged hide-input,
    and its outputs are the boxes themselves (widget views), never printed text or a figure."""
    if cell["cell_type"] != "code" or not ANSWER_BOX.search("".join(cell["source"])):
        return False
    if "hide-input" not in _tags(cell):
        return False
    outputs = cell.get("outputs", [])
    return bool(outputs) and all(
        o["output_type"] in ("display_data", "execute_result")
        and "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        and "AnswerBox(" in "".join(o["data"].get("text/plain", ""))
        for o in outputs
    )


def test_answer_box_cells_are_recognized():
    """The checker of the next test: a box cell passes, a cell that prints beside its box does not."""
    view = {"application/vnd.jupyter.widget-view+json": {"model_id": "x"},
            "text/plain": "AnswerBox(label='Exercise 1', unit=None)"}
    box = {"cell_type": "code", "source": "AnswerBox(n_star)", "metadata": {"tags": ["hide-input"]},
           "outputs": [{"output_type": "execute_result", "data": view}]}
    assert is_answer_box_cell(box)
    printed = {**box, "outputs": box["outputs"] + [{"output_type": "stream", "text": "18432"}]}
    assert not is_answer_box_cell(printed)
    assert not is_answer_box_cell({**box, "metadata": {"tags": []}})


def _after_exercises(cells: list[dict]) -> list[tuple[dict, str]]:
    """(cell, text) for the cells from the `## Exercises` heading on (text: from the heading on)."""
    for k, c in enumerate(cells):
        m = EXERCISES.search("".join(c["source"])) if c["cell_type"] == "markdown" else None
        if m:
            rest = [(d, "".join(d["source"])) for d in cells[k + 1:]]
            return [(c, "".join(c["source"])[m.start():])] + rest
    return []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exercises_hide_their_answers_in_one_order(path):
    """After `## Exercises`, each exercise reads: the question (**1.**), its answer boxes (hide-input
    cells whose output is the box), its solution (an HTML <details> whose summary says Solution, or a
    hide-cell titled 'Solution: ...'), then checks (hide-cell titled 'Check: ...'). Prose says
    Solution/Answer only inside a <details>."""
    cells = _load(path)["cells"]
    assert _after_exercises(cells), f"{path.name} has no '## Exercises' heading"
    events = exercise_events(cells)
    summaries = [w for k, w in events if k == "solution" and not w.startswith("Solution")]
    problems = exercise_order_problems(events) + [f"a <details> summary that is not 'Solution': {w!r}"
                                                  for w in summaries]
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_embedded_widget_code_is_current(path):
    """The widget front end embedded in a notebook (and so in the book) is today's attn_core/static code.

    The static page runs the JavaScript stored in the notebook's widget state, so after a change to
    attn_core/static the widget notebooks must be re-executed (`make notebooks`).
    """
    import importlib

    state = _load(path).get("metadata", {}).get("widgets", {})
    models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for model in models.values():
        if model.get("model_module") == "anywidget":
            # each widget class names its own front end (ledger_widgets.js, answer_box.js)
            module_name, _, class_name = model["state"]["_anywidget_id"].rpartition(".")
            cls = getattr(importlib.import_module(module_name), class_name)
            esm, css = str(cls._esm), str(cls._css)  # anywidget holds the files' current contents
            assert model["state"]["_esm"] == esm, f"{class_name}'s front end changed: make notebooks"
            assert model["state"].get("_css", "") == css
