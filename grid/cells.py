"""The grid as Arrow tables: expanding cells, removing the ones already stored, rendering prompts.

Everything here is vectorised with pyarrow compute so that a 1,000,000-cell grid expands and anti-joins
in seconds with bounded memory; nothing here holds a Python object per cell except seed hashing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.ids import MISSING, SEP, cell_seed

CELL_KEY = ("probe_id", "sample")
"""With the invocation id, the key of a cell for resume and deduplication."""


CELL_COLUMNS = ("label", "item_key", "envelope", "ordering", "sample")
"""Columns every instrument's ``cells`` returns (``-`` for a coordinate it lacks); the engine adds probe_id."""


def with_probe_ids(cells: pa.Table, file: str = "", instrument: str = "") -> pa.Table:
    """``cells`` with a ``probe_id`` column = label|item_key|envelope|ordering (replacing one already there).

    Checks that an instrument's cells carry the core columns and that (probe_id, sample) is unique: two
    cells with one key would overwrite each other's resume state."""
    missing = [c for c in CELL_COLUMNS if c not in cells.column_names]
    if missing:
        raise ValueError(f"instrument {instrument!r}: cells lack {missing} (every instrument returns {CELL_COLUMNS})")
    if "probe_id" in cells.column_names:
        cells = cells.drop_columns(["probe_id"])
    parts = [pc.fill_null(cells.column(c).cast(pa.string()), MISSING) for c in ("label", "item_key", "envelope", "ordering")]
    probe_id = pc.binary_join_element_wise(*parts, SEP)
    cells = cells.append_column("probe_id", probe_id)
    distinct = _distinct_keys(cells)
    if distinct != cells.num_rows:
        raise ValueError(f"instrument {instrument!r}: {cells.num_rows - distinct} cells share a (probe_id, sample)")
    return cells


def _distinct_keys(cells: pa.Table) -> int:
    """How many distinct (probe_id, sample) ``cells`` holds: each column dictionary-encoded and the two codes
    combined into one integer (a hash table of the distinct values only, not a copy of every key)."""
    if cells.column("sample").null_count or cells.column("probe_id").null_count:
        return cells.select(list(CELL_KEY)).group_by(list(CELL_KEY)).aggregate([]).num_rows
    code, size = np.zeros(cells.num_rows, np.int64), 1
    for name in CELL_KEY:
        encoded = pc.dictionary_encode(cells.column(name)).combine_chunks()
        code = code * len(encoded.dictionary) + encoded.indices.to_numpy().astype(np.int64)
        size *= len(encoded.dictionary)
    return len(np.unique(code)) if size < 2 ** 62 else \
        cells.select(list(CELL_KEY)).group_by(list(CELL_KEY)).aggregate([]).num_rows


CELL_KEY_TYPES = pa.schema([("probe_id", pa.string()), ("sample", pa.int32())])
"""The columns of ``CELL_KEY`` with the types a join compares them as."""


def remove_done(cells: pa.Table, done: pa.Table, key: pa.Schema = CELL_KEY_TYPES) -> pa.Table:
    """Cells whose ``key`` columns (default: (probe_id, sample)) are not among ``done``'s (a left anti-join),
    in the original order; both sides' key columns are compared as ``key``'s types (the cells' are returned
    so cast)."""
    if done.num_rows == 0 or cells.num_rows == 0:
        return cells
    keys = done.select(key.names).cast(key)
    for field in key:
        cells = cells.set_column(cells.schema.get_field_index(field.name), field.name,
                                 cells.column(field.name).cast(field.type))
    with_pos = cells.append_column("_pos", pa.array(np.arange(cells.num_rows, dtype=np.int64)))
    left = with_pos.join(keys, keys=key.names, join_type="left anti", use_threads=True)
    return left.sort_by("_pos").drop_columns(["_pos"])


def add_seeds(cells: pa.Table, root_seed: int) -> pa.Table:
    """Append each cell's seed (int64): hash(root seed, probe_id, sample), see ``grid.ids.cell_seed``."""
    seeds = [cell_seed(root_seed, p, s) for p, s in zip(cells.column("probe_id").to_pylist(),
                                                         cells.column("sample").to_pylist())]
    return cells.append_column("seed", pa.array(seeds, pa.int64()))


def plan_attempts(cells: pa.Table, prior: pa.Table, max_attempts: int) -> tuple[pa.Table, pa.Table]:
    """Split a grid against the rows already stored for it.

    ``prior`` has columns probe_id, sample, error (one row per earlier attempt). Cells with a successful
    row are done. Cells whose rows are all errors are retried while they have had fewer than
    ``max_attempts`` attempts. Returns (cells to run, with an ``attempt`` column = earlier attempts + 1;
    cells given up, with their attempt count).
    """
    if prior.num_rows == 0:
        return cells.append_column("attempt", pa.array(np.ones(cells.num_rows, np.int32))), cells.slice(0, 0)
    prior = prior.select(["probe_id", "sample", "error"]).cast(
        pa.schema([("probe_id", pa.string()), ("sample", pa.int32()), ("error", pa.string())]))
    ok = pc.is_null(prior.column("error"))
    succeeded = prior.filter(ok).select(list(CELL_KEY))
    failed = prior.filter(pc.invert(ok)).group_by(list(CELL_KEY)).aggregate([("error", "count")])
    failed = failed.select(["probe_id", "sample", "error_count"]).rename_columns(["probe_id", "sample", "attempts"])
    todo = remove_done(cells, succeeded)
    with_pos = todo.append_column("_pos", pa.array(np.arange(todo.num_rows, dtype=np.int64)))
    joined = with_pos.join(failed, keys=list(CELL_KEY), join_type="left outer").sort_by("_pos")
    attempts = pc.fill_null(joined.column("attempts"), 0).cast(pa.int32())
    joined = joined.drop_columns(["_pos", "attempts"])
    runnable = pc.less(attempts, max_attempts)
    run = joined.filter(runnable).append_column("attempt", pc.add(attempts.filter(runnable), 1).cast(pa.int32()))
    given_up = joined.filter(pc.invert(runnable)).append_column("attempts", attempts.filter(pc.invert(runnable)))
    return run, given_up
