"""One invocation as the catalog and the store hold it: its row, its settings (as format 2), its traces, and the
timing its inference_log recorded. Readers for reproduce and diff; they write nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from grid.errors import ConfigError
from grid.instrument import Instrument, resolve
from grid.settings import upgrade


@dataclass
class Invocation:
    """An invocation read back: catalog row, settings, instrument, store and traces."""

    row: dict
    """Its ``scan_invocations`` row (jsonb as Python values, invocation_id as str)."""
    settings: dict
    """Its frozen settings read as format 2 (``grid.settings.upgrade``; the stored row is untouched)."""
    instrument: Instrument
    """The instrument its settings name (resolved)."""
    store: Any
    """The ``TraceStore`` holding its traces."""
    traces: pa.Table
    """Every stored row (one per attempt), in the instrument's trace schema."""
    manifest: dict | None
    """Its ``invocation.json`` beside the traces (None when absent)."""
    submitted_config: dict | None
    """The config as its first driver run recorded it (``scan_runs.submitted_config``; None before 0004)."""

    @property
    def id(self) -> str:
        return str(self.row["invocation_id"])

    @property
    def experiment(self) -> str:
        return self.row["experiment"]


def catalog_dsn(flag: str | None) -> str:
    """The catalog DSN to read: the flag, else ``$MIRRORSCAN_CATALOG_DSN``, else the embedded server."""
    from cluster.catalog import resolve_dsn

    return resolve_dsn(flag or os.environ.get("MIRRORSCAN_CATALOG_DSN"))


def load(target: str, *, store: str | None = None, dsn: str | None = None, need_traces: bool = True) -> Invocation:
    """The invocation ``target`` names (an id, the unique start of one, or an experiment → its newest), read
    from the catalog at ``dsn`` and the store (``store``, default the one it recorded). ConfigError when it is
    not found, or (``need_traces``) has no traces there."""
    from cluster.catalog import Catalog, resolve_invocation
    from cluster.store import open_store
    from grid.trace_schema import trace_schema

    with Catalog(catalog_dsn(dsn)) as catalog:
        row = resolve_invocation(target, catalog)
        submitted = catalog.execute(
            "SELECT submitted_config FROM scan_runs WHERE invocation_id = %s AND submitted_config IS NOT NULL "
            "ORDER BY started_at LIMIT 1", [row["invocation_id"]])
    settings = upgrade(row["settings"])
    instrument = resolve(settings["instrument"])
    trace_store = open_store(store or row["store_uri"], create=False)
    traces = trace_store.read(row["experiment"], row["invocation_id"], schema=trace_schema(instrument.columns))
    if need_traces and traces.num_rows == 0:
        raise ConfigError("", "invocation", f"invocation {row['invocation_id']} has no traces in {trace_store.uri}",
                          "point --store at the store the scan wrote to, or finish it with scan --resume")
    return Invocation(row, settings, instrument, trace_store, traces,
                      trace_store.read_manifest(row["experiment"], row["invocation_id"]),
                      submitted[0][0] if submitted else None)


def successful_cells(traces: pa.Table) -> pa.Table:
    """One row per cell (probe_id, sample): its successful row of the highest attempt (a cell without a
    successful row is left out)."""
    ok = traces.filter(pc.is_null(traces.column("error")))
    if ok.num_rows == 0:
        return ok
    ok = ok.sort_by([("probe_id", "ascending"), ("sample", "ascending"), ("attempt", "descending")])
    keys = list(zip(ok.column("probe_id").to_pylist(), ok.column("sample").to_pylist()))
    keep = [i for i, key in enumerate(keys) if i == 0 or keys[i - 1] != key]
    return ok.take(pa.array(keep, pa.int64()))


TIMING_COLUMNS = ("label", "ttft_ms", "decode_tok_s", "total_ms")
"""What the timing comparison reads of each engine request."""


def request_timing(invocation: Invocation, dsn: str | None = None) -> tuple[pa.Table, str]:
    """(timing rows of the invocation's engine requests: ``TIMING_COLUMNS``, where they come from). From the
    inference_log (catalog rows and those spilled beside the traces); when it holds none (older runs, or a
    log that was lost), from the timing columns of the trace rows themselves."""
    from cluster.catalog import Catalog
    from cluster.inference_log import spill_dataset

    with Catalog(catalog_dsn(dsn)) as catalog:
        rows = catalog.execute("SELECT label, ttft_ms, decode_tok_s, total_ms FROM inference_log "
                               "WHERE invocation_id = %s AND status = 'ok'", [invocation.id])
    schema = pa.schema([("label", pa.string()), ("ttft_ms", pa.float64()), ("decode_tok_s", pa.float64()),
                        ("total_ms", pa.float64())])
    table = pa.Table.from_pylist([dict(zip(TIMING_COLUMNS, r)) for r in rows], schema=schema)
    spilled = spill_dataset(invocation.store, invocation.experiment, invocation.id).to_table()
    if spilled.num_rows:
        spilled = spilled.filter(pc.equal(spilled.column("status"), "ok"))
        table = pa.concat_tables([table, spilled.select(list(TIMING_COLUMNS)).cast(schema)])
    if table.num_rows:
        return table, "inference_log"
    ok = invocation.traces.filter(pc.is_null(invocation.traces.column("error")))
    return ok.select(list(TIMING_COLUMNS)).cast(schema), "trace rows"
