"""One sweep: every model's cells through its own actor pool, in journaled rounds.

``run_grid`` runs the models of a grid one after another, each through ``run_model_journaled``: the cells
go through ``cluster.pipeline.run_model`` under the in-flight journal (``cluster.crash_journal``), batches
whose actor died become error rows, and their cells are retried one per batch, up to ``max_attempts``.
"""

from __future__ import annotations

import gc
import logging
import uuid
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from cluster.crash_journal import (EXTRA_ROUNDS, _anti, _detach_error_tracebacks, _with_attempt, leftover_markers,
                                   round_folder, settle, stored_keys)
from cluster.pipeline import engine_resources, release_engine_resources, run_model
from cluster.store import open_store
from grid.instrument import InstrumentRef
from grid.records import ModelVariant, RunContext

log = logging.getLogger("cluster.crash_journal")   # one logger for the journal and its rounds


def run_model_journaled(cells: pa.Table, engine_cls: type, engine_kwargs: dict, instrument, *, store_uri: str,
                        experiment: str, invocation_id: str, batch_size: int, pool_size: int,
                        max_pool_size: int | None = None, engine_resources: dict | None = None,
                        max_attempts: int = 3, variant: ModelVariant | None = None, run: RunContext | None = None,
                        source: str | None = None, summary: dict | None = None) -> Iterator[tuple[int, int]]:
    """``cluster.pipeline.run_model`` in rounds under the in-flight journal (see the module docstring).

    Yields (rows, error rows) as parts land, like run_model; after a round with died batches it also
    yields (cells given up, error rows the journal wrote), so that a progress bar counts every cell once
    (a retried cell is counted when its retry lands).

    ``variant``, ``run`` and ``source`` (for the error rows) default to the engine's own kwargs
    (``variant``, ``run``, ``model_source``: the engine interface). ``summary``, when given, is filled
    with rounds, died_batches, died_cells, retried_alone, given_up and left_missing (cells)."""
    variant = variant or engine_kwargs["variant"]
    run = run or engine_kwargs["run"]
    source = source or engine_kwargs["model_source"]
    _detach_error_tracebacks()
    store = open_store(store_uri)
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
        for part, size in ((todo, batch_size), (alone, 1)):
            if part.num_rows == 0:
                continue
            for rows, errors in run_model(part, engine_cls, engine_kwargs, instrument, store_uri=store_uri,
                                          experiment=experiment, invocation_id=invocation_id, batch_size=size,
                                          pool_size=pool_size, max_pool_size=max_pool_size,
                                          engine_resources=engine_resources, journal=folder):
                landed += rows
                yield rows, errors
            gc.collect()   # the pool's actors must go before the next pool asks for their GPUs: RELEASE_NOTE
        ran = pa.concat_tables([todo, alone.select(todo.column_names).cast(todo.schema)]) if alone.num_rows else todo
        batches = len([r for _, r in leftover_markers(store, folder) if r is not None])
        died = settle(store, experiment, invocation_id, folder, ran, variant=variant, run=run, source=source,
                      instrument=instrument)
        if landed + died.num_rows == ran.num_rows:
            not_started = ran.slice(0, 0)
        else:
            not_started = _anti(ran, stored_keys(store, experiment, invocation_id))
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


def run_grid(cells: pa.Table, variants: list[ModelVariant], sources: dict[str, str], run: RunContext,
             instrument: InstrumentRef, *, store_uri: str, batch_size: int, pool_size: int,
             on_part: Callable[[int, int], None], max_attempts: int = 3,
             on_model: Callable[[ModelVariant], None] | None = None) -> None:
    """Run every model's cells, one actor pool per model, calling ``on_part(rows, errors)`` per part; a
    pool's placement group (tensor-parallel engines) is removed when the pool ends, so the next model can
    have its accelerators.
    Batches whose actor died are journaled as error rows and their cells retried one per batch, up to
    ``max_attempts`` attempts per cell (``cluster.crash_journal``). ``on_model(variant)``, when given, is
    called as each model's pool starts (before its engines load)."""
    from actors.registry import engine_class

    for variant in variants:
        mine = cells.filter(pc.equal(cells.column("label"), variant.label))
        if mine.num_rows == 0:
            continue
        kwargs = {"variant": variant, "model_source": sources[variant.label], "run": run}
        engine_cls = engine_class(variant.backend, instrument.instrument.engine_kind)
        if on_model is not None:
            on_model(variant)
        resources = engine_resources(engine_cls, variant)   # may reserve a placement group: released below
        try:
            for rows, errors in run_model_journaled(mine, engine_cls, kwargs, instrument,
                                                    store_uri=store_uri, experiment=run.experiment,
                                                    invocation_id=run.invocation_id, batch_size=batch_size,
                                                    pool_size=variant.min_actors or pool_size,
                                                    max_pool_size=variant.max_actors or pool_size,
                                                    engine_resources=resources, max_attempts=max_attempts):
                on_part(rows, errors)
        finally:
            release_engine_resources(resources)
