"""The inference log: one ``inference_log`` row per engine (or tap) request, written off the hot path.

``InferenceLogWriter`` takes rows with ``add`` (returns at once, never touches the database) and a
background thread writes them to the catalog in batches (``flush_rows`` rows, or whatever is queued
after ``flush_interval_s``), one transaction per batch. When the catalog is slow or down the rows stay
queued and the thread retries with back-off; rows still unwritten ``retry_s`` seconds after the first
failure are *spilled*: written as Parquet beside the traces,
``<store>/<experiment>/<invocation_id>/inference_log/part-….parquet`` (temporary name, then rename,
through the same pyarrow filesystem as the trace store), with a ``logging`` warning. Nothing is lost
and nothing is stored twice:

* every row gets a ``row_uid`` (uuid) when it is added; the table has a unique index on it and the
  insert is ``ON CONFLICT (row_uid) DO NOTHING``, so re-sending a batch whose commit was in doubt
  (connection lost after COMMIT) cannot duplicate it;
* a batch is spilled only after the database refused or failed it, so a spilled row is normally not in
  the catalog; for the rare commit-in-doubt case the ``inference_log`` view of ``mirrorscan sql``
  (``view_sql``) keeps the catalog copy and drops the spilled one by ``row_uid``.

Clocks: ``started_at`` is wall clock (UTC) from the engine; ``logged_at`` is the catalog's ``now()``
at insert (for a spilled row: the wall clock when it was spilled). Every ``*_ms`` is the engine's
monotonic clock, exactly as in the trace row (see ``grid/trace_schema.py``).

Importing this module starts nothing (no thread, no connection) and imports neither torch nor vLLM.
It is longer than most because the writer's states (queued, retrying, spilling, closing) belong together.
"""

from __future__ import annotations

import atexit
import json
import logging
import re
import threading
import time
import uuid
import weakref
from datetime import datetime, timezone

import psycopg
import pyarrow as pa
import pyarrow.fs as pafs
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from mirrorscan.cluster.catalog import _scrub, migrate, redact_dsn
from mirrorscan.grid.secrets import strip_userinfo

log = logging.getLogger(__name__)

SPILL_DIR = "inference_log"  # folder beside ``traces/`` holding spilled log parts
CONNECT_TIMEOUT_S = 3  # libpq connect_timeout for the writer (its minimum useful value is 2)
STATEMENT_TIMEOUT_S = 30  # server-side limit on one batch insert
MAX_BACKOFF_S = 2.0  # longest pause between two retries of a failed batch
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


# --- rows ------------------------------------------------------------------------------------

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


def _normal(row: dict) -> dict:
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


# --- the writer ----------------------------------------------------------------------------

class InferenceLogWriter:
    """Writes inference_log rows in batches from a background thread; spills to Parquet when the
    catalog does not take them within ``retry_s``.

    ``dsn`` None means no catalog: rows go straight to the spill folder. ``spill_store_uri`` None means
    no spill: rows stay queued (retried) until the catalog takes them or the writer is closed, when
    what is left is reported as lost (``lost_rows``, logged as an error). ``writer`` names this writer
    in spill part names (e.g. ``a<pid>``). The thread starts on the first ``add``.
    """

    def __init__(self, dsn: str | None, spill_store_uri: str | None, experiment: str | None,
                 invocation_id: str | None, writer: str, *, flush_rows: int = 256, flush_interval_s: float = 1.0,
                 retry_s: float = 10.0):
        self.dsn, self.spill_store_uri = dsn, spill_store_uri
        self.experiment, self.invocation_id, self.writer = experiment, invocation_id, writer
        self.flush_rows, self.flush_interval_s, self.retry_s = max(1, flush_rows), flush_interval_s, retry_s
        self.written_rows = 0  # rows the catalog committed
        self.spilled_rows = 0  # rows written to spill parts
        self.lost_rows = 0  # rows neither written nor spilled (no catalog and no spill store, at close)
        self.spill_paths: list[str] = []  # spill parts written (filesystem paths)
        self._cond = threading.Condition()
        self._pending: list[dict] = []
        self._added = 0  # rows ever added
        self._done = 0  # rows written, spilled or lost
        self._oldest = 0.0  # monotonic time the oldest pending row was added
        self._urgent = 0  # flushes waiting: write now instead of waiting for a full batch
        self._slow = False  # a flush timed out and the queue has not been empty since
        self._failing_since: float | None = None  # monotonic time of the first failure of the current outage
        self._inflight: list[dict] = []  # the batch the thread is writing now
        self._abandoned = False  # close() gave up on the thread and saved its batch itself
        self._closing = False
        self._close_deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._conn = None
        self._store = None
        _LIVE.add(self)

    # -- the caller's side

    @property
    def healthy(self) -> bool:
        """False while the catalog is failing (writes retried, then spilled), and after a ``flush`` timed
        out until the writer has caught up again; True otherwise (waiting on a flush costs milliseconds)."""
        return self._failing_since is None and not self._slow

    def add(self, rows: list[dict]) -> None:
        """Queue ``rows`` (dicts keyed by LOG_COLUMNS) for writing; returns at once, never blocks on the database."""
        if not rows:
            return
        normal = [_normal(r) for r in rows]
        with self._cond:
            if self._closing:
                raise RuntimeError("InferenceLogWriter.add after close")
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.extend(normal)
            self._added += len(normal)
            self._start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every row added so far is written or spilled (or lost: no catalog, no spill store);
        True when that happened within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self._added
            if self._done >= target:
                return True
            self._urgent += 1
            self._cond.notify_all()
            try:
                while self._done < target:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._thread is None or not self._thread.is_alive():
                        self._slow = self._done < target
                        return not self._slow
                    self._cond.wait(left)
                return True
            finally:
                self._urgent -= 1

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush and stop the thread. Rows the catalog has not taken when the time is half spent are
        spilled (within ``timeout_s``); rows still queued at the deadline are spilled from here."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + timeout_s / 2
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._cond:  # the thread is stuck (a hung server): save its batch and the queue from here
            left, self._pending = self._inflight + self._pending, []
            self._inflight, self._abandoned = [], True
        if left:  # a stuck batch that commits later is in both places; the view keeps one (row_uid)
            self._dispose(left, "the writer thread did not finish in time")
        if self._conn is not None and (self._thread is None or not self._thread.is_alive()):
            self._conn.close()
        _LIVE.discard(self)

    # -- the thread's side

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"inference-log-{self.writer}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._cond:
                batch = self._next_batch()
                if batch is None:
                    return
                self._inflight = batch
            error = "no catalog DSN was given" if self.dsn is None else self._write(batch)
            with self._cond:
                if self._abandoned:  # close() saved this batch itself
                    return
                self._inflight = []
            if self.dsn is None:
                self._dispose(batch, error)
                continue
            if error is None:
                backoff = 0.1
                with self._cond:
                    if self._failing_since is not None:
                        log.warning("inference log: catalog %s is back; writing again", redact_dsn(self.dsn))
                    self._failing_since = None
                    self.written_rows += len(batch)
                    self._count_done(len(batch))
                continue
            now = time.monotonic()
            with self._cond:
                if self._failing_since is None:
                    self._failing_since = now
                    log.warning("inference log: catalog %s failed (%s); retrying for up to %.0f s, then "
                                "spilling to Parquet", redact_dsn(self.dsn), error, self.retry_s)
                give_up = now - self._failing_since >= self.retry_s or (
                    self._close_deadline is not None and now >= self._close_deadline)
                if not give_up:
                    self._pending[:0] = batch  # back to the front: order kept, retried next
                    self._cond.wait(min(backoff, max(0.0, self._failing_since + self.retry_s - now)))
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                rest, self._pending = self._pending, []
            self._dispose(batch + rest, f"catalog unreachable for {now - self._failing_since:.1f} s ({error})")

    def _count_done(self, n: int) -> None:
        """Under the lock: ``n`` more rows are settled (written, spilled or lost); wake the flushers."""
        self._done += n
        if self._done >= self._added:
            self._slow = False
        self._cond.notify_all()

    def _next_batch(self) -> list[dict] | None:
        """Under the lock: wait until a batch is due and take it (None: closed and drained)."""
        while True:
            if self._pending:
                due = (len(self._pending) >= self.flush_rows or self._urgent or self._closing
                       or time.monotonic() - self._oldest >= self.flush_interval_s)
                if due:
                    batch, self._pending = self._pending[:self.flush_rows], self._pending[self.flush_rows:]
                    self._oldest = time.monotonic()
                    return batch
                self._cond.wait(max(0.0, self._oldest + self.flush_interval_s - time.monotonic()))
            elif self._closing:
                return None
            else:
                self._cond.wait()

    def _write(self, batch: list[dict]) -> str | None:
        """Insert one batch in one transaction; None on success, else the error in words."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = _connect(self.dsn)
            columns = LOG_COLUMNS + ["row_uid"]
            query = (f"INSERT INTO inference_log ({', '.join(columns)}) "
                     f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT (row_uid) DO NOTHING")
            params = [[Jsonb(r[c]) if c == "request_headers" and r[c] is not None else r[c] for c in columns]
                      for r in batch]
            with self._conn.transaction():
                with self._conn.cursor() as cur:
                    cur.executemany(query, params)
            return None
        except (psycopg.Error, OSError) as err:
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:
                    pass
                self._conn = None
            return f"{type(err).__name__}: {_scrub(' '.join(str(err).split()), self.dsn)[:300]}"

    def _dispose(self, rows: list[dict], why: str) -> None:
        """Spill ``rows`` to Parquet (or count them lost when there is no spill store); marks them done."""
        if self.spill_store_uri is None:
            if self.dsn is not None and not self._closing:  # keep trying the catalog: nowhere else to go
                with self._cond:
                    self._pending[:0] = rows
                    self._cond.wait(MAX_BACKOFF_S)
                return
            log.error("inference log: %d row(s) lost: %s and no spill store was given", len(rows), why)
            with self._cond:
                self.lost_rows += len(rows)
                self._count_done(len(rows))
            return
        try:
            path = self._spill(rows)
        except Exception as err:  # the store failed too: keep the rows and try again later
            log.error("inference log: spilling %d row(s) failed (%s); will retry", len(rows), err)
            with self._cond:
                if self._closing and self._thread is not threading.current_thread():
                    self.lost_rows += len(rows)
                    self._count_done(len(rows))
                else:
                    self._pending[:0] = rows
                    self._cond.wait(MAX_BACKOFF_S)
            return
        log.warning("inference log: %d row(s) spilled to %s: %s", len(rows), path, why)
        with self._cond:
            self.spilled_rows += len(rows)
            self.spill_paths.append(path)
            self._count_done(len(rows))

    def _spill(self, rows: list[dict]) -> str:
        """Write one spill part per invocation among ``rows``; return the last path written."""
        from mirrorscan.cluster.store import open_store

        if self._store is None:
            self._store = open_store(self.spill_store_uri)
        groups: dict[str, list[dict]] = {}
        for r in rows:
            groups.setdefault(r["invocation_id"] or self.invocation_id or "_no_invocation", []).append(r)
        path = ""
        for invocation, mine in groups.items():
            folder = f"{self._store.invocation_dir(self.experiment or '_no_experiment', invocation)}/{SPILL_DIR}"
            path = self._store.write_parquet_part(folder, spill_table(mine), self.writer)   # atomic on S3 too
        return path


# --- reading: the catalog table and the spilled parts, for ``mirrorscan sql`` ------------------------

CATALOG_SCHEMA = pa.schema([pa.field("id", pa.int64())] + list(SPILL_SCHEMA))
"""inference_log read from the catalog: id, LOG_COLUMNS, row_uid, logged_at (uuid and jsonb as text)."""


def catalog_arrow(fetch) -> pa.Table:
    """The catalog's inference_log as Arrow in CATALOG_SCHEMA, ordered by id; ``fetch(sql)`` runs a query
    on a migrated catalog and returns its rows (e.g. ``Catalog.execute``)."""
    casts = {"invocation_id", "request_headers", "row_uid"}
    select = ", ".join(f"{c}::text" if c in casts else c for c in CATALOG_SCHEMA.names)
    rows = fetch(f"SELECT {select} FROM inference_log ORDER BY id")
    return pa.Table.from_pydict({name: [r[i] for r in rows] for i, name in enumerate(CATALOG_SCHEMA.names)},
                                schema=CATALOG_SCHEMA)


def spill_parts(store, experiment: str | None = None, invocation_id: str | None = None) -> list[str]:
    """Paths of complete spilled parts (``*/inference_log/part-*.parquet``) in ``store`` (a TraceStore), or
    only those of one invocation when ``experiment`` and ``invocation_id`` are given."""
    base = store.invocation_dir(experiment, invocation_id) if experiment and invocation_id else store.root
    if store.fs.get_file_info(base).type == pafs.FileType.NotFound:
        return []
    infos = store.fs.get_file_info(pafs.FileSelector(base, recursive=True))
    return sorted(f.path for f in infos if f.type == pafs.FileType.File and f.base_name.endswith(".parquet")
                  and not f.base_name.startswith(".") and f.path.rsplit("/", 2)[-2] == SPILL_DIR)


def spill_dataset(store, experiment: str | None = None, invocation_id: str | None = None):
    """A pyarrow dataset over the spilled parts of ``store`` (or of one invocation; SPILL_SCHEMA; empty when
    there is none)."""
    import pyarrow.dataset as pads

    return pads.dataset(spill_parts(store, experiment, invocation_id), schema=SPILL_SCHEMA, format="parquet",
                        filesystem=store.fs)


def view_sql(catalog_name: str, spill_name: str) -> str:
    """DuckDB SQL of the ``inference_log`` view over a registered catalog table and spill dataset.

    Catalog rows first (stored_in 'catalog'), then spilled rows (stored_in 'spill', id null) whose
    row_uid the catalog does not hold, one per row_uid; request_headers as JSON."""
    return (f"CREATE VIEW inference_log AS "
            f"SELECT * REPLACE (CAST(request_headers AS JSON) AS request_headers), 'catalog' AS stored_in "
            f"FROM {catalog_name} "
            f"UNION ALL BY NAME "
            f"SELECT CAST(NULL AS BIGINT) AS id, * REPLACE (CAST(request_headers AS JSON) AS request_headers), "
            f"'spill' AS stored_in FROM {spill_name} s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {catalog_name} c WHERE c.row_uid = s.row_uid) "
            f"QUALIFY row_number() OVER (PARTITION BY s.row_uid ORDER BY s.logged_at) = 1")


def _connect(dsn: str) -> psycopg.Connection:
    options = conninfo_to_dict(dsn)
    options.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    options.setdefault("application_name", "mirrorscan-inference-log")
    # a hung server or a dead peer fails the batch (then retry/spill) instead of holding the thread forever
    options["options"] = f"{options.get('options', '')} -c statement_timeout={STATEMENT_TIMEOUT_S * 1000}".strip()
    for key, value in (("keepalives", 1), ("keepalives_idle", 10), ("keepalives_interval", 5),
                       ("keepalives_count", 3)):
        options.setdefault(key, value)
    conn = psycopg.connect(**options, autocommit=True)
    try:
        migrate(conn)  # a fresh catalog (the tap's) gets the table; a migrated one costs one query
    except BaseException:
        conn.close()
        raise
    return conn


_LIVE: weakref.WeakSet = weakref.WeakSet()  # writers not yet closed, flushed at interpreter exit


def _close_all() -> None:
    for writer in list(_LIVE):
        try:
            writer.close(timeout_s=writer.retry_s + 5)
        except Exception:
            pass


atexit.register(_close_all)
