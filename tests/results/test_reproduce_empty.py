"""``reproduce`` of an invocation that stored no traces (a scan interrupted before its first part landed) is
refused before anything runs, with the sentence the diff at its end would have printed, and its dry run says
so too: the diff needs the original's rows, so a reproduction of it could only end in exit 2 after writing a
whole new invocation. Real PostgreSQL catalog; the run itself must never start."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.scan.inputs import content_hashes
from mirrorscan.cluster.scan.run import ScanRun
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.jobs import reproduce


def empty_invocation(spec, store: str, dsn: str, status: str) -> str:
    """An invocation of ``spec`` recorded with ``status`` and no stored row (as Ctrl-C leaves one)."""
    invocation_id = str(uuid.uuid4())
    spec = dataclasses.replace(spec, store=store)
    open_store(store)
    with Catalog(dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": spec.experiment,
                                   "instrument": spec.instrument.name, "settings": spec.settings().to_json(),
                                   "settings_hash": "x", "store_uri": store, "content_hashes": content_hashes(spec),
                                   "status": status, "counts": {"cells": 2}})
    return invocation_id


def invocation_count(dsn: str) -> int:
    with Catalog(dsn) as catalog:
        return catalog.execute("SELECT count(*) FROM scan_invocations")[0][0]


@pytest.fixture
def empty(tmp_path, tiny_dir, catalog_dsn, monkeypatch):
    """A function of a status giving (id of an invocation with that status and no traces, its store, the DSN);
    running a scan fails the test."""
    exp = tmp_path / "empty_repro"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ncd,cat,dog\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 4}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}))
    store = str(tmp_path / "store")

    def ran(self):
        raise AssertionError("reproduce ran the grid of an invocation it cannot diff")

    monkeypatch.setattr(ScanRun, "execute", ran)
    return lambda status: (empty_invocation(load_spec(exp), store, catalog_dsn, status), store, catalog_dsn)


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("status", ["interrupted", "complete"])   # complete: its rows are in another store
def test_reproduce_of_an_invocation_without_traces_is_refused_before_it_runs(empty, capsys, dry, status):
    invocation_id, store, dsn = empty(status)
    code = reproduce.main([invocation_id, "--catalog-dsn", dsn, *(["--dry-run"] if dry else [])])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert f"invocation {invocation_id} has no traces in {store}" in lines[0]
    assert "finish it with scan --resume" in lines[0]
    assert "nothing that cannot be restored" not in captured.out
    assert invocation_count(dsn) == 1   # no new invocation was recorded
