"""``mirrorscan report``: one self-contained HTML file per invocation, every number beside how to get it again.

``build(inv, analysis, analysis_dir)`` gathers what the page shows, with no I/O: the settings and
provenance (catalog row and ``invocation.json``, secrets and DSN passwords removed), counts and errors
(the catalog's counts and the stored rows'), the instrument's headline numbers (``Instrument.headline``)
each with its definition and the ``mirrorscan sql`` query — or, for a statistic, the query selecting its
input and the ``mirrorscan stats`` command with its seed — that computes it (``Instrument.headline_sources``,
``grid.headline``), the analysis text, notes and charts, and — where the analysis carries them
(``numbers["intervals"]``, ``analysis.headline_intervals``'s JSON, any instrument) — the headline numbers'
intervals over the random facets, their paired differences and their error-bar chart
(``analysis.plotting.interval_chart``). ``results.report_html.render`` turns it into the page;
``write_report`` stores the page under ``<store>/<experiment>/<invocation>/report/<stamp>.html``, a new file
each time, never overwriting one.

The numbers are the analysis's own (``analyze``'s path: ``Instrument.analyze`` on the stored rows, written
beside them as ``mirrorscan analyze`` writes it); the report derives none of them again.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.formatting import fixed, stamp
from mirrorscan.grid.headline import HeadlineSource, sql_text
from mirrorscan.grid.instrument import Analysis
from mirrorscan.grid.settings import Settings

SAMPLE_ROWS = 8
"""Stored rows shown verbatim (what was asked, what came back), in probe_id order."""
TOP_ERRORS = 10
"""Distinct error messages listed, most frequent first."""
SECRET_KEYS = {"password", "sslpassword", "api_key", "secret", "token", "authorization", "aws_secret_access_key"}
"""Mapping keys whose string values never reach a report (secrets are removed at spec time; this is the
second fence)."""


@dataclass(frozen=True)
class HeadlineNumber:
    """One headline number of one model, and how to get it again."""

    model: str
    """The model key of ``Instrument.headline`` (a label; lens: ``label/variant``)."""
    name: str
    """The number's name."""
    value: Any
    """The value the analysis reported (None: not measured)."""
    source: HeadlineSource | None
    """Its definition and query, or None when the instrument gives none."""
    applicable: bool = True
    """False where the number is null because the one it stands in for (``HeadlineSource.in_place_of``) has a
    value: not applicable, not "not measured"."""


@dataclass(frozen=True)
class Report:
    """What one invocation's report page shows (``build``)."""

    invocation_id: str
    experiment: str
    instrument: str
    status: str
    description: str
    provenance: dict
    """Catalog columns (git sha and dirty flag, host, pid, user, started/finished, store, hashes), redacted."""
    package_versions: dict
    content_hashes: dict
    model_sources: Any
    """The manifest's model sources (where each model was loaded from), redacted; None without a manifest."""
    settings: dict
    """The frozen settings as stored (``Settings.to_json``, format 2), redacted."""
    catalog_counts: dict
    """The counts the scan recorded in the catalog."""
    per_model: list
    """Per label, from the stored rows: rows, error rows, cells, ok cells, error cells."""
    errors: list
    """(message, rows) of the most frequent error messages."""
    counts_sql: str
    """The ``mirrorscan sql`` query that gives ``per_model``."""
    errors_sql: str
    """The ``mirrorscan sql`` query that lists the error messages."""
    samples: list
    """(cell description, response or error, class/extra) of the first stored rows."""
    headline: list
    """HeadlineNumber per (model, number), in the instrument's order."""
    analysis_text: str
    notes: tuple
    charts: dict
    """name → PNG bytes (embedded as data URIs)."""
    analysis_dir: str | None
    """Display path of the analysis folder the numbers were written to (None when not written)."""
    generated_at: str = field(default_factory=lambda: stamp(datetime.now(timezone.utc)))
    intervals: dict | None = None
    """The analysis's ``numbers["intervals"]`` (``analysis.headline_intervals`` JSON: per headline each model's
    interval over the random facets, the naive one, the paired differences and warnings); None when it has none."""
    interval_chart: bytes | None = None
    """PNG of those intervals as error bars (``analysis.plotting.interval_chart``); None when no headline has one."""


def redact(value: Any) -> Any:
    """``value`` (nested JSON) with the values of secret-named keys replaced by ``***`` and any DSN-looking
    string passed through ``cluster.catalog.client.redact_dsn`` (its password removed)."""
    from mirrorscan.cluster.catalog.client import redact_dsn

    if isinstance(value, dict):
        return {k: "***" if str(k).lower() in SECRET_KEYS and isinstance(v, str) and v else redact(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and re.search(r"postgres(?:ql)?://|\bpassword\s*=", value, re.IGNORECASE):
        return redact_dsn(value)
    return value


def counts_sql(invocation_id: str) -> str:
    """Per label: stored rows, error rows, cells with a row, cells with a successful row."""
    return ("SELECT label, count(*) AS rows, count(*) FILTER (WHERE error IS NOT NULL) AS error_rows,\n"
            "  count(DISTINCT probe_id || '#' || sample) AS cells,\n"
            "  count(DISTINCT probe_id || '#' || sample) FILTER (WHERE error IS NULL) AS ok_cells\n"
            f"FROM traces WHERE invocation_id = {sql_text(invocation_id)} GROUP BY label ORDER BY label")


def errors_sql(invocation_id: str) -> str:
    """The error messages of the invocation's rows, most frequent first."""
    return ("SELECT error, count(*) AS rows FROM traces\n"
            f"WHERE invocation_id = {sql_text(invocation_id)} AND error IS NOT NULL\n"
            "GROUP BY error ORDER BY rows DESC, error LIMIT 10")


def per_model_counts(traces: pa.Table) -> list[dict]:
    """Per label (sorted): rows, error_rows, cells (distinct probe_id × sample), ok_cells (with a successful
    row) and error_cells (only error rows) — what ``counts_sql`` returns, plus error_cells."""
    rows = traces.select(["label", "probe_id", "sample", "error"])
    out = []
    for label in sorted(set(rows.column("label").to_pylist())):
        mine = rows.filter(pc.equal(rows.column("label"), label))
        ok = mine.filter(pc.is_null(mine.column("error")))
        cells = mine.group_by(["probe_id", "sample"]).aggregate([]).num_rows
        ok_cells = ok.group_by(["probe_id", "sample"]).aggregate([]).num_rows
        out.append({"label": label, "rows": mine.num_rows, "error_rows": mine.num_rows - ok.num_rows,
                    "cells": cells, "ok_cells": ok_cells, "error_cells": cells - ok_cells})
    return out


def top_errors(traces: pa.Table, limit: int = TOP_ERRORS) -> list[tuple[str, int]]:
    """(message, rows) of the most frequent error messages (ties by message)."""
    errors = [e for e in traces.column("error").to_pylist() if e is not None]
    counts: dict[str, int] = {}
    for e in errors:
        counts[e] = counts.get(e, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def sample_rows(traces: pa.Table, instrument, limit: int = SAMPLE_ROWS) -> list[tuple[str, str, str]]:
    """(what was asked, what came back, class) of the first ``limit`` rows in (probe_id, sample, attempt) order:
    the instrument's ``describe_cell`` line; the response, or the error, or — for a row without text (flinch's
    log-probs, lens's vectors) — the cell's value as the browser shows it (``cell_value``) and its per-layer
    vectors summarised (``results.vectors.summary``: shape and a few norms, never the values); and the stored
    class where the instrument has one. Only those rows are taken from ``traces``."""
    from mirrorscan.grid.matrix import cell_value
    from mirrorscan.results import vectors

    order = [k for k in ("probe_id", "sample", "attempt") if k in traces.column_names]
    picked = pc.sort_indices(traces.select(order), [(k, "ascending") for k in order])[:limit] if order else \
        pa.array(range(min(limit, traces.num_rows)), pa.int64())
    rows = traces.take(picked)
    nested = [f.name for f in rows.schema if vectors.is_nested_list(f.type)]
    flat = [c for c in rows.column_names if c not in nested and not pa.types.is_fixed_size_list(rows.schema.field(c).type)]
    head = rows.select(flat).to_pylist()
    value = cell_value(instrument)
    derived = (value.derive(rows.select([c for c in value.reads if c in rows.column_names])).to_pylist()
               if value.derive is not None and rows.num_rows else [None] * rows.num_rows)
    columns = {name: rows.column(name).combine_chunks() for name in nested}
    out = []
    for i, row in enumerate(head):
        asked = instrument.describe_cell(row) or row.get("probe_id", "")
        if row.get("error") is not None:
            answer = f"error: {row['error']}"
        elif row.get("response") is not None:
            answer = str(row["response"])
        else:
            shown = derived[i] if value.derive is not None else row.get(value.column) if value.column else None
            parts = [f"{value.column} = {fixed(shown)}" if isinstance(shown, float) else f"{value.column} = {shown}"] \
                if value.column and shown is not None else []
            parts += [f"{name}: {s}" for name, column in columns.items()
                      if (s := vectors.summary(column, i, with_type=False)) is not None]
            answer = " · ".join(parts)
        out.append((asked, answer, str(row.get("class") or "")))
    return out


def headline_numbers(instrument, analysis: Analysis, settings: Settings, invocation_id: str) -> list[HeadlineNumber]:
    """Every (model, number) of ``instrument.headline(analysis)`` with its source from ``headline_sources``
    (None for a number it gives no source for), marked not applicable where it stands in for a number that has
    a value (``HeadlineSource.in_place_of``)."""
    values = instrument.headline(analysis)
    sources = {s.name: s for s in instrument.headline_sources(analysis, settings, invocation_id)}

    def applicable(numbers: dict, name: str, value) -> bool:
        source = sources.get(name)
        return not (value is None and source is not None and source.in_place_of
                    and numbers.get(source.in_place_of) is not None)

    return [HeadlineNumber(model, name, value, sources.get(name), applicable(numbers, name, value))
            for model, numbers in values.items() for name, value in numbers.items()]


def provenance_of(row: dict) -> dict:
    """An invocation's catalog ``row`` as the report's provenance: moments as ``grid.formatting.stamp`` writes
    them (to the second, UTC, as browse shows them), other non-plain values as text, and the catalog's name."""
    provenance = {k: row.get(k) for k in ("git_sha", "git_dirty", "host", "pid", "username", "started_at",
                                          "finished_at", "store_uri", "settings_hash", "reconstructed_from")}
    provenance = {k: (stamp(v) if isinstance(v, datetime) else str(v)
                      if v is not None and not isinstance(v, (bool, int, float, str)) else v)
                  for k, v in provenance.items()}
    provenance["catalog"] = _catalog_name()
    return provenance


def intervals_of(analysis: Analysis) -> dict | None:
    """The analysis's headline intervals (``numbers["intervals"]``, the JSON of
    ``analysis.headline_intervals.headline_intervals``) when it carries any headline; None otherwise."""
    found = analysis.numbers.get("intervals") if isinstance(analysis.numbers, dict) else None
    return found if isinstance(found, dict) and found.get("headlines") else None


def build(inv, analysis: Analysis, analysis_dir: str | None = None) -> Report:
    """The report of one invocation (``results.invocations.Invocation``) and its analysis; no I/O."""
    from mirrorscan.analysis.plotting import interval_chart

    row, manifest = inv.row, inv.manifest or {}
    provenance = provenance_of(row)
    intervals = intervals_of(analysis)
    return Report(
        invocation_id=inv.invocation_id, experiment=inv.experiment, instrument=inv.instrument.name,
        status=row.get("status") or "", description=inv.settings.description,
        provenance=redact(provenance), package_versions=redact(row.get("package_versions") or {}),
        content_hashes=redact(row.get("content_hashes") or {}),
        model_sources=redact(manifest.get("model_sources")) if manifest else None,
        settings=redact(inv.settings.to_json()), catalog_counts=redact(row.get("counts") or {}),
        per_model=per_model_counts(inv.traces), errors=top_errors(inv.traces),
        counts_sql=counts_sql(inv.invocation_id), errors_sql=errors_sql(inv.invocation_id),
        samples=sample_rows(inv.traces, inv.instrument),
        headline=headline_numbers(inv.instrument, analysis, inv.settings, inv.invocation_id),
        analysis_text=analysis.text, notes=tuple(analysis.notes), charts=dict(analysis.charts),
        analysis_dir=analysis_dir, intervals=intervals,
        interval_chart=interval_chart(intervals) if intervals is not None else None)


def _catalog_name() -> str:
    """Which catalog the row came from, as a reader may see it: ``$MIRRORSCAN_CATALOG_DSN`` without its
    password, or "embedded"."""
    import os

    from mirrorscan.cluster.catalog.client import redact_dsn

    dsn = os.environ.get("MIRRORSCAN_CATALOG_DSN", "").strip()
    return redact_dsn(dsn) if dsn and dsn != "embedded" else "embedded (this machine's mirrorscan home)"


def write_report(inv, html: str) -> str:
    """Store the page as ``<invocation>/report/<stamp>.html`` (a new name each time; an existing object is
    never overwritten); returns its display path."""
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.html"
    path = f"{inv.store.invocation_dir(inv.experiment, inv.invocation_id)}/report/{name}"
    inv.store.objects.put(path, html.encode("utf-8"))
    return inv.store.display(path)
