"""An open_scan experiment scanned, imported into, edited and reverted, then reproduced (the tiny random Llama,
real Ray and PostgreSQL): every later scan runs after the import, the revert is refused until accepted and
then recorded, and the matrix — scanned and imported rows side by side — is right cell by cell against the
raw stored rows, computed here without the matrix's code, before and after a reproduction of the edit."""

from __future__ import annotations

import csv
import hashlib
import json

import pyarrow.parquet as pq
import pytest

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.open_scan import cli as verbs
from mirrorscan.jobs.scan import run_scan
from mirrorscan.results.reader import StoreReader

TEXTS = {"q1": "Tea or coffee?", "q2": "Which season do you like best?", "q3": "Cats or dogs?"}
EDITED = "Which season do you like most?"
FOREIGN = "Which season, and why?"   # a text of q2 only the imported file has


def probes(q2: str) -> str:
    return "query_id,query\n" + "".join(f"{q},{q2 if q == 'q2' else t}\n" for q, t in TEXTS.items())


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write(folder, tiny_dir, q2: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probes.csv").write_text(probes(q2))
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": 1, "batch_size": 8, "seed": 5,
        "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 5}, "report_max_tokens": 3}}))
    return str(folder)


SEED_LINES = [   # the seed tool's shape: hub ids, raw self-report replies, other keys kept
    {"model": "Org/TINY", "query_id": "q1", "sample": 0, "query": TEXTS["q1"], "answer": "Tea, always.",
     "cold": "7", "posthoc": "8/10", "temperature": 0.7, "locale": "en-AU"},
    {"model": "Org/TINY", "query_id": "q2", "sample": 0, "query": FOREIGN, "answer": "Autumn.", "cold": "3",
     "posthoc": "eleven"},
    {"model": "Org/TINY", "query_id": "q3", "sample": 0, "answer": "Dogs.", "cold": "0", "posthoc": "5"},
    {"model": "org/other-model", "query_id": "q1", "sample": 0, "answer": "Coffee.", "cold": "9", "posthoc": "9"},
]
IMPORTED_RATINGS = {"q1": (7, 8), "q3": (None, 5)}   # read by hand: "0" is off the 1–10 scale, "eleven" no number


def expected_matrix(rows: list[dict], current: dict[str, str], groups: set) -> dict:
    """(series, label, query_id, sample) → (answer, cold rating, post-hoc rating) of the current versions, from raw
    rows: the newest successful row of each (series, probe_id, sample); the cold row of the (series, label, probe
    version) at sample 0, the post-hoc row of the same sample."""
    best: dict = {}
    for r in rows:
        key = (r["series"], r["probe_id"], r["sample"])
        rank = (r["error"] is None, r["created_at"])
        if key not in best or rank > best[key][0]:
            best[key] = (rank, r)
    kept = [r for _, r in best.values()]

    def report(envelope: str, a: dict, sample: int):
        for r in kept:
            if (r["envelope"], r["series"], r["label"], r["query_id"], r["query_hash"], r["sample"]) == \
                    (envelope, a["series"], a["label"], a["query_id"], a["query_hash"], sample) and r["error"] is None:
                return r["rating"]
        return None

    return {(a["series"], a["label"], a["query_id"], a["sample"]):
            (a["response"] if a["error"] is None else None, report("cold", a, 0), report("posthoc", a, a["sample"]))
            for a in kept if a["envelope"] == "answer" and (a["series"], a["label"]) in groups
            and current.get(a["query_id"]) == a["query_hash"]}


def check_matrix(exp: str, dsn: str, store_uri: str, tmp_path, groups: set, capsys) -> str:
    """Run ``matrix``; assert its long form and CSV equal the matrix computed from the raw rows; its output."""
    capsys.readouterr()
    assert verbs.main(["matrix", exp, "--catalog-dsn", dsn, "--parquet", str(tmp_path / "m.parquet"),
                       "--csv", str(tmp_path / "m.csv")], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    raw = open_store(store_uri).dataset("mixed").to_table(
        columns=["invocation_id", "series", "probe_id", "label", "query_id", "query_hash", "envelope", "sample", "response", "rating",
                 "error", "created_at"]).to_pylist()
    from mirrorscan.cluster.catalog.client import Catalog

    with Catalog(dsn) as catalog:   # a reproduction checks another invocation; its rows are not the experiment's
        copies = {r[0] for r in catalog.execute("SELECT invocation_id::text FROM scan_invocations "
                                                "WHERE reproduces IS NOT NULL")}
    raw = [r for r in raw if r["invocation_id"] not in copies]
    current = {q: sha(t) for q, t in TEXTS.items()}   # the probe set now: q2 reverted to its first text
    expected = expected_matrix(raw, current, groups)
    long = pq.read_table(tmp_path / "m.parquet").to_pylist()
    got = {(r["series"], r["label"], r["query_id"], r["sample"]): (r["answer"], r["cold_rating"], r["posthoc_rating"])
           for r in long if r["status"] in ("answered", "failed")}
    assert got == expected
    missing = {(r["series"], r["query_id"]) for r in long if r["status"] == "missing"}
    assert missing == {(s, q) for s, _ in groups for q in TEXTS if (s, "tiny", q, 0) not in expected}
    with open(tmp_path / "m.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert {(r["series"], r["label"]): [r[q] for q in TEXTS] for r in table} == \
        {g: ["1" if (*g, q, 0) in expected else "missing" for q in TEXTS] for g in groups}
    return out


@pytest.mark.timeout(900)
def test_scanned_imported_edited_and_reverted_series_side_by_side(tmp_path, tiny_dir, catalog_dsn, ray_local, capsys):
    from mirrorscan.cluster.scan.records import Reproduction, ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.results.reproduce import plan

    exp, store_uri = write(tmp_path / "mixed", tiny_dir, TEXTS["q2"]), str(tmp_path / "store")
    first = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert first.status == "complete" and first.counts["ok"] == 9

    seed = tmp_path / "seed.jsonl"
    seed.write_text("".join(json.dumps(x) + "\n" for x in SEED_LINES))
    capsys.readouterr()
    assert verbs.main(["import", str(seed), "--experiment", "mixed", "--store", store_uri,
                       "--catalog-dsn", catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr()
    assert "dropped seed.jsonl:4: label 'other-model' (model 'org/other-model') matches no model" in out.err
    assert "1 line(s) of q2 carry another text than the probe set's" in out.err
    assert "imported 3 of 4 line(s)" in out.out
    imported_series = "imported:" + hashlib.sha256(seed.read_bytes()).hexdigest()[:12]
    rows = open_store(store_uri).dataset("mixed").to_table().to_pylist()
    mine = [r for r in rows if r["series"] == imported_series]
    assert {(r["query_id"], r["envelope"]): r["rating"] for r in mine if r["envelope"] != "answer" and r["query_id"] != "q2"} \
        == {("q1", "cold"): 7, ("q1", "posthoc"): 8, ("q3", "cold"): None, ("q3", "posthoc"): 5}
    assert {r["query_hash"] for r in mine if r["query_id"] == "q2"} == {sha(FOREIGN)}

    write(tmp_path / "mixed", tiny_dir, EDITED)   # an edit after the import: the next scan runs
    with pytest.raises(ConfigError, match=r"changed text under the same id since the last scan: q2"):
        run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    edit = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True, accept_changed_probes=True)
    assert edit.status == "complete" and edit.counts["ok"] == 3   # q2's new text: answer, cold, post-hoc

    write(tmp_path / "mixed", tiny_dir, TEXTS["q2"])   # back to the first text: a revert, refused until accepted
    with pytest.raises(ConfigError, match=r"returned to an earlier text: q2"):
        run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    revert = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True, accept_changed_probes=True)
    assert revert.invocation_id and revert.counts["cells"] == 0   # recorded; the first text's answers count again
    assert "reverted to an earlier text" in capsys.readouterr().err
    again = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert again.invocation_id == ""   # the revert is the text last used now: nothing to do

    scan_series = open_store(store_uri).read("mixed", first.invocation_id, columns=["series"]).column("series")[0].as_py()
    groups = {(scan_series, "tiny"), (imported_series, "tiny")}
    out = check_matrix(exp, catalog_dsn, store_uri, tmp_path, groups, capsys)
    assert f"2 models × 3 probes: 5 answered · 1 missing · 0 failed · 2 superseded" in out
    assert f"tiny [{imported_series} imported seed.jsonl]" in out
    assert f"reverted to {sha(TEXTS['q2'])[:8]}; its series continues" in out

    p = plan(edit.invocation_id, dsn=catalog_dsn)   # reproduce the edit: its own text, not the current one
    copy = ScanRun(p.spec, ScanOptions(catalog_dsn=catalog_dsn, quiet=True, reproduction=Reproduction(
        p.original.invocation_id, p.cells, p.submitted, p.model_sources))).execute()
    assert copy.status == "complete"
    out = check_matrix(exp, catalog_dsn, store_uri, tmp_path, groups, capsys)   # still the reverted text current
    assert f"2 models × 3 probes: 5 answered · 1 missing · 0 failed · 2 superseded" in out
