"""An invocation read for its analysis (catalog row, frozen settings, manifest and traces), and its
instrument's analysis written beside it.

``resolve_rows`` turns what a user typed (an invocation id or its unique start, an experiment folder or
name) into catalog rows; ``load`` reads one of them from its store; ``analyze`` runs the instrument's
``analyze(traces, settings)`` (no I/O) and ``write_analysis`` stores what it produced under
``<store>/<experiment>/<invocation>/analysis/<instrument>/<stamp>/`` (summary.json, one Parquet file per
table, one PNG per chart, one JSON per document), never overwriting an earlier analysis.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from grid.errors import ConfigError
from grid.instrument import Analysis, Instrument, resolve
from grid.settings import upgrade


@dataclass(frozen=True)
class Invocation:
    """An invocation's catalog row, settings (format 2), manifest and traces, and the store holding them."""

    row: dict
    """The ``scan_invocations`` row (invocation_id as text, jsonb columns as Python values)."""
    settings: dict
    """The frozen settings, read as format 2 (``grid.settings.upgrade``)."""
    manifest: dict | None
    """``invocation.json`` from the store (settings, provenance, model sources); None when absent."""
    traces: pa.Table
    """Every stored row of the invocation (one per attempt), core columns plus the instrument's."""
    store: object
    """The ``cluster.store.TraceStore`` the traces were read from."""

    @property
    def invocation_id(self) -> str:
        """The invocation's id (uuid text)."""
        return str(self.row["invocation_id"])

    @property
    def experiment(self) -> str:
        """The experiment's name."""
        return self.row["experiment"]

    @property
    def instrument(self) -> Instrument:
        """The invocation's instrument, resolved from its settings."""
        return resolve(self.settings["instrument"])


def resolve_rows(target: str, *, catalog_dsn: str | None = None, every: bool = False) -> list[dict]:
    """Catalog rows of ``target``: an invocation id (or its unique start) → that one; an experiment (folder or
    name) → its newest invocation, or with ``every`` all its invocations, oldest first. ConfigError (naming
    what to run) when there is none."""
    from cluster.catalog import Catalog, resolve_dsn, resolve_invocation

    with Catalog(resolve_dsn(catalog_dsn or os.environ.get("MIRRORSCAN_CATALOG_DSN"))) as catalog:
        newest = resolve_invocation(target, catalog)
        if not every or _names_invocation(target, newest):
            return [newest]
        ids = [r[0] for r in catalog.execute(
            "SELECT invocation_id::text FROM scan_invocations WHERE experiment = %s ORDER BY started_at",
            [newest["experiment"]])]
        return [catalog.get_invocation(i) for i in ids]


def _names_invocation(target: str, row: dict) -> bool:
    """Whether ``target`` was an invocation id (or its start) rather than an experiment."""
    t = target.strip().lower()
    return not os.path.isdir(target) and bool(re.fullmatch(r"[0-9a-f-]{6,36}", t)) \
        and str(row["invocation_id"]).startswith(t)


def read_manifest(store, experiment: str, invocation_id: str) -> dict | None:
    """The invocation's ``invocation.json`` (None when the store holds none or it is unreadable)."""
    from cluster.store import MANIFEST

    try:
        return json.loads(store.read_bytes(f"{store.invocation_dir(experiment, invocation_id)}/{MANIFEST}"))
    except (OSError, ValueError):
        return None


def load(row: dict, *, store: str | None = None) -> Invocation:
    """The invocation of a catalog ``row``, read from ``store`` (default: the store its row names);
    ConfigError when that store holds no traces of it."""
    from cluster.store import open_store
    from grid.trace_schema import trace_schema

    settings = upgrade(row["settings"])
    inv_id, experiment = str(row["invocation_id"]), row["experiment"]
    trace_store = open_store(store or row["store_uri"])
    traces = trace_store.read(experiment, inv_id, schema=trace_schema(resolve(settings["instrument"]).columns))
    if traces.num_rows == 0:
        raise ConfigError("", "invocation", f"invocation {inv_id} has no traces in {trace_store.uri}",
                          "point --store at the store the scan wrote to, or finish it with scan --resume")
    return Invocation(row, settings, read_manifest(trace_store, experiment, inv_id), traces, trace_store)


def analyze(inv: Invocation, *, reannotate: bool = False) -> Analysis:
    """The instrument's analysis of the invocation (``Instrument.analyze``; computed, not written)."""
    return inv.instrument.analyze(inv.traces, inv.settings, reannotate=reannotate)


def write_analysis(inv: Invocation, analysis: Analysis) -> list[str]:
    """Store ``analysis`` under ``<invocation>/analysis/<instrument>/<stamp>/`` (a new folder each time);
    returns the display paths of the files written, summary.json first."""
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
    return [inv.store.write_analysis(inv.experiment, inv.invocation_id, f"{stamp}/{file}", data)
            for file, data in outputs.items()]
