"""The forced-choice grid as Arrow tables: label × pair × envelope × ordering × sample, and its prompts.

Vectorised with pyarrow compute, so a 1,000,000-cell grid expands in about a second; item_key is
``word_a|word_b`` in the pair set's own order, whatever the ordering.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.ids import SEP
from mirrorscan.instruments.forced_choice.envelopes import Envelope, split_template

ORDERINGS = ("AB", "BA")
"""AB puts word_a into ``{a}`` and word_b into ``{b}``; BA swaps the words."""


def expand_forced_choice(labels: list[str], pairs: pa.Table, envelope_ids: list[str],
                         orderings: list[str], samples: int, *, compact: bool = False) -> pa.Table:
    """All cells of a forced-choice grid: label × pair × envelope × ordering × sample.

    Columns: label, pair_id, word_a, word_b, item_key, envelope, ordering, sample (int32).
    Rows are ordered label-major, then pair, envelope, ordering, sample. The engine adds probe_id.
    ``compact``: the text columns dictionary-encoded (int32 positions into the labels, the pair set's rows,
    the envelopes, the orderings; the same values), so a 10^6-cell grid holds each text once.
    """
    n_l, n_p, n_e, n_o, n_s = len(labels), pairs.num_rows, len(envelope_ids), len(orderings), samples
    total = n_l * n_p * n_e * n_o * n_s

    def positions(count: int, inner: int) -> pa.Array:
        """Per cell, its position along one axis of ``count`` (int32): each position ``inner`` times in a row, that
        block repeated over the grid."""
        block = np.repeat(np.arange(count, dtype=np.int32), inner)
        return pa.array(np.tile(block, total // len(block)) if len(block) else block)

    i_s = positions(n_s, 1)
    i_o = positions(n_o, n_s)
    i_e = positions(n_e, n_s * n_o)
    i_p = positions(n_p, n_s * n_o * n_e)
    i_l = positions(n_l, n_s * n_o * n_e * n_p)

    def column(rows: pa.Array, values: pa.Array) -> pa.Array:
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        return pa.DictionaryArray.from_arrays(rows, values) if compact else values.take(rows)

    words_a, words_b = pairs.column("word_a").combine_chunks(), pairs.column("word_b").combine_chunks()
    return pa.table({
        "label": column(i_l, pa.array(labels, pa.string())), "pair_id": column(i_p, pairs.column("pair_id")),
        "word_a": column(i_p, words_a), "word_b": column(i_p, words_b),
        "item_key": column(i_p, pc.binary_join_element_wise(words_a, words_b, SEP)),
        "envelope": column(i_e, pa.array(envelope_ids, pa.string())),
        "ordering": column(i_o, pa.array(orderings, pa.string())), "sample": i_s,
    })


def render_forced_choice(cells: pa.Table, envelopes: Mapping[str, Envelope]) -> pa.Table:
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
