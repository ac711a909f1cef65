"""Fixtures shared by the browser tests (helpers shared with them live in test_book_pages.py)."""

import pytest
from test_book_pages import CHROMIUM, LAUNCH_ARGS, _require_browser


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, through Playwright (never a downloaded browser)."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        yield b
        b.close()
