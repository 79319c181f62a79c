"""Grid expansion, the resume anti-join, attempt planning, seeds and literal rendering."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from grid.cells import add_seeds, expand_forced_choice, plan_attempts, remove_done, render_forced_choice
from grid.envelopes import load_envelopes, render_template
from grid.ids import cell_seed, make_probe_id

PAIRS = pa.table({"pair_id": ["vw", "cd", "ab"], "word_a": ["vodka", "cat", "x{b}"], "word_b": ["whiskey", "dog", "y"]})


def test_expansion_counts_and_unique_keys():
    cells = expand_forced_choice(["m1", "m2"], PAIRS, ["english_strict", "json_schema"], ["AB", "BA"], 3)
    assert cells.num_rows == 2 * 3 * 2 * 2 * 3
    keys = pc.binary_join_element_wise(cells["probe_id"], cells["sample"].cast(pa.string()), "#")
    assert pc.count_distinct(keys).as_py() == cells.num_rows
    first = cells.slice(0, 1).to_pylist()[0]
    assert first["probe_id"] == "m1|vodka|whiskey|english_strict|AB" == make_probe_id("m1", "vodka|whiskey", "english_strict", "AB")
    assert set(cells["sample"].to_pylist()) == {0, 1, 2}


def test_remove_done_is_an_anti_join_keeping_order():
    cells = expand_forced_choice(["m"], PAIRS, ["e"], ["AB", "BA"], 2)
    done = cells.take([0, 3, 5]).select(["probe_id", "sample"])
    left = remove_done(cells, done)
    assert left.num_rows == cells.num_rows - 3
    assert left["probe_id"].to_pylist() == cells.take([1, 2, 4, 6, 7, 8, 9, 10, 11])["probe_id"].to_pylist()


def test_plan_attempts_retries_errors_up_to_the_limit():
    cells = expand_forced_choice(["m"], PAIRS.slice(0, 1), ["e"], ["AB", "BA"], 1)
    ab, ba = cells["probe_id"].to_pylist()
    prior = pa.table({"probe_id": [ab, ba, ba], "sample": [0, 0, 0], "error": [None, "boom", "boom"]})
    todo, given_up = plan_attempts(cells, prior, max_attempts=3)
    assert todo["probe_id"].to_pylist() == [ba] and todo["attempt"].to_pylist() == [3]
    todo, given_up = plan_attempts(cells, prior, max_attempts=2)
    assert todo.num_rows == 0 and given_up["probe_id"].to_pylist() == [ba]
    fresh, _ = plan_attempts(cells, prior.slice(0, 0), max_attempts=3)
    assert fresh["attempt"].to_pylist() == [1, 1]


def test_seed_depends_only_on_root_probe_and_sample():
    cells = add_seeds(expand_forced_choice(["m"], PAIRS, ["e"], ["AB"], 2), root_seed=7)
    row = cells.slice(1, 1).to_pylist()[0]
    assert row["seed"] == cell_seed(7, row["probe_id"], row["sample"])
    assert cell_seed(7, row["probe_id"], 0) != cell_seed(7, row["probe_id"], 1) != cell_seed(8, row["probe_id"], 1)
    assert 0 <= row["seed"] < 2**63


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
