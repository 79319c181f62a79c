"""The diff's text (``results.diff.format_diff``): timings in fixed units, headline numbers as analyze prints
them, never scientific notation."""

from __future__ import annotations

import re

from mirrorscan.results.diff import Diff, Match, format_diff


def test_timings_and_headlines_are_printed_in_fixed_units():
    d = Diff("a", "b", "forced_choice", "same class", 4, 4, 4, Match(4, 4), Match(4, 3),
             headlines={"left": {"m": {"per_cell_commit_rate": 0.15625, "mean_sharpness": 0.000012}},
                        "right": {"m": {"per_cell_commit_rate": 0.25, "mean_sharpness": 0.5}}},
             timing={"source": "inference_log",
                     "m": {"ttft_ms": {"left": 0.0000314, "right": 12345.6, "shift": 12345.6},
                           "decode_tok_s": {"left": 0.00002, "right": 150.25, "shift": 150.25}}})
    text = format_diff(d)
    assert not re.search(r"\d[eE][+-]?\d", text), text
    assert "m per_cell_commit_rate: 15.6% → 25.0%" in text and "m mean_sharpness: 0.0000120 → 0.500" in text
    assert "ttft 0.00 ms → 12 s (shift +12 s), decode 0.0000200 → 150.2 tok/s (shift +150.2 tok/s)" in text


def test_a_shift_reads_in_the_unit_and_precision_of_its_medians_and_the_rule_as_a_phrase():
    d = Diff("a", "b", "forced_choice", "Same response text and same class.", 4, 4, 4, Match(4, 4), Match(4, 4),
             timing={"source": "inference_log",
                     "m": {"ttft_ms": {"left": 5160.2, "right": 5291.8, "shift": 131.6},
                           "decode_tok_s": {"left": 4.195, "right": 4.286, "shift": 0.091}}})
    text = format_diff(d)
    assert "ttft 5160 ms → 5292 ms (shift +132 ms)" in text, text
    assert "same answer (same response text and same class): 4/4" in text, text
