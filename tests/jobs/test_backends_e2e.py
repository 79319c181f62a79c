"""One grid, three backends: the same experiment through `run_scan` with the demo model on HF (transformers in
an actor), vLLM (the CPU build's engine in an actor) and OpenAI-compatible HTTP (vLLM's own server on
127.0.0.1), with real Ray, a real catalog and a local store.

The backend is only a per-model key in config.json; every cell of every model must land once, greedy
answers must agree across the engines (float32), the streamed backends must carry request-scoped timing
that keeps the invariants, and each trace row must have its inference_log row in the catalog.
"""

from __future__ import annotations

import json
import os

import pytest

from mirrorscan.actors.streaming import timing_problems
from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs.scan import run_scan

PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n"
KEY_ENV = "MIRRORSCAN_TEST_VLLM_KEY"   # set by the session vllm_server fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def scanned(vllm_server, demo_dir, pg_dsn, ray_local, tmp_path_factory):
    """One scan of 2 pairs × 1 envelope × AB/BA on three backends (12 cells); its result, rows and DSN."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    assert os.environ.get(KEY_ENV), "the vllm_server fixture sets the key before Ray starts"
    name = "t_backends"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(pg_dsn, dbname=name)
    folder = tmp_path_factory.mktemp("exps") / "backends"
    folder.mkdir()
    (folder / "pairs.csv").write_text(PAIRS)
    config = {"instrument": "forced_choice", "probe_set": "pairs.csv", "envelopes": ["english_strict"],
              "max_tokens": 12, "batch_size": 4, "seed": 3, "models": [
                  {"model": str(demo_dir), "label": "hf"},
                  {"model": str(demo_dir), "label": "vllm", "backend": "vllm"},
                  {"model": "smollm2", "label": "http", "backend": "openai", "endpoint": vllm_server,
                   "api_key_env": KEY_ENV, "max_concurrency": 2}]}
    (folder / "config.json").write_text(json.dumps(config))
    store = str(tmp_path_factory.mktemp("store"))
    result = run_scan(str(folder), store=store, catalog_dsn=dsn, quiet=True)
    rows = open_store(store).read("backends", result.invocation_id).to_pylist()
    return result, rows, dsn


def test_every_cell_of_every_backend_lands_once(scanned):
    result, rows, _ = scanned
    assert [r["error"] for r in rows if r["error"]] == []
    assert result.status == "complete" and result.counts["ok"] == result.counts["cells"] == 12
    assert sorted((r["label"], r["backend"]) for r in rows) == sorted(
        [("hf", "hf")] * 4 + [("vllm", "vllm")] * 4 + [("http", "openai")] * 4)
    assert len({(r["probe_id"], r["sample"]) for r in rows}) == 12
    assert all(r["error"] is None and r["class"] in ("A", "B", "UNCLEAR", "REF") for r in rows)


def test_greedy_answers_agree_across_engines(scanned):
    _, rows, _ = scanned
    by = {(r["label"], r["item_key"], r["ordering"]): r["response"] for r in rows}
    cells = {(k[1], k[2]) for k in by}
    assert len(cells) == 4
    for item, ordering in cells:
        assert by[("hf", item, ordering)] == by[("vllm", item, ordering)], (item, ordering)
        assert by[("vllm", item, ordering)] == by[("http", item, ordering)], (item, ordering)


def test_streamed_backends_carry_request_timing(scanned):
    _, rows, _ = scanned
    for r in rows:
        if r["backend"] == "hf":
            assert r["timing_scope"] == "batch" and r["n_chunks"] is None
            continue
        assert r["timing_scope"] == "request" and timing_problems(r) == [], r["probe_id"]
        assert r["started_at"] is not None and r["request_params"]
    vllm = [r for r in rows if r["backend"] == "vllm"]
    assert all(1 <= r["n_chunks"] <= r["completion_tokens"] for r in vllm)   # a delta may carry several tokens
    # the vLLM engine answered inside a Ray actor of the pipeline (what an in-process engine never records)
    assert all(r["actor_id"] and r["node_id"] for r in vllm)
    http = [r for r in rows if r["backend"] == "openai"]
    assert all(json.loads(r["request_headers"])["X-Probe-Id"] == r["probe_id"] for r in http)
    assert all(os.environ[KEY_ENV] not in json.dumps(r, default=str) for r in rows)


def test_each_trace_row_has_its_inference_log_row(scanned):
    result, rows, dsn = scanned
    with Catalog(dsn) as catalog:
        logged = catalog.execute("SELECT probe_id, sample, attempt, label, source, ttft_ms FROM inference_log "
                                 "WHERE invocation_id = %s", [result.invocation_id])
    keys = sorted((r["probe_id"], r["sample"], r["attempt"]) for r in rows)
    assert sorted((probe_id, sample, attempt) for probe_id, sample, attempt, *_ in logged) == keys
    assert {source for *_, source, _ in logged} == {"engine"}
