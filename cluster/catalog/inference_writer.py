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
  (``inference_log_view.view_sql``) keeps the catalog copy and drops the spilled one by ``row_uid``.

The rows and their columns are in ``inference_log_rows``; reading the log back (the catalog table, the
spilled parts, the view) in ``inference_log_view``. Importing this module starts nothing (no thread, no
connection) and imports neither torch nor vLLM.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from mirrorscan.cluster.catalog.client import _scrub, migrate, redact_dsn
from mirrorscan.cluster.catalog.inference_rows import LOG_COLUMNS, SPILL_DIR, normal_row, spill_table

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3  # libpq connect_timeout for the writer (its minimum useful value is 2)
STATEMENT_TIMEOUT_S = 30  # server-side limit on one batch insert
MAX_BACKOFF_S = 2.0  # longest pause between two retries of a failed batch


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
        normal = [normal_row(r) for r in rows]
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
        from mirrorscan.cluster.store.traces import open_store

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
