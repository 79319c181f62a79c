"""The in-flight journal without Ray: markers while a batch is answered, and error rows for died batches."""

from __future__ import annotations

import dataclasses
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import standin_engine as standin

from mirrorscan.cluster.scan.journal import DIED, JOURNAL_WRITER, in_flight, leftover_markers, round_folder, settle
from mirrorscan.cluster.scan.pipeline import Pool, render_block
from mirrorscan.cluster.store.traces import open_store

EXPERIMENT = "journal"


@pytest.fixture
def setup(tmp_path):
    store = open_store(str(tmp_path / "store"))
    invocation_id = str(uuid.uuid4())
    cells, instrument = standin.grid_cells(["m"], 4)   # 16 cells
    variant = standin.standin_variant("m")
    run = standin.run_identity(invocation_id, EXPERIMENT)
    folder = round_folder(store, EXPERIMENT, invocation_id, "r1")
    return store, invocation_id, cells, instrument, variant, run, folder


def test_marker_lives_exactly_while_the_batch_is_answered(setup):
    store, _, cells, _, _, _, folder = setup
    batch = cells.slice(0, 8)
    with in_flight(store, folder, "a1", batch):
        (path, record), = leftover_markers(store, folder)
        assert record["writer"] == "a1" and record["pid"] > 0
        assert record["cells"] == [[p, s, 1] for p, s in zip(batch["probe_id"].to_pylist(), batch["sample"].to_pylist())]
    assert leftover_markers(store, folder) == []
    with in_flight(store, None, "a1", batch):   # no journal folder: nothing written
        assert leftover_markers(store, folder) == []


def test_an_exception_leaves_a_marker_carrying_it(setup):
    store, _, cells, _, _, _, folder = setup
    with pytest.raises(RuntimeError, match="disk on fire"):
        with in_flight(store, folder, "a1", cells.slice(0, 4)):
            raise RuntimeError("disk on fire")
    (path, record), = leftover_markers(store, folder)
    assert path.endswith(".raised.json") and record["error"] == "RuntimeError: disk on fire"


def test_settle_turns_died_batches_into_error_rows_except_cells_already_stored(setup):
    store, invocation_id, cells, instrument, variant, run, folder = setup
    died_batch, raised_batch = cells.slice(0, 8), cells.slice(8, 4)
    # the actor died after storing the first two cells of its batch (as if in a part of their own)
    engine = standin.SleepEngine(dataclasses.replace(variant, engine_args={"sleep_s": 0}), "standin", run)
    store.write_part(engine(render_block(died_batch.slice(0, 2), instrument)), EXPERIMENT, invocation_id, "a1")
    in_flight(store, folder, "a1", died_batch).__enter__()   # entered, never left: the process died
    with pytest.raises(ValueError):
        with in_flight(store, folder, "a2", raised_batch):
            raise ValueError("bad batch")
    died = settle(store, folder, cells, journaled_pool(invocation_id, instrument, variant, run))
    assert sorted(standin_keys(died)) == sorted(standin_keys(died_batch.slice(2)) + standin_keys(raised_batch))
    rows = store.read(EXPERIMENT, invocation_id)
    errors = rows.filter(pc.invert(pc.is_null(rows.column("error"))))
    assert errors.num_rows == 10 and set(errors["attempt"].to_pylist()) == {1}
    by_key = {(r["probe_id"], r["sample"]): r for r in errors.to_pylist()}
    for key in standin_keys(died_batch.slice(2)):
        assert by_key[key]["error"].startswith(DIED) and by_key[key]["batch_size"] == 8
    for key in standin_keys(raised_batch):
        assert by_key[key]["error"] == "ValueError: bad batch"
    first = by_key[standin_keys(raised_batch)[0]]
    assert first["user_text"] and first["seed"] is not None and first["label"] == "m"   # a complete row
    journal_parts = [p for p in store.list_parts(EXPERIMENT, invocation_id) if f"-{JOURNAL_WRITER}-" in p]
    assert len(journal_parts) == 1
    assert leftover_markers(store, folder) == []
    # settling again finds nothing
    again = settle(store, folder, cells, journaled_pool(invocation_id, instrument, variant, run))
    assert again.num_rows == 0 and store.read(EXPERIMENT, invocation_id).num_rows == rows.num_rows


def test_unreadable_marker_is_removed_and_counts_nothing(setup):
    store, invocation_id, cells, instrument, variant, run, folder = setup
    store.objects.put(f"{folder}/a9-torn.json", b'{"cells": [["m|')
    (path, record), = leftover_markers(store, folder)
    assert record is None
    died = settle(store, folder, cells, journaled_pool(invocation_id, instrument, variant, run))
    assert died.num_rows == 0 and leftover_markers(store, folder) == []


def journaled_pool(invocation_id: str, instrument, variant, run) -> Pool:
    """The pool whose round the journal settles: the stand-in engine's variant, run and source."""
    return Pool(standin.SleepEngine, {"variant": variant, "model_source": "standin", "run": run}, instrument,
                store_uri="", experiment=EXPERIMENT, invocation_id=invocation_id, batch_size=8)


def standin_keys(table: pa.Table) -> list[tuple[str, int]]:
    return list(zip(table["probe_id"].to_pylist(), table["sample"].to_pylist()))
