"""One sweep: every model's cells through its own actor pool, in journaled rounds, pools side by side.

``run_grid`` runs each model's cells through ``run_model_journaled``: the cells go through
``cluster.scan.pipeline.run_model`` in the in-flight journal's rounds (``cluster.scan.journal.run_rounds``):
batches whose actor died become error rows, and their cells are retried one per batch, up to ``max_attempts``. Up to
``max_concurrent_models`` models' pools run at once, each driven by a thread of the driver (Ray Data runs
one streaming executor per pool); the parts they report reach the caller's callback in the calling thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.scan.journal import run_rounds
from mirrorscan.cluster.scan.pipeline import Pool, engine_resources, release_engine_resources, run_model
from mirrorscan.actors.placement import NoRoom
from mirrorscan.grid.instrument import InstrumentRef
from mirrorscan.grid.records import ModelVariant, InvocationContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sweep:
    """What every model's pool of one sweep shares: the invocation, the instrument, batches and pool sizes."""

    run: InvocationContext
    """The invocation the rows belong to, as the engines get it (its ``catalog_dsn``: where the actors log)."""
    instrument: InstrumentRef
    """The instrument whose cells the pools answer."""
    store_uri: str
    """Trace store URI the parts go to."""
    batch_size: int
    """Cells per engine call."""
    pool_size: int
    """Actors per model, unless the model sets ``min_actors``/``max_actors``."""
    max_attempts: int = 3
    """Attempts per cell whose batch's actor died, before the cell is given up."""
    max_concurrent_models: int = 1
    """Model pools that run at once (``concurrent_models``)."""


def run_model_journaled(cells: pa.Table, pool: Pool, max_attempts: int = 3,
                        summary: dict | None = None) -> Iterator[tuple[int, int]]:
    """``cluster.scan.pipeline.run_model`` over ``pool`` in the in-flight journal's rounds
    (``cluster.scan.journal.run_rounds``, which says what is yielded and what ``summary`` is filled with)."""
    return run_rounds(cells, pool, run_model, max_attempts, summary)


def run_grid(cells: pa.Table, variants: list[ModelVariant], model_sources: dict[str, str], sweep: Sweep,
             on_part: Callable[..., None], on_model: Callable[[ModelVariant, str | None], None] | None = None) -> None:
    """Run every model's cells, one actor pool per model, up to ``sweep.max_concurrent_models`` pools at once,
    calling ``on_part(rows, errors, label)`` per part (in this thread, whichever pool it came from).
    ``model_sources``: label → the model source its engines load.

    Pools start in the models' order as slots free up; each asks Ray for its actors at once, so what does not
    fit waits as resource demand (an autoscaler sees it) and starts when room appears. A tensor-parallel
    model whose placement group finds no room while other pools hold the accelerators waits for one of them
    to end and tries again. A pool's placement group is removed when the pool ends. Batches whose actor
    died are journaled as error rows and their cells retried one per batch, up to ``sweep.max_attempts``
    attempts per cell (``cluster.scan.journal``). ``on_model(variant, warm)``, when given, is called as each
    model's pool starts (before its engines load), with the name of the running warm engine that will answer its
    batches, or None. HTTP labels that share an endpoint share its
    ``max_concurrency`` while pools run side by side (``cluster.scan.endpoints``)."""
    from mirrorscan.cluster.scan.endpoints import share_endpoints

    pools = []
    for variant in share_endpoints(variants, sweep.max_concurrent_models):
        mine = cells.filter(pc.equal(cells.column("label"), variant.label))
        if mine.num_rows:
            pools.append((variant, mine, model_sources[variant.label]))
    if sweep.max_concurrent_models <= 1 or len(pools) <= 1:
        for variant, mine, source in pools:
            if on_model is not None:
                on_model(variant, warm_engine(sweep, variant, source))
            for rows, errors in _run_pool(sweep, variant, mine, source):
                on_part(rows, errors, variant.label)
        return
    _run_pools_at_once(pools, sweep, on_part, on_model)


def warm_engine(sweep: Sweep, variant: ModelVariant, source: str) -> str | None:
    """The running warm engine that will answer ``variant``'s batches (``cluster.runtime.warm_engines``), or None
    when its pool's actors load the model themselves. Asked again by each round of the pool (``run_model``)."""
    from mirrorscan.actors.registry import engine_class
    from mirrorscan.cluster.models.resolve import engine_variant
    from mirrorscan.cluster.runtime.warm_engines import running_engine

    return running_engine(engine_class(variant.backend, sweep.instrument.instrument.engine_kind),
                          engine_variant(variant), source)


def _run_pool(sweep: Sweep, variant: ModelVariant, mine: pa.Table, source: str,
              stop: threading.Event | None = None) -> Iterator[tuple[int, int]]:
    """One model's cells (``mine``, engines loading ``source``) through its own pool, journaled; its placement
    group (if any) removed at the end. Stops between parts once ``stop`` is set."""
    from mirrorscan.actors.registry import engine_class
    from mirrorscan.cluster.models.resolve import engine_variant

    run = sweep.run
    engine_cls = engine_class(variant.backend, sweep.instrument.instrument.engine_kind)
    resources = engine_resources(engine_cls, variant)   # may reserve a placement group: released below
    engine_kwargs = {"variant": engine_variant(variant), "model_source": source, "run": run}
    pool = Pool(engine_cls, engine_kwargs, sweep.instrument,
                store_uri=sweep.store_uri, experiment=run.experiment, invocation_id=run.invocation_id,
                batch_size=sweep.batch_size, pool_size=variant.min_actors or sweep.pool_size,
                max_pool_size=variant.max_actors or sweep.pool_size, engine_resources=resources)
    try:
        for counts in run_model_journaled(mine, pool, sweep.max_attempts):
            yield counts
            if stop is not None and stop.is_set():
                return
    finally:
        release_engine_resources(resources)


def concurrent_models(chosen: int | None, variants: list[ModelVariant], *, joined: bool) -> int:
    """How many model pools run at once: ``chosen`` (``max_concurrent_models``) when set; else every model on
    a cluster (``joined``: Ray reached by address), or on a local Ray when every model declares its memory
    (``memory_gb``), so Ray can tell whether they fit together; else one at a time, since a local
    machine's memory is not declared to Ray and two models that do not fit would both start."""
    if chosen is not None:
        return int(chosen)
    return len(variants) if joined or all(v.memory_gb for v in variants) else 1


POLL_S = 0.2
"""How often the driver thread wakes while pools run side by side (signals such as SIGTERM are handled then)."""


def _run_pools_at_once(pools: list, sweep: Sweep, on_part, on_model) -> None:
    """Run the pools (variant, cells, source) in threads, at most ``sweep.max_concurrent_models`` at a time,
    started in order; relay their parts to ``on_part`` in this thread. A pool's error ends the sweep: the
    others stop after their next part."""
    limit = sweep.max_concurrent_models
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    pending = list(pools)
    active: set[str] = set()
    blocked = [False]   # a pool found no room: start nothing more until another pool ends

    def work(variant: ModelVariant, mine: pa.Table, source: str) -> None:
        try:
            for rows, errors in _run_pool(sweep, variant, mine, source, stop):
                events.put(("part", variant, (rows, errors)))
            events.put(("done", variant, None))
        except NoRoom as exc:
            events.put(("no_room", variant, (mine, source, exc)))
        except BaseException as exc:   # re-raised in the driver thread
            events.put(("error", variant, exc))

    def start_next() -> None:
        while pending and len(active) < limit and not blocked[0]:
            variant, mine, source = pending.pop(0)
            active.add(variant.label)
            if on_model is not None:
                on_model(variant, warm_engine(sweep, variant, source))
            threading.Thread(target=work, args=(variant, mine, source), name=f"pool-{variant.label}", daemon=True).start()

    try:
        start_next()
        while active:
            try:
                kind, variant, payload = events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if kind == "part":
                on_part(*payload, variant.label)
                continue
            active.discard(variant.label)
            if kind == "error":
                raise payload
            if kind == "no_room":
                if not active:   # nothing else holds resources: it can never fit
                    raise payload[2]
                log.info("%s: no room for its placement group while %s run; it starts when one ends",
                         variant.label, ", ".join(sorted(active)))
                pending.insert(0, (variant, *payload[:2]))
                blocked[0] = True
                continue
            blocked[0] = False   # a pool ended: its resources are free again
            start_next()
    finally:
        stop.set()
