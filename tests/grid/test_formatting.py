"""One formatting of numbers and units (grid/formatting.py): no scientific notation, fixed units, and the report
showing a headline number as analyze prints it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mirrorscan.grid.formatting import article, duration, fixed, headline, milliseconds, percent, points

from report_page import numbers  # noqa: E402  (tests/results/report_page.py)

FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"   # the legacy fixture's finished forced-choice invocation


@pytest.mark.parametrize("value, text", [
    (0.000012345, "0.0000123"), (0.0049, "0.00490"), (0.7123, "0.712"), (9.9994, "9.999"), (42.46, "42.5"),
    (12345.6, "12346"), (-0.5, "-0.500"), (0.0, "0"), (7, "7"), (None, "—"), (math.nan, "—"), (math.inf, "∞"),
])
def test_fixed_never_writes_scientific_notation(value, text):
    assert fixed(value) == text and "e" not in fixed(value)


@pytest.mark.parametrize("seconds, text", [
    (0.000042, "0.04 ms"), (0.0123, "12.3 ms"), (0.84, "840 ms"), (3.21, "3.2 s"), (42.4, "42 s"),
    (125, "2 min 05 s"), (3725, "1 h 02 min"), (None, "—"),
])
def test_durations_are_written_in_fixed_units(seconds, text):
    assert duration(seconds) == text


def test_milliseconds_switch_to_seconds_past_ten_seconds():
    assert milliseconds(0.5) == "0.50 ms" and milliseconds(250.4) == "250 ms" and milliseconds(12_345) == "12 s"


def test_headline_numbers_take_their_unit_from_their_name():
    assert percent(0.15625) == "15.6%" == headline("per_cell_commit_rate", 0.15625)
    assert points(16.666) == "+16.7 pp" == headline("position_bias_pp", 16.666)
    assert headline("ttft_ms", 840.2) == "840 ms" and headline("wall_s", 0.5) == "500 ms"
    assert headline("mean_sharpness", 0.84375) == "0.844" and headline("total_flinch", 123.456) == "123.5"
    assert headline("pair_commit_unanimity", "3 / 1 / 5") == "3 / 1 / 5" and headline("axes_summed", 2) == "2"


@pytest.mark.parametrize("word, art", [("ATTACH", "an"), ("open_scan", "an"), ("evaluation", "an"),
                                       ("UNCLEAR", "an"), ("deployment", "a"), ("forced_choice", "a"),
                                       ("UUID", "a"), ("URL", "a"), ("COPY", "a"), ("", "a")])
def test_the_article_follows_the_sound(word, art):
    assert article(word) == art


def test_a_report_of_the_legacy_fixture_shows_the_commit_rate_as_analyze_prints_it(legacy):
    from mirrorscan.jobs.analyze import analyze_invocation, format_report
    from mirrorscan.jobs.report import report_invocations

    root, dsn = legacy
    printed = format_report(analyze_invocation(FINISHED, catalog_dsn=dsn))
    row = next(x for x in printed.splitlines() if x.startswith("smollm2-135m-instruct"))
    rate = re.search(r"\s(\d+\.\d%)\s", row).group(1)                # analyze's commit/cell column
    bias = re.search(r"\s([+-]\d+\.\d pp)\s", row).group(1)          # and its position bias
    (path,) = report_invocations(FINISHED, catalog_dsn=dsn)
    rows = numbers(Path(path).read_text(encoding="utf-8"))
    commit = rows[("smollm2-135m-instruct", "per_cell_commit_rate")]
    assert commit["shown"] == rate == "0.0%" and float(commit["value"]) == 0.0   # the exact value stays in the page
    assert rows[("smollm2-135m-instruct", "position_bias_pp")]["shown"] == bias


def test_an_instruments_headline_units_say_how_its_numbers_are_written():
    from mirrorscan.grid.instrument import headline_units

    units = {"total": 1, "flinch_*": 1, "flinch_anti_*": 2, "rate_like": "percent"}
    assert headline("total", 5.26, units) == "5.3" and headline("flinch_violence", 7.04, units) == "7.0"
    assert headline("flinch_anti_china", 7.04, units) == "7.04"      # the longest matching prefix
    assert headline("rate_like", 0.5, units) == "50.0%" and headline("other", 7.04, units) == "7.040"
    flinch = headline_units("flinch")   # as flinch's analyze prints them: one decimal, Eρ² with two
    assert headline("total_flinch", 7.04, flinch) == "7.0" and headline("flinch_sexual", 61.25, flinch) == "61.2"
    assert headline("carrier_g_sexual", 0.8567, flinch) == "0.86"
    assert headline_units("no_such_instrument") == {}


def test_a_large_count_reads_short_and_never_in_scientific_notation():
    from mirrorscan.grid.formatting import count

    assert [count(n) for n in (812, 41_300, 134_515_008, 1.7e9, 99.96e6, None)] == \
        ["812", "41.3K", "135M", "1.70B", "100M", "—"]
