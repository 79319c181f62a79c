"""Probe ids, the resume anti-join, attempt planning and seeds, on cells of any instrument."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mirrorscan.grid.cells import add_seeds, plan_attempts, remove_held, with_probe_ids
from mirrorscan.grid.ids import cell_seed


def cells_of(n_items: int, samples: int = 1, orderings=("-",)) -> pa.Table:
    """A grid of one label over ``n_items`` items, the given orderings and samples (no envelope)."""
    rows = [{"label": "m", "item_key": f"q{i}", "envelope": "-", "ordering": o, "sample": s}
            for i in range(n_items) for o in orderings for s in range(samples)]
    return with_probe_ids(pa.Table.from_pylist(rows, schema=pa.schema(
        [("label", pa.string()), ("item_key", pa.string()), ("envelope", pa.string()), ("ordering", pa.string()),
         ("sample", pa.int32())])))


def test_probe_ids_join_the_coordinates_and_null_reads_as_missing():
    table = pa.table({"label": ["m"], "item_key": ["a|b"], "envelope": [None], "ordering": ["AB"],
                      "sample": pa.array([0], pa.int32())})
    assert with_probe_ids(table)["probe_id"].to_pylist() == ["m|a|b|-|AB"]


def test_probe_ids_refuse_cells_that_share_a_key_or_lack_a_core_column():
    twice = pa.concat_tables([cells_of(1), cells_of(1)]).drop_columns(["probe_id"])
    with pytest.raises(ValueError, match="share a"):
        with_probe_ids(twice, instrument="twice")
    with pytest.raises(ValueError, match="lack"):
        with_probe_ids(pa.table({"label": ["m"], "sample": pa.array([0], pa.int32())}), instrument="thin")


def test_remove_held_is_an_anti_join_keeping_order():
    cells = cells_of(6, samples=2)
    held = cells.take([0, 3, 5]).select(["probe_id", "sample"])
    left = remove_held(cells, held)
    assert left.num_rows == cells.num_rows - 3
    assert left["probe_id"].to_pylist() == cells.take([1, 2, 4, 6, 7, 8, 9, 10, 11])["probe_id"].to_pylist()


def test_plan_attempts_retries_errors_up_to_the_limit():
    cells = cells_of(1, orderings=("AB", "BA"))
    ab, ba = cells["probe_id"].to_pylist()
    prior = pa.table({"probe_id": [ab, ba, ba], "sample": [0, 0, 0], "error": [None, "boom", "boom"]})
    todo, given_up = plan_attempts(cells, prior, max_attempts=3)
    assert todo["probe_id"].to_pylist() == [ba] and todo["attempt"].to_pylist() == [3]
    todo, given_up = plan_attempts(cells, prior, max_attempts=2)
    assert todo.num_rows == 0 and given_up["probe_id"].to_pylist() == [ba]
    fresh, _ = plan_attempts(cells, prior.slice(0, 0), max_attempts=3)
    assert fresh["attempt"].to_pylist() == [1, 1]


def test_seed_depends_only_on_root_probe_and_sample():
    cells = add_seeds(cells_of(3, samples=2), root_seed=7)
    row = cells.slice(1, 1).to_pylist()[0]
    assert row["seed"] == cell_seed(7, row["probe_id"], row["sample"])
    assert cell_seed(7, row["probe_id"], 0) != cell_seed(7, row["probe_id"], 1) != cell_seed(8, row["probe_id"], 1)
    assert 0 <= row["seed"] < 2**63
