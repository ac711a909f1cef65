"""How `make test` shares its one pytest run (notebooks and tests) among xdist workers.

At the repository root so that its hooks see the notebooks' items as well as the tests'.
"""

import pytest

# the longest chains, measured with --durations on a 2-core machine (20 to 125 s each)
LONG_FIRST = ("test_jupyterlab", "10_training_step", "09_fused_attention_and_decoding",
              "11_beyond_one_device", "08_delta_rule", "test_parallel")


def _start_order(item) -> tuple[int, int, str]:
    """Long chains start first, then the other notebooks, the browser tests (those of one book page
    together, as their page is loaded once), and the small unit tests, which fill the workers at
    the end."""
    stem = item.path.stem
    if stem in LONG_FIRST:
        return (0, LONG_FIRST.index(stem), "")
    if item.path.suffix == ".ipynb":
        return (1, 0, "")
    if item.path.parent.name == "browser":
        group = item.get_closest_marker("xdist_group")
        return (2, 0, group.args[0] if group else "")
    return (3, 0, "")


def pytest_itemcollected(item):
    """Under `pytest -n K --dist loadgroup` (make test): a notebook's cells run in order on one worker
    with one kernel; a test file whose tests share a costly module fixture (a JupyterLab server, a
    browser, ring attention's process groups) runs on one worker; the tests of one book page are
    grouped by their parameters (tests/browser/test_book_pages.py); every other test goes to
    whichever worker is free. (Marked as each item is collected: xdist reads the marks in its own
    pytest_collection_modifyitems.)"""
    shared = item.path.parent.name == "browser" and item.path.name != "test_book_pages.py"
    if item.path.suffix == ".ipynb" or shared or item.path.name == "test_parallel.py":
        item.add_marker(pytest.mark.xdist_group(item.path.stem))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Long chains start first (a stable sort: within a notebook, a file or a page, the order of
    the file is kept)."""
    items.sort(key=_start_order)
