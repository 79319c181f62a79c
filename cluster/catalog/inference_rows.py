"""The rows of the inference log: its columns (``LOG_COLUMNS``, each documented where it is declared), the rows a
scan's trace rows give, and a row checked and made storable (``normal_row``): known keys, coerced types,
auth headers dropped, a ``row_uid`` for deduplication. ``SPILL_SCHEMA`` is the schema of a spilled part.

Clocks: ``started_at`` is wall clock (UTC) from the engine; ``logged_at`` is the catalog's ``now()`` at insert
(for a spilled row: the wall clock when it was spilled). Every ``*_ms`` is the engine's monotonic clock,
exactly as in the trace row (see ``grid/trace_schema.py``).
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone

import pyarrow as pa

from mirrorscan.grid.secrets import strip_userinfo

SPILL_DIR = "inference_log"  # folder beside ``traces/`` holding spilled log parts
_AUTH_KEY = re.compile(r"auth|api[-_]?key|cookie|token|secret|password", re.IGNORECASE)
"""Header names never stored (Authorization, Proxy-Authorization, X-Api-Key, Cookie, Set-Cookie, …)."""

_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("probe_id", pa.string(), "label|item_key|envelope|ordering of the cell (null for a tap request without X-Probe-Id)"),
    ("sample", pa.int32(), "0-based sample index of the cell"),
    ("attempt", pa.int32(), "1-based attempt number at this (probe_id, sample)"),
    ("invocation_id", pa.string(), "uuid of the scan invocation (null for a tap request without X-Invocation-Id)"),
    ("label", pa.string(), "model variant label"),
    ("endpoint", pa.string(), "where the request went: an http(s) URL, or engine://<backend>/<model> in-process"),
    ("source", pa.string(), "who logged the row: engine (the scan's engine actor) or tap (the HTTP tap)"),
    ("started_at", pa.timestamp("us", tz="UTC"), "wall clock (UTC) when the request (or batch) was sent"),
    ("ttft_ms", pa.float64(), "ms, monotonic: request start to the first chunk carrying text or reasoning"),
    ("ttft_answer_ms", pa.float64(), "ms, monotonic: request start to the first chunk of the answer itself"),
    ("intervals_ms", pa.list_(pa.float64()), "ms, monotonic: gaps between the arrivals of consecutive content-bearing chunks (n_chunks - 1 values; a chunk carrying several tokens is one gap)"),
    ("n_chunks", pa.int32(), "content-bearing streamed chunks as received (an SSE event or a vLLM delta, which may carry several tokens); null for batch timing"),
    ("total_ms", pa.float64(), "ms, monotonic: request start to the last chunk/token"),
    ("decode_tok_s", pa.float64(), "tokens/s, derived: (completion_tokens - 1) / (total_ms - ttft_ms) in seconds; null for one token"),
    ("timing_scope", pa.string(), "batch: timings are of the engine batch; request: of this request's own stream"),
    ("prompt_tokens", pa.int32(), "tokens in the templated prompt"),
    ("completion_tokens", pa.int32(), "generated tokens"),
    ("status", pa.string(), "ok | error for engine rows; the HTTP status (http_200, http_429, …) for tap rows"),
    ("error", pa.string(), "null when fine; else the error type and message"),
    ("request_headers", pa.string(), "JSON of the request headers sent (X-Probe-Id …; never auth headers)"),
]
LOG_COLUMNS: list[str] = [name for name, _, _ in _FIELDS]
"""The inference_log columns a writer fills from a row dict, in table order (id, row_uid and
logged_at are filled by the writer and the database)."""
SPILL_SCHEMA = pa.schema(
    [pa.field(name, dtype, metadata={"doc": doc}) for name, dtype, doc in _FIELDS]
    + [pa.field("row_uid", pa.string(), metadata={"doc": "uuid given to the row when it was added (dedup key)"}),
       pa.field("logged_at", pa.timestamp("us", tz="UTC"), metadata={"doc": "wall clock (UTC) when the row was spilled"})])
"""Schema of a spilled ``inference_log/part-….parquet``: LOG_COLUMNS, then row_uid and logged_at."""

_INT_COLUMNS = {"sample", "attempt", "n_chunks", "prompt_tokens", "completion_tokens"}
_FLOAT_COLUMNS = {"ttft_ms", "ttft_answer_ms", "total_ms", "decode_tok_s"}



def safe_headers(headers) -> dict | None:
    """``headers`` (a dict or its JSON text) without any auth-bearing header; None when there are none.

    Keys are kept as sent; values become strings. Dropped: any name containing auth, api-key,
    cookie, token, secret or password (case-insensitive), so a secret never reaches the log."""
    if headers is None:
        return None
    if isinstance(headers, str):
        try:
            headers = json.loads(headers)
        except ValueError:
            return None
    if not isinstance(headers, dict):
        return None
    return {str(k): str(v) for k, v in headers.items() if not _AUTH_KEY.search(str(k))}


def log_rows_from_traces(traces: pa.Table, source: str = "engine") -> list[dict]:
    """One inference_log row (dict keyed by LOG_COLUMNS) per trace row of ``traces`` (TRACE_SCHEMA or
    any table with those columns): identity, timing and tokens copied, status 'ok' when the trace's
    error is null else 'error', request headers parsed from the trace's JSON with auth headers removed."""
    present = [c for c in LOG_COLUMNS if c in traces.column_names]
    rows = traces.select(present).to_pylist()
    out = []
    for row in rows:
        entry = {c: row.get(c) for c in LOG_COLUMNS}
        entry["source"] = source
        entry["status"] = "ok" if row.get("error") is None else "error"
        entry["request_headers"] = safe_headers(row.get("request_headers"))
        entry["endpoint"] = strip_userinfo(entry["endpoint"])
        out.append(entry)
    return out


def normal_row(row: dict) -> dict:
    """A row checked and made storable: known keys only, types coerced, headers scrubbed, a new row_uid.

    Coercion happens here, in ``add``, so a bad value can never make the database refuse a whole batch."""
    unknown = set(row) - set(LOG_COLUMNS)
    if unknown:
        raise ValueError(f"inference_log rows carry unknown keys {sorted(unknown)}; columns are {LOG_COLUMNS}")
    if row.get("source") not in ("engine", "tap") or not row.get("status"):
        raise ValueError(f"inference_log rows need source 'engine' or 'tap' and a status; got "
                         f"source={row.get('source')!r} status={row.get('status')!r}")
    out = {c: row.get(c) for c in LOG_COLUMNS}
    for c in _INT_COLUMNS:
        out[c] = None if out[c] is None else int(out[c])
    for c in _FLOAT_COLUMNS:
        out[c] = None if out[c] is None else float(out[c])
    if out["intervals_ms"] is not None:
        out["intervals_ms"] = [None if v is None else float(v) for v in out["intervals_ms"]]
    if out["invocation_id"] is not None:
        try:
            out["invocation_id"] = str(uuid.UUID(str(out["invocation_id"])))
        except ValueError:  # a tap header that is not a uuid: keep the row, not the bad id
            out["invocation_id"] = None
    started = out["started_at"]
    if isinstance(started, datetime) and started.tzinfo is None:
        out["started_at"] = started.replace(tzinfo=timezone.utc)
    out["request_headers"] = safe_headers(out["request_headers"])
    out["endpoint"] = strip_userinfo(out["endpoint"])
    out["row_uid"] = str(uuid.uuid4())
    return out


def spill_table(rows: list[dict]) -> pa.Table:
    """Normalised rows (from ``add``) as a table in SPILL_SCHEMA, stamped with logged_at = now (UTC)."""
    now = datetime.now(timezone.utc)
    data = [{**r, "request_headers": None if r["request_headers"] is None else json.dumps(r["request_headers"]),
             "logged_at": now} for r in rows]
    return pa.Table.from_pylist(data, schema=SPILL_SCHEMA)
