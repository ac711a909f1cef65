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
from sync_notebooks import CELL_ID, colab_cell_source  # noqa: E402

# a cell may skip nbval's comparison only if it times something (or shows a bench run's times) or a widget
IGNORE_OK = re.compile(r"time_fn|perf_counter|timeit|measure_time|bench\[|Widget\(|Explorer\(")


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
HIDDEN_CELL = {"hide-cell", "remove-cell"}
SOLUTION_WORD = re.compile(r"\b(Solutions?|Answers?)\b")
DIRECTIVE = re.compile(r"^\s*(?P<fence>:{3,}|`{3,})\s*(?P<name>\{[^}]*\})?")


def _after_exercises(cells: list[dict]) -> list[tuple[dict, str]]:
    """(cell, text) for the cells from the `## Exercises` heading on (text: from the heading on)."""
    for k, c in enumerate(cells):
        m = EXERCISES.search("".join(c["source"])) if c["cell_type"] == "markdown" else None
        if m:
            rest = [(d, "".join(d["source"])) for d in cells[k + 1:]]
            return [(c, "".join(c["source"])[m.start():])] + rest
    return []


def words_outside_dropdowns(text: str) -> list[str]:
    """Lines of MyST markdown that say Solution/Answer outside a dropdown admonition.

    A dropdown admonition is ``:::{admonition} Title`` (or the backtick form) whose option lines
    include ``:class: dropdown``; its title and body may say anything.
    """
    lines = text.splitlines()
    stack: list[tuple[str, bool]] = []  # open directives: (fence, is a dropdown)
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = DIRECTIVE.match(line)
        if m and m.group("name"):
            options = []
            j = i + 1
            while j < len(lines) and re.match(r"^\s*:[\w-]+:", lines[j]):
                options.append(lines[j])
                j += 1
            dropdown = m.group("name") == "{admonition}" and any(
                re.match(r"^\s*:class:.*\bdropdown\b", o) for o in options)
            stack.append((m.group("fence"), dropdown or any(d for _, d in stack)))
            if not stack[-1][1] and SOLUTION_WORD.search(line):
                found.append(line)
            i = j
            continue
        if m and stack and line.strip() == m.group("fence") and m.group("fence")[0] == stack[-1][0][0]:
            stack.pop()
        elif not (stack and stack[-1][1]) and SOLUTION_WORD.search(line):
            found.append(line)
        i += 1
    return found


def test_solution_words_found_outside_dropdowns_only():
    """The checker of the next test: a solution in a dropdown passes, one under the question fails."""
    hidden = ":::{admonition} Solution\n:class: dropdown\nThe answer is 42.\n:::\n"
    assert words_outside_dropdowns("**1.** What is it?\n\n" + hidden) == []
    assert words_outside_dropdowns("````{admonition} Answer\n:class: dropdown\nAnswer: 42\n````") == []
    assert words_outside_dropdowns(":::{admonition} Solution\nAnswer: 42.\n:::") != []
    assert words_outside_dropdowns(hidden + "**Solution.** It is 42.") == ["**Solution.** It is 42."]
    assert words_outside_dropdowns(":::{note}\nAnswer: 42\n:::") == ["Answer: 42"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_title_and_exercises(path):
    """One H1 title; a chapter ends with an Exercises section."""
    cells = _load(path)["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    titles = [line for text in markdown for line in text.splitlines() if line.startswith("# ")]
    assert len(titles) == 1, titles
    if _is_chapter(path):
        assert _after_exercises(cells), f"{path.name} has no '## Exercises' heading"


ANSWER_BOX = re.compile(r"\bAnswerBox\(")


def is_answer_box_cell(cell: dict) -> bool:
    """A cell that only builds and shows answer boxes: it makes an AnswerBox, is tagged hide-input,
    and its outputs are the boxes themselves (widget views), never printed text or a figure."""
    if cell["cell_type"] != "code" or not ANSWER_BOX.search("".join(cell["source"])):
        return False
    if "hide-input" not in cell["metadata"].get("tags", []):
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exercises_hide_their_answers(path):
    """After `## Exercises`, every code cell is tagged hide-cell (input and output hidden until the
    reader opens it), except answer-box cells (hide-input: the box shows, the code that computes its
    answer does not; they print nothing), and prose says Solution/Answer only inside a dropdown
    admonition."""
    after = _after_exercises(_load(path)["cells"])
    assert after, f"{path.name} has no '## Exercises' heading"
    shown = [
        "".join(c["source"])[:120] for c, text in after
        if c["cell_type"] == "code" and text.strip()
        and not HIDDEN_CELL & set(c["metadata"].get("tags", []))
        and not is_answer_box_cell(c)
    ]
    assert not shown, (f"{path.name}: code cells after '## Exercises' must be tagged hide-cell "
                       "(or be answer-box cells tagged hide-input):\n"
                       + "\n---\n".join(shown))
    told = [line for c, text in after if c["cell_type"] == "markdown"
            for line in words_outside_dropdowns(text)]
    assert not told, (f"{path.name}: a solution outside a ':::{{admonition}} Solution' "
                      f"with ':class: dropdown':\n" + "\n".join(told))
    hidden = [c for c, text in after
              if c["cell_type"] == "code" and "hide-cell" in c["metadata"].get("tags", [])]
    dropdowns = [text for c, text in after if c["cell_type"] == "markdown" and ":class: dropdown" in text]
    assert hidden or dropdowns, f"{path.name}: the exercises have no hidden solution"


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
