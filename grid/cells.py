"""The grid as Arrow tables: expanding cells, removing the ones already stored, rendering prompts.

Everything here is vectorised with pyarrow compute so that a 1,000,000-cell grid expands and anti-joins
in seconds with bounded memory; nothing here holds a Python object per cell except seed hashing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from grid.envelopes import Envelope, split_template
from grid.ids import SEP, cell_seed

CELL_KEY = ("probe_id", "sample")
"""With the invocation id, the key of a cell for resume and deduplication."""


def expand_forced_choice(labels: list[str], pairs: pa.Table, envelope_ids: list[str],
                         orderings: list[str], samples: int) -> pa.Table:
    """All cells of a forced-choice grid: label × pair × envelope × ordering × sample.

    Columns: label, pair_id, word_a, word_b, item_key, envelope, ordering, sample (int32), probe_id.
    Rows are ordered label-major, then pair, envelope, ordering, sample.
    """
    n_l, n_p, n_e, n_o, n_s = len(labels), pairs.num_rows, len(envelope_ids), len(orderings), samples
    total = n_l * n_p * n_e * n_o * n_s
    idx = np.arange(total, dtype=np.int64)
    i_s = idx % n_s
    i_o = (idx // n_s) % n_o
    i_e = (idx // (n_s * n_o)) % n_e
    i_p = (idx // (n_s * n_o * n_e)) % n_p
    i_l = idx // (n_s * n_o * n_e * n_p)
    del idx
    label = pa.array(labels, pa.string()).take(pa.array(i_l))
    pair_rows = pa.array(i_p)
    pair_id = pairs.column("pair_id").combine_chunks().take(pair_rows)
    word_a = pairs.column("word_a").combine_chunks().take(pair_rows)
    word_b = pairs.column("word_b").combine_chunks().take(pair_rows)
    envelope = pa.array(envelope_ids, pa.string()).take(pa.array(i_e))
    ordering = pa.array(orderings, pa.string()).take(pa.array(i_o))
    item_key = pc.binary_join_element_wise(word_a, word_b, SEP)
    probe_id = pc.binary_join_element_wise(label, item_key, envelope, ordering, SEP)
    return pa.table({
        "label": label, "pair_id": pair_id, "word_a": word_a, "word_b": word_b, "item_key": item_key,
        "envelope": envelope, "ordering": ordering, "sample": pa.array(i_s.astype(np.int32)),
        "probe_id": probe_id,
    })


def remove_done(cells: pa.Table, done: pa.Table) -> pa.Table:
    """Cells whose (probe_id, sample) is not in ``done`` (a left anti-join), in the original order."""
    if done.num_rows == 0:
        return cells
    keys = done.select(list(CELL_KEY)).cast(pa.schema([("probe_id", pa.string()), ("sample", pa.int32())]))
    with_pos = cells.append_column("_pos", pa.array(np.arange(cells.num_rows, dtype=np.int64)))
    left = with_pos.join(keys, keys=list(CELL_KEY), join_type="left anti", use_threads=True)
    return left.sort_by("_pos").drop_columns(["_pos"])


def add_seeds(cells: pa.Table, root_seed: int) -> pa.Table:
    """Append each cell's seed (int64): hash(root seed, probe_id, sample), see ``grid.ids.cell_seed``."""
    seeds = [cell_seed(root_seed, p, s) for p, s in zip(cells.column("probe_id").to_pylist(),
                                                         cells.column("sample").to_pylist())]
    return cells.append_column("seed", pa.array(seeds, pa.int64()))


def render_forced_choice(cells: pa.Table, envelopes: dict[str, Envelope]) -> pa.Table:
    """Append system_text and user_text: each envelope rendered with the cell's words by literal substitution.

    AB puts word_a into ``{a}`` and word_b into ``{b}``; BA swaps them. Pure function, no chat template.
    """
    is_ab = pc.equal(cells.column("ordering"), "AB")
    fill_a = pc.if_else(is_ab, cells.column("word_a"), cells.column("word_b"))
    fill_b = pc.if_else(is_ab, cells.column("word_b"), cells.column("word_a"))
    env_col = cells.column("envelope")
    system = pa.nulls(cells.num_rows, pa.string())
    user = pa.nulls(cells.num_rows, pa.string())
    for env_id in pc.unique(env_col).to_pylist():
        env = envelopes[env_id]
        mask = pc.equal(env_col, env_id)
        parts = [fill_a if p == "{a}" else fill_b if p == "{b}" else pa.scalar(p) for p in split_template(env.user)]
        rendered = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
        user = pc.if_else(mask, rendered, user)
        system = pc.if_else(mask, pa.scalar(env.system), system)
    return cells.append_column("system_text", system).append_column("user_text", user)


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
