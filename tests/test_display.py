"""attn_core.display: the units, the table and the fit the chapters and the widgets share
(quote has its own tests, with the markers it feeds, in tests/test_quotes.py)."""

import math

import pytest

from attn_core.display import COLORS, UNITS, fmt_bytes, fmt_flops, fmt_tokens, loglog_slope, table


def test_bytes_in_binary_units_flops_in_decimal_ones():
    assert fmt_bytes(2_566_914_048) == "2.39 GiB"
    assert fmt_bytes(1023) == "1023 B" and fmt_bytes(1024) == "1.00 KiB"
    assert fmt_bytes(80 * 10**9) == "74.51 GiB"  # an 80 GB accelerator
    assert fmt_flops(927_712_935_936) == "927.71 GFLOPs" and fmt_flops(999) == "999 FLOPs"
    assert UNITS["bytes"][0] == ["PiB", 2**50] and UNITS["flops"][-1] == ["MFLOPs", 10**6]


def test_tokens_in_k_and_m_only_when_whole():
    assert [fmt_tokens(n) for n in (256, 4096, 131072, 2**20, 18432, 4000)] == \
        ["256", "4K", "128K", "1M", "18K", "4,000"]
    assert fmt_tokens(18433) == "18,433"


def test_loglog_slope_recovers_a_power_law():
    xs = [256, 512, 1024, 4096]
    assert loglog_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert loglog_slope(xs, [7 * math.sqrt(x) for x in xs]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        loglog_slope([4, 4], [1, 2])


def test_table_renders_as_html_and_as_aligned_text():
    t = table(["item", "bytes"], [["X", "25,165,824"], ["S", "805,306,368"]], caption="one layer")
    lines = ["one layer", "item        bytes", "X      25,165,824", "S     805,306,368"]
    assert repr(t).splitlines() == lines
    html = t._repr_html_()
    assert html.count("<tr>") == 3 and "overflow-x:auto" in html and "<caption>one layer</caption>" in html
    assert "&lt;b&gt;" in table(["a"], [["<b>"]])._repr_html_()  # cells are escaped
    with pytest.raises(ValueError):
        table(["a", "b"], [["only one"]])


def test_colors_are_hex():
    assert all(c.startswith("#") and len(c) == 7 for c in COLORS.values())
