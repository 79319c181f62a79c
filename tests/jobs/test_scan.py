"""Scan end to end with real Ray, a real PostgreSQL catalog, a local store and the tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import CatalogError, ConfigError
from mirrorscan.grid.ids import cell_seed
from mirrorscan.results import sql as results_sql
from mirrorscan.jobs.scan import run_scan
from conftest import new_database

PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\ntea_coffee,tea,coffee\n"


def write_experiment(folder: Path, tiny_dir: Path, **overrides) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(PAIRS)
    config = {"instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"},
                                                        {"model": str(tiny_dir), "label": "tiny@hot", "temperature": 1.0}],
              "probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"], "samples": 2,
              "temperature": 0.0, "max_tokens": 6, "seed": 5, "batch_size": 8, "actor_pool_size": 1,
              "max_concurrent_models": 2, **overrides}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def successful(store, experiment, invocation_id):
    rows = store.read(experiment, invocation_id)
    return rows.filter(pc.is_null(rows.column("error")))


@pytest.fixture
def setup(tmp_path, tiny_dir, catalog_dsn, ray_local):
    exp = write_experiment(tmp_path / "exps" / "fc", tiny_dir)
    return {"exp": exp, "store": str(tmp_path / "store"), "dsn": catalog_dsn}


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, tiny_dir, pg_dsn, ray_local):
    """One finished scan of the two-model grid (48 cells), shared by the tests that only read it (each
    scan starts an actor per model: ~20 s)."""
    base, catalog_dsn = tmp_path_factory.mktemp("scanned"), new_database(pg_dsn)
    setup = {"exp": write_experiment(base / "exps" / "fc", tiny_dir), "store": str(base / "store"), "dsn": catalog_dsn}
    return {**setup, "result": run_scan(str(setup["exp"]), store=setup["store"], catalog_dsn=catalog_dsn, quiet=True)}


def test_scan_stores_every_cell_once_and_records_the_invocation(scanned):
    setup, result = scanned, scanned["result"]
    assert result.status == "complete"
    assert result.counts == {"cells": 48, "ok": 48, "error": 0, "missing": 0, "rows": 48, "error_rows": 0, "given_up": 0}
    store = open_store(setup["store"])
    rows = store.read("fc", result.invocation_id)
    keys = {(p, s) for p, s in zip(rows["probe_id"].to_pylist(), rows["sample"].to_pylist())}
    assert len(keys) == rows.num_rows == 48
    assert {r.split("|")[0] for r, _ in keys} == {"tiny", "tiny@hot"}
    for row in rows.to_pylist():
        assert row["seed"] == cell_seed(5, row["probe_id"], row["sample"])
        assert row["invocation_id"] == result.invocation_id and row["node_id"] and row["actor_id"]
        assert row["temperature"] == (1.0 if row["label"] == "tiny@hot" else 0.0)
        if row["envelope"] == "json_schema":
            expected = (row["word_a"], row["word_b"]) if row["ordering"] == "AB" else (row["word_b"], row["word_a"])
            assert row["user_text"] == f'Return {{"choice": "..."}} where "..." is either "{expected[0]}" or "{expected[1]}".'
    with Catalog(setup["dsn"]) as catalog:
        inv = catalog.get_invocation(result.invocation_id)
    assert inv["status"] == "complete" and inv["finished_at"] is not None
    assert inv["settings"]["max_tokens"] == 6 and inv["settings"]["models"][1]["label"] == "tiny@hot"
    assert inv["counts"]["ok"] == 48 and "ray" in inv["package_versions"]
    assert inv["git_sha"] and inv["git_dirty"] in (True, False)
    assert inv["content_hashes"]["probe_set"] == inv["settings"]["instrument_settings"]["probe_set_sha256"]
    manifest = json.loads((Path(setup["store"]) / "fc" / result.invocation_id / "invocation.json").read_text())
    assert manifest["settings"] == inv["settings"]
    with Catalog(setup["dsn"]) as catalog:
        (submitted,), = catalog.execute("SELECT submitted_config FROM scan_runs WHERE invocation_id = %s",
                                        [result.invocation_id])
    assert submitted["config"] == json.loads((setup["exp"] / "config.json").read_text())
    assert submitted["file"] == str((setup["exp"] / "config.json").resolve())


def test_the_config_as_submitted_keeps_no_catalog_password(tmp_path, tiny_dir):
    from mirrorscan.grid.spec import load_spec
    from mirrorscan.cluster.scan.inputs import submitted_config

    exp = write_experiment(tmp_path / "fc", tiny_dir, catalog_dsn="postgresql://scanner:hunter2-pw@db.internal/mirror")
    recorded = json.dumps(submitted_config(load_spec(exp)))
    assert "hunter2-pw" not in recorded and "postgresql://scanner@db.internal/mirror" in recorded


def test_plain_rerun_is_a_new_invocation_and_sampled_cells_reproduce(scanned, tmp_path, tiny_dir, capsys):
    first = scanned["result"]
    store = open_store(scanned["store"])
    parts_before = store.list_parts("fc", first.invocation_id)
    rerun = write_experiment(tmp_path / "fc", tiny_dir, batch_size=5)   # experiment "fc" again, other batch mixes
    with pytest.raises(ConfigError, match="experiment 'fc' already holds runs of .*scanned.*fc/config.json") as info:
        run_scan(str(rerun), store=scanned["store"], catalog_dsn=scanned["dsn"], quiet=True)   # another folder
    assert "--as NAME" in info.value.fix and len(parts_before) == len(store.list_parts("fc", first.invocation_id))
    capsys.readouterr()
    second = run_scan(str(rerun), store=scanned["store"], catalog_dsn=scanned["dsn"], quiet=False, as_name="fc")
    bar = capsys.readouterr().err   # the progress bar says what it waits for before cells land
    # both pools load at once (max_concurrent_models 2), and the bar names each
    assert "scan fc · loading tiny (transformers) · loading tiny@hot (transformers)" in bar
    assert second.invocation_id != first.invocation_id and second.status == "complete"
    assert store.list_parts("fc", first.invocation_id) == parts_before
    from mirrorscan.cluster.catalog.client import resolve_invocation

    with Catalog(scanned["dsn"]) as catalog:   # `analyze DIR` picks that folder's newest invocation
        assert resolve_invocation(str(rerun), catalog)["invocation_id"] == second.invocation_id
        assert resolve_invocation(str(scanned["exp"]), catalog)["invocation_id"] == first.invocation_id
    a = {(r["probe_id"], r["sample"]): r["response"] for r in store.read("fc", first.invocation_id).to_pylist()}
    b = {(r["probe_id"], r["sample"]): r["response"] for r in store.read("fc", second.invocation_id).to_pylist()}
    assert a.keys() == b.keys()
    hot = [k for k in a if k[0].startswith("tiny@hot|")]
    assert len(hot) == 24 and all(a[k] == b[k] for k in hot)
    assert len({a[k] for k in hot}) > 12   # sampling really sampled


def test_sql_joins_a_trace_to_its_frozen_settings(scanned):
    setup, result = scanned, scanned["result"]
    probe = "tiny|vodka|whiskey|english_strict|AB"
    table = results_sql.query(
        "SELECT si.settings->>'max_tokens' AS max_tokens, t.response, t.experiment_version "
        "FROM traces t JOIN scan_invocations si ON si.invocation_id::text = t.experiment_version "
        f"WHERE t.probe_id = '{probe}' AND t.invocation_id = '{result.invocation_id}' ORDER BY t.sample",
        setup["store"], setup["dsn"])
    assert table.column("max_tokens").to_pylist() == ["6", "6"]   # each trace found its invocation's settings
    assert set(table.column("experiment_version").to_pylist()) == {result.invocation_id}


def test_resume_refuses_changed_settings_and_retries_error_cells(setup, tiny_dir):
    one_model = [{"model": str(tiny_dir), "label": "tiny"}]   # 24 cells: one actor start instead of two
    write_experiment(setup["exp"], tiny_dir, models=one_model)
    result = run_scan(str(setup["exp"]), store=setup["store"], catalog_dsn=setup["dsn"], quiet=True)
    store = open_store(setup["store"])
    with pytest.raises(ConfigError, match="no unfinished invocation"):
        run_scan(str(setup["exp"]), resume=True, store=setup["store"], catalog_dsn=setup["dsn"], quiet=True)
    # make it unfinished: drop one part (its cells are now missing) and add error rows for two of them
    parts = store.list_parts("fc", result.invocation_id)
    import pyarrow.parquet as pq
    lost = pq.read_table(parts[0])
    Path(parts[0]).unlink()
    errors = lost.slice(0, 2).set_column(lost.schema.get_field_index("error"), "error",
                                         pc.cast(pc.fill_null(lost.slice(0, 2)["error"], "RuntimeError: boom"), lost.schema.field("error").type))
    store.write_part(errors, "fc", result.invocation_id, "test")
    with Catalog(setup["dsn"]) as catalog:
        catalog.update_progress(result.invocation_id, "interrupted", {})
    write_experiment(setup["exp"], tiny_dir, models=one_model, max_tokens=7)
    with pytest.raises(ConfigError) as info:
        run_scan(str(setup["exp"]), resume=True, store=setup["store"], catalog_dsn=setup["dsn"], quiet=True)
    assert info.value.field.split(", ")[0] == "max_tokens" and result.invocation_id in str(info.value)
    # how it executes may change on a resume (timeouts, retries): not refused
    write_experiment(setup["exp"], tiny_dir, models=[{**one_model[0], "timeout_s": 30, "max_retries": 9}])
    resumed = run_scan(str(setup["exp"]), resume=True, store=setup["store"], catalog_dsn=setup["dsn"], quiet=True)
    assert resumed.invocation_id == result.invocation_id and resumed.status == "complete"
    ok = successful(store, "fc", result.invocation_id)
    keys = list(zip(ok["probe_id"].to_pylist(), ok["sample"].to_pylist()))
    assert len(keys) == len(set(keys)) == 24
    retried = {(r["probe_id"], r["sample"]): r["attempt"] for r in ok.to_pylist()}
    assert [retried[(p, s)] for p, s in zip(errors["probe_id"].to_pylist(), errors["sample"].to_pylist())] == [2, 2]


def test_frozen_settings_cannot_be_edited_through_the_catalog(scanned):
    setup, result = scanned, scanned["result"]
    with Catalog(setup["dsn"]) as catalog:
        with pytest.raises(CatalogError, match="settings"):
            catalog.execute("UPDATE scan_invocations SET settings = '{}' WHERE invocation_id = %s", (result.invocation_id,))
        with pytest.raises(CatalogError, match="DELETE"):
            catalog.execute("DELETE FROM scan_invocations WHERE invocation_id = %s", (result.invocation_id,))
