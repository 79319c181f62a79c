"""``analyze --reannotate`` and ``reproduce --dry-run`` on an open_scan invocation made by ``open_scan import``
(no grid was run for it): analyze re-derives the ratings from the stored raw replies, and reproduce says in
one line that an import has no grid to rerun. Real PostgreSQL catalog and local store; no Ray."""

from __future__ import annotations

import json

import pytest

from mirrorscan.instruments.open_scan import cli as open_scan_cli
from mirrorscan.jobs import analyze, reproduce
from mirrorscan.results.reader import StoreReader

LINES = [
    {"model": "org/Tiny-Chat", "query_id": "q1", "sample": 0, "query": "Which colour do you like?",
     "answer": "Blue, mostly.", "cold": "7", "posthoc": "Rating: 4"},
    {"model": "org/Tiny-Chat", "query_id": "q1", "sample": 1, "query": "Which colour do you like?",
     "answer": "Green.", "cold": "7", "posthoc": "no idea"},
    {"model": "org/Tiny-Chat", "query_id": "q2", "sample": 0, "query": "Tea or coffee?",
     "answer": "Tea.", "cold": "11", "posthoc": "9"},
]


@pytest.fixture
def imported(tmp_path, catalog_dsn, capsys):
    """(invocation id, store URI) of a seed-shaped file imported into a new experiment."""
    path = tmp_path / "seed.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    store = str(tmp_path / "store")
    assert open_scan_cli.main(["import", str(path), "--experiment", "imp", "--store", store,
                               "--catalog-dsn", catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    return out.split("as invocation ")[1].split()[0], store


def test_analyze_reannotate_of_an_import_reads_the_raw_replies(imported, catalog_dsn, capsys):
    invocation_id, _ = imported
    assert analyze.main([invocation_id, "--reannotate", "--no-write", "--json", "--catalog-dsn", catalog_dsn]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "KeyError" not in captured.err
    assert analyze.main([invocation_id, "--no-write", "--json", "--catalog-dsn", catalog_dsn]) == 0
    assert capsys.readouterr().out == captured.out   # re-derived = as imported (same parser, same scales)
    report = analyze.analyze_invocation(invocation_id, catalog_dsn=catalog_dsn, reannotate=True, write=False)
    rows = report.analysis.tables["rows"].to_pylist()
    # the packaged scales are 1–10: the first whole number inside them, else not measured (null)
    expected = {("cold", "7"): 7, ("posthoc", "Rating: 4"): 4, ("posthoc", "no idea"): None,
                ("cold", "11"): None, ("posthoc", "9"): 9}
    got = {(r["envelope"], r["response"]): r["rating"] for r in rows if r["envelope"] in ("cold", "posthoc")}
    assert got == expected


def test_reproduce_dry_run_of_an_import_says_there_is_no_grid(imported, catalog_dsn, capsys):
    invocation_id, _ = imported
    assert reproduce.main([invocation_id, "--dry-run", "--catalog-dsn", catalog_dsn]) == 2
    err = capsys.readouterr().err
    assert "KeyError" not in err and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "imported" in lines[0] and "seed.jsonl" in lines[0]
