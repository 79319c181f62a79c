"""``flinch compare`` of two or more models of one invocation: their intervals and paired differences come from
the invocation's carrier rows by analyze's own code, the same numbers as analyze's over the run's axes and a total
over the compared axes only when fewer are compared (no Ray: the analysis runs on stored-shaped rows)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mirrorscan.instruments.flinch.compare import compare, format_table
from mirrorscan.instruments.flinch.instrument import INSTRUMENT
from mirrorscan.jobs.cli import main as cli
from test_intervals import MODELS, WORDS, corpus, seeded, settings_for, traces  # noqa: F401 (corpus: a fixture)


@pytest.fixture()
def analysed(tmp_path, corpus):
    """An analysis folder as analyze writes it: summary.json beside carriers.parquet; and the analysis."""
    failed = {("m2", "syn_b", "late", 0)}
    analysis = INSTRUMENT.analyze(traces(seeded(), failed), settings_for(corpus))
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(analysis.numbers))
    pq.write_table(analysis.tables["carriers"], folder / "carriers.parquet")
    return folder, analysis


def test_models_of_one_invocation_get_analyze_s_intervals_and_paired_differences(analysed, capsys):
    folder, analysis = analysed
    out = compare([str(folder / "summary.json")])
    (group,) = out["invocations"]
    assert group["models"] == list(MODELS) and out["notes"] == []
    assert group["intervals"] == analysis.numbers["intervals"]   # the same code on the same rows
    text = format_table(out)
    assert "models of one invocation" in text and "paired differences" in text
    assert "    total: m1 − m2 " in text and "  syn_b  (random: term, carrier; REML, 1 cell(s) missing)" in text
    assert cli(["flinch", "compare", str(folder / "summary.json"), "--out", str(folder / "r.png")]) == 0
    assert "    syn_a: m2 − m3 " in capsys.readouterr().out


def test_the_total_is_over_the_compared_axes_only(analysed):
    folder, analysis = analysed
    out = compare([str(folder / "summary.json")], axes=["syn_b"])
    heads = out["invocations"][0]["intervals"]["headlines"]
    assert set(heads) == {"flinch_syn_b"}   # one axis compared: its score is the total
    assert heads["flinch_syn_b"] == analysis.numbers["intervals"]["headlines"]["flinch_syn_b"]
    out = compare([str(folder / "summary.json"), str(folder / "summary.json")])
    assert len(out["invocations"]) == 1   # one file, its models once


def test_an_input_without_its_carrier_rows_gets_a_note_not_a_guess(analysed, tmp_path):
    folder, _ = analysed
    alone = tmp_path / "elsewhere.json"
    alone.write_text((folder / "summary.json").read_text())
    out = compare([str(alone)])
    assert out["invocations"] == [] and "no carriers.parquet beside it" in out["notes"][0]
    assert "note: " in format_table(out) and "paired differences (" not in format_table(out)
