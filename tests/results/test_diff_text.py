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
    assert "ttft 0.00 ms → 12 s (shift +12346 ms), decode 0.0000200 → 150.2 tok/s (shift +150.2 tok/s)" in text
