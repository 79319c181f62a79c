"""The local trace store: immutable parts, temporaries invisible, cleanup and quarantine."""

from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.instrument import known_trace_schema
from mirrorscan.grid.trace_schema import to_trace_table


def rows(n: int, start: int = 0) -> list[dict]:
    now = dt.datetime.now(dt.timezone.utc)
    return [{"invocation_id": "inv", "probe_id": f"m|a|b|e|AB{i}", "sample": 0, "attempt": 1, "created_at": now}
            for i in range(start, start + n)]


def test_parts_are_unique_and_readable(tmp_path):
    store = open_store(str(tmp_path / "store"))
    p1 = store.write_part(to_trace_table(rows(3)), "exp", "inv", "w1")
    p2 = store.write_part(to_trace_table(rows(2, 3)), "exp", "inv", "w1")
    assert p1 != p2 and store.list_parts("exp", "inv") == sorted([p1, p2])
    table = store.read("exp", "inv")
    assert table.num_rows == 5 and table.schema.equals(known_trace_schema(), check_metadata=False)   # core + instruments' columns
    assert pq.read_schema(p1).field("ttft_ms").metadata[b"doc"].startswith(b"ms, monotonic")


def test_temporaries_are_ignored_then_removed_and_corrupt_parts_quarantined(tmp_path):
    store = open_store(str(tmp_path / "store"))
    good = store.write_part(to_trace_table(rows(2)), "exp", "inv", "w1")
    folder = store.traces_dir("exp", "inv")
    (tmp_path / "store/exp/inv/traces/.part-x.parquet.tmp").write_bytes(b"half a part")
    (tmp_path / "store/exp/inv/traces/part-broken.parquet").write_bytes(b"PAR1 not really")
    assert f"{folder}/.part-x.parquet.tmp" not in store.list_parts("exp", "inv")
    removed, quarantined = store.cleanup("exp", "inv")
    assert removed == [f"{folder}/.part-x.parquet.tmp"]
    assert [q.rsplit("/", 1)[-1] for q in quarantined] == ["part-broken.parquet"]
    assert store.list_parts("exp", "inv") == [good]
    assert store.read("exp", "inv").num_rows == 2


def test_empty_store_reads_as_empty_table(tmp_path):
    store = open_store(str(tmp_path / "s"))
    assert store.read("exp", "nothing", columns=["probe_id", "sample", "error"]).num_rows == 0
    assert store.dataset().count_rows() == 0


def dictionary_encoded(path: str) -> set[str]:
    """The columns of a Parquet file's first row group that have dictionary pages."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(i).path_in_schema for i in range(group.num_columns)
            if any("DICTIONARY" in e for e in group.column(i).encodings)}


def test_trace_parts_have_no_dictionary_pages_and_other_files_keep_them(tmp_path):
    store = open_store(str(tmp_path / "store"))
    table = to_trace_table(rows(16))
    part = store.write_part(table, "exp", "inv", "w1")
    assert dictionary_encoded(part) == set()
    assert store.read("exp", "inv").column("probe_id").to_pylist() == table.column("probe_id").to_pylist()
    index = store.write_parquet_part(store.invocation_dir("exp", "inv") + "/index", table, "ix")
    assert {"probe_id", "invocation_id"} <= dictionary_encoded(index)   # a row index: repeated values
