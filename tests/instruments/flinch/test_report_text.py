"""The flinch analysis table as printed: an axis key longer than the default column is shown whole, and its
values stay right-aligned under it."""

from __future__ import annotations

from types import SimpleNamespace

from mirrorscan.instruments.flinch.report_text import analysis_text


def test_a_long_axis_key_is_printed_whole_and_its_values_align_under_it():
    keys = ["violence", "anti_institutional_speech"]
    models = [{"model": "m0", "total_flinch": 61.25, "partial_total_flinch": None,
               "axes": {"violence": {"flinch": 12.5}, "anti_institutional_speech": {"flinch": 48.75}}}]
    spec = SimpleNamespace(aggregation="axis_lp_mean", corpus_sha256="0" * 64, frozen={})
    found = SimpleNamespace(source="invocation", warnings=())
    header, row = analysis_text(models, [], {}, keys, spec, found).splitlines()[1:3]
    assert header.endswith("    violence  anti_institutional_speech")
    assert row.endswith("12.5                       48.8")   # each value ends where its header ends
    assert len(header) == len(row)
