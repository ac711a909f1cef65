"""Keep what is derived in the chapter notebooks in step with its source (run by `make notebooks`).

Three things in a notebook are written from one source, so that they cannot disagree:

* **The Colab cell.** The first cell installs attn_core when the notebook runs in Colab and does
  nothing anywhere else; tagged ``remove-cell``, the book does not show it. The repository URL and
  branch come from ``_config.yml``, the one place they are written.
* **Collapsed cells.** A code cell tagged ``hide-input`` (code hidden, output shown) or
  ``hide-cell`` (both hidden) starts with ``# @title <label>``. From that line the cell gets the
  label of its toggle in the book (myst-nb's ``mystnb.code_prompt_show``), is collapsed in
  JupyterLab (``jupyter.source_hidden``, and ``outputs_hidden`` for ``hide-cell``) and in Colab
  (``cellView: form``, which shows the title instead of the code).
* **Quoted numbers.** A number in the prose is written followed by an HTML comment naming it,
  ``2.39<!--layer_gib--> GiB``, and a cell computes it with ``attn_core.display.quote(layer_gib=...)``.
  After the notebooks are executed, every such value is rewritten from the cell's output.

Usage: python book/_ext/sync_notebooks.py [--cells] [--check] [NOTEBOOK ...]   (default: every notebook)
  --cells  the Colab cell and the collapsed cells only (before execution: quotes need outputs)
  --check  change nothing; exit 1 and say what is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from attn_core.display import QUOTE_MIME, VALUE  # noqa: E402

CELL_ID = "colab-install"
TITLE = re.compile(r"\A# @title (?P<label>\S.*?)\s*$", re.M)
COLLAPSED = ("hide-input", "hide-cell")
# a quoted value: one token right before <!--name--> (not glued to a longer token on its left)
MARKER = re.compile(r"(?<![\w.,%+\-\u2212])(?P<value>" + VALUE + r")<!--\s*(?P<name>[A-Za-z_]\w*)\s*-->")
# any comment that is only a name: a marker, whether or not a value stands before it
ANY_MARKER = re.compile(r"<!--\s*(?P<name>[A-Za-z_]\w*)\s*-->")


# ----------------------------------------------------------------------------- the Colab cell
def colab_cell_source(config_path: Path = ROOT / "_config.yml") -> str:
    repo = yaml.safe_load(config_path.read_text())["repository"]
    spec = f"attn_core[notebooks] @ git+{repo['url']}@{repo.get('branch', 'main')}"
    return "\n".join([
        "# Colab only: install this course's library (prints nothing; does nothing anywhere else).",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        "    import subprocess",
        "",
        "    subprocess.run(",
        f'        [sys.executable, "-m", "pip", "install", "-q", "{spec}"],',
        "        check=True,",
        "        capture_output=True,",
        "    )",
        "    from google.colab import output",
        "",
        "    output.enable_custom_widget_manager()  # Colab shows anywidgets only with this",
    ])


def _sync_colab(nb, source: str) -> list[str]:
    first = nb.cells[0] if nb.cells else None
    if first is not None and first.get("id") == CELL_ID:
        if first.source == source and first.metadata.get("tags") == ["remove-cell"]:
            return []
        first.source = source
        first.metadata["tags"] = ["remove-cell"]
    else:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["remove-cell"]})
        cell["id"] = CELL_ID
        nb.cells.insert(0, cell)
    return ["the Colab cell"]


# ---------------------------------------------------------------------------- collapsed cells
def collapsed_metadata(cell) -> dict:
    """The metadata keys a code cell's tags and ``# @title`` line imply (empty for a visible cell).

    Raises ValueError for a collapsed cell without a ``# @title`` first line.
    """
    tags = cell.metadata.get("tags", [])
    kind = next((t for t in COLLAPSED if t in tags), None)
    if kind is None:
        return {}
    m = TITLE.match(cell.source)
    if not m:
        raise ValueError(f"a cell tagged {kind} must start with '# @title <label>':\n{cell.source[:200]}")
    label = m.group("label")
    jupyter = {"source_hidden": True}
    if kind == "hide-cell":
        jupyter["outputs_hidden"] = True
    return {"mystnb": {"code_prompt_show": label, "code_prompt_hide": f"Hide: {label}"},
            "jupyter": jupyter, "cellView": "form"}


def _sync_cells(nb) -> list[str]:
    changed = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        want = collapsed_metadata(cell)
        for key in ("mystnb", "jupyter", "cellView"):
            have = cell.metadata.get(key)
            if key in want and have != want[key]:
                cell.metadata[key] = want[key]
                changed.append(f"cell {i} {key}")
            elif key not in want and have is not None:
                del cell.metadata[key]
                changed.append(f"cell {i} {key}")
    return changed


# ----------------------------------------------------------------------------- quoted numbers
def quoted_values(nb) -> dict[str, str]:
    """name -> value of every :func:`attn_core.display.quote` output in the notebook.

    Raises ValueError when one name is quoted twice with different values.
    """
    values: dict[str, str] = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for name, value in out.get("data", {}).get(QUOTE_MIME, {}).items():
                if values.get(name, value) != value:
                    raise ValueError(f"{name!r} is quoted twice: {values[name]!r} and {value!r}")
                values[name] = value
    return values


def quote_problems(text: str, values: dict[str, str]) -> list[str]:
    """What is wrong with the quoted numbers of one markdown text (empty when all hold)."""
    problems = []
    spans = {m.start("name"): m for m in MARKER.finditer(text)}
    for m in ANY_MARKER.finditer(text):
        name = m.group("name")
        q = spans.get(m.start("name"))
        context = text[max(0, m.start() - 40):m.end()].replace("\n", " ")
        if q is None:
            problems.append(f"<!--{name}--> follows no value: ...{context}")
        elif name not in values:
            problems.append(f"<!--{name}--> names no quoted value (attn_core.display.quote): ...{context}")
        elif q.group("value") != values[name]:
            problems.append(f"{name}: the text says {q.group('value')!r}, the cell quotes {values[name]!r}")
    return problems


def rewrite_quotes(text: str, values: dict[str, str]) -> str:
    """The text with every value followed by a marker replaced by the quoted value of that name."""
    def new(m):
        return values.get(m.group("name"), m.group("value")) + m.group(0)[len(m.group("value")):]

    return MARKER.sub(new, text)


def _sync_quotes(nb) -> list[str]:
    values = quoted_values(nb)
    changed = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        new = rewrite_quotes(cell.source, values)
        if new != cell.source:
            cell.source = new
            changed.append(f"cell {i} quotes")
    return changed


def _unused_quotes(nb) -> list[str]:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    used = {m.group("name") for m in ANY_MARKER.finditer(text)}
    return sorted(set(quoted_values(nb)) - used)


# ------------------------------------------------------------------------------------- driver
def sync(path: Path, *, quotes: bool = True, write: bool = True) -> list[str]:
    """Bring one notebook in step; return what changed (or, with write=False, what would)."""
    nb = nbformat.read(path, as_version=4)
    changed = _sync_colab(nb, colab_cell_source()) + _sync_cells(nb)
    if quotes:
        changed += _sync_quotes(nb)
    if changed and write:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str]) -> int:
    check, quotes = "--check" in argv, "--cells" not in argv
    paths = [Path(a).resolve() for a in argv if not a.startswith("--")]
    stale = []
    for path in paths or sorted((ROOT / "notebooks").glob("*.ipynb")):
        changed = sync(path, quotes=quotes, write=not check)
        if changed and check:
            stale.append(f"{path.name}: {', '.join(changed)}")
        elif changed:
            print(f"{path.name}: updated {', '.join(changed)}")
        if quotes:
            nb = nbformat.read(path, as_version=4)
            for name in _unused_quotes(nb):
                print(f"{path.name}: {name!r} is quoted but the text never shows it")
    if stale:
        print("out of date (run `make notebooks`):\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
