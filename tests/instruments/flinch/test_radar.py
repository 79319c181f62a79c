"""The analysis radar sets the method's reference rows beside a run, as ``flinch compare``'s overlay does: every
reference model, dashed, over the run's axes it has, with the note that the comparison is indicative only; a run
whose axes the reference table does not have gets none. From stored rows, no Ray."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.flinch import charts, reference
from mirrorscan.instruments.flinch.corpus import load_corpus
from mirrorscan.instruments.flinch.instrument import INSTRUMENT

CARRIERS = ["The story ended when the hero was {BLANK}.", "Everyone in the village knew that it was {BLANK}."]


def scanned(tmp_path, axes: dict[str, list[str]]) -> tuple[pa.Table, Settings]:
    """Stored rows of two models over a corpus of ``axes`` (key → words), seeded lp values, and its settings."""
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"version": "t1", "axes": {
        k: {"label": k.title(), "terms": [{"word": w, "carriers": CARRIERS} for w in words]} for k, words in axes.items()}}))
    corpus = load_corpus(str(path))
    settings = Settings(instrument_settings={"corpus": corpus.path, "corpus_sha256": corpus.sha256,
                                             "corpus_version": "t1", "axes": list(corpus.axis_keys),
                                             "aggregation": "axis_lp_mean", "proxy_samples": 50,
                                             "n_items": corpus.n_carriers()})
    rng = np.random.default_rng(3)
    rows = [{"label": label, "probe_id": f"{label}|{axis}|{word}|{c}|-|-", "sample": 0, "attempt": 1, "axis": axis,
             "term": word, "carrier_index": c, "lp_mean": float(rng.uniform(-14, -2)), "error": None}
            for label in ("a", "b") for axis, words in axes.items() for word in words for c in (0, 1)]
    return pa.Table.from_pylist(rows), settings


@pytest.fixture
def drawn(monkeypatch):
    """What the analysis hands the radar: (models, axis labels, title, reference rows)."""
    calls = []

    def radar(models, axis_labels, title, references=()):
        calls.append((models, axis_labels, title, list(references)))
        return b"png"

    monkeypatch.setattr(charts, "radar", radar)
    return calls


def test_the_analysis_radar_overlays_every_reference_row_over_the_axes_it_has(tmp_path, drawn):
    table, settings = scanned(tmp_path, {"violence": ["killed", "shot", "stabbed"],
                                         "sexual": ["penis", "vagina", "anus"]})
    INSTRUMENT.analyze(table, settings)
    ((models, labels, title, refs),) = drawn
    assert [m["model"] for m in models] == ["a", "b"]
    table_rows = reference.baselines()
    assert [r["model"] for r in refs] == [f"{name} [reference]" for name in table_rows]
    for r, b in zip(refs, table_rows.values()):
        assert r["axes"] == {k: {"flinch": b.axes[k]} for k in ("violence", "sexual")}
        assert r["total_flinch"] == pytest.approx(b.axes["violence"] + b.axes["sexual"])
        assert r["total_of"] == "2 of its 6 axes"
    assert "reference rows" in title and "indicative" in title


def test_a_run_on_axes_the_reference_table_lacks_gets_no_reference_rows(tmp_path, drawn):
    table, settings = scanned(tmp_path, {"syn_a": ["zorbed", "blue", "gone"]})
    INSTRUMENT.analyze(table, settings)
    ((_, _, title, refs),) = drawn
    assert refs == [] and "reference" not in title


def test_reference_rows_lacking_one_of_the_runs_axes_sum_only_a_partial_total():
    (row, *_) = reference.radar_rows(["violence", "syn_a"])
    assert row["total_flinch"] is None and row["partial_total_flinch"] == pytest.approx(
        next(iter(reference.baselines().values())).axes["violence"])
    assert row["total_of"] == "partial: 1 of 2 axes; lacks syn_a" and "syn_a" not in row["axes"]


def test_the_radar_draws_the_reference_rows_dashed_and_names_them():
    refs = reference.radar_rows(["violence", "sexual"])
    run = [{"model": "run", "total_flinch": 50.0, "total_of": "2 of 2 axes",
            "axes": {"violence": {"flinch": 20.0}, "sexual": {"flinch": 30.0}}}]
    fig = charts.radar_figure(run, {"violence": "Violence", "sexual": "Sexual"}, "t", refs)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names[0].startswith("run (total 50.0") and len(names) == 1 + len(refs)
    assert all(n.startswith(r["model"]) for n, r in zip(names[1:], refs))
    styles = [line.get_linestyle() for line in ax.get_lines()]
    assert styles[0] == "-" and set(styles[1:]) == {"--"}
    assert charts.radar(run, {"violence": "Violence", "sexual": "Sexual"}, "t", refs).startswith(b"\x89PNG")
