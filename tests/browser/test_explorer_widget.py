"""The chapter widgets with the current static files, in a static page as the book shows them.

A small page holds the saved state of an Explorer, a memory ledger and a FLOPs widget, and the book's
loader (book/_extra/widgets/static-anywidget.js), as test_fit_widget.py does for the "does it fit"
widget, so this checks the widgets' present code without building the book (a built page embeds the code
of its notebook's last run). Chromium (Debian's, /usr/bin/chromium, through Playwright; never
downloaded) moves the controls as a reader would, and every number the page shows must be what Python
computes for the same state:

* the Explorer's serving readouts: the users control (B) moves the total, weights + KV caches x users,
  which equals Python's and :func:`attn_core.inference.serving_memory`; the memory is typed exactly
  (74.5 GiB) and the users that fit follow, less the allowance for the allocator; the menu of accelerators
  sets the memory nvidia-smi reports; N is typed exactly; the preset's source is a link; a model without a
  vocabulary says its weights are its blocks';
* the memory ledger: in the teaching ledger the dropout-mask menu is disabled and the empty rows are
  greyed, each with its reason; moving d to 10,496 moves H from 24 to 32, and the page says why;
* the FLOPs widget: N snaps to powers of two and 1.5 times them; the crossovers read N*_FLOPs; the labels
  of the marked lines never overlap one another and stay inside the plot;
* at 420 px nothing is wider than the screen.
"""

from __future__ import annotations

import pytest
from test_book_pages import (
    SHOTS,
    PageWatch,
    _assert_matches_python,
    _require_browser,
    serve,
    widget_site,
)

RENDERED = ".static-anywidget[data-rendered=true]"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from attn_core.widgets import Explorer, FlopsWidget, MemoryLedgerWidget

    _require_browser()
    pages = {"explorer": [Explorer(model="Llama 3 8B", N=8192)], "worked": [Explorer()],
             "memory": [MemoryLedgerWidget()], "flops": [FlopsWidget()]}
    yield from serve(widget_site(tmp_path_factory.mktemp("chapters"), pages))


def _open(browser, site, name, width=1280):
    w = PageWatch(browser, site)
    w.page.set_viewport_size({"width": width, "height": 900})
    w.page.goto(f"{site}/{name}.html", wait_until="load")
    w.page.wait_for_selector(f"{RENDERED} .al-widget", timeout=15_000)
    return w, w.page.query_selector(RENDERED)


def _state(page, handle) -> dict:
    return page.evaluate("id => window.staticWidgetModels[id]._state", handle.get_attribute("data-model-id"))


def _shown(handle, key) -> float:
    return float(handle.query_selector(f"[data-key='{key}']").get_attribute("data-value"))


def _press(page, slider, key, times=1) -> None:
    slider.focus()
    for _ in range(times):
        page.keyboard.press(key)
    page.wait_for_timeout(30)


def test_explorer_users_control_moves_the_serving_total(browser, site):
    """The users control (B) moves the KV caches and the total, which equal Python's and serving_memory's;
    the memory typed exactly in GiB gives Python's users that fit; the source is a link."""
    from attn_core import inference, kv_cache
    from attn_core.widgets import Explorer

    llama = kv_cache.MODELS["Llama 3 8B"]
    w, handle = _open(browser, site, "explorer")
    try:
        _assert_matches_python(handle, w.page)
        users = handle.query_selector("input[aria-label='users B']")
        totals = []
        for presses in (31, 32, 64):  # B = 32, 64, 128
            _press(w.page, users, "ArrowRight", presses)
            state = _state(w.page, handle)
            _assert_matches_python(handle, w.page)  # every number shown is Python's
            python = Explorer.compute_values(**state)
            assert _shown(handle, "serving_bytes") == python["serving_bytes"]
            held = inference.serving_memory(llama, 8192, users=state["B"])
            assert _shown(handle, "serving_bytes") == held["total_bytes"]
            assert _shown(handle, "kv_cache_bytes") == held["kv_bytes"]
            totals.append((state["B"], _shown(handle, "serving_bytes")))
        assert [b for b, _ in totals] == [32, 64, 128]
        assert totals[0][1] < totals[1][1] < totals[2][1]
        verdict = handle.query_selector(".al-serving .al-verdict")
        assert verdict.get_attribute("data-verdict") == "over"  # 128 users of 8K tokens on 80 GB
        # the memory typed exactly, in GiB
        mem = handle.query_selector("input[aria-label='accelerator memory']")
        mem.fill("74.5")
        mem.evaluate("e => e.dispatchEvent(new Event('change'))")
        handle.query_selector("select[aria-label='memory unit']").select_option("GiB")
        w.page.wait_for_timeout(50)
        state = _state(w.page, handle)
        assert (state["mem"], state["mem_unit"], state["allowance"]) == (74.5, "GiB", 10)
        assert state["accelerator"] == ""  # typed: no GPU of the menu
        _assert_matches_python(handle, w.page)
        most = int(_shown(handle, "users_max"))
        weights, per_user = 2 * llama.num_params(), llama.kv_bytes(8192)
        usable = 74.5 * 2**30 * 0.9  # less 10% for the allocator
        assert _shown(handle, "usable_bytes") == usable
        assert weights + most * per_user <= usable < weights + (most + 1) * per_user
        assert f"at most {most} users fit" in verdict.inner_text()
        assert "usable after a 10% allowance" in verdict.inner_text()
        # no allowance: more users fit, up to the whole memory
        allowance = handle.query_selector("input[aria-label='allowance for the allocator (%)']")
        allowance.fill("0")
        allowance.evaluate("e => e.dispatchEvent(new Event('change'))")
        w.page.wait_for_timeout(50)
        _assert_matches_python(handle, w.page)
        assert int(_shown(handle, "users_max")) == (74.5 * 2**30 - weights) // per_user > most
        # the menu of accelerators: an A100 80GB's 81,920 MiB, 80 GiB exactly
        handle.query_selector("select[aria-label='accelerator']").select_option("A100 80GB")
        w.page.wait_for_timeout(50)
        state = _state(w.page, handle)
        assert (state["accelerator"], state["mem"], state["mem_unit"]) == ("A100 80GB", 81920, "MiB")
        assert _shown(handle, "mem_bytes") == 80 * 2**30
        _assert_matches_python(handle, w.page)
        # N typed exactly
        exact = handle.query_selector("input[aria-label='N, exactly']")
        exact.fill("10000")
        exact.evaluate("e => e.dispatchEvent(new Event('change'))")
        w.page.wait_for_timeout(50)
        assert _state(w.page, handle)["N"] == 10000
        _assert_matches_python(handle, w.page)
        exact.fill("8192")
        exact.evaluate("e => e.dispatchEvent(new Event('change'))")
        w.page.wait_for_timeout(50)
        # the preset's source, a link to its config.json (only http(s) URLs become links)
        link = handle.query_selector(".al-note a")
        assert link.get_attribute("href") == llama.source and "noopener" in link.get_attribute("rel")
        # a slider makes the model custom; the weights keep Llama 3 8B's vocabulary
        _press(w.page, handle.query_selector("input[aria-label='L']"), "ArrowLeft")
        state = _state(w.page, handle)
        assert (state["model"], state["base"], state["L"]) == ("custom", "Llama 3 8B", 31)
        assert _shown(handle, "params") == llama.with_(num_layers=31).num_params()
        _assert_matches_python(handle, w.page)
        SHOTS.mkdir(parents=True, exist_ok=True)
        w.page.screenshot(path=str(SHOTS / "explorer_serving.png"), full_page=True)
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


def test_explorer_worked_example_has_no_vocabulary(browser, site):
    """The worked example has no vocabulary: its weights are its blocks' (the 3.6B of its name), said so."""
    from attn_core import kv_cache
    from attn_core.widgets import DEFAULT_MODEL

    w, handle = _open(browser, site, "worked")
    try:
        _assert_matches_python(handle, w.page)
        assert _shown(handle, "params") == kv_cache.MODELS[DEFAULT_MODEL].num_params() == 3_624_278_016
        assert "has no vocabulary" in handle.query_selector(".al-serving").inner_text()
        assert handle.query_selector(".al-note a") is None  # its source is words, not a URL
        assert w.errors == [], w.errors
    finally:
        w.page.close()


def _row_class(handle, key) -> str:
    return handle.query_selector(f"[data-key='{key}']").evaluate("e => e.closest('.al-row').className")


def test_memory_widget_greys_what_the_teaching_ledger_ignores(browser, site):
    w, handle = _open(browser, site, "memory")
    try:
        mask = handle.query_selector("select[aria-label='dropout mask']")
        assert mask.is_disabled()
        assert "teaching ledger" in mask.evaluate("s => s.closest('.al-control').innerText")
        assert "al-off" in _row_class(handle, "item.P_drop") and "al-off" not in _row_class(handle, "item.S")
        handle.query_selector("select[aria-label='ledger']").select_option("autograd")
        w.page.wait_for_timeout(50)
        assert not mask.is_disabled()  # with dropout, the mask's bytes count as autograd saves it
        for key, off in (("item.P_drop", False), ("item.S", True), ("item.O", True)):
            assert ("al-off" in _row_class(handle, key)) == off, key
        _assert_matches_python(handle, w.page)
        # the rule H follows: d = 10,496 (2^8 x 41) is not a multiple of 24, so H moves to 32
        d = handle.query_selector("input[aria-label='d']")
        d.evaluate("s => { s.value = '10496'; s.dispatchEvent(new Event('input')); }")
        w.page.wait_for_timeout(50)
        state = _state(w.page, handle)
        assert (state["d"], state["H"]) == (10496, 32)
        rule = handle.query_selector(".al-rule").inner_text()
        assert "H follows d" in rule and "24 does not divide 10,496, so H became 32" in rule
        _assert_matches_python(handle, w.page)
        assert "N*mem" in handle.query_selector(".al-readouts").inner_text()  # N*<sub>mem</sub>
        assert w.errors == [], w.errors
    finally:
        w.page.close()


LABEL_BOXES = """svg => {
  const plot = svg.querySelector('rect[fill=none]').getBBox();
  return [...svg.querySelectorAll('text[paint-order=stroke]')].map(t => {
    const b = t.getBBox();
    return {text: t.textContent, x0: b.x, x1: b.x + b.width, y0: b.y, y1: b.y + b.height,
            inside: b.x >= plot.x && b.x + b.width <= plot.x + plot.width};
  });
}"""


def test_flops_widget_snaps_n_and_keeps_labels_apart(browser, site):
    """N moves through powers of two and 1.5 times them; the marked lines' labels never overlap."""
    w, handle = _open(browser, site, "flops")
    try:
        slider = handle.query_selector("input[aria-label='N']")
        seen = []
        for _ in range(6):
            _press(w.page, slider, "ArrowRight")
            n = _state(w.page, handle)["N"]
            k = n.bit_length() - 1
            assert n in (2**k, 3 * 2 ** (k - 1)), n
            seen.append(n)
            _assert_matches_python(handle, w.page)
            for svg in handle.query_selector_all("svg"):
                boxes = svg.evaluate(LABEL_BOXES)
                assert all(b["inside"] for b in boxes), boxes
                for i, a in enumerate(boxes):
                    for b in boxes[i + 1:]:
                        side_by_side = a["x1"] <= b["x0"] or b["x1"] <= a["x0"]
                        assert side_by_side or a["y1"] <= b["y0"] or b["y1"] <= a["y0"], (a, b)
        assert seen == [6144, 8192, 12288, 16384, 24576, 32768]
        assert "N*FLOPs" in handle.query_selector(".al-readouts").inner_text()
        assert w.errors == [], w.errors
    finally:
        w.page.close()


@pytest.mark.parametrize("name", ["explorer", "memory", "flops"])
def test_chapter_widgets_on_a_phone(browser, site, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    w, _ = _open(browser, site, name, width=420)
    try:
        wide = w.page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 420, f"the page is {wide} px wide on a 420 px phone"
        w.page.screenshot(path=str(SHOTS / f"{name}_widget_420.png"), full_page=True)
        assert w.errors == [], w.errors
    finally:
        w.page.close()
