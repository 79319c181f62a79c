"""An invocation's row index: a plan reads it instead of every part, and never misses a part it does not list."""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.cluster.store.row_index import read_successful_rows, write_index
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

COLUMNS = ["invocation_id", "probe_id", "sample", "label", "error"]


def part(invocation: str, keys: range) -> pa.Table:
    return to_trace_table([{"invocation_id": invocation, "probe_id": f"m|q{k}|answer|-", "sample": 0, "label": "m",
                            "seed": 1, "error": None if k % 5 else "boom"} for k in keys])


def test_an_index_serves_the_parts_it_lists_and_parts_written_after_it_are_read_raw(tmp_path):
    store = open_store(str(tmp_path / "store"))
    first = [store.write_part(part("inv-a", range(i, i + 4)), "exp", "inv-a", "w") for i in range(0, 12, 4)]
    store.write_part(part("inv-b", range(100, 104)), "exp", "inv-b", "w")   # no index: read raw
    assert write_index(store, "exp", "inv-a", COLUMNS, trace_schema()) is not None
    later = store.write_part(part("inv-a", range(12, 16)), "exp", "inv-a", "w")   # a resume after the index
    store.fs.delete_file(first[0])   # proof that the index served it: the part itself is gone
    rows = read_successful_rows(store, "exp", COLUMNS, trace_schema(), exclude="inv-c")
    assert sorted(rows.column("probe_id").to_pylist()) == sorted(
        [f"m|q{k}|answer|-" for k in [*range(16), *range(100, 104)] if k % 5])   # error rows left out
    assert set(rows.column("part").to_pylist()) >= {first[0], later}
    only_a = read_successful_rows(store, "exp", COLUMNS, trace_schema(), exclude="inv-b")
    assert only_a.num_rows == 16 - 4 and set(only_a.column("invocation_id").to_pylist()) == {"inv-a"}
