"""An invocation's instrument analysis, computed and written beside it.

``analyze`` runs the instrument's ``analyze(traces, settings)`` (no I/O) on an invocation read by
``results.invocations.load``, and ``write_analysis`` stores what it produced under
``<store>/<experiment>/<invocation>/analysis/<instrument>/<stamp>/`` (summary.json, one Parquet file per
table, one PNG per chart, one JSON per document), never overwriting an earlier analysis.
"""

from __future__ import annotations

import io
import json
import time
import uuid

from grid.instrument import Analysis
from results.invocations import Invocation


def analyze(inv: Invocation, *, reannotate: bool = False) -> Analysis:
    """The instrument's analysis of the invocation (``Instrument.analyze``; computed, not written)."""
    return inv.instrument.analyze(inv.traces, inv.settings, reannotate=reannotate)


def write_analysis(inv: Invocation, analysis: Analysis) -> list[str]:
    """Store ``analysis`` under ``<invocation>/analysis/<instrument>/<stamp>/`` (a new folder each time, complete
    or absent: ``TraceStore.write_analysis_folder``); returns the display paths of the files written,
    summary.json first."""
    import pyarrow.parquet as pq

    name = inv.instrument.name
    stamp = f"{name}/{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"   # unique per analysis
    summary = {"invocation_id": inv.invocation_id, "experiment": inv.experiment, "instrument": name,
               "settings_hash": inv.row["settings_hash"], **analysis.numbers}
    outputs = {"summary.json": json.dumps(summary, indent=2, ensure_ascii=False).encode()}
    for table_name, table in analysis.tables.items():
        buf = io.BytesIO()
        pq.write_table(table, buf)
        outputs[f"{table_name}.parquet"] = buf.getvalue()
    outputs.update({f"{chart}.png": png for chart, png in analysis.charts.items()})
    outputs.update({f"{doc}.json": json.dumps(body, indent=2, ensure_ascii=False).encode()
                    for doc, body in analysis.documents.items()})
    return inv.store.write_analysis_folder(inv.experiment, inv.invocation_id, stamp, outputs)
