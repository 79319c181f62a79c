"""Reading only core trace columns (what a scan's outcome, resume and journal read) uses the core schema: no
instrument is imported for it, and the rows are the ones written, beside an instrument's own columns."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_core_columns_are_read_without_importing_an_instrument(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys
        import pyarrow as pa
        from mirrorscan.cluster.store.traces import open_store
        from mirrorscan.grid.trace_schema import conform, trace_schema

        store = open_store({str(tmp_path / "store")!r})
        extra = (pa.field("flinch_axis", pa.string(), metadata={{"doc": "an instrument's own column"}}),)
        rows = pa.table({{"probe_id": ["a|x|e|AB", "a|y|e|AB"], "sample": pa.array([0, 1], pa.int32()),
                          "error": [None, "boom"], "flinch_axis": ["x", "y"]}})
        store.write_part(conform(rows, trace_schema(extra)), "exp", "inv", "w0")
        got = store.read("exp", "inv", columns=["probe_id", "sample", "error"]).sort_by("probe_id")
        loaded = sorted(m for m in sys.modules if m.startswith("mirrorscan.instruments") or m == "scipy.stats")
        print(json.dumps({{"rows": got.to_pylist(), "loaded": loaded}}))
        full = store.read("exp", "inv")   # every column: the instruments' union schema, which imports them
        print(json.dumps({{"columns": full.num_columns,
                          "loaded": any(m.startswith("mirrorscan.instruments") for m in sys.modules)}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    core, full = (json.loads(line) for line in out.stdout.strip().splitlines())
    assert core["rows"] == [{"probe_id": "a|x|e|AB", "sample": 0, "error": None},
                            {"probe_id": "a|y|e|AB", "sample": 1, "error": "boom"}]
    assert core["loaded"] == []
    assert full["loaded"] is True   # the check above can see an instrument import when there is one
