"""Running cells through Ray Data: cells → engine actor pool (one pool per model) → Parquet parts.

The driver never holds the results. Each engine actor wraps its engine in ``StoringEngine``: it renders a
batch of cells through their instrument (the request columns of its engine kind: a few ms of string
work, done beside the engine rather than in a task of its own, which cost a worker process per block and
a round trip through the object store), answers it, copies the instrument's coordinate columns onto the
rows, runs the instrument's in-actor step
(``annotate``, which may fill the instrument's own columns at scan time), stores the
batch's trace rows as one immutable part, and returns only the counts, which the driver turns into the
progress bar. A crash therefore loses at most the batches in flight, never a written part. The instrument
travels as an ``InstrumentRef`` (a name and its frozen section): every worker resolves it by import.

The cells are cut into many small input blocks (a few engine batches each) so that every actor of a pool
gets work and progress arrives as it happens: Ray Data hands an actor a whole block per call. The blocks
enter Ray Data with their metadata computed in the driver (``ray.data.from_blocks``; ``from_arrow`` runs a
remote task per block for it, hundreds of them at once for a large sweep).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.actors.engine import Engine
from mirrorscan.cluster.scan.journal import in_flight
from mirrorscan.cluster.catalog.inference_writer import InferenceLogWriter
from mirrorscan.cluster.catalog.inference_rows import log_rows_from_traces
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.instrument import InstrumentRef
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.trace_schema import conform, trace_schema

MAX_BATCHES_PER_BLOCK = 8
"""Upper bound on engine batches per input block (bounds what a crash or a slow actor holds)."""
LOG_WAIT_S = 1.0
"""Longest wait, per batch, for the batch's inference_log rows while the catalog is healthy (normally ms)."""
LOG_CLOSE_S = 30.0
"""Longest wait at actor teardown for queued inference_log rows (retry, then spill)."""
EXECUTOR_POLL_S = 0.5
"""Longest wait (s) of one step of Ray Data's scheduling loop in the driver for its running tasks (Ray's own: 0.1).

Each step waits for *all* running tasks or this long, then does its bookkeeping (resource budgets, operator
states, metrics): about 1 ms of driver CPU. An engine block is seconds of work, so at Ray's 0.1 s the loop of
every model's pool wakes ten times a second mostly to find nothing done, and that was a third of the driver's
CPU in ``bench/scale.py --study sweep`` (driver 5.9 → 4.0–4.2 CPU-s; head side 0.316 ms per cell in one run
at 0.1 s, medians of three 0.272 and 0.258 at 0.5 s; engine busy fraction unchanged, docs/benchmarks.md).
The price is that a block finished mid-step is noticed up to this late, while the actor answers the second
block Ray Data keeps in flight per actor: an actor is handed at most two blocks per step, so its engine waits
on the driver only when two blocks take less than this (blocks of 8 batches: batches under ~31 ms, where the
10 ms gap between an actor's calls already costs a quarter). A step ends at once when every running block
is done, so the end of a run is not delayed."""


@dataclass(frozen=True)
class Pool:
    """One model's actor pool: the engine its actors build, where their rows go, and its size."""

    engine_cls: type[Engine]
    """The engine class (``actors.registry``; an ``actors.engine.Engine``): built once per actor as
    ``engine_cls(**engine_kwargs)``; its declarations give the actor's resources, concurrency and shutdown."""
    engine_kwargs: dict
    """The engine's arguments: ``variant``, ``model_source`` and ``run`` (the engine interface), and any more
    the class takes."""
    instrument: InstrumentRef | None
    """The instrument whose cells the pool answers (renders them, adds its columns, runs its in-actor step);
    None: cells arrive rendered, rows carry the core columns only."""
    store_uri: str
    """Trace store URI the actors write parts to."""
    experiment: str
    """Experiment name (the store's folder)."""
    invocation_id: str
    """The invocation the rows belong to."""
    batch_size: int
    """Cells per engine call (one part each)."""
    pool_size: int = 1
    """Actors the pool starts with."""
    max_pool_size: int | None = None
    """Actors the pool may grow to while work is queued (None: ``pool_size``)."""
    engine_resources: dict | None = None
    """Ray resources of one actor (``engine_resources``; None: one CPU)."""

    @property
    def variant(self) -> ModelVariant:
        """The model variant the engines load."""
        return self.engine_kwargs["variant"]


class StoringEngine:
    """An engine actor that stores each answered batch as one part and returns its counts."""

    def __init__(self, pool: Pool, journal: str | None = None):
        """Build the pool's engine (model load happens here, once per actor) and open its store. The pool's
        ``instrument`` says which columns the rows carry and what runs on them before they are stored (None:
        core columns only, nothing runs). With ``journal`` (a round's in-flight folder), each batch is
        marked there while it is answered."""
        self.journal = journal
        self.engine = pool.engine_cls(**pool.engine_kwargs)
        self.instrument = instrument = pool.instrument
        extra = instrument.instrument.columns if instrument is not None else ()
        self.schema = trace_schema(extra)
        self.store = open_store(pool.store_uri)
        self.experiment, self.invocation_id = pool.experiment, pool.invocation_id
        self.writer = f"a{os.getpid()}"
        run = pool.engine_kwargs.get("run")   # no catalog_dsn (a bare run_model): log rows are spilled
        self.log = InferenceLogWriter(run.catalog_dsn if run is not None else None, pool.store_uri, pool.experiment,
                                      pool.invocation_id, self.writer)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Render ``batch`` (cells) through its instrument, answer it, store the rows as a part, return (rows,
        error rows) for it; meanwhile the batch's cells are marked in flight in the journal folder
        (``cluster.scan.journal``)."""
        with in_flight(self.store, self.journal, self.writer, batch):
            return self._answer(render_block(batch, self.instrument) if self.instrument is not None else batch)

    def _answer(self, batch: pa.Table) -> pa.Table:
        rows = instrument_rows(self.engine(batch), batch, self.instrument)
        rows = conform(rows, self.schema)
        self.store.write_part(rows, self.experiment, self.invocation_id, self.writer)
        self.log.add(log_rows_from_traces(rows))
        if self.log.healthy:   # a few ms: the counts leave only once their log rows are in; never waits on
            self.log.flush(LOG_WAIT_S)   # a failing catalog (rows retried/spilled behind, closed below)
        errors = rows.num_rows - pc.sum(pc.is_null(rows.column("error")).cast(pa.int64())).as_py()
        return pa.table({"rows": [rows.num_rows], "errors": [errors]})

    def __del__(self):
        """Write or spill the log rows still queued. Ray Data 2.60 calls this on graceful actor-pool
        teardown (``_MapWorker.__ray_shutdown__`` drops the UDF), not after ``ray.kill``."""
        engine = self.__dict__.get("engine")   # None when __init__ failed before the engine was built
        if engine is not None:   # vLLM: stop the engine core before the process goes (no EngineDeadError noise)
            try:
                engine.shutdown()
            except Exception:
                pass
        log = getattr(self, "log", None)
        if log is not None:
            log.close(LOG_CLOSE_S)


def instrument_rows(rows: pa.Table, cells: pa.Table, instrument: InstrumentRef | None) -> pa.Table:
    """Engine rows with the instrument's coordinate columns copied from their cells (matched by probe_id and
    sample, whatever order the engine answered in) and its in-actor step applied (``annotate``)."""
    if instrument is None:
        return rows
    inst = instrument.instrument
    coordinates = [c for c in inst.coordinates if c in cells.column_names]
    if coordinates and rows.num_rows:
        position = {(p, s): i for i, (p, s) in enumerate(zip(cells.column("probe_id").to_pylist(),
                                                              cells.column("sample").to_pylist()))}
        take = pa.array([position[(p, s)] for p, s in zip(rows.column("probe_id").to_pylist(),
                                                          rows.column("sample").to_pylist())], pa.int64())
        for name in coordinates:
            column = cells.column(name).take(take)
            i = rows.schema.get_field_index(name)
            rows = rows.set_column(i, name, column) if i >= 0 else rows.append_column(name, column)
    return inst.annotate(rows, instrument.spec)


def render_block(table: pa.Table, instrument: InstrumentRef) -> pa.Table:
    """The request columns of a block of cells, rendered by their instrument (resolved in this worker)."""
    return instrument.instrument.render(table, instrument.spec)


def input_blocks(cells: pa.Table, batch_size: int, pool_size: int) -> list[pa.Table]:
    """Cut the cells into blocks of whole engine batches: at least ~4 blocks per actor, at most 8 batches each."""
    n_batches = -(-cells.num_rows // batch_size)
    per_block = max(1, min(MAX_BATCHES_PER_BLOCK, n_batches // (4 * pool_size)))
    rows = per_block * batch_size
    return [cells.slice(i, rows) for i in range(0, cells.num_rows, rows)]


def engine_resources(engine_cls: type[Engine], variant: ModelVariant) -> dict:
    """Ray resources of one engine actor of ``variant``: the engine class's ``ray_resources`` (``actors.engine``:
    one CPU and the variant's GPUs unless the engine says otherwise, as vLLM does with placement groups and HTTP
    engines with a quarter CPU), plus the model's memory request."""
    resources = dict(engine_cls.ray_resources(variant))
    if variant.memory_gb:
        resources["memory"] = int(variant.memory_gb * 2**30)
    return resources


def release_engine_resources(resources: dict) -> None:
    """Remove the placement group that ``engine_resources`` reserved for a model's pool (tensor-parallel
    engines, ``actors.placement``), once that pool has ended: until then its accelerators stay reserved
    and the autoscaler cannot remove their node. Nothing to do for other resources."""
    group = getattr(resources.get("scheduling_strategy"), "placement_group", None)
    if group is not None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(group)


def executor_poll(seconds: float = EXECUTOR_POLL_S) -> None:
    """Set how long a step of Ray Data's scheduling loop waits for running tasks in this (the driver's)
    process (``EXECUTOR_POLL_S``). Ray Data has no setting for it: this sets the module constant its loop
    reads on every step, and fails loudly if a Ray release no longer has it."""
    from ray.data._internal.execution import streaming_executor_state as state

    if not hasattr(state, "WAIT_FOR_TASK_COMPLETION_TIMEOUT_S"):
        raise RuntimeError("ray.data no longer has WAIT_FOR_TASK_COMPLETION_TIMEOUT_S: update "
                           "cluster.scan.pipeline.executor_poll for this Ray release")
    state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S = float(seconds)


def run_model(cells: pa.Table, pool: Pool, journal: str | None = None) -> Iterator[tuple[int, int]]:
    """Run one model's cells over ``pool``'s actors (``pool_size``, up to ``max_pool_size``: Ray Data grows the
    pool while work is queued); yield (rows written, error rows) as each part lands.

    An actor that dies is restarted, but the task it was running is not retried (Ray Data's default
    retries it forever: a poison cell would loop). Without ``journal`` a death then fails the run; with
    ``journal`` (an in-flight folder, ``cluster.scan.sweep.run_model_journaled``) the failed blocks are
    dropped, the run goes on, and the journal accounts for their cells afterwards. A running warm engine that
    matches the pool's engine answers its batches (``cluster.runtime.warm_engines.hosted_pool``)."""
    import ray.data

    from mirrorscan.cluster.runtime.warm_engines import hosted_pool

    executor_poll()
    # Warm engines (cluster/runtime/warm_engines.py): where a running Serve deployment holds an engine that answers
    # like this pool's, the actors send it their batches instead of loading the model; otherwise nothing changes.
    pool = hosted_pool(pool)
    max_pool_size = max(pool.pool_size, pool.max_pool_size or pool.pool_size)
    # Engines that serve requests concurrently (vLLM, HTTP) take the next batch while the last one's tail
    # is still streaming, so the engine never idles between batches; HF generates one batch at a time.
    calls = pool.engine_cls.CONCURRENT_BATCHES
    overlap = {"max_concurrent_calls_per_actor": calls, "enable_true_multi_threading": True} if calls > 1 else {}
    strategy = (ray.data.ActorPoolStrategy(size=pool.pool_size, **overlap) if max_pool_size == pool.pool_size
                else ray.data.ActorPoolStrategy(min_size=pool.pool_size, max_size=max_pool_size, **overlap))
    ds = ray.data.from_blocks(input_blocks(cells, pool.batch_size, max_pool_size))
    with warnings.catch_warnings():
        # Ray 2.60 deprecates ray_remote_args but names no parameter for an actor's restarts and retries
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        ds = ds.map_batches(StoringEngine, batch_format="pyarrow", batch_size=pool.batch_size,
                            fn_constructor_kwargs={"pool": pool, "journal": journal},
                            compute=strategy, **{"max_restarts": -1, "max_task_retries": 0,
                                                 **(pool.engine_resources or {"num_cpus": 1})})
    if journal is not None:
        ds.context.max_errored_blocks = -1   # this dataset only: the journal accounts for dropped blocks
    for counts in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        for rows, errors in zip(counts.column("rows").to_pylist(), counts.column("errors").to_pylist()):
            yield rows, errors
