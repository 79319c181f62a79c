"""The in-flight journal: which cells an engine actor was answering when it died, and the driver loop
that turns those batches into error rows (``settle``), and the rounds that retry their cells one per batch
(``run_rounds``, which ``cluster.scan.sweep`` runs over each model's pool).

Why it exists. An engine actor can die in the middle of a batch: a CUDA fault or an out-of-memory kill
on one prompt, a segfault in a kernel, a preempted node. Ray Data 2.60 restarts pool actors forever
and retries their tasks forever by default (``max_restarts=-1``, ``max_task_retries=-1`` in
``ActorPoolMapOperator._apply_default_remote_args``), so a *poison cell* — one that kills the process
every time — would loop forever, and a retried task would redo batches it had already stored.
``cluster.scan.pipeline.run_model`` therefore asks for ``max_task_retries=0`` (the actor still restarts, the
task that was running on it fails once) and, when a journal folder is given, lets Ray Data drop the
failed blocks (``max_errored_blocks=-1`` on that dataset only) so the rest of the grid goes on.

What is written. Before answering a batch, ``StoringEngine`` puts a small marker
``<invocation>/inflight/<round>/<writer>-<uuid>.json`` holding the batch's (probe_id, sample, attempt)
keys and where it runs; after the batch's part is stored the marker is deleted. A Python exception
rewrites the marker with the error text (and is re-raised). A marker left at the end of a round is a
batch that did not finish.

What the driver does (``run_rounds``, one model, in rounds):

1. run the cells (round 1: as planned; later rounds: cells that never started in normal batches, and
   the cells of batches that died, one per batch, each as its next attempt);
2. ``settle``: every leftover marker's cells without a stored row at that attempt become error rows
   (``EngineActorDied: …``, or the exception a batch raised), written as one part by writer
   ``journal``; the markers are deleted;
3. cells without any stored row at their attempt (the rest of a dropped block, tasks queued on a dead
   actor) run again with the same attempt; died cells below ``max_attempts`` run alone as attempt + 1.

Only the poison cell keeps dying when alone, so it alone ends as error rows; its batch-mates finish.
Rounds stop when every cell is accounted for, when a round wrote nothing (then the rest is left
missing: ``scan --resume`` picks it up), or after ``max_attempts + 3`` rounds.

Costs (measured by ``bench/scale.py``): one marker put and one delete per engine batch, beside the part
write; a store read of the invocation's keys only in a round where something did not land.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from mirrorscan.cluster.store.traces import TraceStore, open_store
from mirrorscan.grid.cells import remove_held

log = logging.getLogger(__name__)

INFLIGHT = "inflight"
"""Folder beside ``traces/`` holding the in-flight markers, one sub-folder per round."""
JOURNAL_WRITER = "journal"
"""Writer name of the parts holding the error rows of died batches."""
DIED = "EngineActorDied"
"""Error type written for a cell whose batch was in flight when its engine actor died."""
EXTRA_ROUNDS = 3
"""Rounds allowed beyond ``max_attempts`` (cells of dropped blocks that never started need a round too)."""
RELEASE_NOTE = """Why a run ends with gc.collect(), and why Ray Data's error records lose their exception objects.

Ray Data releases a finished pool by dropping its actor handles; Ray ends an actor when no handle is
left. After an actor died, handles to the pool's actors are still reachable from the error: its
traceback's frames hold the failed task, whose done-callback holds the actor. Until those go, the
old actors stay alive and keep their GPUs, and the next pool (the next round, the next model) waits
for them forever. Seen under pytest, whose log capture keeps every record, with its exc_info, until
the test ends: the round-2 pool waited 10 minutes. So the streaming executor's log records carry the
traceback as text only (``_TracebackAsText``), and reference cycles are collected after each run."""
_RAY_DATA_ERROR_LOGGER = "ray.data._internal.execution.streaming_executor_state"
"""The logger through which Ray Data reports an errored block, with the exception as exc_info."""


class _TracebackAsText(logging.Filter):
    """Turns a record's exc_info into exc_text (what formatters print anyway) and drops the exception,
    so a handler that keeps records does not keep its traceback's frames and actor handles alive."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return True


def _detach_error_tracebacks() -> None:
    """Install ``_TracebackAsText`` on Ray Data's error logger once per process."""
    logger = logging.getLogger(_RAY_DATA_ERROR_LOGGER)
    if not any(isinstance(f, _TracebackAsText) for f in logger.filters):
        logger.addFilter(_TracebackAsText())


_KEYS = pa.schema([("probe_id", pa.string()), ("sample", pa.int32()), ("attempt", pa.int32())])


def round_folder(store: TraceStore, experiment: str, invocation_id: str, round_id: str) -> str:
    """Folder (filesystem path) of one round's in-flight markers."""
    return f"{store.invocation_dir(experiment, invocation_id)}/{INFLIGHT}/{round_id}"


def batch_keys(batch: pa.Table) -> list[list]:
    """The (probe_id, sample, attempt) of every cell of ``batch`` (attempt 1 where the column is absent)."""
    attempts = batch.column("attempt").to_pylist() if "attempt" in batch.column_names else [1] * batch.num_rows
    return [[p, int(s), int(a)] for p, s, a in zip(batch.column("probe_id").to_pylist(),
                                                   batch.column("sample").to_pylist(), attempts)]


@contextmanager
def in_flight(store: TraceStore, folder: str | None, writer: str, batch: pa.Table) -> Iterator[None]:
    """Mark ``batch`` as in flight in ``folder`` for the duration of the block (nothing when ``folder`` is
    None). On a Python exception the marker is replaced by one carrying the error, then it re-raises; if
    the process dies, the marker stays. Costs one small put and one delete (see ``bench/scale.py``)."""
    if folder is None:
        yield
        return
    from mirrorscan.actors.rows import where_am_i

    record = {"writer": writer, "pid": os.getpid(), **where_am_i(),
              "started_at": datetime.now(timezone.utc).isoformat(), "cells": batch_keys(batch)}
    path = f"{folder}/{writer}-{uuid.uuid4().hex[:12]}.json"
    store.objects.put(path, json.dumps(record).encode())
    try:
        yield
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        try:
            store.objects.put(f"{path[:-5]}.raised.json", json.dumps(record).encode())
            store.objects.delete(path)
        except Exception as journal_exc:   # the batch's own error matters more; the marker stays as it was
            log.warning("in-flight marker %s not updated with the batch's error (%s)", path, journal_exc)
        raise
    store.objects.delete(path)


def leftover_markers(store: TraceStore, folder: str) -> list[tuple[str, dict | None]]:
    """(path, record) of every marker left in ``folder``; record is None for an unreadable marker."""
    if store.fs.get_file_info(folder).type == pafs.FileType.NotFound:
        return []
    found = []
    for info in store.fs.get_file_info(pafs.FileSelector(folder)):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json") or info.base_name.startswith("."):
            continue
        try:
            found.append((info.path, json.loads(store.read_bytes(info.path))))
        except (OSError, ValueError) as exc:
            log.warning("unreadable in-flight marker %s (%s); its cells count as not started", info.path, exc)
            found.append((info.path, None))
    return found


def stored_keys(store: TraceStore, experiment: str, invocation_id: str) -> pa.Table:
    """(probe_id, sample, attempt) of every row stored for the invocation, whatever its outcome."""
    return store.read(experiment, invocation_id, columns=list(_KEYS.names)).cast(_KEYS)


def _typed(cells: pa.Table) -> pa.Table:
    """``cells`` with sample and attempt as int32 (the key types of ``_KEYS``)."""
    for name in ("sample", "attempt"):
        cells = cells.set_column(cells.schema.get_field_index(name), name, cells.column(name).cast(pa.int32()))
    return cells


def _semi(cells: pa.Table, keys: pa.Table) -> pa.Table:
    """Rows of ``cells`` whose (probe_id, sample, attempt) is in ``keys``."""
    if keys.num_rows == 0 or cells.num_rows == 0:
        return cells.slice(0, 0)
    keys = keys.select(list(_KEYS.names)).cast(_KEYS)
    return _typed(cells).join(keys, keys=list(_KEYS.names), join_type="left semi", use_threads=True)


def settle(store: TraceStore, folder: str, cells: pa.Table, pool) -> pa.Table:
    """Turn the round's leftover markers into error rows and delete them.

    ``cells``: the round's cells (unrendered, with seed and attempt), run by ``pool`` (a
    ``cluster.scan.pipeline.Pool``: its invocation, instrument, and the variant, run and model source its engines
    were given). A marker's cell gets an error row unless a row is already stored for it at that attempt (the
    actor died after storing the part). Returns the died cells (rows of ``cells``), which the caller may
    retry."""
    from mirrorscan.actors.rows import trace_row
    from mirrorscan.grid.trace_schema import conform, to_trace_table, trace_schema

    experiment, invocation_id, instrument = pool.experiment, pool.invocation_id, pool.instrument
    variant, run, source = (pool.engine_kwargs[k] for k in ("variant", "run", "model_source"))
    markers = leftover_markers(store, folder)
    records = [r for _, r in markers if r is not None]
    if not records:
        _clear(store, folder, markers)
        return cells.slice(0, 0)
    keyed = {}
    for record in records:
        for p, s, a in record["cells"]:
            keyed[(p, int(s), int(a))] = record
    marked = pa.table({"probe_id": [k[0] for k in keyed], "sample": [k[1] for k in keyed],
                       "attempt": [k[2] for k in keyed]}, schema=_KEYS)
    died = remove_held(_semi(cells, marked), stored_keys(store, experiment, invocation_id), _KEYS)
    if died.num_rows:
        rendered = instrument.instrument.render(died, instrument.spec)
        rows = []
        for cell in rendered.to_pylist():
            record = keyed[(cell["probe_id"], int(cell["sample"]), int(cell["attempt"]))]
            where = {k: record.get(k) for k in ("node_id", "actor_id", "hostname")}
            error = record.get("error") or (
                f"{DIED}: the engine actor died while answering this cell's batch of {len(record['cells'])} "
                f"(pid {record.get('pid')}, node {record.get('node_id')}); retried alone up to the attempt limit")
            rows.append(trace_row(variant, run, source, where, cell, error=error, batch_size=len(record["cells"]),
                                  started_at=datetime.fromisoformat(record["started_at"])))
        schema = trace_schema(instrument.instrument.columns)
        coordinates = [c for c in instrument.instrument.coordinates if c in rendered.column_names]
        table = to_trace_table(rows)
        for name in coordinates:   # error rows carry the cell's coordinates too (no in-actor step ran)
            table = table.append_column(name, rendered.column(name))
        store.write_part(conform(table, schema), experiment, invocation_id, JOURNAL_WRITER)
    _clear(store, folder, markers)
    return died


def _clear(store: TraceStore, folder: str, markers: list[tuple[str, dict | None]]) -> None:
    """Delete a round's markers, and its folder where folders exist (a local store)."""
    for path, _ in markers:
        store.objects.delete(path)
    if store.is_local and store.fs.get_file_info(folder).type == pafs.FileType.Directory:
        try:
            store.fs.delete_dir(folder)
        except OSError:   # a marker written meanwhile (never: the round is over) or a race: leave it
            pass


def _with_attempt(cells: pa.Table) -> pa.Table:
    """``cells`` with an ``attempt`` column (1 where it has none)."""
    if "attempt" in cells.column_names:
        return cells
    return cells.append_column("attempt", pa.array([1] * cells.num_rows, pa.int32()))


def run_rounds(cells: pa.Table, pool, run_model: Callable[..., Iterator[tuple[int, int]]], max_attempts: int = 3,
               summary: dict | None = None) -> Iterator[tuple[int, int]]:
    """``run_model(cells, pool, journal=folder)`` (``cluster.scan.pipeline.run_model``, handed in by the sweep)
    over ``pool`` (a ``cluster.scan.pipeline.Pool``) in rounds under the in-flight journal (see the module
    docstring).

    Yields (rows, error rows) as parts land, like run_model; after a round with died batches it also
    yields (cells given up, error rows the journal wrote), so that a progress bar counts every cell once
    (a retried cell is counted when its retry lands). The journal's error rows name the variant, run and
    model source of the pool's ``engine_kwargs`` (the engine interface). ``summary``, when given, is filled
    with rounds, died_batches, died_cells, retried_alone, given_up and left_missing (cells)."""
    variant, experiment, invocation_id = pool.variant, pool.experiment, pool.invocation_id
    _detach_error_tracebacks()
    store = open_store(pool.store_uri)
    stats = summary if summary is not None else {}
    stats.update(rounds=0, died_batches=0, died_cells=0, retried_alone=0, given_up=0, left_missing=0)
    todo, alone = _with_attempt(cells), _with_attempt(cells).slice(0, 0)
    while todo.num_rows or alone.num_rows:
        if stats["rounds"] >= max_attempts + EXTRA_ROUNDS:
            stats["left_missing"] = todo.num_rows + alone.num_rows
            log.warning("%s: %d cell(s) left after %d rounds; scan --resume runs them", variant.label,
                        stats["left_missing"], stats["rounds"])
            break
        stats["rounds"] += 1
        folder = round_folder(store, experiment, invocation_id, uuid.uuid4().hex[:12])
        landed = 0
        for part, size in ((todo, pool.batch_size), (alone, 1)):
            if part.num_rows == 0:
                continue
            for rows, errors in run_model(part, replace(pool, batch_size=size), journal=folder):
                landed += rows
                yield rows, errors
            gc.collect()   # the pool's actors must go before the next pool asks for their GPUs: RELEASE_NOTE
        ran = pa.concat_tables([todo, alone.select(todo.column_names).cast(todo.schema)]) if alone.num_rows else todo
        batches = len([r for _, r in leftover_markers(store, folder) if r is not None])
        died = settle(store, folder, ran, pool)
        if landed + died.num_rows == ran.num_rows:
            not_started = ran.slice(0, 0)
        else:
            not_started = remove_held(ran, stored_keys(store, experiment, invocation_id), _KEYS)
        attempts = died.column("attempt")
        retry = died.filter(pc.less(attempts, max_attempts))
        given_up = died.num_rows - retry.num_rows
        stats["died_batches"] += batches
        stats["died_cells"] += died.num_rows
        stats["given_up"] += given_up
        if died.num_rows:
            log.warning("%s: an engine actor died in %d batch(es) (%d cells); %d cell(s) retried one per batch, "
                        "%d given up after %d attempts", variant.label, batches, died.num_rows, retry.num_rows,
                        given_up, max_attempts)
            yield given_up, died.num_rows
        if landed + died.num_rows == 0:
            stats["left_missing"] = not_started.num_rows
            log.warning("%s: a round wrote nothing; %d cell(s) left for scan --resume", variant.label,
                        not_started.num_rows)
            break
        retry = retry.set_column(retry.schema.get_field_index("attempt"), "attempt",
                                 pc.add(retry.column("attempt"), 1).cast(pa.int32()))
        stats["retried_alone"] += retry.num_rows
        todo, alone = not_started, retry
