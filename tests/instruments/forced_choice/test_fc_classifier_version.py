"""The report's classifier version is the one stored on the counted rows, not the current constant; rows of
several versions are refused unless re-classified. Data: the legacy fixture's finished invocation (its
Parquet parts and frozen settings, read directly: no catalog, no Ray)."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.forced_choice.classify import CLASSIFIER_VERSION
from mirrorscan.instruments.forced_choice.report import analysis, format_report, report

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "legacy_fc"
FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"
INVOCATION = FIXTURE / "store" / "legacy_fc" / FINISHED


@pytest.fixture
def legacy():
    """(traces, settings) of the fixture's finished invocation; every row stored under fc-1.0.0 (an earlier
    classifier version than the current one)."""
    parts = sorted((INVOCATION / "traces").glob("*.parquet"))
    traces = pa.concat_tables([pq.read_table(p) for p in parts], promote_options="default")
    settings = Settings.from_json(json.loads((INVOCATION / "invocation.json").read_text())["settings"])
    assert set(traces.column("classifier_version").to_pylist()) == {"fc-1.0.0"}
    return traces, settings


def with_versions(traces, versions):
    i = traces.schema.get_field_index("classifier_version")
    return traces.set_column(i, traces.schema.field(i), pa.array(versions, pa.string()))


def run(traces, settings, **kw):
    return report(traces, settings, FINISHED, "legacy_fc", **kw)


def test_the_stored_version_on_every_row_reads_as_before(legacy):
    traces, settings = legacy
    rep = run(traces, settings)
    assert (rep.classifier_version, rep.reclassified) == ("fc-1.0.0", False) and CLASSIFIER_VERSION != "fc-1.0.0"
    # byte-identical to the fixture's analyze text (its lines before the outputs line)
    expected = (FIXTURE / "expected_analyze.txt").read_text().split("\noutputs: ")[0]
    assert format_report(rep) == expected


def test_rows_of_the_current_version_name_it_alone(legacy):
    traces, settings = legacy
    rep = run(with_versions(traces, [CLASSIFIER_VERSION] * traces.num_rows), settings)
    assert (rep.classifier_version, rep.reclassified) == (CLASSIFIER_VERSION, False)
    expected = (FIXTURE / "expected_analyze.txt").read_text().split("\noutputs: ")[0].splitlines()
    lines = format_report(rep).splitlines()
    assert lines[0] == expected[0].split("classifier ")[0] + f"classifier {CLASSIFIER_VERSION}"
    assert lines[1:] == expected[1:]


def test_an_older_stored_version_is_reported_as_stored(legacy):
    traces, settings = legacy
    rep = run(with_versions(traces, ["fc-0.9.0"] * traces.num_rows), settings)
    assert (rep.classifier_version, rep.reclassified) == ("fc-0.9.0", False)
    first = format_report(rep).splitlines()[0]
    assert "classifier fc-0.9.0" in first and f"current {CLASSIFIER_VERSION}" in first
    assert analysis(rep).numbers["classifier_version"] == "fc-0.9.0"


def test_mixed_stored_versions_are_refused_in_one_line(legacy):
    traces, settings = legacy
    n = traces.num_rows
    mixed = with_versions(traces, ["fc-0.9.0"] * (n // 2) + ["fc-1.0.0"] * (n - n // 2))
    with pytest.raises(AnalysisError) as info:
        run(mixed, settings)
    message = str(info.value)
    assert "\n" not in message and info.value.field == "classifier_version"
    assert "fc-0.9.0" in message and "fc-1.0.0" in message
    assert f"mirrorscan analyze {FINISHED} --reclassify" in message


def test_mixed_versions_are_counted_under_the_current_one_when_reclassified(legacy):
    traces, settings = legacy
    n = traces.num_rows
    mixed = with_versions(traces, ["fc-0.9.0"] * (n // 2) + ["fc-1.0.0"] * (n - n // 2))
    rep = run(mixed, settings, reclassify=True)
    assert (rep.classifier_version, rep.reclassified) == (CLASSIFIER_VERSION, True)
    assert format_report(rep).splitlines()[0].endswith(f"classifier {CLASSIFIER_VERSION}  (re-classified now)")


def test_only_counted_rows_carry_the_version(legacy):
    traces, settings = legacy
    # an error row (no class, no version) and a superseded attempt with another version are not counted
    first = traces.slice(0, 1).to_pylist()[0]
    failed = {**first, "error": "TimeoutError", "class": None, "classifier_version": None,
              "attempt": (first.get("attempt") or 0) + 1, "sample": 5}
    superseded = {**first, "classifier_version": "fc-0.1.0", "attempt": (first.get("attempt") or 0) + 1}
    extra = pa.Table.from_pylist([failed, superseded], schema=traces.schema)
    rep = run(pa.concat_tables([traces, extra]), settings)
    assert rep.classifier_version == "fc-1.0.0"   # the counted rows' stored version


def test_a_class_stored_without_a_version_is_not_passed_off_as_current(legacy):
    traces, settings = legacy
    rep = run(with_versions(traces, [None] * traces.num_rows), settings)
    assert rep.classifier_version is None and not rep.reclassified
    assert "classifier unrecorded" in format_report(rep).splitlines()[0]
    with pytest.raises(AnalysisError, match="unrecorded"):
        run(with_versions(traces, [None] + ["fc-1.0.0"] * (traces.num_rows - 1)), settings)
