"""Browser tests of the built book: every page offline, math rendered, sliders live with no kernel.

Run by `make test` after the book is built (`make browser` alone). They drive Debian's Chromium
(/usr/bin/chromium) through Playwright; no browser is ever downloaded. Without Chromium they skip
with a message, except under CI=true, where a missing browser fails.

Each page is served from _build/html on 127.0.0.1. A request to any other host is aborted and fails
the test, so the book must work with no network. On widget pages each slider is moved with the
keyboard; the numbers the page then shows must change and equal what attn_core computes in Python
for the same inputs. A screenshot of every widget page is saved under _build/screenshots/.

Exercise solutions (hide-cell code, HTML <details>) must be closed until clicked. Every page is read
at a desk's width and at a 420 px phone's: nothing wider than the screen, no number in bold, every
collapsed cell labelled. Every answer
box of every chapter is graded in the page: a wrong answer, its slips and the right one are typed and
submitted with Enter, and each must get its verdict. At several
widths a page shows one search box, the book's title at most once, and no empty header band (the
look of sphinx-book-theme 1.3.0 with pydata-sphinx-theme 0.17.1; constraints.txt pins 1.2.0/0.16.1).
Set BOOK_HTML to check a build elsewhere than _build/html.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import json
import math
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the built site: _build/html, or the folder named by BOOK_HTML (to check another build)
HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# the anywidgets with sliders: every attn_core widget but the answer boxes
SLIDER_WIDGET = re.compile(r'"_anywidget_id":\s*"attn_core\.widgets\.(?!answer\.)')
ANSWER_WIDGET = re.compile(r'"_anywidget_id":\s*"attn_core\.widgets\.answer\.AnswerBox"')
LEDGER = ".static-anywidget[data-rendered=true]:has(.al-widget)"  # a rendered slider widget


def _pages() -> list[Path]:
    if not HTML.is_dir():
        return []
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


def _require_browser():
    if CHROMIUM.exists():
        return
    message = f"Chromium not found at {CHROMIUM}: install Debian's `chromium` to run the browser tests"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path):
    """Serve a folder on 127.0.0.1 for the duration of a fixture: yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def widget_site(root: Path, pages: dict) -> Path:
    """A folder of small static pages ({name: widgets} makes name.html), each holding its widgets'
    saved state and the book's loader (book/_extra/widgets/static-anywidget.js), as a built chapter
    holds them: the widgets' present code, without building the book."""
    shutil.copy(ROOT / "book" / "_extra" / "widgets" / "static-anywidget.js", root / "loader.js")
    for name, widgets in pages.items():
        (root / f"{name}.html").write_text(_widget_page(widgets))
    return root


def _widget_page(widgets) -> str:
    states, views = {}, []
    for i, w in enumerate(widgets):
        state = json.loads(json.dumps(w.get_state(), default=str))
        states[f"m{i}"] = {"model_module": "anywidget", "model_name": "AnyModel", "state": state}
        view = json.dumps({"model_id": f"m{i}", "version_major": 2})
        views.append(f'<div class="cell"><script type="{WIDGET_VIEW}">{view}</script></div>')
    manager = json.dumps({"version_major": 2, "version_minor": 0, "state": states})
    return ("<!doctype html><html><head><meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<style>body{font-family:sans-serif;margin:8px}</style></head><body>" + "".join(views)
            + f'<script type="application/vnd.jupyter.widget-state+json">{manager}</script>'
            + "<script src='loader.js'></script></body></html>")


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make book` (or `make test`, which builds it first)")
    yield from serve(HTML)


class PageWatch:
    """A page whose console errors and off-site requests are recorded (off-site ones are aborted)."""

    def __init__(self, browser, base: str):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.offsite: list[str] = []
        host = urlparse(base).netloc
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def route(r):
            if urlparse(r.request.url).netloc == host:
                r.continue_()
            else:
                self.offsite.append(r.request.url)
                r.abort()

        self.page.route("**/*", route)



@pytest.fixture(scope="module")
def opened(browser, server):
    """open(page): the page as a PageWatch, loaded once for all the tests that read it. They run one
    after another on one worker (each page's parameters carry an xdist group, and conftest.py keeps
    a file's order), in the order of this file: the first visit's checks, the launch links, the
    exercises, the answer boxes, then the sliders, which change what the widgets show."""
    held: dict = {}

    def open_(page: Path) -> PageWatch:
        url = f"{server}/{_rel(page)}"
        if held.get("url") != url or held["watch"].page.is_closed():
            if "watch" in held:
                held["watch"].page.close()
            watch = PageWatch(browser, server)
            watch.page.goto(url, wait_until="load")
            held.update(url=url, watch=watch)
        return held["watch"]

    yield open_
    if "watch" in held:
        held["watch"].page.close()


def _each(pages: list[Path]) -> list:
    """Parameters for the tests that share a loaded page: one xdist group a page."""
    return [pytest.param(p, id=_rel(p), marks=pytest.mark.xdist_group(f"page {_rel(p)}")) for p in pages]

# [text before each <!--name--> comment in the article, its font weight, its paragraph's weight]
QUOTED_WEIGHTS = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.querySelector("article") || document.body,
                                           NodeFilter.SHOW_COMMENT);
  for (let c = walker.nextNode(); c; c = walker.nextNode()) {
    if (!/^\\s*[A-Za-z_]\\w*\\s*$/.test(c.data)) continue;
    const before = c.previousSibling;
    if (!before || before.nodeType !== Node.TEXT_NODE) continue;
    const el = before.parentElement;
    const block = el.closest("p, li, td, th, dd, summary") || el;
    out.push([before.data.slice(-12), Number(getComputedStyle(el).fontWeight),
              Number(getComputedStyle(block).fontWeight)]);
  }
  return out;
}"""


def _rel(page: Path) -> str:
    return page.relative_to(HTML).as_posix()


@pytest.mark.parametrize("page", _each(_pages()))
def test_page_offline_clean_and_math_rendered(page, opened):
    """No console error, no request leaving 127.0.0.1, and rendered math wherever the page has math.

    The same visit checks how the page reads: numbers in the prose in its own weight (no bold
    but an exercise label), every collapsed cell's toggle labelled by its title (never the generic
    "Show code cell ..."), and, at the width of a 420 px phone, nothing wider than the screen (wide
    tables, equations and outputs scroll inside their own box).
    """
    w = opened(page)  # the page's first visit: this test comes first
    html = page.read_text(encoding="utf-8")
    try:
        if 'class="math' in html:
            w.page.wait_for_selector("mjx-container", state="attached", timeout=15_000)
        if WIDGET_VIEW in html:
            w.page.wait_for_selector(".static-anywidget[data-rendered=true]", timeout=15_000)
        w.page.wait_for_load_state("networkidle")
        assert w.offsite == [], f"requests left the site: {w.offsite}"
        assert w.errors == [], f"console errors: {w.errors}"
        # a number the prose quotes is the text right before its <!--name--> comment: it must be set
        # in the weight of the text around it, never bold
        quoted = w.page.evaluate(QUOTED_WEIGHTS)
        bold = [q for q in quoted if q[1] >= 600 or q[1] != q[2]]
        assert bold == [], f"quoted numbers not in the prose's weight (text, weight, paragraph's): {bold[:5]}"
        labels = w.page.eval_on_selector_all(
            "div.cell details.hide > summary", "els => els.map(e => e.innerText.trim())")
        generic = [t for t in labels if not t or t.startswith(("Show code cell", "Hide code cell"))]
        assert generic == [], f"a collapsed cell without its label: {generic[:3]}"
        w.page.set_viewport_size({"width": 420, "height": 900})
        w.page.wait_for_timeout(100)
        wide = w.page.evaluate("document.documentElement.scrollWidth")
        culprits = [] if wide <= 420 else w.page.evaluate(
            "() => [...document.querySelectorAll('article *')]"
            ".filter(e => e.getBoundingClientRect().right > 421)"
            ".slice(0, 5).map(e => e.tagName + '.' + e.className)")
        assert wide <= 420, f"the page is {wide} px wide on a 420 px phone: {culprits}"
    finally:
        w.page.set_viewport_size({"width": 1280, "height": 900})  # back at a desk for the next test


def test_every_chapter_page_was_checked():
    """Guard: the parametrized test above really ran over the chapters (the book is built)."""
    names = {p.name for p in _pages()}
    assert "index.html" in names and any(n.startswith("01_") for n in names), sorted(names)


# ----------------------------------------------------------------------------- widgets
def _widget_pages() -> list[Path]:
    """Pages with a slider widget (the ledger widgets; answer boxes have no sliders)."""
    return [p for p in _pages() if SLIDER_WIDGET.search(p.read_text(encoding="utf-8"))]


def _python_values(anywidget_id: str, state: dict) -> dict:
    """What attn_core computes for this widget class and trait values (the kernel-side `values`)."""
    module_name, _, class_name = anywidget_id.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    synced = cls.class_trait_names(sync=True)
    traits = {k: v for k, v in state.items() if k in synced and not k.startswith("_")}
    return cls.compute_values(**traits)


def _shown_values(handle) -> dict[str, float]:
    return handle.evaluate(
        "el => Object.fromEntries([...el.querySelectorAll('[data-key][data-value]')]"
        ".map(e => [e.dataset.key, Number(e.dataset.value)]))"
    )


def _nudge(page, slider) -> None:
    """Move a slider one step with the keyboard, as a reader would: right, or left if it is at its max."""
    slider.focus()
    at_max = slider.evaluate("s => Number(s.value) >= Number(s.max)")
    page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")


def _assert_matches_python(handle, page) -> dict[str, float]:
    model_id = handle.get_attribute("data-model-id")
    state = page.evaluate("id => window.staticWidgetModels[id]._state", model_id)
    shown = _shown_values(handle)
    assert shown, "the widget shows no value with data-key / data-value"
    expected = _python_values(state["_anywidget_id"], state)
    for key, value in shown.items():
        assert key in expected, f"{key} is shown but not computed in Python"
        assert math.isclose(value, expected[key], rel_tol=1e-9, abs_tol=1e-9), (key, value, expected[key])
    return shown


def _parallel_controls(handle, page) -> None:
    """On a "does it fit" widget (its folded settings opened): the largest TP degree, then sequence
    parallelism, then another CP degree each change the values shown, which stay equal to Python's."""
    tp = handle.query_selector("select[aria-label='TP degree']")
    if tp is None:
        return
    more = handle.query_selector("details.al-more")  # the folded settings, where the degrees are
    if more is not None and more.get_attribute("open") is None:
        more.query_selector("summary").click()
    cp = handle.query_selector("select[aria-label='CP degree']")
    tp_max = tp.evaluate("s => [...s.options].map(o => o.value).pop()")
    cp_other = cp.evaluate("s => [...s.options].map(o => o.value).find(v => v !== s.value)")
    for name, act in (("TP degree", lambda: tp.select_option(tp_max)),
                      ("sequence parallel", lambda: handle.query_selector(
                          "input[aria-label^='sequence parallel']").click()),
                      ("CP degree", lambda: cp.select_option(cp_other))):
        before = _shown_values(handle)
        if name == "TP degree" and tp.evaluate("s => s.value") == tp_max:
            continue  # already at the largest degree
        act()
        page.wait_for_timeout(50)
        after = _assert_matches_python(handle, page)
        assert after != before, f"{name} changed nothing"


# ----------------------------------------------------------------------------- launch buttons
def _chapter_pages() -> list[Path]:
    return [p for p in _pages() if p.parent.name == "notebooks"]


@pytest.mark.parametrize("page", _each(_chapter_pages()))
def test_chapter_launch_and_download_buttons(page, opened, server):
    """Chapter pages link to Colab and Binder (JupyterLab) on branch main, and serve their .ipynb locally."""
    import yaml

    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    slug = urlparse(repo["url"]).path.strip("/")
    w = opened(page)
    hrefs = w.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    nb = f"notebooks/{page.stem}.ipynb"
    assert any(h.startswith("https://colab.research.google.com/github/") and f"{slug}/blob/main/{nb}" in h
               for h in hrefs), "no Colab launch link"
    assert any("mybinder.org" in h and f"{slug}/main" in h and "urlpath=lab" in h for h in hrefs), \
        "no Binder (JupyterLab) launch link"
    download = next((h for h in hrefs if h.endswith(f"_sources/{nb}")), None)
    assert download, "no download-.ipynb link"
    response = w.page.request.get(f"{server}/{(Path(_rel(page)).parent / download).as_posix()}")
    assert response.ok and response.json()["nbformat"] == 4


# ----------------------------------------------------------------------------- opened from disk
@pytest.mark.parametrize("page", _widget_pages(), ids=_rel)
def test_widget_page_opened_from_disk(page, browser):
    """Opened as a file (no server, no network): math renders and a slider still updates the numbers."""
    w = PageWatch(browser, "file://")
    try:
        w.page.goto(page.as_uri(), wait_until="load")
        w.page.wait_for_selector("mjx-container", state="attached", timeout=15_000)
        handle = w.page.wait_for_selector(LEDGER, timeout=15_000)
        before = _shown_values(handle)
        slider = handle.query_selector("input[type=range]")
        _nudge(w.page, slider)
        assert _assert_matches_python(handle, w.page) != before
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


# ----------------------------------------------------------------------------- exercises
def _exercise_pages() -> list[Path]:
    return [p for p in _chapter_pages() if p.stem[:2].isdigit() and int(p.stem[:2]) < 90]


def _visible(locator) -> list[bool]:
    return [locator.nth(k).is_visible() for k in range(locator.count())]


@pytest.mark.parametrize("page", _each(_exercise_pages()))
def test_exercise_solutions_hidden_until_clicked(page, opened):
    """Under Exercises, solution code (hide-cell: input and output) and <details> solutions are
    closed when the page opens, and open with one click."""
    w = opened(page)
    w.page.wait_for_load_state("networkidle")
    if WIDGET_VIEW in page.read_text(encoding="utf-8"):
        _wait_widgets_rendered(w.page)
    section = w.page.locator("section#exercises")
    assert section.count() == 1, "no Exercises section"
    cells = section.locator("div.cell")
    for k in range(cells.count()):
        cell = cells.nth(k)
        classes = cell.get_attribute("class").split()
        if "tag_hide-input" in classes and cell.locator(".exercise-check").count():
            # an answer box: the box shows, the code that computes its answer does not
            assert not any(_visible(cell.locator(".cell_input"))), "an answer box's code is visible"
            assert all(_visible(cell.locator(".exercise-check"))), "an answer box is hidden"
            continue
        assert "tag_hide-cell" in classes, f"a code cell under Exercises is not hidden: {classes}"
    toggles = section.locator("div.cell.tag_hide-cell")
    dropdowns = section.locator("details:not(.hide)")
    assert toggles.count() + dropdowns.count() > 0, "the exercises have no hidden solution"
    for k in range(toggles.count()):
        cell = toggles.nth(k)
        body = cell.locator(".cell_input, .cell_output")
        assert body.count() > 0 and not any(_visible(body)), "solution code visible before a click"
        cell.locator("summary").first.click()
        assert all(_visible(cell.locator(".cell_input"))), "solution code not shown after a click"
        outputs = cell.locator(".cell_output")
        for j in range(outputs.count()):
            if outputs.nth(j).inner_text().strip():
                assert outputs.nth(j).is_visible(), "solution output not shown after a click"
    for k in range(dropdowns.count()):
        box = dropdowns.nth(k)
        body = box.locator(":scope > :not(summary)")
        assert box.get_attribute("open") is None, "a solution is open before a click"
        assert body.count() > 0 and not any(_visible(body)), "a solution visible before a click"
        box.locator(":scope > summary").click()
        assert any(_visible(body)), "a solution not shown after a click"
    assert w.errors == [], w.errors


# ----------------------------------------------------------------------------- answer boxes
ALL_RENDERED = f"""() => !document.querySelector('script[type="{WIDGET_VIEW}"]')
  && [...document.querySelectorAll('.static-anywidget')].every(e => e.dataset.rendered === 'true')"""


def _wait_widgets_rendered(page) -> None:
    page.wait_for_function(ALL_RENDERED, timeout=15_000)


def _answer_pages() -> list[Path]:
    return [p for p in _exercise_pages() if ANSWER_WIDGET.search(p.read_text(encoding="utf-8"))]


def _wrong_text(spec: dict) -> str:
    """A typed value the grader finds plainly wrong for this box (no slip, not close)."""
    from js_grader import grade  # the page's grader, run in Node.js

    e = spec["expected"]
    for value in (3 * e + 7, 1e-3 * e + 0.123, e + 1e6 + 7, -e - 5):
        if grade(spec, repr(float(value)))["status"] == "wrong":
            return repr(float(value))
    raise AssertionError(f"no wrong answer found for {spec['label']!r}")


def _submit(page, field, text: str) -> None:
    """Type an answer as a reader would, and submit it with Enter."""
    field.fill("")
    field.focus()
    page.keyboard.type(text)
    page.keyboard.press("Enter")


@pytest.mark.parametrize("page", _each(_answer_pages()))
def test_answer_boxes_grade_in_the_page(page, opened):
    """Every answer box of a chapter, offline and with no kernel: the input is found by its label,
    a wrong answer, each of the box's slips and then the right answer are typed and submitted with
    Enter, and the verdict (role="status") is the one the rules give (wrong, each slip, right) and the
    grader's message for the same text, run outside the page (tests/js_grader.py). The
    Check button is reachable with Tab and works with Space."""
    from js_grader import grade  # the page's grader, run in Node.js

    SHOTS.mkdir(parents=True, exist_ok=True)
    w = opened(page)
    _wait_widgets_rendered(w.page)
    boxes = w.page.locator(".exercise-check")
    models = w.page.evaluate("() => Object.values(window.staticWidgetModels)"
                             ".filter(m => m.get('_anywidget_id').endsWith('.AnswerBox')).length")
    assert boxes.count() == models > 0, f"{boxes.count()} boxes shown for {models} AnswerBox widgets"
    for k in range(boxes.count()):
        box = boxes.nth(k)
        model_id = box.evaluate("e => e.closest('.static-anywidget').dataset.modelId")
        spec = w.page.evaluate("id => window.staticWidgetModels[id].get('spec')", model_id)
        field = box.get_by_label(spec["label"], exact=True)  # the label is tied to the input
        status = box.get_by_role("status")
        assert field.count() == 1 and status.count() == 1
        tries = [(_wrong_text(spec), "wrong")] + [(repr(float(v)), "slip") for v, _ in spec["slips"]]
        tries.append((repr(float(spec["expected"])), "right"))
        for text, verdict in tries:
            _submit(w.page, field, text)
            want = grade(spec, text)
            got = status.get_attribute("data-verdict")
            assert got == want["status"] == verdict, (spec["label"], text)
            shown = status.inner_text()
            assert want["message"] in shown and want["hint"] in shown, (spec["label"], text, shown)
        assert status.get_attribute("data-verdict") == "right"
        if k == 0:
            field.fill("0.5 bananas")
            w.page.keyboard.press("Tab")  # from the input to the Check button
            assert box.get_by_role("button").evaluate("b => b === document.activeElement")
            w.page.keyboard.press("Space")
            assert status.get_attribute("data-verdict") == "invalid"
            _submit(w.page, field, _wrong_text(spec))
            box.screenshot(path=str(SHOTS / f"answer_box_{page.stem}.png"))
    assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)


# ----------------------------------------------------------------------------- sliders
@pytest.mark.parametrize("page", _each(_widget_pages()))
def test_sliders_live_and_equal_python(page, opened):
    """Move every slider with the keyboard: the values shown change and equal attn_core's in Python."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    w = opened(page)
    w.page.wait_for_selector(LEDGER, timeout=15_000)
    widgets = w.page.query_selector_all(LEDGER)
    assert widgets
    moved = 0
    for handle in widgets:
        _assert_matches_python(handle, w.page)
        for slider in handle.query_selector_all("input[type=range]"):
            before = _shown_values(handle)
            _nudge(w.page, slider)
            after = _assert_matches_python(handle, w.page)
            assert after != before, f"moving slider {slider.get_attribute('name')} changed nothing"
            moved += 1
    assert moved > 0, "no slider found on a widget page"
    for handle in widgets:
        _parallel_controls(handle, w.page)
    w.page.screenshot(path=str(SHOTS / (page.stem + ".png")), full_page=True)
    assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)


# ----------------------------------------------------------------------------- the page's chrome
WIDTHS = [1400, 1000, 768, 500]
SEARCH = "input[type=search], .search-button-field, .search-button, form.bd-search"
HEADER_REPORT = """
() => {
  const shown = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const headers = [...document.querySelectorAll('header, .bd-header')].filter(shown);
  return headers.map(h => ({
    height: Math.round(h.getBoundingClientRect().height),
    // what the band shows besides search controls and sidebar toggles
    content: [...h.querySelectorAll('a, img, svg, p, span, h1, h2, h3, li')].filter(e => shown(e)
      && !e.closest('.search-button-field, .search-button, form.bd-search, .sidebar-toggle')
      && (e.textContent.trim() || ['IMG', 'svg'].includes(e.tagName))).length,
  }));
}
"""
TITLE_COUNT = """
title => [...document.querySelectorAll('body *')].filter(e => {
  const r = e.getBoundingClientRect(), s = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'
    && e.textContent.trim() === title
    && ![...e.children].some(c => c.textContent.trim() === title);
}).length
"""


def _chrome_pages() -> list[Path]:
    pages = [HTML / "book" / "intro.html"] + _exercise_pages()[:1]  # index.html only redirects
    return [p for p in pages if p.exists()]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", _chrome_pages(), ids=_rel)
def test_one_search_box_no_empty_header_band(page, width, browser, server):
    """At every width: one visible search box (or search button), the book's title shown at most
    once, and no header band that shows nothing but a search box."""
    import yaml

    title = yaml.safe_load((ROOT / "_config.yml").read_text())["title"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    w = PageWatch(browser, server)
    try:
        w.page.set_viewport_size({"width": width, "height": 800})
        w.page.goto(f"{server}/{_rel(page)}", wait_until="load")
        w.page.wait_for_load_state("networkidle")
        w.page.screenshot(path=str(SHOTS / f"chrome_{page.stem}_{width}.png"))
        search = w.page.locator(SEARCH)
        shown = [search.nth(k) for k in range(search.count()) if search.nth(k).is_visible()]
        # a search control nested in another counts once
        outer = [s for s in shown if not any(
            o != s and o.evaluate("(a, b) => a.contains(b)", s.element_handle()) for o in shown)]
        assert len(outer) == 1, f"{len(outer)} search boxes visible at {width} px"
        assert w.page.evaluate(TITLE_COUNT, title) <= 1, f"the title {title!r} repeats at {width} px"
        bands = w.page.evaluate(HEADER_REPORT)
        empty = [b for b in bands if b["height"] > 0 and b["content"] == 0]
        assert not empty, f"an empty header band at {width} px: {bands}"
    finally:
        w.page.close()
