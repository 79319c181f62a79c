"""``conform``: a table in exactly the trace schema's columns, order and types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mirrorscan.grid.trace_schema import TRACE_SCHEMA, conform, to_trace_table


def test_conform_orders_casts_and_fills_columns():
    rows = to_trace_table([{"probe_id": "m|a|b|e|AB", "sample": 0}])
    shuffled = pa.table({"sample": pa.array([3], pa.int64()),          # wrong type: cast to int32
                         "probe_id": rows.column("probe_id")})           # right type: kept as it is
    out = conform(shuffled, TRACE_SCHEMA)
    assert out.schema.equals(TRACE_SCHEMA, check_metadata=True)
    assert out.column("sample").to_pylist() == [3] and out.column("probe_id").to_pylist() == ["m|a|b|e|AB"]
    assert out.column("response").null_count == 1                      # absent: null


def test_conform_refuses_a_value_its_type_cannot_hold():
    bad = pa.table({"probe_id": ["p"], "sample": pa.array([2**40], pa.int64())})
    with pytest.raises(pa.ArrowInvalid):
        conform(bad, TRACE_SCHEMA)
