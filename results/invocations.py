"""One invocation as the catalog and the store hold it — its row, its settings (a ``grid.settings.Settings``
record), its instrument, its manifest and its traces — and the timing its inference_log recorded: the one
reader of ``results/`` (reproduce, diff, report) and of ``analyze``. It writes nothing.

``resolve_rows`` turns what a user typed (an invocation id or its unique start, an experiment folder or
name) into catalog rows; ``load`` reads one invocation, named that way or by its row, from its store.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Instrument, resolve
from mirrorscan.grid.settings import Settings


@dataclass(frozen=True)
class Invocation:
    """An invocation read back: catalog row, settings, instrument, store, traces and manifest."""

    row: dict
    """Its ``scan_invocations`` row (jsonb as Python values, invocation_id as str)."""
    settings: Settings
    """Its frozen settings (``Settings.from_json`` of the row's, any format; the stored row is untouched)."""
    instrument: Instrument
    """The instrument its settings name (resolved)."""
    store: Any
    """The ``cluster.store.traces.TraceStore`` holding its traces."""
    traces: pa.Table
    """Every stored row (one per attempt), core columns plus the instrument's."""
    manifest: dict | None
    """Its ``invocation.json`` beside the traces (settings, provenance, model sources); None when absent."""

    @property
    def invocation_id(self) -> str:
        """The invocation's id (uuid text)."""
        return str(self.row["invocation_id"])

    @property
    def experiment(self) -> str:
        """The experiment's name."""
        return self.row["experiment"]


def resolve_rows(target: str, *, dsn: str | None = None, every: bool = False) -> list[dict]:
    """Catalog rows of ``target``: an invocation id (or its unique start) → that one; an experiment (folder or
    name) → its newest invocation, or with ``every`` all its invocations, oldest first. ConfigError (naming
    what to run) when there is none."""
    from mirrorscan.cluster.catalog.client import Catalog, resolve_invocation

    with Catalog(dsn) as catalog:   # cluster.catalog.client.resolve_dsn: the flag, else $MIRRORSCAN_CATALOG_DSN, else embedded
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


def load(target: str | dict, *, store: str | None = None, dsn: str | None = None,
         need_traces: bool = True) -> Invocation:
    """The invocation ``target`` names — an id, the unique start of one, or an experiment → its newest, looked
    up in the catalog at ``dsn``; or its catalog row itself (``resolve_rows``), read without the catalog —
    from the store (``store``, default the one it recorded; a local folder that does not exist is an
    error, never created). ConfigError when it is not found, when its settings hold a key this version does not
    know, or (``need_traces``) when it has no traces there."""
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.trace_schema import trace_schema

    row = target if isinstance(target, dict) else resolve_rows(target, dsn=dsn)[0]
    inv_id, experiment = str(row["invocation_id"]), row["experiment"]
    try:
        settings = Settings.from_json(row["settings"])
    except (TypeError, ValueError) as exc:
        raise ConfigError("", "settings", f"invocation {inv_id}'s frozen settings: {exc}",
                          "read it with the mirrorscan version that made it") from None
    instrument = resolve(settings.instrument)
    trace_store = open_store(store or row["store_uri"], create=False)
    traces = trace_store.read(experiment, inv_id, schema=trace_schema(instrument.columns))
    if need_traces and traces.num_rows == 0:
        raise ConfigError("", "invocation", f"invocation {inv_id} has no traces in {trace_store.uri}",
                          "point --store at the store the scan wrote to, or finish it with scan --resume")
    manifest = trace_store.read_manifest(experiment, inv_id)
    return Invocation(row, inputs_in_place(settings, manifest), instrument, trace_store, traces, manifest)


def inputs_in_place(settings: Settings, manifest: dict | None) -> Settings:
    """``settings`` with the input paths it records relative to its experiment folder (``./…``,
    ``grid.input_paths``) made paths under that folder, where the manifest's ``config_file`` says it is (the
    config.json the scan ran, on the machine that submitted it), so that readers find the files it read; as
    stored when the manifest names none (older invocations, which hold absolute paths)."""
    import dataclasses

    from mirrorscan.grid.input_paths import absolute_inputs, experiment_folder

    folder = experiment_folder((manifest or {}).get("config_file") or "")
    if folder is None:
        return settings
    return dataclasses.replace(settings, instrument_settings=absolute_inputs(settings.instrument_settings, folder))


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
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.catalog.inference_view import spill_dataset

    with Catalog(dsn) as catalog:
        rows = catalog.execute("SELECT label, ttft_ms, decode_tok_s, total_ms FROM inference_log "
                               "WHERE invocation_id = %s AND status = 'ok'", [invocation.invocation_id])
    schema = pa.schema([("label", pa.string()), ("ttft_ms", pa.float64()), ("decode_tok_s", pa.float64()),
                        ("total_ms", pa.float64())])
    table = pa.Table.from_pylist([dict(zip(TIMING_COLUMNS, r)) for r in rows], schema=schema)
    spilled = spill_dataset(invocation.store, invocation.experiment, invocation.invocation_id).to_table()
    if spilled.num_rows:
        spilled = spilled.filter(pc.equal(spilled.column("status"), "ok"))
        table = pa.concat_tables([table, spilled.select(list(TIMING_COLUMNS)).cast(schema)])
    if table.num_rows:
        return table, "inference_log"
    ok = invocation.traces.filter(pc.is_null(invocation.traces.column("error")))
    return ok.select(list(TIMING_COLUMNS)).cast(schema), "trace rows"
