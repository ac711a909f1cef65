"""The "does it fit" widget in a static page, as the book shows it: a config.json pasted into the page.

A small page holds a FitWidget's saved state and the book's loader (book/_extra/widgets/static-anywidget.js),
as a built chapter does, so this runs without building the book. Chromium (Debian's, /usr/bin/chromium,
through Playwright; never downloaded) pastes config.json files of several families (tests/test_models.py's,
whose parameter counts transformers gave): the page reads each with static/hf_config.js, and every number
it shows, its verdict in words and its cheapest change must be what Python computes for the same state
(training_memory, the widget's values, the page's advice run in Node.js). A config the reader rejects
shows the reason and changes nothing. Memory is entered exactly (74.5 GiB), or chosen from the menu of
accelerators (the bytes nvidia-smi reports); the allowance for the allocator moves the verdict; N is typed
exactly; the menus show readable labels with tooltips; what the other settings make irrelevant is greyed
with its reason; the changes tried say what "cheapest" means and what each costs. At 420 px nothing is
wider than the screen, with every fold open.
"""

from __future__ import annotations

import json
import math

import pytest
from test_book_pages import (
    SHOTS,
    PageWatch,
    _assert_matches_python,
    _require_browser,
    serve,
    widget_site,
)

WIDGET = ".static-anywidget[data-rendered=true] .al-fit"
# pasted configs: (tests/test_models.py's case, the parameters transformers counted for it)
PASTE = ["qwen2-7b", "gemma-2-9b", "mixtral-8x7b", "phi-3-mini-4k", "gpt2-xl", "deepseek-v3-small"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from attn_core.widgets import FitWidget

    _require_browser()
    yield from serve(widget_site(tmp_path_factory.mktemp("fit"), {"fit": [FitWidget()]}))


def _open(browser, site, width=1280):
    w = PageWatch(browser, site)
    w.page.set_viewport_size({"width": width, "height": 900})
    w.page.goto(f"{site}/fit.html", wait_until="load")
    w.page.wait_for_selector(WIDGET, timeout=15_000)
    return w, w.page.query_selector(".static-anywidget[data-rendered=true]")


def _state(page, handle) -> dict:
    model_id = handle.get_attribute("data-model-id")
    return page.evaluate("id => window.staticWidgetModels[id]._state", model_id)


def _paste(page, handle, config: dict) -> None:
    paste = handle.query_selector("details.al-paste")
    if paste.get_attribute("open") is None:
        paste.query_selector("summary").click()
    handle.query_selector("textarea[aria-label='config.json']").fill(json.dumps(config, indent=1))
    page.wait_for_timeout(50)


def _check_against_python(page, handle) -> dict:
    """Every number shown equals Python's; the verdict, the longest N and the change are Python's."""
    import js_fit

    from attn_core import widgets as W

    _assert_matches_python(handle, page)
    state = {k: v for k, v in _state(page, handle).items() if k in W.FitWidget._inputs}
    v = W.FitWidget.compute_values(**state)
    kind = js_fit.verdict_kind(v)
    verdict = handle.query_selector(".al-verdict")
    assert verdict.get_attribute("data-verdict") == kind
    js_fit.assert_verdict_names(state, v, verdict.inner_text())
    said = handle.query_selector(".al-advice").get_attribute("data-change")
    change = None if said == "none" else json.loads(said)
    if v["fits"]:
        assert change is None
    else:
        best = js_fit.cheapest_change(state)["best"]
        assert change == (best and best["change"])
        if change:  # Python agrees that it fits
            assert W.FitWidget.compute_values(**{**state, **change})["fits"] == 1
    return state


def test_fit_widget_pastes_configs_and_equals_python(browser, site):
    from test_models import CASES

    from attn_core import training
    from attn_core.models import ModelConfig

    SHOTS.mkdir(parents=True, exist_ok=True)
    w, handle = _open(browser, site)
    try:
        _check_against_python(w.page, handle)  # the preset the widget opens with
        for case in PASTE:
            config, count = CASES[case]
            _paste(w.page, handle, config)
            state = _check_against_python(w.page, handle)
            assert state["model"] == "config.json" and state["config"] == config, case
            shown = {e.get_attribute("data-key"): float(e.get_attribute("data-value"))
                     for e in handle.query_selector_all("[data-key][data-value]")}
            assert shown["params"] == count, case  # what transformers counts for this config.json
            tm = training.training_memory(ModelConfig.from_hf_config(config), state["N"], B=state["B"],
                                          zero=state["zero"], dp=state["dp"])
            assert math.ceil(shown["total_bytes"]) == tm["peak"], case
            if case == "gemma-2-9b":
                w.page.screenshot(path=str(SHOTS / "fit_widget_pasted.png"), full_page=True)
        # a config the reader does not know: the reason is shown, the model stays
        before = _state(w.page, handle)["config"]
        _paste(w.page, handle, {"model_type": "bert", "hidden_size": 768})
        assert "unknown model_type 'bert'" in handle.query_selector(".al-error").inner_text()
        assert _state(w.page, handle)["config"] == before
        # back to a preset: the pasted config is dropped
        handle.query_selector("select[aria-label='model']").select_option("Llama 3 8B")
        w.page.wait_for_timeout(50)
        assert _state(w.page, handle)["config"] == {}
        _check_against_python(w.page, handle)
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


def test_fit_widget_memory_is_exact_and_advice_follows(browser, site):
    """74.5 GiB typed and its unit chosen: the memory is 74.5 x 2^30 bytes; then a long N that does not
    fit gets Python's verdict and change; every menu of the folded settings keeps the page equal to Python."""
    w, handle = _open(browser, site)
    try:
        mem = handle.query_selector("input[aria-label='memory per GPU']")
        mem.fill("74.5")
        mem.press("Enter")
        mem.evaluate("e => e.dispatchEvent(new Event('change'))")
        handle.query_selector("select[aria-label='memory unit']").select_option("GiB")
        w.page.wait_for_timeout(50)
        state = _check_against_python(w.page, handle)
        assert (state["mem"], state["mem_unit"]) == (74.5, "GiB")
        slider = handle.query_selector("input[aria-label='N']")
        slider.focus()
        for _ in range(4):  # N x 4 (half steps: 6K, 8K, 12K, 16K): the activations outgrow the card
            w.page.keyboard.press("ArrowRight")
        state = _check_against_python(w.page, handle)
        assert state["N"] == 16384
        assert handle.query_selector(".al-verdict").get_attribute("data-verdict") == "over"
        handle.query_selector("details.al-more > summary").click()
        for select in handle.query_selector_all("details.al-more select"):
            if select.is_disabled():  # greyed: it changes nothing under these settings
                continue
            options = select.evaluate("s => [...s.options].filter(o => !o.disabled).map(o => o.value)")
            other = next((o for o in options if o != select.evaluate("s => s.value")), None)
            if other is not None:
                select.select_option(other)
                w.page.wait_for_timeout(20)
                _check_against_python(w.page, handle)
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


def _shown(handle, key) -> float:
    return float(handle.query_selector(f"[data-key='{key}']").get_attribute("data-value"))


def _type(page, handle, label, value) -> None:
    box = handle.query_selector(f"input[aria-label='{label}']")
    box.fill(str(value))
    box.evaluate("e => e.dispatchEvent(new Event('change'))")
    page.wait_for_timeout(50)


def test_fit_widget_accelerators_allowance_and_exact_n(browser, site):
    """The menu of accelerators sets the memory nvidia-smi reports, exactly (81,559 MiB on the H100 it opens
    with; 40,960 MiB = 40 GiB on an A100 40GB); a memory typed names no GPU; the allowance for the allocator
    moves the verdict (Llama 3 8B at N = 6,144 fits an H100's whole memory, not the 90% of it); N is typed
    exactly, beside its slider."""
    w, handle = _open(browser, site)
    try:
        gpu = handle.query_selector("select[aria-label='accelerator']")
        assert gpu.evaluate("s => s.value") == "H100 80GB HBM3"
        assert _shown(handle, "mem_bytes") == 81559 * 2**20 == 85_520_809_984
        assert _shown(handle, "usable_bytes") == 85_520_809_984 * 0.9
        assert "torch.cuda.mem_get_info()" in handle.inner_text() and "nvidia-smi" in handle.inner_text()
        gpu.select_option("A100 40GB")
        w.page.wait_for_timeout(50)
        _check_against_python(w.page, handle)
        state = _state(w.page, handle)
        assert (state["accelerator"], state["mem"], state["mem_unit"]) == ("A100 40GB", 40960, "MiB")
        assert _shown(handle, "mem_bytes") == 40 * 2**30
        assert handle.query_selector("input[aria-label='memory per GPU']").evaluate("e => e.value") == "40960"
        _type(w.page, handle, "memory per GPU", 40000)  # typed: no longer the menu's GPU
        assert _state(w.page, handle)["accelerator"] == "" and gpu.evaluate("s => s.value") == ""
        gpu.select_option("H100 80GB HBM3")
        w.page.wait_for_timeout(50)
        assert _state(w.page, handle)["mem"] == 81559
        # N typed exactly: 6,144 tokens fit the H100's whole memory, not the 71.7 GiB left after 10%
        _type(w.page, handle, "N, exactly", 6144)
        state = _check_against_python(w.page, handle)
        verdict = handle.query_selector(".al-verdict")
        assert state["N"] == 6144 and verdict.get_attribute("data-verdict") == "over"
        assert "71.7 GiB usable after a 10% allowance" in verdict.inner_text()
        assert handle.query_selector(".al-allow") is not None  # the allowance, hatched on the bar
        _type(w.page, handle, "allowance for the allocator (%)", 0)
        state = _check_against_python(w.page, handle)
        assert state["allowance"] == 0 and verdict.get_attribute("data-verdict") == "fits"
        assert handle.query_selector(".al-allow") is None
        _type(w.page, handle, "N, exactly", 10000)  # any whole number, not only the slider's
        state = _check_against_python(w.page, handle)
        assert state["N"] == 10000
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


def test_fit_widget_labels_greyed_controls_and_changes_tried(browser, site):
    """The menus show labels (their keys stay the values) with tooltips; under full training LoRA's rank,
    targets and dropout and QLoRA's base are disabled with a reason, under LoRA only the base; offloading
    only with full recomputation, sequence parallelism only with TP; the changes tried say what cheapest
    means and each change's cost."""
    from attn_core.symbols import OPTION_LABELS

    w, handle = _open(browser, site)
    try:
        handle.query_selector("details.al-more > summary").click()
        loss = handle.query_selector("select[aria-label='loss']")
        options = "s => Object.fromEntries([...s.options].map(o => [o.value, [o.text, o.title]]))"
        texts = loss.evaluate(options)
        assert texts == {k: list(v) for k, v in OPTION_LABELS["loss"].items()}
        assert texts["fp32_parallel"][0] == "fp32 logits, vocabulary-parallel (loss_parallel)"
        finetune = handle.query_selector("select[aria-label='training']")
        finetune.select_option("qlora_bnb")
        w.page.wait_for_timeout(50)
        chosen = finetune.evaluate("s => s.options[s.selectedIndex].text")
        assert chosen == OPTION_LABELS["finetune"]["qlora_bnb"][0]
        assert finetune.get_attribute("title") == OPTION_LABELS["finetune"]["qlora_bnb"][1]
        assert _state(w.page, handle)["finetune"] == "qlora_bnb"  # the value is the key
        _check_against_python(w.page, handle)

        def off(selector):
            e = handle.query_selector(selector)
            return e.is_disabled(), e.evaluate("e => e.closest('.al-control').innerText")

        lora = ("select[aria-label='LoRA rank']", "input[aria-label='LoRA on q']",
                "input[aria-label='LoRA dropout']")
        assert not any(off(x)[0] for x in (*lora, "select[aria-label='QLoRA base']"))
        finetune.select_option("full")
        w.page.wait_for_timeout(50)
        for x in (*lora, "select[aria-label='QLoRA base']"):
            disabled, words = off(x)
            assert disabled and "full training" in words, x
        finetune.select_option("lora")
        w.page.wait_for_timeout(50)
        assert not any(off(x)[0] for x in lora)
        disabled, words = off("select[aria-label='QLoRA base']")
        assert disabled and "not quantized" in words
        disabled, words = off("input[aria-label='offload checkpoints']")
        assert disabled and "only with full recomputation" in words
        handle.query_selector("select[aria-label='recompute']").select_option("full")
        w.page.wait_for_timeout(50)
        assert not off("input[aria-label='offload checkpoints']")[0]
        disabled, words = off("input[aria-label='sequence parallel']")
        assert disabled and "needs TP > 1" in words
        handle.query_selector("select[aria-label='TP degree']").select_option("2")
        w.page.wait_for_timeout(50)
        assert not off("input[aria-label='sequence parallel']")[0]
        _check_against_python(w.page, handle)
        # over the memory: the changes tried, cheapest first, with what cheapest means and each cost
        finetune.select_option("full")
        handle.query_selector("select[aria-label='recompute']").select_option("none")
        handle.query_selector("select[aria-label='TP degree']").select_option("1")
        _type(w.page, handle, "N, exactly", 16384)
        _check_against_python(w.page, handle)
        advice = handle.query_selector(".al-advice")
        assert advice.get_attribute("data-change") == json.dumps({"recompute": "full"}, separators=(",", ":"))
        advice.query_selector("details.al-tried > summary").click()
        text = advice.inner_text()
        assert "Cheapest means this order, fixed by hand" in text
        assert "full recomputation: reruns the whole block during its backward" in text
        assert "about a third" not in text
        assert w.offsite == [] and w.errors == [], (w.offsite, w.errors)
    finally:
        w.page.close()


def test_fit_widget_on_a_phone(browser, site):
    """At 420 px, with the paste box, the folded settings and the changes tried open, nothing is wider than
    the screen."""
    from test_models import CASES

    w, handle = _open(browser, site, width=420)
    try:
        _paste(w.page, handle, CASES["deepseek-v3-small"][0])
        handle.query_selector("details.al-more > summary").click()
        _type(w.page, handle, "N, exactly", 65536)
        tried = handle.query_selector("details.al-tried > summary")
        if tried is not None:
            tried.click()
        w.page.wait_for_timeout(50)
        wide = w.page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 420, f"the page is {wide} px wide on a 420 px phone"
        w.page.screenshot(path=str(SHOTS / "fit_widget_420.png"), full_page=True)
        assert w.errors == [], w.errors
    finally:
        w.page.close()
