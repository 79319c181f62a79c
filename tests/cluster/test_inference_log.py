"""The inference log against a real PostgreSQL: batched writes, auth headers dropped, spill to Parquet when
the catalog is unreachable, recovery when it comes back (nothing lost, nothing twice), the SQL view over
both, and one log row per trace row through the real Ray pipeline (HF sampler, tiny random model)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import time
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mirrorscan.actors.engine import Engine
from mirrorscan.cluster.catalog import embedded_pg
from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.catalog.inference_writer import InferenceLogWriter
from mirrorscan.cluster.catalog.inference_rows import LOG_COLUMNS, SPILL_SCHEMA, log_rows_from_traces
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import CatalogError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.results import sql as results_sql

UTC = dt.timezone.utc
AUTH = {"Authorization": "Bearer sk-secret-1", "X-Api-Key": "sk-secret-2", "Cookie": "session=sk-secret-3",
        "x-goog-api-key": "sk-secret-4", "Proxy-Authorization": "Basic sk-secret-5"}


def log_row(i: int, invocation_id: str, **overrides) -> dict:
    probe = f"tiny|w{i}|x{i}|english_strict|AB"
    row = {"probe_id": probe, "sample": i % 3, "attempt": 1, "invocation_id": invocation_id, "label": "tiny",
           "endpoint": "engine://hf/tiny", "source": "engine", "started_at": dt.datetime.now(UTC),
           "ttft_ms": 10.0 + i, "ttft_answer_ms": 12.0 + i, "intervals_ms": [1.5, 2.5, float(i)], "n_chunks": 4,
           "total_ms": 40.0 + i, "decode_tok_s": 90.0, "timing_scope": "request", "prompt_tokens": 30,
           "completion_tokens": 4, "status": "ok", "error": None,
           "request_headers": {"X-Probe-Id": probe, **AUTH}}
    return row | overrides


def catalog_rows(dsn: str) -> list[dict]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        return cur.execute("SELECT * FROM inference_log ORDER BY id").fetchall()


def spilled(store_uri: str) -> pa.Table:
    parts = sorted(Path(store_uri).rglob("inference_log/part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts]) if parts else SPILL_SCHEMA.empty_table()


def closed_dsn() -> str:
    """A DSN on a 127.0.0.1 port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/mirrorscan?connect_timeout=2"


@pytest.fixture
def own_server(own_catalog_server):
    """A catalog server of this test alone (conftest's ``own_catalog_server``); yields (root, dsn)."""
    return own_catalog_server


# --- rows ------------------------------------------------------------------------------------

def test_log_rows_from_traces_copy_timing_and_never_auth():
    inv = str(uuid.uuid4())
    started = dt.datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    traces = to_trace_table([
        {"invocation_id": inv, "probe_id": "tiny|a|b|e|AB", "sample": 0, "attempt": 1, "label": "tiny",
         "started_at": started, "ttft_ms": 5.0, "ttft_answer_ms": 7.0, "intervals_ms": [1.0, 2.0], "n_chunks": 3,
         "total_ms": 9.0, "decode_tok_s": 50.0, "timing_scope": "request", "prompt_tokens": 20,
         "completion_tokens": 3, "endpoint": "http://127.0.0.1:1/v1",
         "request_headers": json.dumps({"X-Probe-Id": "tiny|a|b|e|AB", **AUTH})},
        {"invocation_id": inv, "probe_id": "tiny|a|b|e|BA", "sample": 1, "attempt": 2, "label": "tiny",
         "timing_scope": "batch", "error": "TimeoutError: no answer in 5 s"}])
    rows = log_rows_from_traces(traces)
    assert [sorted(r) for r in rows] == [sorted(LOG_COLUMNS)] * 2
    first, second = rows
    assert first["status"] == "ok" and second["status"] == "error"
    assert second["error"] == "TimeoutError: no answer in 5 s" and second["attempt"] == 2
    assert first["started_at"] == started and first["intervals_ms"] == [1.0, 2.0] and first["n_chunks"] == 3
    assert first["request_headers"] == {"X-Probe-Id": "tiny|a|b|e|AB"}
    assert second["request_headers"] is None   # the engine sent no headers: absence, not an empty dict
    assert {r["source"] for r in rows} == {"engine"}
    assert log_rows_from_traces(traces, source="tap")[0]["source"] == "tap"


# --- the writer against the catalog -------------------------------------------------------------

def test_writer_writes_every_row_in_batches_without_auth_headers(catalog_dsn, tmp_path):
    inv = str(uuid.uuid4())
    writer = InferenceLogWriter(catalog_dsn, str(tmp_path / "store"), "exp", inv, "t", flush_rows=100,
                                flush_interval_s=0.05)
    rows = [log_row(i, inv) for i in range(1000)]
    for start in range(0, 1000, 37):
        writer.add(rows[start:start + 37])
    assert writer.flush(60)
    writer.close()
    assert (writer.written_rows, writer.spilled_rows, writer.lost_rows) == (1000, 0, 0)
    stored = catalog_rows(catalog_dsn)
    assert len(stored) == 1000 and len({r["row_uid"] for r in stored}) == 1000
    per_transaction = {}
    for r in stored:   # logged_at = now() = transaction start: one value per batch
        per_transaction[r["logged_at"]] = per_transaction.get(r["logged_at"], 0) + 1
    assert len(per_transaction) >= 10 and max(per_transaction.values()) <= 100
    by_sample = {(r["probe_id"], r["sample"]): r for r in stored}
    want = rows[417]
    got = by_sample[(want["probe_id"], want["sample"])]
    for column in ("ttft_ms", "ttft_answer_ms", "intervals_ms", "n_chunks", "total_ms", "decode_tok_s",
                   "timing_scope", "prompt_tokens", "completion_tokens", "status", "label", "endpoint"):
        assert got[column] == want[column], column
    assert str(got["invocation_id"]) == inv and got["started_at"] == want["started_at"]
    assert got["request_headers"] == {"X-Probe-Id": want["probe_id"]}
    with psycopg.connect(catalog_dsn) as conn:
        text = conn.execute("SELECT string_agg(request_headers::text, ' ') FROM inference_log").fetchone()[0]
    assert "sk-secret" not in text and "uthorization" not in text and "ookie" not in text


def test_the_log_is_append_only(catalog_dsn, tmp_path):
    inv = str(uuid.uuid4())
    writer = InferenceLogWriter(catalog_dsn, None, "exp", inv, "t")
    writer.add([log_row(i, inv) for i in range(3)])
    writer.close()
    with Catalog(catalog_dsn) as catalog:
        for statement in ("UPDATE inference_log SET status = 'error'", "DELETE FROM inference_log WHERE id < 0",
                          "TRUNCATE inference_log"):
            with pytest.raises(CatalogError, match="append-only"):
                catalog.execute(statement)
        assert catalog.execute("SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM inference_log") == [(3, 3)]


def test_unreachable_catalog_spills_every_row_to_parquet_with_a_warning(tmp_path, caplog):
    inv, store = str(uuid.uuid4()), str(tmp_path / "store")
    writer = InferenceLogWriter(closed_dsn(), store, "exp", inv, "t", flush_rows=64, retry_s=0.5)
    with caplog.at_level(logging.WARNING, logger="mirrorscan.cluster.catalog.inference_writer"):
        for start in range(0, 300, 50):
            writer.add([log_row(i, inv) for i in range(start, start + 50)])
        assert writer.flush(60)
        writer.close()
    assert (writer.written_rows, writer.spilled_rows, writer.lost_rows) == (0, 300, 0)
    table = spilled(store)
    assert table.schema.equals(SPILL_SCHEMA) and table.num_rows == 300
    assert len(set(table.column("row_uid").to_pylist())) == 300
    assert all(p.startswith(f"{store}/exp/{inv}/inference_log/part-") for p in writer.spill_paths)
    assert not list(Path(store).rglob(".*.tmp"))
    assert sorted(table.column("sample").to_pylist()) == sorted(i % 3 for i in range(300))
    headers = [json.loads(h) for h in table.column("request_headers").to_pylist()]
    assert all(list(h) == ["X-Probe-Id"] for h in headers)
    assert "sk-secret" not in caplog.text
    assert any("spilled" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_catalog_down_then_back_loses_nothing_and_writes_nothing_twice(own_server, tmp_path):
    root, dsn = own_server
    inv, store = str(uuid.uuid4()), str(tmp_path / "store")
    Catalog(dsn).close()   # migrated: the table exists
    writer = InferenceLogWriter(dsn, store, "exp", inv, "t", flush_rows=50, flush_interval_s=0.05, retry_s=120)
    writer.add([log_row(i, inv) for i in range(100)])
    assert writer.flush(60) and writer.written_rows == 100

    embedded_pg.stop(root)
    writer.add([log_row(i, inv) for i in range(100, 250)])   # returns at once: the database is not touched
    assert not writer.flush(3)   # queued and retried, not spilled (retry_s is long)
    assert not writer.healthy and writer.spilled_rows == 0
    assert embedded_pg.ensure_running(root, durable=False) == dsn   # same port after a restart
    assert writer.flush(90)
    writer.close()
    assert (writer.written_rows, writer.spilled_rows, writer.lost_rows) == (250, 0, 0)
    stored = catalog_rows(dsn)
    assert len(stored) == 250 and len({r["row_uid"] for r in stored}) == 250
    assert sorted(r["ttft_ms"] for r in stored) == [10.0 + i for i in range(250)]
    assert spilled(store).num_rows == 0


def test_catalog_down_for_good_spills_only_what_it_did_not_take(own_server, tmp_path):
    root, dsn = own_server
    inv, store = str(uuid.uuid4()), str(tmp_path / "store")
    writer = InferenceLogWriter(dsn, store, "exp", inv, "t", flush_rows=40, retry_s=1.0)
    writer.add([log_row(i, inv) for i in range(60)])
    assert writer.flush(60) and writer.written_rows == 60
    embedded_pg.stop(root)
    writer.add([log_row(i, inv) for i in range(60, 150)])
    assert writer.flush(60)   # within retry_s + spill
    writer.close()
    assert (writer.written_rows, writer.spilled_rows, writer.lost_rows) == (60, 90, 0)
    embedded_pg.ensure_running(root, durable=False)
    in_catalog = {str(r["row_uid"]) for r in catalog_rows(dsn)}
    in_spill = set(spilled(store).column("row_uid").to_pylist())
    assert len(in_catalog) == 60 and len(in_spill) == 90 and not in_catalog & in_spill
    assert sorted(spilled(store).column("ttft_ms").to_pylist()) == [10.0 + i for i in range(60, 150)]


# --- the SQL view ----------------------------------------------------------------------------

def test_sql_view_unions_catalog_and_spilled_rows_once_each(catalog_dsn, tmp_path):
    store = str(tmp_path / "store")
    inv = str(uuid.uuid4())
    in_catalog = InferenceLogWriter(catalog_dsn, store, "exp", inv, "a")
    in_catalog.add([log_row(i, inv) for i in range(5)])
    in_catalog.close()
    to_spill = InferenceLogWriter(closed_dsn(), store, "exp", inv, "b", retry_s=0.2)
    to_spill.add([log_row(i, inv, status="error", error="boom") for i in range(5, 8)])
    to_spill.close()
    # a batch whose commit was in doubt: in the catalog and spilled too; the view keeps the catalog copy
    doubt = pa.Table.from_pylist(catalog_rows_as_spill(catalog_dsn)[:2], schema=SPILL_SCHEMA)
    spill_store = open_store(store)
    spill_store.write_parquet_part(f"{spill_store.invocation_dir('exp', inv)}/inference_log", doubt, "c")

    got = results_sql.query("SELECT stored_in, count(*) AS n, count(DISTINCT row_uid) AS uids, min(status) AS status "
                    "FROM inference_log GROUP BY 1 ORDER BY 1", store, catalog_dsn).to_pylist()
    assert got == [{"stored_in": "catalog", "n": 5, "uids": 5, "status": "ok"},
                   {"stored_in": "spill", "n": 3, "uids": 3, "status": "error"}]
    one = results_sql.query("SELECT probe_id, intervals_ms, request_headers->>'X-Probe-Id' AS probe_header, "
                    "ttft_ms, id IS NULL AS no_id FROM inference_log WHERE stored_in = 'spill' ORDER BY ttft_ms "
                    "LIMIT 1", store, catalog_dsn).to_pylist()[0]
    assert one == {"probe_id": log_row(5, inv)["probe_id"], "intervals_ms": [1.5, 2.5, 5.0],
                   "probe_header": log_row(5, inv)["probe_id"], "ttft_ms": 15.0, "no_id": True}


def catalog_rows_as_spill(dsn: str) -> list[dict]:
    rows = []
    for r in catalog_rows(dsn):
        row = {c: r[c] for c in SPILL_SCHEMA.names}
        row.update(invocation_id=str(r["invocation_id"]), row_uid=str(r["row_uid"]),
                   request_headers=json.dumps(r["request_headers"]))
        rows.append(row)
    return rows


# --- through the real pipeline -----------------------------------------------------------------

def test_scan_writes_one_log_row_per_trace_row(tmp_path, tiny_dir, catalog_dsn, ray_local):
    from mirrorscan.jobs.scan import run_scan

    exp = tmp_path / "exps" / "fc"
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\ntc,tea,coffee\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"], "samples": 1,
        "temperature": 0.0, "max_tokens": 6, "seed": 5, "batch_size": 4, "actor_pool_size": 1}))
    store = str(tmp_path / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    traces = open_store(store).read("fc", result.invocation_id).to_pylist()
    assert len(traces) == 12
    log = results_sql.query(f"SELECT * FROM inference_log WHERE invocation_id = '{result.invocation_id}'",
                    store, catalog_dsn).to_pylist()
    assert sorted((r["probe_id"], r["sample"], r["attempt"]) for r in log) == \
        sorted((t["probe_id"], t["sample"], t["attempt"]) for t in traces)
    assert {r["stored_in"] for r in log} == {"catalog"} and {r["source"] for r in log} == {"engine"}
    by_key = {(t["probe_id"], t["sample"]): t for t in traces}
    for r in log:
        t = by_key[(r["probe_id"], r["sample"])]
        assert (r["ttft_ms"], r["total_ms"], r["completion_tokens"], r["timing_scope"]) == \
            (t["ttft_ms"], t["total_ms"], t["completion_tokens"], t["timing_scope"])
        assert r["status"] == ("ok" if t["error"] is None else "error")


def test_pipeline_with_unreachable_catalog_keeps_traces_and_spills_log_rows(tmp_path, tiny_dir, ray_local):
    from mirrorscan.actors.hf_sampler import HFSampler
    from mirrorscan.cluster.scan.pipeline import Pool, run_model
    from fc_grid import fc_cells, fc_ref

    pairs = pa.table({"pair_id": ["vw", "cd", "tc"], "word_a": ["vodka", "cat", "tea"],
                      "word_b": ["whiskey", "dog", "coffee"]})
    cells = fc_cells(["tiny"], pairs, ["english_strict"], ["AB", "BA"], 2, seed=3)
    instrument = fc_ref(["english_strict"])
    inv, store = str(uuid.uuid4()), str(tmp_path / "store")
    run = InvocationContext(invocation_id=inv, experiment="exp", instrument="forced_choice", envelope_version="t",
                     catalog_dsn=closed_dsn(), store_uri=store)
    variant = ModelVariant(label="tiny", model="tiny", temperature=0.0, top_p=1.0, max_tokens=6, dtype="float32")
    kwargs = {"variant": variant, "model_source": str(tiny_dir), "run": run}
    pool = Pool(HFSampler, kwargs, instrument, store_uri=store, experiment="exp", invocation_id=inv, batch_size=4)
    done = sum(rows for rows, _ in run_model(cells, pool))
    assert done == cells.num_rows == 12
    traces = open_store(store).read("exp", inv)
    assert traces.num_rows == 12   # every trace landed although the catalog never answered
    deadline = time.monotonic() + 120   # the actor spills at teardown, after retry_s (10 s)
    while spilled(store).num_rows < 12 and time.monotonic() < deadline:
        time.sleep(0.5)
    log = spilled(store)
    assert sorted(zip(log.column("probe_id").to_pylist(), log.column("sample").to_pylist())) == \
        sorted(zip(traces.column("probe_id").to_pylist(), traces.column("sample").to_pylist()))
    assert len(set(log.column("row_uid").to_pylist())) == 12


class StandInEngine(Engine):
    """Answers every cell with a fixed trace row (no model): the engine interface, for StoringEngine."""

    kind, backend = "generate", "standin"

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        self.run = run

    def __call__(self, batch: pa.Table) -> pa.Table:
        return to_trace_table([{"invocation_id": self.run.invocation_id, "experiment": self.run.experiment,
                                "probe_id": p, "sample": s, "attempt": 1, "label": "stand-in", "response": "A",
                                "ttft_ms": 1.0, "total_ms": 2.0, "timing_scope": "request"}
                               for p, s in zip(batch["probe_id"].to_pylist(), batch["sample"].to_pylist())])


def test_storing_engine_keeps_log_rows_the_catalog_never_took_until_teardown(tmp_path, monkeypatch):
    from mirrorscan.cluster.scan import pipeline
    from mirrorscan.cluster.scan.pipeline import Pool, StoringEngine

    monkeypatch.setattr(pipeline, "LOG_CLOSE_S", 4.0)   # teardown spills after half of it (30 s in a run)
    inv, store = str(uuid.uuid4()), str(tmp_path / "store")
    run = InvocationContext(invocation_id=inv, experiment="exp", instrument="forced_choice", catalog_dsn=closed_dsn())
    variant = ModelVariant(label="stand-in", model="stand-in")
    engine = StoringEngine(Pool(StandInEngine, {"variant": variant, "model_source": "", "run": run}, None,
                                store_uri=store, experiment="exp", invocation_id=inv, batch_size=5))
    engine.log.retry_s = 600.0   # the thread alone would keep retrying: only teardown can spill
    for first in (0, 5):
        batch = pa.table({"probe_id": [f"s|w{i}|x|e|AB" for i in range(first, first + 5)], "sample": [0] * 5})
        assert engine(batch).to_pylist() == [{"rows": 5, "errors": 0}]
    assert open_store(store).read("exp", inv).num_rows == 10   # traces landed while the catalog was down
    assert not engine.log.healthy   # so __call__ stopped waiting for the log
    assert engine.log.spilled_rows == 0 and engine.log.written_rows == 0   # all 10 rows still queued
    del engine   # what Ray Data's graceful teardown does (_MapWorker.__ray_shutdown__ drops the UDF)
    log = spilled(store)
    assert sorted(log.column("probe_id").to_pylist()) == sorted(f"s|w{i}|x|e|AB" for i in range(10))
    assert set(log.column("source").to_pylist()) == {"engine"} and set(log.column("status").to_pylist()) == {"ok"}


# --- a whole scan whose catalog goes away mid-run ----------------------------------------------------

def outage_experiment(tmp_path: Path, tiny_dir: Path) -> Path:
    """3 pairs × 1 envelope × AB/BA × 1 sample = 6 cells of the tiny model, batches of 2."""
    exp = tmp_path / "exps" / "outage"
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\ntc,tea,coffee\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "probe_set": "pairs.csv", "envelopes": ["english_strict"], "samples": 1, "temperature": 0.0,
        "max_tokens": 4, "seed": 2, "batch_size": 2, "actor_pool_size": 1}))
    return exp


def catalog_down_while_cells_run(monkeypatch, root: Path, *, back_after: bool) -> None:
    """The catalog server stops once the invocation is recorded, before any cell runs; it is started again
    when the cells are done (``back_after``) or stays down."""
    from mirrorscan.cluster.scan.run import ScanRun

    original = ScanRun.run_cells
    # the driver cannot renew its lease while the catalog is down; these tests are about the traces and log
    # rows, not about a lapsed lease (tests/cluster/test_runs.py), so the lease outlives any slow run here
    monkeypatch.setenv("MIRRORSCAN_LEASE_TTL_S", "900")

    def run_cells_without_catalog(*args, **kwargs):
        embedded_pg.stop(root)
        try:
            return original(*args, **kwargs)
        finally:
            if back_after:
                embedded_pg.ensure_running(root, durable=False)
    monkeypatch.setattr(ScanRun, "run_cells", run_cells_without_catalog)


def assert_one_log_row_per_trace(store: str, dsn: str, invocation_id: str) -> None:
    traces = open_store(store).read("outage", invocation_id)
    log = results_sql.query(f"SELECT probe_id, sample, stored_in FROM inference_log WHERE invocation_id = '{invocation_id}'",
                    store, dsn)
    assert sorted(zip(log["probe_id"].to_pylist(), log["sample"].to_pylist())) == \
        sorted(zip(traces["probe_id"].to_pylist(), traces["sample"].to_pylist()))


def test_scan_whose_catalog_comes_back_records_its_status(own_server, tmp_path, tiny_dir, ray_local, monkeypatch):
    from mirrorscan.jobs.scan import run_scan

    root, dsn = own_server
    catalog_down_while_cells_run(monkeypatch, root, back_after=True)
    store = str(tmp_path / "store")
    result = run_scan(str(outage_experiment(tmp_path, tiny_dir)), store=store, catalog_dsn=dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == 6
    with Catalog(dsn) as catalog:   # the final status reached the restarted catalog (a new connection)
        inv = catalog.get_invocation(result.invocation_id)
    assert inv["status"] == "complete" and inv["counts"]["ok"] == 6 and inv["finished_at"] is not None
    assert open_store(store).read("outage", result.invocation_id).num_rows == 6
    assert_one_log_row_per_trace(store, dsn, result.invocation_id)   # spilled while down, none lost or twice


def test_scan_whose_catalog_stays_down_keeps_its_outcome_and_resume_records_it(own_server, tmp_path, tiny_dir,
                                                                            ray_local, monkeypatch, capsys):
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.jobs import scan

    root, dsn = own_server
    catalog_down_while_cells_run(monkeypatch, root, back_after=False)
    monkeypatch.setenv("MIRRORSCAN_CATALOG_FINAL_WAIT_S", "3")
    exp, store = outage_experiment(tmp_path, tiny_dir), str(tmp_path / "store")
    rc = scan.main([str(exp), "--store", store, "--catalog-dsn", dsn, "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1
    message = [line for line in err.splitlines() if line.startswith("catalog error:")]
    assert len(message) == 1 and "complete: 6/6 cells ok" in message[0] and "--resume" in message[0], err
    outcomes = list(Path(store).glob("outage/*/outcome/*.json"))
    assert len(outcomes) == 1 and outcomes[0].name in message[0]
    outcome = json.loads(outcomes[0].read_text())
    assert outcome["status"] == "complete" and outcome["counts"]["ok"] == 6
    invocation_id = outcome["invocation_id"]
    assert open_store(store).read("outage", invocation_id).num_rows == 6   # every trace landed meanwhile

    assert embedded_pg.ensure_running(root, durable=False) == dsn
    with Catalog(dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "running"   # what the catalog knew
    monkeypatch.setattr(ScanRun, "run_cells", lambda *a, **k: pytest.fail("resume reran stored cells"))
    result = scan.run_scan(str(exp), resume=True, store=store, catalog_dsn=dsn, quiet=True)
    assert result.invocation_id == invocation_id and result.status == "complete"
    with Catalog(dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "complete"
    assert open_store(store).read("outage", invocation_id).num_rows == 6
    assert_one_log_row_per_trace(store, dsn, invocation_id)
