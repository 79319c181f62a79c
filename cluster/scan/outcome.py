"""How a scan's run ends: its cells counted by status, its final status recorded in the catalog (or kept beside
the traces while the catalog is unreachable), its inference_log rows waited for, and the row index an
appending instrument's next scan reads (``cluster.scan.run.ScanRun`` calls these)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.scan.records import Recording
from mirrorscan.grid.errors import CatalogError

OUTCOME_WAIT_S = 120.0
"""How long a finished scan keeps reconnecting to a lost catalog to record its final status (seconds)."""
LOG_SETTLE_S = 45.0
"""How long a finished run waits for inference_log rows queued in engine actors to be written or spilled (s)."""


def cell_counts(store, experiment: str, invocation_id: str, n_cells: int) -> dict:
    """Cells by status from the stored rows: ok (≥1 successful row), error (only error rows), missing."""
    rows = store.read(experiment, invocation_id, columns=["probe_id", "sample", "error"])
    ok_keys = rows.filter(pc.is_null(rows.column("error"))).group_by(["probe_id", "sample"]).aggregate([])
    all_keys = rows.group_by(["probe_id", "sample"]).aggregate([])
    ok = ok_keys.num_rows
    return {"cells": n_cells, "ok": ok, "error": all_keys.num_rows - ok, "missing": n_cells - all_keys.num_rows,
            "rows": rows.num_rows,
            "error_rows": rows.num_rows - pc.sum(pc.is_null(rows.column("error")), min_count=0).as_py()}


def index_rows(store, experiment: str, invocation_id: str, settings) -> None:
    """For an instrument that holds cells across invocations: write the invocation's row index, which the next
    scan's plan reads instead of every part (``cluster.store.row_index``); ``settings``: the invocation's frozen
    ``grid.settings.Settings``. A failure only costs that speed."""
    from mirrorscan.cluster.store.row_index import write_index
    from mirrorscan.cluster.scan.stages import index_columns, instrument_ref
    from mirrorscan.grid.trace_schema import trace_schema

    ref = instrument_ref(settings)
    if not ref.instrument.appends:
        return
    try:
        write_index(store, experiment, invocation_id, index_columns(ref), trace_schema(ref.instrument.columns))
    except Exception as exc:   # the parts are the data; the index is a cache
        print(f"warning: the row index of invocation {invocation_id} was not written ({type(exc).__name__}: {exc}); "
              f"the next scan reads its parts instead", file=sys.stderr)


def loggable_rows(store, experiment: str, invocation_id: str) -> int:
    """Trace rows of the invocation that should have an inference_log row: all but the error rows this
    driver writes for a died batch (``EngineActorDied``), which answered no request."""
    from mirrorscan.cluster.scan.journal import DIED

    errors = store.read(experiment, invocation_id, columns=["error"]).column("error")
    died = pc.fill_null(pc.starts_with(errors, DIED), False).cast(pa.int64())
    return len(errors) - pc.sum(died, min_count=0).as_py()


def logged_rows(store, catalog, experiment: str, invocation_id: str) -> int:
    """inference_log rows of the invocation, in the catalog plus spilled beside the traces (a row is never
    in both); while the catalog is unreachable only the spilled ones are counted."""
    from mirrorscan.cluster.catalog.inference_view import spill_dataset

    in_catalog = 0
    try:
        if not catalog.connected:
            catalog.reconnect()
        in_catalog = catalog.execute("SELECT count(*) FROM inference_log WHERE invocation_id = %s",
                                     [invocation_id])[0][0]
    except CatalogError:
        pass
    return in_catalog + spill_dataset(store, experiment, invocation_id).count_rows()


def await_inference_log(store, catalog, experiment: str, invocation_id: str, before: tuple[int, int],
                        timeout_s: float | None = None) -> int:
    """Wait at most ``timeout_s`` seconds (default LOG_SETTLE_S) until every trace row this run added has its
    inference_log row, in the catalog or spilled. ``before``: (``loggable_rows``, ``logged_rows``) taken
    before the run, so rows lost by an earlier crash are not waited for. Engine actors write log rows off
    the hot path: with a healthy catalog they are in before a batch is counted, but rows queued during a
    catalog outage are written or spilled in the background, and this process must not end (and take a
    local Ray's actors with it) before they land. Returns the number of this run's rows still unaccounted
    for (0: settled)."""
    timeout_s = LOG_SETTLE_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    added = loggable_rows(store, experiment, invocation_id) - before[0]   # the traces are all in
    while True:
        missing = added - (logged_rows(store, catalog, experiment, invocation_id) - before[1])
        if missing <= 0 or time.monotonic() >= deadline:
            return max(0, missing)
        time.sleep(0.5)


def record_outcome(recording: Recording, status: str, counts: dict, *, wait_s: float | None = None,
                   raise_on_failure: bool = True) -> None:
    """Record the final status and counts of the invocation of ``recording`` in its catalog, reconnecting to a catalog that was lost (restarted or unreachable) for up to ``wait_s`` seconds
    (default $MIRRORSCAN_CATALOG_FINAL_WAIT_S, else OUTCOME_WAIT_S). If it stays unreachable, the outcome is
    kept beside the traces (``<invocation>/outcome/<time>.json``) and a CatalogError says so and how to
    record it later (``--resume``, which reruns nothing stored); with ``raise_on_failure`` False that is a
    warning only (the scan is already failing for another reason)."""
    catalog, store = recording.catalog, recording.store
    invocation_id, experiment = recording.invocation_id, recording.experiment
    wait_s = float(os.environ.get("MIRRORSCAN_CATALOG_FINAL_WAIT_S", OUTCOME_WAIT_S)) if wait_s is None else wait_s
    deadline, delay = time.monotonic() + wait_s, 0.5
    while True:
        try:
            if not catalog.connected:
                catalog.reconnect()
            catalog.update_progress(invocation_id, status, counts, finished=True)
            return
        except CatalogError as exc:
            if catalog.connected or time.monotonic() >= deadline:   # a refusal, or out of time
                problem = exc
                break
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 10.0)
    if catalog.connected:
        raise problem
    outcome = {"invocation_id": invocation_id, "experiment": experiment, "status": status, "counts": counts,
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "catalog_error": str(problem)}
    path = f"{store.invocation_dir(experiment, invocation_id)}/outcome/" \
           f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.json"
    store.objects.put(path, json.dumps(outcome, indent=2, default=str).encode())
    message = (f"the catalog stayed unreachable for {wait_s:.0f} s at the end of invocation {invocation_id}, so its "
               f"final status ({status}: {counts.get('ok', 0)}/{counts.get('cells', 0)} cells ok) is kept in "
               f"{store.display(path)}; the traces are all stored. Once the catalog is back, "
               f"`mirrorscan scan {Path(recording.config_path).parent} --resume` records it (nothing stored is rerun)")
    if raise_on_failure:
        raise CatalogError(f"catalog: {message}") from None
    print(f"warning: {message}", file=sys.stderr)
