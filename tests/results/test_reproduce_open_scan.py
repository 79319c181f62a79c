"""Reproducing an appending instrument's invocation (open_scan, the tiny random Llama, real Ray and PostgreSQL).

One scan (2 probes: 2 answers, 2 cold and 2 post-hoc self-reports) is shared by the module. A reproduction
runs its full grid, though every cell is held by the invocation it reproduces, and its rows never count as
holding cells for later scans. After the probe file changed, the reproduction runs the stored cells from the
query each row recorded, post-hoc stage included; interrupted between its stages, ``reproduce --resume``
finishes exactly the missing cells in the same invocation; rows stored before they recorded their query keep
the refusal. The first test needs the probe file as scanned; each later one changes it itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from plan_warnings import printed_warnings, same_but_git  # noqa: E402

PROBES = "query_id,query\nq1,Tea or coffee?\nq2,Which season do you like best?\n"
CHANGED = "query_id,query\nq1,Tea or coffee or juice?\nq3,A new probe?\n"


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, tiny_dir, pg_dsn, ray_local):
    """The original scan: its folder, store, catalog and invocation id."""
    from conftest import new_database
    from mirrorscan.jobs.scan import run_scan

    base, dsn = tmp_path_factory.mktemp("os_repro"), new_database(pg_dsn)
    folder = base / "exps" / "os_repro"
    folder.mkdir(parents=True)
    (folder / "probes.csv").write_text(PROBES)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": 1, "batch_size": 8, "seed": 3,
        "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 6}, "report_max_tokens": 4}}))
    store = str(base / "store")
    first = run_scan(str(folder), store=store, catalog_dsn=dsn, quiet=True)
    assert first.status == "complete" and first.counts["ok"] == 6   # 2 answers, 2 cold, 2 post-hoc
    return {"folder": folder, "store": store, "dsn": dsn, "original": first.invocation_id}


def cell_keys(store_uri: str, invocation_id: str) -> list[tuple[str, int]]:
    from mirrorscan.cluster.store.traces import open_store

    rows = open_store(store_uri).read("os_repro", invocation_id, columns=["probe_id", "sample"])
    return sorted(zip(rows.column("probe_id").to_pylist(), rows.column("sample").to_pylist()))


def reproductions(dsn: str, original: str) -> list[dict]:
    from mirrorscan.cluster.catalog.client import Catalog

    with Catalog(dsn) as catalog:
        ids = [r[0] for r in catalog.execute("SELECT invocation_id::text FROM scan_invocations WHERE reproduces = %s "
                                             "ORDER BY started_at", [original])]
        return [catalog.get_invocation(i) for i in ids]


@pytest.mark.timeout(900)
def test_a_reproduction_runs_the_full_grid_and_holds_no_cells(scanned):
    from mirrorscan.cluster.scan.stages import earlier_rows
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.records import Reproduction, ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.cluster.scan.stages import NO_INVOCATION, StageScope, instrument_ref
    from mirrorscan.jobs.scan import run_scan
    from mirrorscan.results.diff import diff_targets
    from mirrorscan.results.reproduce import ITEMS_FROM_FILES, plan

    dsn, store_uri, original = scanned["dsn"], scanned["store"], scanned["original"]
    again = run_scan(str(scanned["folder"]), store=store_uri, catalog_dsn=dsn, quiet=True)
    assert again.invocation_id == ""   # a plain scan: every cell is held, nothing to do

    p = plan(original, dsn=dsn)
    assert p.items_from == ITEMS_FROM_FILES
    copy = ScanRun(p.spec, ScanOptions(catalog_dsn=dsn, quiet=True, reproduction=Reproduction(
        p.original.invocation_id, p.cells, p.submitted, p.model_sources))).execute()
    assert copy.status == "complete" and copy.counts["cells"] == copy.counts["ok"] == 6
    assert "held_elsewhere" not in copy.counts   # nothing of the original counted as held

    store = open_store(store_uri)
    held_by = earlier_rows(StageScope(store, "os_repro", NO_INVOCATION, instrument_ref(p.spec.settings())))
    assert set(held_by.column("invocation_id").to_pylist()) == {original}   # the copy holds nothing
    copy_rows = store.read("os_repro", copy.invocation_id, columns=["probe_id", "error"])
    assert copy_rows.num_rows == 6 and pc.all(pc.is_null(copy_rows.column("error"))).as_py()

    d = diff_targets(original, copy.invocation_id, dsn=dsn)
    assert d.shared == 6 and d.same_answer.rate == 1.0   # seeded sampling, same batches: the same text and ratings
    assert set(d.by["envelope"]) == {"answer", "cold", "posthoc"}


@pytest.mark.timeout(900)
def test_a_changed_probe_file_is_reproduced_from_the_stored_queries(scanned, capsys):
    from mirrorscan.jobs import reproduce
    from mirrorscan.results.reproduce import ITEMS_FROM_TRACES, plan

    dsn, original = scanned["dsn"], scanned["original"]
    (scanned["folder"] / "probes.csv").write_text(CHANGED)
    p = plan(original, dsn=dsn)
    assert p.items_from == ITEMS_FROM_TRACES and p.n_cells == 4   # answers and cold; post-hoc is built from answers
    items = [w for w in p.warnings if w.startswith("items: ")]
    assert len(items) == 1 and "probes.csv: changed since the invocation was frozen" in items[0] \
        and "rebuilt from the coordinates stored in the traces" in items[0], p.warnings
    assert set(p.cells.column("query").to_pylist()) == {"Tea or coffee?", "Which season do you like best?"}

    before = {r["invocation_id"] for r in reproductions(dsn, original)}
    assert reproduce.main([original, "--catalog-dsn", dsn, "--quiet", "--expect-exact"]) == 0   # complete, exact
    (copy,) = [r for r in reproductions(dsn, original) if r["invocation_id"] not in before]
    assert copy["status"] == "complete" and copy["counts"]["cells"] == copy["counts"]["ok"] == 6
    out, err = capsys.readouterr()
    recorded = copy["settings"]["execution"]["reproduce_warnings"]   # what it could not restore, as it printed it
    assert recorded == printed_warnings(err) and same_but_git(recorded, p.warnings)
    assert cell_keys(scanned["store"], copy["invocation_id"]) == cell_keys(scanned["store"], original)
    assert "cells: 6 in A · 6 in B · 6 in both" in out and "EXACT MATCH" in out


@pytest.mark.timeout(900)
def test_an_interrupted_reproduction_is_finished_by_reproduce_resume(scanned, monkeypatch, capsys):
    """Stopped (as by Ctrl-C) after its first stage's batches, before its post-hoc stage: ``--resume`` runs the
    2 post-hoc cells alone in the same invocation, which stays a reproduction of the original."""
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import Stage, resolve
    from mirrorscan.jobs import reproduce

    dsn, store_uri, original = scanned["dsn"], scanned["store"], scanned["original"]
    (scanned["folder"] / "probes.csv").write_text(CHANGED)   # the cells come from the stored queries

    real = resolve("open_scan").stages[0]

    def interrupt(spec, previous):
        if "invocation_id" in previous.column_names:   # stored rows: the driver is about to run the stage
            raise KeyboardInterrupt("stopped between the stages")
        return real.cells(spec, previous)   # the printed plan's stand-in rows (nothing stored yet)

    before = {r["invocation_id"] for r in reproductions(dsn, original)}
    with monkeypatch.context() as m:   # the driver builds later stages itself: patch the instrument it resolves
        m.setattr(resolve("open_scan"), "stages", (Stage("posthoc", interrupt, real.reads),))
        assert reproduce.main([original, "--catalog-dsn", dsn, "--quiet"]) == 130
    assert f"run mirrorscan reproduce {original} --resume to finish it" in capsys.readouterr().err
    (stopped,) = [r for r in reproductions(dsn, original) if r["invocation_id"] not in before]
    copy = stopped["invocation_id"]
    assert stopped["status"] == "interrupted"
    store = open_store(store_uri)
    first_stage = store.read("os_repro", copy, columns=["probe_id", "sample", "envelope"])
    assert sorted(first_stage.column("envelope").to_pylist()) == ["answer", "answer", "cold", "cold"]

    assert reproduce.main([copy[:8], "--resume", "--catalog-dsn", dsn, "--quiet", "--expect-exact"]) == 0
    out = capsys.readouterr()
    assert f"resume: finishes reproduction {copy}" in out.err and "EXACT MATCH" in out.out
    finished = {r["invocation_id"]: r for r in reproductions(dsn, original)}[copy]
    assert finished["status"] == "complete" and finished["reproduces"] == original
    assert finished["counts"]["cells"] == finished["counts"]["ok"] == 6
    rows = store.read("os_repro", copy, columns=["probe_id", "sample", "envelope", "error", "query"])
    keys = list(zip(rows.column("probe_id").to_pylist(), rows.column("sample").to_pylist()))
    assert len(keys) == len(set(keys)) == 6 and pc.all(pc.is_null(rows.column("error"))).as_py()   # each cell once
    assert set(first_stage.column("probe_id").to_pylist()) < set(rows.column("probe_id").to_pylist())   # kept
    assert sorted(keys) == cell_keys(store_uri, original)
    assert set(rows.column("query").to_pylist()) == {"Tea or coffee?", "Which season do you like best?"}
    assert reproduce.main([original, "--resume", "--catalog-dsn", dsn, "--quiet"]) == 2   # nothing left to finish
    assert f"invocation {original} has no unfinished reproduction" in capsys.readouterr().err


def test_rows_stored_before_the_queries_were_recorded_keep_the_refusal(scanned):
    """An invocation stored by earlier code has no ``query`` on its rows: with its probe file changed, its cells
    cannot be rendered, and reproduce refuses with one line asking to restore the file."""
    import dataclasses

    import pyarrow as pa

    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.results.invocations import load
    from mirrorscan.results.reproduce import _cells, spec_from_settings

    (scanned["folder"] / "probes.csv").write_text(CHANGED)
    original = load(scanned["original"], dsn=scanned["dsn"])
    traces = original.traces
    older = dataclasses.replace(original, traces=traces.set_column(
        traces.schema.get_field_index("query"), "query", pa.nulls(traces.num_rows, pa.string())))
    # from the config file the invocation recorded, as reproduce rebuilds it: its probe file is ./probes.csv there
    spec = spec_from_settings(original.settings, str(scanned["folder"] / "config.json"), scanned["store"])
    with pytest.raises(ConfigError) as refused:
        _cells(spec, older, [])
    assert refused.value.field == "items" and "renders its prompts from the item file, which changed" \
        in refused.value.problem and "restore the file" in refused.value.fix
    assert refused.value.file.endswith("probes.csv")
