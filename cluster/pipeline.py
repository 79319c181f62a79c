"""Running cells through Ray Data: render → engine actor pool (one pool per model) → Parquet parts.

The driver never holds the results. Each engine actor wraps its engine in ``StoringEngine``: it answers a
batch, classifies the answers (forced_choice: class and classifier_version are written at scan time),
stores the batch's trace rows as one immutable part, and returns only the counts, which the driver turns
into the progress bar. A crash therefore loses at most the batches in flight, never a written part.

The cells are cut into many small input blocks (a few engine batches each) so that every actor of a pool
gets work and progress arrives as it happens: Ray Data hands an actor a whole block per call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from analysis.classify import with_classes
from cluster.crash_journal import in_flight
from cluster.inference_log import InferenceLogWriter, log_rows_from_traces
from cluster.store import open_store
from grid.cells import render_forced_choice
from grid.envelopes import envelopes_from_settings
from grid.trace_schema import TRACE_SCHEMA

LIGHT_TASK_CPUS = 0.25
"""Render tasks are light: a fraction of a CPU, so engine actors keep the cores."""
MAX_BATCHES_PER_BLOCK = 8
"""Upper bound on engine batches per input block (bounds what a crash or a slow actor holds)."""
LOG_WAIT_S = 1.0
"""Longest wait, per batch, for the batch's inference_log rows while the catalog is healthy (normally ms)."""
LOG_CLOSE_S = 30.0
"""Longest wait at actor teardown for queued inference_log rows (retry, then spill)."""


class StoringEngine:
    """An engine actor that stores each answered batch as one part and returns its counts."""

    def __init__(self, engine_cls: type, engine_kwargs: dict, store_uri: str, experiment: str, invocation_id: str,
                 envelopes: dict | None = None, journal: str | None = None):
        """Build the engine (model load happens here, once per actor) and open the store. With
        ``envelopes`` (frozen envelope texts), forced-choice answers are classified before they are stored.
        With ``journal`` (a round's in-flight folder), each batch is marked there while it is answered."""
        self.journal = journal
        self.engine = engine_cls(**engine_kwargs)
        self.envelopes = envelopes_from_settings(envelopes) if envelopes else None
        self.store = open_store(store_uri)
        self.experiment, self.invocation_id = experiment, invocation_id
        self.writer = f"a{os.getpid()}"
        run = engine_kwargs.get("run") or {}   # no catalog_dsn (a bare run_model): log rows are spilled
        self.log = InferenceLogWriter(run.get("catalog_dsn"), store_uri, experiment, invocation_id, self.writer)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer ``batch``, store the rows as a part, return (rows, error rows) for it; meanwhile the
        batch's cells are marked in flight in the journal folder (``cluster.crash_journal``)."""
        with in_flight(self.store, self.journal, self.writer, batch):
            return self._answer(batch)

    def _answer(self, batch: pa.Table) -> pa.Table:
        rows = self.engine(batch)
        if self.envelopes is not None:
            rows = with_classes(rows, self.envelopes)
        rows = rows.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
        self.store.write_part(rows, self.experiment, self.invocation_id, self.writer)
        self.log.add(log_rows_from_traces(rows))
        if self.log.healthy:   # a few ms: the counts leave only once their log rows are in; never waits on
            self.log.flush(LOG_WAIT_S)   # a failing catalog (rows retried/spilled behind, closed below)
        errors = rows.num_rows - pc.sum(pc.is_null(rows.column("error")).cast(pa.int64())).as_py()
        return pa.table({"rows": [rows.num_rows], "errors": [errors]})

    def __del__(self):
        """Write or spill the log rows still queued. Ray Data 2.60 calls this on graceful actor-pool
        teardown (``_MapWorker.__ray_shutdown__`` drops the UDF), not after ``ray.kill``."""
        engine = getattr(self, "engine", None)
        if hasattr(engine, "shutdown"):   # vLLM: stop the engine core before the process goes (no EngineDeadError noise)
            try:
                engine.shutdown()
            except Exception:
                pass
        log = getattr(self, "log", None)
        if log is not None:
            log.close(LOG_CLOSE_S)


def render_block(table: pa.Table, envelopes: dict) -> pa.Table:
    """Render system and user text of a block of forced-choice cells (envelopes as plain dicts)."""
    return render_forced_choice(table, envelopes_from_settings(envelopes))


def input_blocks(cells: pa.Table, batch_size: int, pool_size: int) -> list[pa.Table]:
    """Cut the cells into blocks of whole engine batches: at least ~4 blocks per actor, at most 8 batches each."""
    n_batches = -(-cells.num_rows // batch_size)
    per_block = max(1, min(MAX_BATCHES_PER_BLOCK, n_batches // (4 * pool_size)))
    rows = per_block * batch_size
    return [cells.slice(i, rows) for i in range(0, cells.num_rows, rows)]


def engine_resources(engine_cls: type, variant: dict) -> dict:
    """Ray resources of one engine actor of ``variant``: the engine class's own ``ray_resources`` when it
    has one (vLLM: GPUs, placement groups), else one CPU; plus the model's memory request."""
    if hasattr(engine_cls, "ray_resources"):
        resources = dict(engine_cls.ray_resources(variant))
    else:
        resources = {"num_cpus": 1}
        if variant.get("num_gpus"):
            resources["num_gpus"] = variant["num_gpus"]
    if variant.get("memory_gb"):
        resources["memory"] = int(variant["memory_gb"] * 2**30)
    return resources


def run_model(cells: pa.Table, engine_cls: type, engine_kwargs: dict, envelopes: dict, *, store_uri: str,
              experiment: str, invocation_id: str, batch_size: int, pool_size: int, max_pool_size: int | None = None,
              engine_resources: dict | None = None, journal: str | None = None) -> Iterator[tuple[int, int]]:
    """Run one model's cells over an actor pool of ``pool_size`` (up to ``max_pool_size``: Ray Data grows the
    pool while work is queued); yield (rows written, error rows) as each part lands.

    An actor that dies is restarted, but the task it was running is not retried (Ray Data's default
    retries it forever: a poison cell would loop). Without ``journal`` a death then fails the run; with
    ``journal`` (an in-flight folder, ``cluster.crash_journal.run_model_journaled``) the failed blocks are
    dropped, the run goes on, and the journal accounts for their cells afterwards."""
    import ray.data

    max_pool_size = max(pool_size, max_pool_size or pool_size)
    # Engines that serve requests concurrently (vLLM, HTTP) take the next batch while the last one's tail
    # is still streaming, so the engine never idles between batches; HF generates one batch at a time.
    calls = int(getattr(engine_cls, "CONCURRENT_BATCHES", 1))
    overlap = {"max_concurrent_calls_per_actor": calls, "enable_true_multi_threading": True} if calls > 1 else {}
    pool = (ray.data.ActorPoolStrategy(size=pool_size, **overlap) if max_pool_size == pool_size
            else ray.data.ActorPoolStrategy(min_size=pool_size, max_size=max_pool_size, **overlap))
    ds = ray.data.from_arrow(input_blocks(cells, batch_size, max_pool_size))
    ds = ds.map_batches(render_block, fn_kwargs={"envelopes": envelopes}, batch_format="pyarrow",
                        batch_size=None, num_cpus=LIGHT_TASK_CPUS)
    ds = ds.map_batches(StoringEngine, batch_format="pyarrow", batch_size=batch_size,
                        fn_constructor_kwargs={"engine_cls": engine_cls, "engine_kwargs": engine_kwargs,
                                               "store_uri": store_uri, "experiment": experiment,
                                               "invocation_id": invocation_id, "envelopes": envelopes,
                                               "journal": journal},
                        compute=pool, **{"max_restarts": -1, "max_task_retries": 0,
                                         **(engine_resources or {"num_cpus": 1})})
    if journal is not None:
        ds.context.max_errored_blocks = -1   # this dataset only: the journal accounts for dropped blocks
    for counts in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        for rows, errors in zip(counts.column("rows").to_pylist(), counts.column("errors").to_pylist()):
            yield rows, errors


def run_grid(cells: pa.Table, variants: list[dict], sources: dict[str, str], run: dict, envelopes: dict, *,
             store_uri: str, batch_size: int, pool_size: int,
             on_part: Callable[[int, int], None], max_attempts: int = 3) -> None:
    """Run every model's cells, one actor pool per model, calling ``on_part(rows, errors)`` per part.
    Batches whose actor died are journaled as error rows and their cells retried one per batch, up to
    ``max_attempts`` attempts per cell (``cluster.crash_journal``)."""
    from actors.registry import engine_class
    from cluster.crash_journal import run_model_journaled

    for variant in variants:
        mine = cells.filter(pc.equal(cells.column("label"), variant["label"]))
        if mine.num_rows == 0:
            continue
        kwargs = {"variant": variant, "model_source": sources[variant["label"]], "run": run}
        engine_cls = engine_class(variant.get("backend", "hf"))
        for rows, errors in run_model_journaled(mine, engine_cls, kwargs, envelopes,
                                                store_uri=store_uri, experiment=run["experiment"],
                                                invocation_id=run["invocation_id"], batch_size=batch_size,
                                                pool_size=variant.get("min_actors") or pool_size,
                                                max_pool_size=variant.get("max_actors") or pool_size,
                                                engine_resources=engine_resources(engine_cls, variant),
                                                max_attempts=max_attempts):
            on_part(rows, errors)
