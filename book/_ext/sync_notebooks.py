"""Keep the first cell of every chapter notebook in sync with _config.yml (run by `make notebooks`).

The first cell installs attn_core when the notebook runs in Colab and does nothing anywhere else, so
nbval and JupyterLab run it as a no-op. It is tagged ``remove-cell``: the book does not show it. The
repository URL and branch come from ``_config.yml``, the one place they are written.

Usage: python book/_ext/sync_notebooks.py [--check]   (--check: exit 1 if a notebook is out of date)
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
CELL_ID = "colab-install"


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


def sync(path: Path, source: str) -> bool:
    """Insert or update the Colab cell of one notebook; True if the file changed."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0] if nb.cells else None
    if first is not None and first.get("id") == CELL_ID:
        if first.source == source and first.metadata.get("tags") == ["remove-cell"]:
            return False
        first.source = source
        first.metadata["tags"] = ["remove-cell"]
    else:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["remove-cell"]})
        cell["id"] = CELL_ID
        nb.cells.insert(0, cell)
    nbformat.write(nb, path)
    return True


def main(argv: list[str]) -> int:
    source = colab_cell_source()
    stale = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if "--check" in argv:
            nb = nbformat.read(path, as_version=4)
            if not nb.cells or nb.cells[0].get("id") != CELL_ID or nb.cells[0].source != source:
                stale.append(path.name)
        elif sync(path, source):
            print(f"updated the Colab cell of {path.name}")
    if stale:
        print("Colab cell out of date (run `make notebooks`):", " ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
