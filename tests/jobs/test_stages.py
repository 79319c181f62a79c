"""Later stages and cells held across invocations, through scan and resume on a multi-process Ray.

``tests/plugin/echo_instrument.py:ECHO_TWICE`` asks each item, then asks again quoting the first answer (a
second stage built from the stored first-stage rows), and holds every cell an earlier invocation of the
experiment answered. A driver that fails between the stages resumes to exactly the second stage; a new
invocation with one more item runs that item alone, in both stages (the held first-stage cells build
no second-stage cells in it)."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest
from echo_instrument import EchoTwice

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs.scan import run_scan


def write_config(folder, tiny_dir, items):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "echo_instrument:ECHO_TWICE", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "echo_twice": {"items": items}, "max_tokens": 8, "batch_size": 4}))
    return folder


def rows_by_probe(store, invocation_id):
    rows = store.read("twice", invocation_id, columns=["probe_id", "sample", "error", "user_text", "response"])
    return {p: r for p, r in zip(rows.column("probe_id").to_pylist(), rows.to_pylist())}, rows.num_rows


def test_a_later_stage_resumes_and_held_cells_are_not_asked_again(tmp_path, tiny_dir, catalog_dsn, ray_local,
                                                                   monkeypatch):
    exp, store_uri = write_config(tmp_path / "twice", tiny_dir, ["alpha", "beta"]), str(tmp_path / "store")
    store = open_store(store_uri)
    monkeypatch.setenv(EchoTwice.FAIL_ENV, "1")
    with pytest.raises(RuntimeError, match="second stage refused"):
        run_scan(str(exp), store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    (first_id,) = store.dataset("twice").to_table(columns=["invocation_id"]).column(0).unique().to_pylist()
    rows, n = rows_by_probe(store, first_id)
    assert n == 2 and set(rows) == {"tiny|alpha|-|-", "tiny|beta|-|-"}   # the first stage only
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(first_id)["status"] == "failed"

    monkeypatch.delenv(EchoTwice.FAIL_ENV)
    resumed = run_scan(str(exp), resume=True, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert resumed.invocation_id == first_id and resumed.status == "complete"
    assert resumed.counts["cells"] == resumed.counts["ok"] == resumed.counts["rows"] == 4   # each cell once
    rows, n = rows_by_probe(store, first_id)
    assert n == 4
    for item in ("alpha", "beta"):
        again = rows[f"tiny|{item}~again|-|-"]
        assert again["error"] is None and repr(rows[f"tiny|{item}|-|-"]["response"]) in again["user_text"]

    write_config(exp, tiny_dir, ["alpha", "beta", "gamma"])   # a new invocation of the same experiment
    second = run_scan(str(exp), store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert second.invocation_id != first_id and second.status == "complete"
    assert second.counts["held_elsewhere"] == 4 and second.counts["cells"] == second.counts["ok"] == 2
    rows, n = rows_by_probe(store, second.invocation_id)
    assert n == 2 and set(rows) == {"tiny|gamma|-|-", "tiny|gamma~again|-|-"}
    all_rows = store.dataset("twice").to_table(columns=["probe_id", "error"])
    assert pc.sum(pc.is_null(all_rows.column("error")).cast("int64")).as_py() == 6 == all_rows.num_rows
