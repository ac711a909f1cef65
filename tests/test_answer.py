"""attn_core.widgets.answer: the exercises' answer boxes.

The grader is written once, in the page's module (static/answer_box.js); these tests run it in
Node.js: parsing (numbers, separators, suffixes, units, short expressions) and grading (right,
close, wrong, the box's slips and the common ones: GB against GiB, a factor 2, 1000 against 1024,
a missing unit), each verdict written here from the rules. Python builds the box's spec.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
from js_grader import JS, NODE, _grader_source, grade, parse_answer  # the page's grader, in Node.js

from attn_core.widgets import AnswerBox
from attn_core.widgets.answer import format_expected

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the grader is not run here")


class _Box:
    def __init__(self, box):
        self.spec, self.expected = box.spec, box.expected

    def check(self, text):
        return grade(self.spec, text)


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(("text", "unit", "value"), [
    ("18432", None, 18432),
    ("18,432", None, 18432),
    ("  18432  ", None, 18432),
    ("1.2e9", None, 1.2e9),
    ("1.2E+9", None, 1.2e9),
    (".5", None, 0.5),
    ("-3", None, -3),
    ("\u22123", None, -3),
    ("43%", None, 0.43),
    ("1.22x", None, 1.22),
    ("2.5M", None, 2.5e6),
    ("4K", None, 4000),
    ("2^30", None, 2**30),
    ("2**30", None, 2**30),
    ("6*3072", None, 18432),
    ("6 x 3072", None, 18432),
    ("1.2 x 10^9", None, 1.2e9),
    ("1.2\u00d710^9", None, 1.2e9),
    ("(1 + 2) * 3", None, 9),
    ("2^-1", None, 0.5),
    ("-2^2", None, -4),
    ("ln 9", None, math.log(9)),
    ("ln(9)", None, math.log(9)),
    ("log2(8)", None, 3),
    ("sqrt(16)", None, 4),
    ("exp(0)", None, 1),
    ("2.4 GiB", "bytes", 2.4 * GiB),
    ("2.4GiB", "bytes", 2.4 * GiB),
    ("26.6 GB", "bytes", 26.6e9),
    ("26.6 gb", "bytes", 26.6e9),
    ("512 MiB", "bytes", 512 * 2**20),
    ("2^30 B", "bytes", 2**30),
    ("100 bytes", "bytes", 100),
    ("515 GFLOPs", "FLOPs", 515e9),
    ("5.2e11 FLOPs", "FLOPs", 5.2e11),
    ("9 layers", "layers", 9),
    ("1 layer", "layers", 1),
    ("2336 tokens", "tokens", 2336),
])
def test_parse_reads_numbers_expressions_and_units(text, unit, value):
    values = parse_answer(text, unit)["values"]
    assert len(values) == 1 and math.isclose(values[0], value, rel_tol=1e-12)


def test_parse_k_of_tokens_is_1024_or_1000():
    """A 4K context is 4096 tokens; 18K may also mean 18,000: both candidates are graded."""
    assert parse_answer("18K", "tokens")["values"] == [18432, 18000]
    assert parse_answer("4K tokens", "tokens")["values"] == [4096, 4000]
    assert parse_answer("4K", None)["values"] == [4000]


def test_parse_reports_units_and_bases():
    assert parse_answer("26.6 GB", "bytes")["base"] == "decimal"
    p = parse_answer("2.4 GiB", "bytes")
    assert (p["base"], p["power"], p["kind"], p["bare"]) == ("binary", 3, "bytes", False)
    assert parse_answer("2400", "bytes")["bare"]
    assert parse_answer("5 GFLOPs", "bytes")["kind"] == "FLOPs"


@pytest.mark.parametrize("text", ["", "abc", "1,2345", "1,5", "18 432", "2 +", "(2", "1/0", "ln(-1)",
                                  "sqrt(-4)", "10^400", "1e400", "GiB", "5 %%", "9 heads", "2e", "=4"])
def test_parse_rejects(text):
    assert parse_answer(text, None) is None


# ----------------------------------------------------------------------------- grading
def _box(expected, **kw):
    return _Box(AnswerBox(expected, **{"label": "test", **kw}))


def test_right_within_one_percent_and_says_the_exact_value():
    box = _box(960 * GiB, unit="bytes")
    for text in ("960 GiB", "1030.8 GB", "1.0308e12", "2^30*960 B", "0.9375 TiB", "1,030,792,151,040"):
        v = box.check(text)
        assert v["status"] == "right", (text, v)
    assert box.check("960 GiB")["message"] == "Right: 960.00 GiB (1,030,792,151,040 bytes)."


def test_close_says_how_close_and_gives_the_hint():
    box = _box(18432, unit="tokens", hint="weights 12 d^2 L b; the cache 2 L d b per token")
    v = box.check("19000")
    assert v == {"status": "close", "message": "Close: 3.1% high.", "value": 19000.0,
                 "hint": "weights 12 d^2 L b; the cache 2 L d b per token"}
    assert box.check("17000")["message"] == "Close: 7.8% low."


def test_wrong_says_how_far():
    box = _box(100.0)
    assert box.check("150")["message"] == "Not quite: 50.0% too high."
    assert box.check("350")["message"] == "Not quite: about 3.5 times too high."
    assert box.check("1")["message"] == "Not quite: about 100 times too low."
    assert box.check("-100")["message"] == "Not quite: the sign is wrong."
    assert box.check("0")["message"] == "Not quite: the answer is not zero."
    assert box.check("1e9")["message"] == "Not quite: over a million times too high."


def test_exact_boxes_count_and_say_off_by_how_many():
    box = _box(2336, unit="tokens", exact=True)
    assert box.check("2336")["status"] == "right"
    assert box.check("2,336 tokens")["status"] == "right"
    assert box.check("2337")["message"] == "Close: 1 too high."
    assert box.check("2330")["message"] == "Close: 6 too low."


def test_zero_expected():
    box = _box(0.0)
    assert box.check("0")["status"] == "right"
    assert box.check("0.0")["status"] == "right"
    assert box.check("0.01")["status"] == "wrong"
    assert _box(0.0, abs_tol=0.05).check("0.01")["status"] == "right"


def test_the_box_slips_come_first_with_their_message():
    box = _box(7, unit="sequences", exact=True, slips={8: "80 GiB is not 80 x 10^9 bytes."})
    assert box.check("8") == {"status": "slip", "message": "80 GiB is not 80 x 10^9 bytes.", "hint": "",
                              "value": 8.0}
    assert box.check("7 sequences")["status"] == "right"


def test_a_slip_near_the_answer_narrows_right():
    """5d/H = 640 is a slip for a crossover of 638.3: typing 640 must not be graded right."""
    n_star = Fraction(5 * 8 * 3072 * 2, 8 * 24 * 2 + 1)  # B = 8, bf16, d = 3072, H = 24
    box = _box(n_star, unit="tokens", slips={640: "5d/H ignores the mask"})
    assert box.check("640")["status"] == "slip"
    assert box.check("638.3")["status"] == "right"
    assert _box(8, slips={8: "the answer itself", 9: "one more"}).spec["slips"] == [[9.0, "one more"]]


def test_common_slips():
    cache = _box(960 * GiB, unit="bytes")
    assert cache.check("960 GB")["message"].startswith("Right digits, wrong unit")
    assert cache.check("1030.8 GiB")["message"].startswith("Right digits, wrong unit")
    assert cache.check("1920 GiB")["message"] == "Twice the answer: is something counted twice?"
    assert cache.check("480 GiB")["message"] == "Half the answer: is a factor 2 missing?"
    assert cache.check("960 MiB")["message"] == ("A factor 2^10 too low: check the unit prefix "
                                                 "(KiB, MiB, GiB).")
    assert cache.check("960")["status"] == "unit"  # a bare number of bytes, but the digits of GiB
    assert cache.check("515 GFLOPs")["message"] == "The unit does not fit: the answer is a number of bytes."
    assert cache.check("900 GiB")["status"] == "close"  # no slip is guessed for an ordinary miss
    flops = _box(515396075520, unit="FLOPs")
    assert flops.check("515.4")["message"] == "Add the unit: a bare number is read as FLOPs."
    assert flops.check("515.4 GFLOPs")["status"] == "right"
    assert flops.check("515.4 MFLOPs")["message"] == ("A factor 10^3 too low: check the unit prefix "
                                                      "(K, M, G, T).")
    tokens = _box(4096, unit="tokens", exact=True)
    assert tokens.check("4K")["status"] == "right"
    assert tokens.check("4000")["message"].startswith("Off by the ratio of 1000 to 1024")
    assert tokens.check("5 GiB")["message"] == "The unit does not fit: the answer is a number of tokens."


def test_empty_and_invalid_say_what_to_type():
    box = _box(2.0, unit="bytes")
    assert box.check("   ")["status"] == "empty"
    v = box.check("two")
    assert v["status"] == "invalid" and "2.4 GiB" in v["message"] and v["hint"] == ""


def test_expected_comes_in_any_number_type():
    import torch

    assert _box(Fraction(1881, 3)).expected == 627.0
    assert _box(torch.tensor(2.5)).expected == 2.5
    with pytest.raises(ValueError):
        _box(float("nan"))
    with pytest.raises(TypeError):
        _box(True)
    with pytest.raises(ValueError):
        _box(1, unit="GiB bytes")
    with pytest.raises(ValueError):
        _box(1, rel_tol=-1)


def test_format_expected():
    assert format_expected(960 * GiB, "bytes") == "960.00 GiB (1,030,792,151,040 bytes)"
    assert format_expected(32, "bytes") == "32 bytes"
    assert format_expected(515396075520, "FLOPs") == "515.40 GFLOPs (515,396,075,520 FLOPs)"
    assert format_expected(18432, "tokens") == "18,432 tokens"
    assert format_expected(math.log(9)) == "2.19722"


def test_the_answer_is_not_in_the_repr_and_the_page_sends_its_verdict():
    box = AnswerBox(960 * GiB, unit="bytes", label="Exercise 2: the KV cache")
    assert repr(box) == "AnswerBox(label='Exercise 2: the KV cache', unit='bytes')"
    assert "960" not in repr(box) and "1030" not in repr(box)
    assert "verdict" in box.keys and "answer" in box.keys  # synced: the page writes both
    assert 'model.set("verdict", v)' in JS.read_text()


def test_front_end_files_are_the_widget_module():
    box = AnswerBox(1)
    assert box._esm == JS.read_text() and "export default" in box._esm
    assert box._css == (ROOT / "attn_core" / "static" / "answer_box.css").read_text()
    assert "http://" not in box._esm and "https://" not in box._esm  # no network


def test_grader_block_is_pure():
    """The graded block touches no page, model or network: it runs in Node.js as it is."""
    src = _grader_source()
    for word in ("document", "window", "model", "fetch", "import"):
        assert not re.search(rf"\b{word}\b", src), word
