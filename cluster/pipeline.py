"""Running cells through Ray Data: render → engine actor pool (one pool per model) → Parquet parts.

The driver never holds the results: engine actors return trace rows, small write tasks store each
block as one immutable part, and only per-part counts come back to the driver for the progress bar.
A crash therefore loses at most the blocks in flight; everything written is a complete part.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from cluster.store import open_store
from grid.cells import render_forced_choice
from grid.envelopes import Envelope
from grid.trace_schema import TRACE_SCHEMA

WRITE_TASK_CPUS = 0.25
"""Write and render tasks are light: a fraction of a CPU, so engine actors keep the cores."""


def write_block(table: pa.Table, store_uri: str, experiment: str, invocation_id: str) -> pa.Table:
    """Store one block of trace rows as a part; return its counts (rows, error rows)."""
    if table.num_rows == 0:
        return pa.table({"rows": pa.array([], pa.int64()), "errors": pa.array([], pa.int64())})
    table = table.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
    open_store(store_uri).write_part(table, experiment, invocation_id, writer=f"w{os.getpid()}")
    errors = table.num_rows - pc.sum(pc.is_null(table.column("error")).cast(pa.int64())).as_py()
    return pa.table({"rows": [table.num_rows], "errors": [errors]})


def render_block(table: pa.Table, envelopes: dict) -> pa.Table:
    """Render system and user text of a block of forced-choice cells (envelopes as plain dicts)."""
    envs = {k: Envelope(id=k, system=v["system"], user=v["user"]) for k, v in envelopes.items()}
    return render_forced_choice(table, envs)


def run_model(cells: pa.Table, engine_cls: type, engine_kwargs: dict, envelopes: dict, *, store_uri: str,
              experiment: str, invocation_id: str, batch_size: int, pool_size: int,
              engine_resources: dict | None = None) -> Iterator[tuple[int, int]]:
    """Run one model's cells; yield (rows written, error rows) as each part lands."""
    import ray.data

    ds = ray.data.from_arrow(cells)
    ds = ds.map_batches(render_block, fn_kwargs={"envelopes": envelopes}, batch_format="pyarrow",
                        batch_size=batch_size, num_cpus=WRITE_TASK_CPUS)
    ds = ds.map_batches(engine_cls, fn_constructor_kwargs=engine_kwargs, batch_format="pyarrow",
                        batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=pool_size),
                        **(engine_resources or {"num_cpus": 1}))
    ds = ds.map_batches(write_block, fn_kwargs={"store_uri": store_uri, "experiment": experiment,
                                                "invocation_id": invocation_id},
                        batch_format="pyarrow", batch_size=None, num_cpus=WRITE_TASK_CPUS)
    for counts in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        for rows, errors in zip(counts.column("rows").to_pylist(), counts.column("errors").to_pylist()):
            yield rows, errors


def run_grid(cells: pa.Table, variants: list[dict], sources: dict[str, str], run: dict, envelopes: dict, *,
             store_uri: str, batch_size: int, pool_size: int,
             on_part: Callable[[int, int], None]) -> None:
    """Run every model's cells, one actor pool per model, calling ``on_part(rows, errors)`` per part."""
    from actors.registry import engine_class

    for variant in variants:
        mine = cells.filter(pc.equal(cells.column("label"), variant["label"]))
        if mine.num_rows == 0:
            continue
        kwargs = {"variant": variant, "model_source": sources[variant["label"]], "run": run}
        for rows, errors in run_model(mine, engine_class(variant["backend"]), kwargs, envelopes,
                                      store_uri=store_uri, experiment=run["experiment"],
                                      invocation_id=run["invocation_id"], batch_size=batch_size,
                                      pool_size=pool_size):
            on_part(rows, errors)
