"""The widgets in JupyterLab with a live kernel: sliders and answer boxes, and Python sees both.

A JupyterLab server runs on 127.0.0.1 over scratch notebooks that each show one slider widget
(MemoryLedgerWidget, FitWidget) and then print its Python-side state. Chromium (Debian's, through
Playwright) runs the notebook, moves the N slider with the keyboard, re-runs the print cell, and
checks that the kernel got the new N and that the total the page shows equals the one Python
computed. A config.json pasted into the "does it fit" widget reaches the kernel too, which computes the
peak the page shows.

Chapters as committed (READ_CHAPTERS) are opened as a reader opens them: the markdown must show no
raw MyST (roles, directives: JupyterLab renders CommonMark), its quoted numbers, closed solutions,
and collapsed cells labelled by their titles.

The same server opens a copy of one chapter (ANSWER_CHAPTER, outputs cleared, one cell appended
that reports the boxes' Python-side grades), runs it, types a wrong and then the right answer into
every answer box, submitting with Enter, checks each verdict against the grader's for the same text,
and re-runs the last cell: the kernel must have received every answer and the page's verdict of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from test_book_pages import CHROMIUM, LAUNCH_ARGS, ROOT, SHOTS, _require_browser, _wrong_text

# the slider widgets tested live: the memory ledger (chapter 5) and "does it fit?" (chapter 10)
SLIDER_WIDGETS = ("MemoryLedgerWidget", "FitWidget")


def _cells(cls: str) -> list[str]:
    return [f"from attn_core.widgets import {cls}\nw = {cls}()\nw",
            'print(f"N={w.N} total={int(w.values[\'total_bytes\'])}")']


# the "does it fit" widget with a config.json pasted into the page: the kernel reads the same model
PASTE_CELLS = ["from attn_core.widgets import FitWidget\nw = FitWidget()\nw",
               "v = w.values\n"
               "print(f\"model={w.model} tp={w.tp} params={v['params']} peak={int(v['total_bytes'])}\")"]
ANSWER_CHAPTER = "04_gqa_kv_cache"  # quick to run, with boxes of counts and of bytes
# chapters opened as committed: the first one, the one the course issue quoted, the training step
READ_CHAPTERS = ("00_attention_from_scratch", "05_memory_ledger", "10_training_step")
RAW_MYST = re.compile(r"\{(glue|doc|cite|ref|numref|eq|math|term)(:[a-z]+)?\}`"  # a role
                      r"|^[ \t]*(:::+|```+)[ \t]*\{"  # a directive
                      r"|^\(\S+\)=$", re.M)  # a target
REPORT = (
    "import gc\n"
    "from attn_core.widgets import AnswerBox\n"
    "graded = [b.verdict.get('status') for b in gc.get_objects() if isinstance(b, AnswerBox)]\n"
    "print(f\"kernel graded {graded.count('right')} right of {len(graded)} boxes\")"
)


def _chapter_copy(root: Path) -> list[dict]:
    """Write the chapter, outputs and widget state cleared, with REPORT appended; return its box specs."""
    nb = nbformat.read(ROOT / "notebooks" / f"{ANSWER_CHAPTER}.ipynb", as_version=4)
    widgets = nb.metadata.get("widgets", {})
    state = widgets.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    specs = [m["state"]["spec"] for m in state.values()
             if m["state"].get("_anywidget_id", "").endswith(".AnswerBox")]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    nbformat.write(nb, root / "chapter.ipynb")
    return specs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _require_browser()
    root = tmp_path_factory.mktemp("lab")
    for cls in SLIDER_WIDGETS:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in _cells(cls)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, root / f"{cls}.ipynb")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in PASTE_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "FitPaste.ipynb")
    _chapter_copy(root)
    for name in READ_CHAPTERS:
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", root / f"{name}.ipynb")
    # render every cell at once (JupyterLab 4 renders only the cells in view by default)
    settings = root / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port = _free_port()
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    proc = subprocess.Popen(
        [jupyter, "lab", "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None", "--ServerApp.open_browser=False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(root / "settings")},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/lab", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within 60 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _accept_kernel_dialog(page):
    """A fresh JupyterLab may ask which kernel to start: take the proposed one (this venv's python3)."""
    try:
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=10_000)
    except Exception:  # no dialog: the notebook's kernelspec was started directly
        pass


def _run_all(page):
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


@pytest.mark.parametrize("cls", SLIDER_WIDGETS)
def test_slider_moves_in_jupyterlab_and_kernel_follows(lab, cls):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(lab) else r.abort())
        try:
            page.goto(f"{lab}/lab/tree/{cls}.ipynb?reset")  # ?reset: no saved workspace layout
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            _accept_kernel_dialog(page)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            _run_all(page)
            total = page.wait_for_selector(".jp-OutputArea [data-key='total_bytes']", timeout=90_000)
            page.wait_for_selector("text=/N=4096 total=\\d+/", timeout=60_000)
            shown_before = total.get_attribute("data-value")

            widget = total.evaluate_handle("e => e.closest('.jp-OutputArea-output')")
            slider = widget.query_selector("input[type=range]")  # the first slider is N
            slider.focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                "([e, v]) => e.getAttribute('data-value') !== v", arg=[total, shown_before], timeout=10_000
            )
            shown_after = int(float(total.get_attribute("data-value")))

            page.locator(".jp-Cell").nth(1).click()  # select the print cell and run it again
            page.keyboard.press("Shift+Enter")
            out = page.wait_for_selector(f"text=/N=(?!4096 )\\d+ total={shown_after}\\b/", timeout=30_000)
            n_after = int(re.search(r"N=(\d+)", out.inner_text()).group(1))
            assert n_after > 4096  # the kernel saw the slider move, and computed what the page shows
        except Exception:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"jupyterlab-failure-{cls}.png"))  # what the test saw
            raise
        finally:
            browser.close()


def test_pasted_config_reaches_the_kernel(lab):
    """A config.json pasted into the "does it fit" widget: the kernel gets it (the model becomes the
    config's, tp where it divides the new heads) and computes the peak the page shows."""
    from playwright.sync_api import sync_playwright
    from test_models import CASES

    config, count = CASES["gpt2-xl"]  # 25 heads: a TP degree of 2 cannot stay
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(lab) else r.abort())
        try:
            page.goto(f"{lab}/lab/tree/FitPaste.ipynb?reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            _accept_kernel_dialog(page)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            _run_all(page)
            page.wait_for_selector("text=/model=Llama 3 8B tp=1 /", timeout=90_000)
            widget = page.wait_for_selector(".jp-OutputArea .al-fit", timeout=30_000)
            widget.query_selector("details.al-more > summary").click()
            widget.query_selector("select[aria-label='TP degree']").select_option("2")
            widget.query_selector("details.al-paste > summary").click()
            widget.query_selector("textarea[aria-label='config.json']").fill(json.dumps(config))
            total = widget.query_selector("[data-key='total_bytes']")
            page.wait_for_function("e => e.closest('.al-fit').querySelector(\"[data-key='params']\")"
                                   f".getAttribute('data-value') === '{count}'", arg=total, timeout=10_000)
            shown = int(float(total.get_attribute("data-value")))
            page.locator(".jp-Cell").nth(1).click()
            page.keyboard.press("Shift+Enter")
            page.wait_for_selector(f"text=/model=config.json tp=1 params={count} peak={shown}\\b/",
                                   timeout=30_000)
        except Exception:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "jupyterlab-paste-failure.png"))
            raise
        finally:
            browser.close()


def test_answer_boxes_in_jupyterlab_and_kernel_grades_them(lab, tmp_path):
    """A chapter's answer boxes with a live kernel: typed, submitted with Enter, graded in the page,
    and every answer reaches the kernel with the page's grade (the box's `answer` and `verdict`)."""
    from js_grader import grade  # the page's grader, run in Node.js
    from playwright.sync_api import sync_playwright

    specs = {spec["label"]: spec for spec in _chapter_copy(tmp_path)}
    assert specs, f"{ANSWER_CHAPTER} has no answer box"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(lab) else r.abort())
        try:
            page.goto(f"{lab}/lab/tree/chapter.ipynb?reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            _accept_kernel_dialog(page)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            _run_all(page)
            page.wait_for_selector(f"text=/kernel graded 0 right of {len(specs)} boxes/", timeout=240_000)
            boxes = page.locator(".jp-OutputArea .exercise-check")
            assert boxes.count() == len(specs)
            for k in range(boxes.count()):
                box = boxes.nth(k)
                box.scroll_into_view_if_needed()
                label = box.locator("label").text_content().strip()
                spec = specs[label]
                field = box.get_by_label(label, exact=True)
                status = box.get_by_role("status")
                for text in (_wrong_text(spec), repr(float(spec["expected"]))):
                    field.fill("")
                    field.focus()
                    page.keyboard.type(text)
                    page.keyboard.press("Enter")
                    want = grade(spec, text)
                    assert status.get_attribute("data-verdict") == want["status"], (label, text)
                    assert want["message"] in status.inner_text(), (label, text)
            page.locator(".jp-Cell").last.click()  # run the report cell again
            page.keyboard.press("Shift+Enter")
            n = len(specs)
            page.wait_for_selector(f"text=/kernel graded {n} right of {n} boxes/", timeout=30_000)
        except Exception:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "jupyterlab-answers-failure.png"))
            raise
        finally:
            browser.close()


def test_chapters_read_in_jupyterlab_as_in_the_book(lab):
    """Chapters as committed, opened in JupyterLab: no raw MyST role or directive in the rendered
    markdown, the quoted numbers there as text, solutions closed (<details>), and every collapsed cell
    shows its title in the placeholder of its hidden code."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(lab) else r.abort())
        try:
            for name in READ_CHAPTERS:
                nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
                n_md = sum(c.cell_type == "markdown" for c in nb.cells)
                titles = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code"
                          and c.metadata.get("jupyter", {}).get("source_hidden")]
                page.goto(f"{lab}/lab/tree/{name}.ipynb?reset")
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
                _accept_kernel_dialog(page)
                page.wait_for_function(
                    "n => document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown').length >= n",
                    arg=n_md, timeout=60_000)
                opened = page.eval_on_selector_all(".jp-RenderedMarkdown details",
                                                   "ds => ds.filter(d => d.open).length")
                assert opened == 0, f"{name}: a solution is open before a click"
                # a reader clicks every solution open; closed <details> keep their text out of innerText
                page.eval_on_selector_all(".jp-RenderedMarkdown details",
                                          "ds => ds.forEach(d => d.open = true)")
                text = page.eval_on_selector_all(
                    ".jp-MarkdownCell .jp-RenderedMarkdown", "els => els.map(e => e.innerText).join('\\n')")
                raw = RAW_MYST.findall(text)
                assert not raw and "{glue" not in text and "<!--" not in text, (name, raw[:5])
                quoted = re.findall(r"([\w.,%+-]+)<!--\s*\w+\s*-->", "\n".join(
                    c.source for c in nb.cells if c.cell_type == "markdown"))
                missing = [q for q in quoted if q not in text]
                assert quoted and not missing, (name, missing[:5])
                shown = page.eval_on_selector_all(".jp-InputPlaceholder",
                                                  "els => els.map(e => e.innerText.trim())")
                assert len(shown) == len(titles), (name, len(shown), len(titles))
                assert all(t in s for t, s in zip(titles, shown)), (name, shown[:3])
        except Exception:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "jupyterlab-reading-failure.png"))
            raise
        finally:
            browser.close()

