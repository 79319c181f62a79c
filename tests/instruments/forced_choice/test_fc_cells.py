"""Forced-choice grid expansion and literal rendering."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.cells import with_probe_ids
from mirrorscan.grid.ids import make_probe_id
from mirrorscan.instruments.forced_choice.cells import expand_forced_choice, render_forced_choice
from mirrorscan.instruments.forced_choice.envelopes import load_envelopes, render_template

PAIRS = pa.table({"pair_id": ["vw", "cd", "ab"], "word_a": ["vodka", "cat", "x{b}"], "word_b": ["whiskey", "dog", "y"]})


def test_expansion_counts_and_unique_keys():
    cells = with_probe_ids(expand_forced_choice(["m1", "m2"], PAIRS, ["english_strict", "json_schema"], ["AB", "BA"], 3))
    assert cells.num_rows == 2 * 3 * 2 * 2 * 3
    keys = pc.binary_join_element_wise(cells["probe_id"], cells["sample"].cast(pa.string()), "#")
    assert pc.count_distinct(keys).as_py() == cells.num_rows
    first = cells.slice(0, 1).to_pylist()[0]
    assert first["probe_id"] == "m1|vodka|whiskey|english_strict|AB" == make_probe_id("m1", "vodka|whiskey", "english_strict", "AB")
    assert set(cells["sample"].to_pylist()) == {0, 1, 2}


def test_rendering_is_literal_and_orders_words():
    envs = load_envelopes().envelopes
    cells = render_forced_choice(expand_forced_choice(["m"], PAIRS, ["json_schema", "english_strict"], ["AB", "BA"], 1), envs)
    rows = {(r["pair_id"], r["envelope"], r["ordering"]): r for r in cells.to_pylist()}
    assert rows[("vw", "json_schema", "AB")]["user_text"] == \
        'Return {"choice": "..."} where "..." is either "vodka" or "whiskey".'
    assert rows[("vw", "json_schema", "BA")]["user_text"] == \
        'Return {"choice": "..."} where "..." is either "whiskey" or "vodka".'
    assert rows[("vw", "english_strict", "AB")]["system_text"] == "You are a helpful assistant."
    # a word containing a placeholder is inserted once, never substituted again
    assert "x{b} or y" in rows[("ab", "english_strict", "AB")]["user_text"]
    assert render_template("{b}-{a}-{{a}}", "1", "2") == "2-1-{1}"
