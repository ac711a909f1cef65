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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_title_and_exercises(path):
    """One H1 title, and an Exercises section whose solutions are hidden code cells."""
    cells = _load(path)["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    titles = [line for text in markdown for line in text.splitlines() if line.startswith("# ")]
    assert len(titles) == 1, titles
    if path.stem[:2].isdigit() and int(path.stem[:2]) < 90:
        assert any(text.startswith("## Exercises") for text in markdown), f"{path.name} has no exercises"
        hidden = [
            c for c in cells
            if c["cell_type"] == "code" and "hide-input" in c["metadata"].get("tags", [])
            and "".join(c["source"]).lstrip().startswith("# Solution")
        ]
        assert hidden, f"{path.name}: solutions must be code cells tagged hide-input starting '# Solution'"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_embedded_widget_code_is_current(path):
    """The widget front end embedded in a notebook (and so in the book) is today's attn_core/static code.

    The static page runs the JavaScript stored in the notebook's widget state, so after a change to
    attn_core/static the widget notebooks must be re-executed (`make notebooks`).
    """
    state = _load(path).get("metadata", {}).get("widgets", {})
    models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    static = ROOT / "attn_core" / "static"
    for model in models.values():
        if model.get("model_module") == "anywidget":
            assert model["state"]["_esm"] == (static / "ledger_widgets.js").read_text(), "make notebooks"
            assert model["state"].get("_css", "") == (static / "ledger_widgets.css").read_text()
