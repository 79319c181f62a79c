"""analyze and compare on real scans (tiny random model, real Ray and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from mirrorscan.instruments.forced_choice.classify import CLASSIFIER_VERSION
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs.analyze import analyze_invocation, format_report
from mirrorscan.jobs.compare import compare
from mirrorscan.jobs.scan import run_scan
from conftest import new_database

REPO = Path(__file__).resolve().parents[2]
MIRRORSCAN = str(Path(sys.executable).parent / "mirrorscan")
PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n"


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, tiny_dir, pg_dsn, ray_local):
    """One finished scan of 2 pairs × 3 envelopes × AB/BA (12 cells), shared by the module's tests (a scan
    starts an engine actor: ~15 s). The compare test, last in the file, adds a newer invocation."""
    base, catalog_dsn = tmp_path_factory.mktemp("analyze"), new_database(pg_dsn)
    exp = base / "fc2"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}], "probe_set": "pairs.csv",
        "envelopes": ["english_strict", "json_schema", "python_typed"], "max_tokens": 6, "batch_size": 8}))
    store = str(base / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    return {"exp": exp, "store": store, "dsn": catalog_dsn, "result": result}


def test_classes_are_written_at_scan_time_and_analysis_lands_beside_the_traces(scanned):
    store = open_store(scanned["store"])
    inv = scanned["result"].invocation_id
    rows = store.read("fc2", inv)
    assert rows.num_rows == 2 * 3 * 2
    assert pc.all(pc.is_valid(rows.column("class"))).as_py()
    assert set(rows.column("classifier_version").to_pylist()) == {CLASSIFIER_VERSION}
    assert set(rows.column("class").to_pylist()) <= {"A", "B", "UNCLEAR", "REF"}

    report = analyze_invocation(str(scanned["exp"]), catalog_dsn=scanned["dsn"])
    assert report.invocation_id == inv and not report.analysis.detail.reclassified
    (summary,) = report.analysis.detail.summaries
    stored_classes = rows.column("class").to_pylist()
    assert summary.commit_rate.n_answered == 12
    assert summary.commit_rate.n_a + summary.commit_rate.n_b == sum(c in ("A", "B") for c in stored_classes)
    assert summary.pair_commit_unanimity.n_pairs == 2 and summary.pair_commit_unanimity.rule == "unanimity"
    names = sorted(p.rsplit("/", 1)[1] for p in report.outputs)
    assert names == ["fingerprint_agreement.png", "pair_commit_split.png", "pairs.parquet",
                     "position_bias_by_envelope.png", "summary.json"]
    assert all(Path(p).read_bytes() for p in report.outputs)
    assert Path(report.outputs[-1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary_json = json.loads(next(Path(p) for p in report.outputs if p.endswith("summary.json")).read_text())
    assert summary_json["invocation_id"] == inv and summary_json["classifier_version"] == CLASSIFIER_VERSION
    table = format_report(report)
    assert "unanimity" in table and "tiny" in table and inv in table

    # re-classification reads the stored text again and leaves the stored rows alone
    parts_before = {p: Path(p).read_bytes() for p in store.list_parts("fc2", inv)}
    again = analyze_invocation(inv, catalog_dsn=scanned["dsn"], reannotate=True)
    assert again.analysis.detail.reclassified and again.analysis.detail.summaries[0].commit_rate == summary.commit_rate
    assert {p: Path(p).read_bytes() for p in store.list_parts("fc2", inv)} == parts_before
    # a second analysis lands in its own folder; the first one's files are still there
    assert again.outputs[0].rsplit("/", 1)[0] != report.outputs[0].rsplit("/", 1)[0]
    assert all(Path(p).is_file() for p in report.outputs + again.outputs)


def test_analyze_says_what_it_analyses_before_the_wait_only_on_a_terminal(scanned, capsys, monkeypatch):
    """On a terminal (``cluster.scan.progress.bar_wanted``) a line before the computation; in a pipe or CI, stderr
    stays empty and stdout is the analysis alone."""
    from mirrorscan.jobs import analyze as analyze_cli

    inv = scanned["result"].invocation_id
    for terminal in (False, True):
        monkeypatch.setattr("mirrorscan.cluster.scan.progress.bar_wanted", lambda requested, stream=None: terminal)
        capsys.readouterr()
        assert analyze_cli.main([inv, "--no-write", "--store", scanned["store"], "--catalog-dsn", scanned["dsn"]]) == 0
        out, err = capsys.readouterr()
        assert out.strip() and "analysing" not in out
        assert err == (f"analysing {inv} (forced_choice, experiment fc2)\n" if terminal else ""), err


def test_analyze_cli_names_a_missing_experiment(tmp_path, catalog_dsn):
    env = {"MIRRORSCAN_CATALOG_DSN": catalog_dsn, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([MIRRORSCAN, "analyze", "never_scanned"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "never_scanned" in proc.stderr and "mirrorscan scan" in proc.stderr


def test_statistics_read_an_invocations_traces_and_store_beside_it(scanned, monkeypatch, capsys):
    from mirrorscan.jobs import stats

    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", scanned["dsn"])
    inv = scanned["result"].invocation_id
    code = stats.main(["gstudy", "--input", inv, "--score", "completion_tokens", "--object", "pair_id",
                       "--facets", "envelope,ordering"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["invocation_id"] == inv
    assert set(result["components"]) >= {"pair_id", "envelope", "ordering", "residual"}
    stored = list((Path(scanned["store"]) / "fc2" / inv / "analysis" / "gstudy").glob("*/result.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["components"] == result["components"]
    # the experiment folder works as input too, and a missing column is one line naming it
    assert stats.main(["gstudy", "--input", str(scanned["exp"]), "--score", "no_such", "--object", "pair_id",
                       "--facets", "envelope"]) == 2
    assert "no_such" in capsys.readouterr().err


def test_compare_two_greedy_reruns_agree_completely(scanned):
    # last in the file: the rerun is the experiment's newest invocation from here on
    second = run_scan(str(scanned["exp"]), store=scanned["store"], catalog_dsn=scanned["dsn"], quiet=True)
    result = compare(scanned["result"].invocation_id, second.invocation_id, catalog_dsn=scanned["dsn"]).detail
    assert result.n_pairs == 2 and result.hamming == 0
    assert result.agreement == (1.0 if result.n_committed_either else None)   # undefined when nothing committed
