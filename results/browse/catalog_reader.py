"""What the browser reads from the catalog, over a read-only connection.

The connection is opened with ``default_transaction_read_only = on`` and never migrates, so the browser
cannot write to the catalog even by mistake: a catalog that has no tables yet is reported, not created.
One connection is shared by the app's threads behind a lock (each call is one short statement) and is
opened again when it was lost.
"""

from __future__ import annotations

import threading
from datetime import datetime

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from mirrorscan.cluster.catalog.client import CONNECT_TIMEOUT_S, UUID_PATTERN, redact_dsn
from mirrorscan.grid.errors import CatalogError

TIMING_ROWS_MAX = 1_000_000
"""Most inference_log rows one timing view reads (the newest are kept when an invocation has more)."""


class ReadOnlyCatalog:
    """Read-only queries over ``scan_invocations`` and ``inference_log``."""

    def __init__(self, dsn: str):
        """``dsn``: a resolved DSN (``cluster.catalog.client.resolve_dsn``); nothing connects until the first query."""
        self.dsn = dsn
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            options = conninfo_to_dict(self.dsn)
            options.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
            options["application_name"] = "mirrorscan-browse"
            options["options"] = f"{options.get('options', '')} -c default_transaction_read_only=on".strip()
            try:
                self._conn = psycopg.connect(**options, autocommit=True)
            except psycopg.Error as exc:
                raise CatalogError(f"catalog: cannot connect to {redact_dsn(self.dsn)} "
                                   f"({' '.join(str(exc).split())[:200]})") from None
        return self._conn

    def rows(self, query: str, params: list | None = None) -> list[dict]:
        """One statement's rows as dicts; CatalogError (in plain words) when it fails."""
        with self._lock:
            try:
                cursor = self._connection().cursor(row_factory=dict_row)
                return cursor.execute(query, params).fetchall()
            except psycopg.errors.UndefinedTable:
                raise CatalogError("catalog: no scan has been recorded in this catalog yet (its tables do not "
                                   "exist); run mirrorscan scan first") from None
            except psycopg.Error as exc:
                raise CatalogError(f"catalog error: {' '.join(str(exc).split())[:300]}") from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def experiments(self) -> list[dict]:
        """Per experiment and instrument: invocations, the newest start, and the newest invocation's id."""
        return self.rows(
            "SELECT experiment, instrument, count(*) AS invocations, max(started_at) AS newest, "
            "(array_agg(invocation_id::text ORDER BY started_at DESC))[1] AS newest_id "
            "FROM scan_invocations GROUP BY experiment, instrument ORDER BY max(started_at) DESC")

    def invocations(self, experiment: str | None = None) -> list[dict]:
        """Invocations (of one experiment, or all), newest first, without their settings."""
        where, params = ("WHERE experiment = %s", [experiment]) if experiment is not None else ("", [])
        return self.rows(
            "SELECT invocation_id::text AS invocation_id, experiment, instrument, status, started_at, finished_at, "
            "counts, store_uri, git_sha, git_dirty, host, username, reconstructed_from "
            f"FROM scan_invocations {where} ORDER BY started_at DESC", params)

    def invocation(self, invocation_id: str) -> dict | None:
        """One invocation's whole row (settings included), or None (also for a malformed id)."""
        if not UUID_PATTERN.match(invocation_id or ""):
            return None
        found = self.rows("SELECT *, invocation_id::text AS invocation_id FROM scan_invocations "
                          "WHERE invocation_id = %s", [invocation_id])
        return found[0] if found else None

    def ids_starting(self, prefix: str, n: int) -> list[str]:
        """Up to ``n`` invocation ids starting with ``prefix`` (lower-case hex and hyphens), sorted."""
        return [r["invocation_id"] for r in self.rows(
            "SELECT invocation_id::text AS invocation_id FROM scan_invocations WHERE invocation_id::text LIKE %s "
            f"ORDER BY invocation_id LIMIT {int(n)}", [prefix + "%"])]

    def timing_rows(self, invocation_id: str | None) -> list[tuple[str, datetime, float | None, float | None, str]]:
        """(endpoint, started_at, ttft_ms, decode_tok_s, row_uid) of the inference_log rows of one invocation (or
        of every request, tap rows included, when ``invocation_id`` is None), at most TIMING_ROWS_MAX, newest
        kept."""
        where, params = ("WHERE invocation_id = %s", [invocation_id]) if invocation_id else ("", [])
        with self._lock:
            try:
                cursor = self._connection().cursor()
                return cursor.execute(
                    "SELECT endpoint, started_at, ttft_ms, decode_tok_s, row_uid::text FROM inference_log "
                    f"{where} ORDER BY started_at DESC NULLS LAST LIMIT {TIMING_ROWS_MAX}", params).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
            except psycopg.Error as exc:
                raise CatalogError(f"catalog error: {' '.join(str(exc).split())[:300]}") from None
