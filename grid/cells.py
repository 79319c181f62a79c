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


def with_probe_ids(cells: pa.Table, file: str = "", instrument: str = "", *, compact: bool = False) -> pa.Table:
    """``cells`` with a ``probe_id`` column = label|item_key|envelope|ordering (replacing one already there).

    Checks that an instrument's cells carry the core columns and that (probe_id, sample) is unique: two
    cells with one key would overwrite each other's resume state. The columns come back as plain values
    (``plain``: an instrument may hand over dictionary-encoded ones); with ``compact``, as the instrument gave
    them, and probe_id dictionary-encoded too (each distinct probe id held once; the same values)."""
    missing = [c for c in CELL_COLUMNS if c not in cells.column_names]
    if missing:
        raise ValueError(f"instrument {instrument!r}: cells lack {missing} (every instrument returns {CELL_COLUMNS})")
    if "probe_id" in cells.column_names:
        cells = cells.drop_columns(["probe_id"])
    if compact and cells.num_rows:
        probe_id, by_entry = _compact_probe_ids(cells), not _joins_may_repeat(cells)
    else:
        cells = plain(cells)
        parts = [pc.fill_null(cells.column(c).cast(pa.string()), MISSING) for c in PROBE_ID_PARTS]
        probe_id, by_entry = pc.binary_join_element_wise(*parts, SEP), False
    cells = cells.append_column("probe_id", probe_id)
    distinct = _distinct_keys(cells, by_entry=by_entry)
    if distinct != cells.num_rows:
        raise ValueError(f"instrument {instrument!r}: {cells.num_rows - distinct} cells share a (probe_id, sample)")
    return cells


PROBE_ID_PARTS = ("label", "item_key", "envelope", "ordering")
"""The cell columns a probe_id joins, in order."""


def plain(table: pa.Table) -> pa.Table:
    """``table`` with each dictionary-encoded column decoded to its values' type (``table`` itself when none is)."""
    if not any(pa.types.is_dictionary(f.type) for f in table.schema):
        return table
    return table.cast(pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                                 for f in table.schema], metadata=table.schema.metadata))


def _codes(column: pa.Array | pa.ChunkedArray, by_entry: bool = False) -> tuple[np.ndarray, int]:
    """Exact integer codes of a column's values: (code per row (int32), how many codes). Equal values share one
    code and null has a code of its own; a dictionary-encoded column is read through its dictionary, whose
    repeated values are merged (``by_entry``: its entries are known to be distinct values, taken as they are)."""
    if isinstance(column, pa.ChunkedArray):
        column = (column.unify_dictionaries() if pa.types.is_dictionary(column.type) else column).combine_chunks()
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
        by_entry = True
    n_values = len(column.dictionary)
    indices = column.indices.cast(pa.int32())
    if indices.null_count:
        indices = pc.fill_null(indices, n_values)
    if by_entry and not column.dictionary.null_count:
        return indices.to_numpy(), n_values + 1
    values = pc.dictionary_encode(column.dictionary)   # the dictionary's distinct values
    remap = np.append(pc.fill_null(values.indices, len(values.dictionary)).to_numpy(), len(values.dictionary))
    return remap.astype(np.int32)[indices.to_numpy()], len(values.dictionary) + 1


def _row_codes(cells: pa.Table, names: tuple[str, ...], by_entry: tuple[str, ...] = ()) -> np.ndarray:
    """One int64 code per row for the values of columns ``names``: equal tuples, equal codes (made dense again
    before the product of the columns' code counts could overflow). ``by_entry``: the columns whose
    dictionary entries are known to be distinct values."""
    code, size = np.zeros(cells.num_rows, np.int64), 1
    for name in names:
        codes, n = _codes(cells.column(name), name in by_entry)
        if size * n >= 2 ** 62:
            code = pc.dictionary_encode(pa.array(code)).indices.to_numpy().astype(np.int64)
            size = int(code.max()) + 1
        code *= n
        code += codes
        size *= n
    return code


def _first_rows(indices: np.ndarray) -> np.ndarray:
    """Where each code first occurs in ``indices``, codes numbered in order of first occurrence (as
    ``pc.dictionary_encode`` numbers them): a row holds a new code exactly where it exceeds all before it."""
    highest = np.maximum.accumulate(indices)
    return np.flatnonzero(np.concatenate([[True], highest[1:] > highest[:-1]]))


def _compact_probe_ids(cells: pa.Table) -> pa.DictionaryArray:
    """The probe_id column as ``with_probe_ids`` joins it, dictionary-encoded: each distinct combination of the
    parts is joined once (at its first row). Two combinations may join to one text (a null part reads as
    ``MISSING``; two parts hold the separator): two entries of the same value, which ``_codes`` merges."""
    combos = pc.dictionary_encode(pa.array(_row_codes(cells, PROBE_ID_PARTS))).indices
    at = pa.array(_first_rows(combos.to_numpy()))
    joined = pc.binary_join_element_wise(*(pc.fill_null(cells.column(c).take(at).cast(pa.string()).combine_chunks(),
                                                        MISSING) for c in PROBE_ID_PARTS), SEP)
    return pa.DictionaryArray.from_arrays(combos, joined)


def _joins_may_repeat(cells: pa.Table) -> bool:
    """Whether two distinct combinations of the probe id's parts could join to one text: a null part reads as
    ``MISSING`` (which a part may also hold); a text splits back into its parts only while at most one part
    holds the separator (as item_key does)."""
    with_sep = 0
    for name in PROBE_ID_PARTS:
        column = cells.column(name)
        values = pa.chunked_array([c.dictionary for c in column.chunks]) if pa.types.is_dictionary(column.type) \
            else column
        if column.null_count or values.null_count:
            return True
        with_sep += bool(pc.any(pc.match_substring(values.cast(pa.string()), SEP)).as_py())
    return with_sep > 1


def _distinct_keys(cells: pa.Table, *, by_entry: bool = False) -> int:
    """How many distinct (probe_id, sample) ``cells`` holds: each column's values coded as integers and the
    codes combined into one, sorted in place and the changes counted (no copy of every key). ``by_entry``: a
    dictionary-encoded probe_id's entries are distinct values (each combination of parts joined once, and no
    two joining to one text), so its positions are its codes."""
    if not cells.num_rows:
        return 0
    code = _row_codes(cells, CELL_KEY, ("probe_id",) if by_entry else ())
    code.sort()
    return 1 + int(np.count_nonzero(code[1:] != code[:-1]))


CELL_KEY_TYPES = pa.schema([("probe_id", pa.string()), ("sample", pa.int32())])
"""The columns of ``CELL_KEY`` with the types a join compares them as."""


def remove_held(cells: pa.Table, held: pa.Table, key: pa.Schema = CELL_KEY_TYPES) -> pa.Table:
    """Cells whose ``key`` columns (default: (probe_id, sample)) are not among ``held``'s — the keys of cells
    already stored — (a left anti-join), in the original order; both sides' key columns are compared as
    ``key``'s types (the cells' are returned so cast)."""
    if held.num_rows == 0 or cells.num_rows == 0:
        return cells
    keys = held.select(key.names).cast(key)
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
    row are held (stored already). Cells whose rows are all errors are retried while they have had fewer than
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
    todo = remove_held(cells, succeeded)
    with_pos = todo.append_column("_pos", pa.array(np.arange(todo.num_rows, dtype=np.int64)))
    joined = with_pos.join(failed, keys=list(CELL_KEY), join_type="left outer").sort_by("_pos")
    attempts = pc.fill_null(joined.column("attempts"), 0).cast(pa.int32())
    joined = joined.drop_columns(["_pos", "attempts"])
    runnable = pc.less(attempts, max_attempts)
    run = joined.filter(runnable).append_column("attempt", pc.add(attempts.filter(runnable), 1).cast(pa.int32()))
    given_up = joined.filter(pc.invert(runnable)).append_column("attempts", attempts.filter(pc.invert(runnable)))
    return run, given_up
