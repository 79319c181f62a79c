"""The matrix of an experiment made only of imported files (PostgreSQL catalog, local store, no Ray): each file
is its own series, side by side and labelled with its file, never merged; ``--series`` shows one alone."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from mirrorscan.instruments.open_scan import cli
from mirrorscan.results.reader import StoreReader


def line(model, qid, sample, answer, cold, posthoc, query):
    return {"model": model, "query_id": qid, "sample": sample, "answer": answer, "cold": cold, "posthoc": posthoc,
            "query": query}


def test_two_imported_files_are_two_labelled_rows_never_merged(tmp_path, catalog_dsn, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(x) + "\n" for x in [line("org/M", "q1", 0, "Tea.", "4", "6", "Tea?"),
                                                         line("org/M", "q2", 0, "Cats.", "5", "x", "Cats?")]))
    b.write_text(json.dumps(line("other/M", "q1", 0, "Coffee.", "9", "9", "Tea?")) + "\n")
    store = str(tmp_path / "store")
    for f in (a, b):
        assert cli.main(["import", str(f), "--experiment", "files", "--store", store, "--catalog-dsn", catalog_dsn],
                        "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    series = [s.split(",")[0] for s in out.split("(series ")[1:]]
    assert len(series) == 2 and series[0] != series[1]
    assert cli.main(["matrix", "files", "--catalog-dsn", catalog_dsn, "--parquet", str(tmp_path / "m.parquet")],
                    "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    assert f"experiment files · series {series[1]} · 2 models × 1 probes" in out   # the newest file's probes
    assert f"m [{series[1]} imported b.jsonl]" in out and f"m [{series[0]} imported a.jsonl]" in out
    cells = {(r["series"], r["query_id"]): (r["answer"], r["cold_rating"], r["posthoc_rating"])
             for r in pq.read_table(tmp_path / "m.parquet").to_pylist() if r["status"] == "answered"}
    assert cells == {(series[1], "q1"): ("Coffee.", 9, 9), (series[0], "q1"): ("Tea.", 4, 6)}   # each its own
    assert cli.main(["matrix", "files", "--series", series[0], "--catalog-dsn", catalog_dsn],
                    "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    assert f"series {series[0]} · 1 models × 2 probes" in out and "b.jsonl" not in out


def test_an_import_without_store_flag_writes_where_mirrorscan_store_points(tmp_path, catalog_dsn, monkeypatch, capsys):
    """The store is resolved as scan resolves it: --store, else $MIRRORSCAN_STORE, else the home's store."""
    f = tmp_path / "a.jsonl"
    f.write_text(json.dumps(line("org/M", "q1", 0, "Tea.", "4", "6", "Tea?")) + "\n")
    home, store = tmp_path / "home", tmp_path / "elsewhere"
    monkeypatch.setenv("MIRRORSCAN_HOME", str(home))
    monkeypatch.setenv("MIRRORSCAN_STORE", str(store))
    assert cli.main(["import", str(f), "--experiment", "files", "--catalog-dsn", catalog_dsn],
                    "mirrorscan open_scan", StoreReader()) == 0
    assert list((store / "files").rglob("*.parquet")), "nothing written under $MIRRORSCAN_STORE"
    assert not (home / "store").exists()
