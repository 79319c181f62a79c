"""The forced-choice grid as Arrow tables: label × pair × envelope × ordering × sample, and its prompts.

Vectorised with pyarrow compute, so a 1,000,000-cell grid expands in about a second; item_key is
``word_a|word_b`` in the pair set's own order, whatever the ordering.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.ids import SEP
from mirrorscan.instruments.forced_choice.envelopes import Envelope, split_template

ORDERINGS = ("AB", "BA")
"""AB puts word_a into ``{a}`` and word_b into ``{b}``; BA swaps the words."""


def expand_forced_choice(labels: list[str], pairs: pa.Table, envelope_ids: list[str],
                         orderings: list[str], samples: int) -> pa.Table:
    """All cells of a forced-choice grid: label × pair × envelope × ordering × sample.

    Columns: label, pair_id, word_a, word_b, item_key, envelope, ordering, sample (int32).
    Rows are ordered label-major, then pair, envelope, ordering, sample. The engine adds probe_id.
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
    return pa.table({
        "label": label, "pair_id": pair_id, "word_a": word_a, "word_b": word_b, "item_key": item_key,
        "envelope": envelope, "ordering": ordering, "sample": pa.array(i_s.astype(np.int32)),
    })


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
