"""The timing chart's value axis ends at a round number, so its three ticks (0, half, top) read as round."""

from __future__ import annotations

import pytest

from mirrorscan.results.browse.timing import round_ceiling


@pytest.mark.parametrize("value, top", [
    (8.385, 10.0), (0.37, 0.4), (230.0, 400.0), (1.0, 1.0), (4.0, 4.0), (4.01, 5.0), (0.00123, 0.002),
    (51.0, 100.0), (1.9, 2.0), (12345.0, 20000.0),
])
def test_the_axis_top_is_the_smallest_round_number_at_or_above_the_largest_value(value, top):
    assert round_ceiling(value) == pytest.approx(top)
    for tick in (top / 2, top):   # the half is round too: at most two significant digits
        digits = f"{tick:.10g}".replace(".", "").replace("-", "").strip("0")
        assert len(digits) <= 2, tick
