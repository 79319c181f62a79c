"""The PostgreSQL catalog: one frozen ``scan_invocations`` row per run, and the migrations that make it.

``Catalog(dsn)`` connects (psycopg 3, autocommit: every call is its own short transaction), applies
pending migrations from ``cluster/catalog/migrations/NNNN_name.sql`` and offers the few operations a job
needs. The database enforces the rules (triggers refuse changes to an invocation's settings, and
any DELETE or TRUNCATE); this module only translates its refusals into ``CatalogError`` messages
in plain words. A DSN is never shown with its password: every message goes through ``redact_dsn``.

Importing this module starts nothing and imports neither torch nor vLLM (pyarrow only when
``invocations_arrow`` is called).

One module past 400 lines on purpose: every statement that touches the catalog's tables is here, beside
the refusals it translates, so that what the database enforces and how a user hears of it read in one place.
"""

from __future__ import annotations

import os
import re
import uuid
from contextlib import contextmanager
from importlib import resources
from typing import Any
from urllib.parse import unquote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from mirrorscan.grid.errors import CatalogError, ConfigError

DSN_ENV = "MIRRORSCAN_CATALOG_DSN"  # a DSN here is used when none is passed; unset → embedded server
CONNECT_TIMEOUT_S = 10  # used when the DSN does not set connect_timeout itself
STATUSES = ("running", "complete", "incomplete", "failed", "interrupted")
_MIGRATION_LOCK = 0x6D69_7272_6F72  # pg_advisory_xact_lock key for migrations ("mirror")
_JSONB = {"settings", "package_versions", "content_hashes", "counts", "model_weights"}
_UUIDS = {"invocation_id", "reproduces"}
_REQUIRED = {"invocation_id", "experiment", "instrument", "settings", "settings_hash", "status"}
_COLUMNS = (  # scan_invocations, in table order
    "invocation_id", "experiment", "instrument", "settings", "settings_hash", "git_sha", "git_dirty",
    "host", "pid", "username", "package_versions", "content_hashes", "store_uri", "started_at",
    "finished_at", "status", "counts", "reconstructed_from", "model_weights", "reproduces")
_PASSWORD_KEYS = ("password", "sslpassword")


# --- DSNs ---------------------------------------------------------------------------------

def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password or sslpassword (URL or key=value form); the rest unchanged.

    ``postgresql://u:pw@h/db?sslpassword=x`` → ``postgresql://u@h/db``;
    ``host=h password='a b' user=u`` → ``host=h user=u``.
    """
    match = re.match(r"(?is)(postgres(?:ql)?://)(.*)", dsn)
    if match is None:
        pair = r"""\s*\b(?:ssl)?password\s*=\s*(?:'(?:[^'\\]|\\.)*'?|\S*)"""
        return re.sub(pair, "", dsn, flags=re.IGNORECASE).strip()
    scheme, rest = match.groups()
    at = rest.rfind("@")  # the last '@': a raw '@' inside a password still ends up redacted
    if at >= 0:
        user = rest[:at].split(":", 1)[0]
        rest = (user + "@" if user else "") + rest[at + 1:]
    if "?" in rest:
        rest, query = rest.split("?", 1)
        kept = [part for part in query.split("&")
                if unquote(part.split("=", 1)[0]).strip().lower() not in _PASSWORD_KEYS]
        rest += "?" + "&".join(kept) if kept else ""
    return scheme + rest


def resolve_dsn(flag: str | None = None, config: str | None = None, *, start: bool = True) -> str | None:
    """The catalog DSN to connect to, by the one rule every verb follows: the first one given of ``flag``
    (``--catalog-dsn``, or a DSN a caller holds), ``config`` (config.json's ``catalog_dsn``) and
    ``$MIRRORSCAN_CATALOG_DSN``; when none is given, or the one given is ``"embedded"``, the local embedded
    server's under the home folder — started now, or with ``start=False`` only when it already runs (None
    when it does not: nothing is started or created)."""
    dsn = flag or config or os.environ.get(DSN_ENV)
    if dsn and dsn.strip() != "embedded":
        return dsn
    from mirrorscan.cluster.catalog import embedded_pg

    if start:
        return embedded_pg.ensure_running()
    from mirrorscan.cluster.home import locate_home

    return embedded_pg.running_dsn(locate_home() / "catalog")


def catalog_status() -> dict:
    """Where the home and the embedded catalog are, and whether its server runs: a dict with ``home``,
    ``catalog`` (folders), ``running`` (bool), ``pid``, ``port`` and ``dsn`` (None when stopped), and
    ``external_dsn`` (``$MIRRORSCAN_CATALOG_DSN`` with any password removed, when set)."""
    from mirrorscan.cluster.catalog.embedded_pg import running_dsn, server_process
    from mirrorscan.cluster.home import locate_home

    home = locate_home()
    root = home / "catalog"
    dsn = running_dsn(root)
    info = server_process(root) if dsn else None
    external = os.environ.get(DSN_ENV, "").strip()
    return {"home": str(home), "catalog": str(root), "running": dsn is not None,
            "pid": info[0] if info else None, "port": info[1] if info else None, "dsn": dsn,
            "external_dsn": redact_dsn(external) if external and external != "embedded" else None}


# --- migrations -----------------------------------------------------------------------------

def migrations() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, name, sql), in version order."""
    found = []
    for entry in (resources.files("mirrorscan.cluster.catalog") / "migrations").iterdir():
        match = re.fullmatch(r"(\d+)_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found)


def migrate(conn: psycopg.Connection) -> list[int]:
    """Apply pending migrations in one transaction; returns the versions applied now.

    Idempotent, and safe when several processes migrate at once: they queue on an advisory lock
    and re-read ``schema_migrations`` after taking it. When nothing is pending no lock is taken
    and nothing is created, so a role without CREATE privilege can connect to a migrated database.
    """
    wanted = migrations()
    if {version for version, _, _ in wanted} <= _applied(conn):
        return []
    applied = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     " version int PRIMARY KEY, name text, applied_at timestamptz DEFAULT now())")
        done = _applied(conn)
        for version, name, text in wanted:
            if version not in done:
                conn.execute(text.encode())  # no parameters: simple protocol, many statements
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                             [version, name])
                applied.append(version)
    return applied


def _applied(conn: psycopg.Connection) -> set[int]:
    if conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


# --- the catalog ----------------------------------------------------------------------------

class Catalog:
    """A connection to the catalog database, migrated; use as a context manager or call ``close()``."""

    def __init__(self, dsn: str | None = None):
        """Connect to ``resolve_dsn(dsn)`` and apply pending migrations.

        Raises ``CatalogError`` naming the redacted DSN when the server cannot be reached.
        """
        self.dsn = resolve_dsn(dsn)
        self._conn = _connect(self.dsn)
        try:
            with self._translated():
                migrate(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    @property
    def connected(self) -> bool:
        """Whether the connection is open and was not broken by a lost server."""
        return not (self._conn.closed or self._conn.broken)

    def reconnect(self) -> None:
        """Replace a lost connection with a new one (e.g. after the server restarted).

        Raises ``CatalogError`` naming the redacted DSN while the server still cannot be reached.
        """
        self._conn.close()
        self._conn = _connect(self.dsn)

    @contextmanager
    def transaction(self):
        """Run the ``execute`` calls inside the block as one transaction (committed at its end)."""
        with self._translated():
            with self._conn.transaction():
                yield

    def execute(self, query: str, params: Any = None) -> list[tuple]:
        """Run one SQL statement; its rows (empty when it returns none). Refusals → ``CatalogError``."""
        with self._translated():
            cursor = self._conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def create_invocation(self, record: dict) -> None:
        """Insert one invocation row; ``record`` maps column names to values.

        Required: invocation_id (uuid or str), experiment, instrument, settings, settings_hash,
        status. Optional: the other columns; started_at defaults to now() and counts to ``{}``.
        Values of the jsonb columns (settings, package_versions, content_hashes, counts,
        model_weights) are stored as JSON; ``reproduces`` is an invocation id (uuid or str).
        """
        unknown = sorted(set(record) - set(_COLUMNS))
        missing = sorted(_REQUIRED - {key for key, value in record.items() if value is not None})
        if unknown or missing:
            problem = "; ".join(filter(None, [unknown and f"unknown column(s) {', '.join(unknown)}",
                                              missing and f"missing {', '.join(missing)}"]))
            raise CatalogError(f"catalog refused: invocation record: {problem}; "
                               f"columns are {', '.join(_COLUMNS)}")
        _check_status(record["status"])
        values = {key: Jsonb(value) if key in _JSONB else _uuid(value) if key in _UUIDS else value
                  for key, value in record.items() if value is not None}
        query = sql.SQL("INSERT INTO scan_invocations ({}) VALUES ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(sql.Placeholder() * len(values)))
        with self._translated():
            self._conn.execute(query, list(values.values()))

    def update_progress(self, invocation_id: uuid.UUID | str, status: str, counts: dict,
                        finished: bool = False) -> None:
        """Set an invocation's status and counts (counts replaced whole); ``finished`` stamps finished_at=now()."""
        _check_status(status)
        with self._translated():
            cursor = self._conn.execute(
                "UPDATE scan_invocations SET status = %s, counts = %s,"
                " finished_at = CASE WHEN %s THEN now() ELSE finished_at END"
                " WHERE invocation_id = %s",
                [status, Jsonb(counts), finished, _uuid(invocation_id)])
        if cursor.rowcount == 0:
            raise CatalogError(f"catalog: no invocation {invocation_id}; nothing was updated")

    def get_invocation(self, invocation_id: uuid.UUID | str) -> dict | None:
        """The invocation row as a dict (invocation_id as str, jsonb as Python values), or None."""
        rows = self._select("WHERE invocation_id = %s", [_uuid(invocation_id)])
        return rows[0] if rows else None

    def newest_unfinished(self, experiment: str) -> dict | None:
        """The most recently started invocation of ``experiment`` whose status is not 'complete', or None."""
        rows = self._select("WHERE experiment = %s AND status <> 'complete'"
                            " ORDER BY started_at DESC LIMIT 1", [experiment])
        return rows[0] if rows else None

    def newest(self, experiment: str) -> dict | None:
        """The most recently started invocation of ``experiment``, whatever its status, or None."""
        rows = self._select("WHERE experiment = %s ORDER BY started_at DESC LIMIT 1", [experiment])
        return rows[0] if rows else None

    def config_files(self, experiment: str) -> list[str]:
        """The config.json paths that driver runs of ``experiment`` were started from (recorded from migration
        0004 on), most recent first."""
        rows = self.execute(
            "SELECT r.submitted_config->>'file' AS file, max(r.started_at) AS last FROM scan_runs r "
            "JOIN scan_invocations i ON i.invocation_id = r.invocation_id WHERE i.experiment = %s "
            "AND r.submitted_config ? 'file' GROUP BY 1 ORDER BY 2 DESC", [experiment])
        return [row[0] for row in rows]

    def newest_from(self, config_file: str) -> dict | None:
        """The most recently started invocation whose driver runs were started from ``config_file``, or None."""
        rows = self.execute(
            "SELECT i.invocation_id::text FROM scan_runs r JOIN scan_invocations i ON i.invocation_id = "
            "r.invocation_id WHERE r.submitted_config->>'file' = %s ORDER BY i.started_at DESC LIMIT 1",
            [config_file])
        return self.get_invocation(rows[0][0]) if rows else None

    def invocations_arrow(self):
        """All invocations as a ``pyarrow.Table`` (columns in table order) for DuckDB and reports.

        uuid → string, jsonb → JSON text (string), timestamptz → timestamp[us, tz=UTC],
        integer → int32, boolean → bool; rows ordered by started_at.
        """
        import pyarrow as pa

        types = {"uuid": pa.string(), "jsonb": pa.string(), "text": pa.string(),
                 "boolean": pa.bool_(), "integer": pa.int32(), "bigint": pa.int64(),
                 "double precision": pa.float64(),
                 "timestamp with time zone": pa.timestamp("us", tz="UTC")}
        as_is = {"text", "boolean", "integer", "bigint", "double precision", "timestamp with time zone"}
        with self._translated():
            columns = self._conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_name = 'scan_invocations' AND table_schema = current_schema()"
                " ORDER BY ordinal_position").fetchall()
            select = sql.SQL(", ").join(  # uuid, jsonb and anything unknown travel as text
                sql.Identifier(name) if data_type in as_is
                else sql.SQL("{}::text").format(sql.Identifier(name)) for name, data_type in columns)
            rows = self._conn.execute(sql.SQL("SELECT {} FROM scan_invocations ORDER BY started_at")
                                      .format(select)).fetchall()
        schema = pa.schema([(name, types.get(data_type, pa.string())) for name, data_type in columns])
        return pa.Table.from_pydict({name: [row[i] for row in rows]
                                     for i, name in enumerate(schema.names)}, schema=schema)

    def _select(self, where: str, params: list) -> list[dict]:
        with self._translated():
            cursor = self._conn.cursor(row_factory=dict_row)
            rows = cursor.execute("SELECT * FROM scan_invocations " + where, params).fetchall()
        for row in rows:
            row["invocation_id"] = str(row["invocation_id"])
            if row.get("reproduces") is not None:
                row["reproduces"] = str(row["reproduces"])
        return rows

    @contextmanager
    def _translated(self):
        try:
            yield
        except psycopg.Error as err:
            raise _refusal(err, self.dsn) from err


# --- errors, in plain words ---------------------------------------------------------------------

def _connect(dsn: str) -> psycopg.Connection:
    try:
        options = conninfo_to_dict(dsn)
    except psycopg.Error:
        raise CatalogError(f"catalog: the DSN {redact_dsn(dsn)!r} cannot be parsed; "
                           f"fix it (flag or {DSN_ENV})") from None
    options.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    options.setdefault("application_name", "mirrorscan")
    try:
        return psycopg.connect(**options, autocommit=True)
    except psycopg.Error as err:
        reason = _scrub(" ".join(str(err).split()), dsn)
        raise CatalogError(
            f"catalog: cannot connect to {redact_dsn(dsn)} ({reason}); start that server, or set "
            f"{DSN_ENV} to a reachable one (unset it to use the embedded local server)") from None


def _refusal(err: psycopg.Error, dsn: str) -> CatalogError:
    diag = err.diag
    constraint = diag.constraint_name or ""
    if constraint == "scan_invocations_frozen":
        columns = [f"scan_invocations.{name}" for name in (diag.column_name or "?").split(", ")]
        verb = "is" if len(columns) == 1 else "are"
        return CatalogError(f"catalog refused: {', '.join(columns)} of invocation {diag.message_detail} "
                            f"{verb} frozen; start a new invocation instead")
    if constraint.startswith("scan_invocations_no_"):
        operation = constraint.removeprefix("scan_invocations_no_").upper()
        return CatalogError(f"catalog refused: {operation} on scan_invocations; invocations are never "
                            f"removed: mark one 'failed' with update_progress or start a new invocation")
    if isinstance(err, psycopg.errors.UniqueViolation) and constraint == "scan_invocations_pkey":
        return CatalogError(f"catalog refused: an invocation with this id already exists "
                            f"({diag.message_detail}); each run gets a new invocation_id")
    if isinstance(err, psycopg.errors.InsufficientPrivilege):
        return CatalogError(f"catalog refused: the database role may not do this ({diag.message_primary})")
    if isinstance(err, psycopg.OperationalError) and diag.sqlstate is None:
        return CatalogError(f"catalog: lost the connection to {redact_dsn(dsn)} "
                            f"({_scrub(str(err), dsn)}); check that the server is running")
    return CatalogError(f"catalog error: {_scrub(diag.message_primary or str(err), dsn)}")


def _scrub(text: str, dsn: str) -> str:
    """``text`` with any password from ``dsn`` masked (libpq messages can echo parts of a DSN)."""
    try:
        options = conninfo_to_dict(dsn)
    except psycopg.Error:
        return text
    for key in _PASSWORD_KEYS:
        if options.get(key):
            text = text.replace(str(options[key]), "***")
    return text


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise CatalogError(f"catalog refused: status {status!r} is not one of {', '.join(STATUSES)}")


def _uuid(value: uuid.UUID | str) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        raise CatalogError(f"catalog: {value!r} is not an invocation id (a UUID)") from None


UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
"""An invocation id as text (lower-case, hyphenated)."""


ID_PREFIX_PATTERN = re.compile(r"^[0-9a-f]{6}[0-9a-f-]{0,30}$")
"""The start of an invocation id (at least 6 hex digits) that ``resolve_invocation`` accepts when unique."""


def match_invocation_id(target: str, ids_starting) -> str | None:
    """The invocation id ``target`` names when it is a whole id or the unique start of one (6+ hex digits):
    the one rule every verb (diff, report, reproduce, stats, analyze, compare, browse, open_scan) reads ids by.
    ``ids_starting(prefix, n)`` returns up to ``n`` ids starting with ``prefix``, sorted. None when ``target`` is
    not shaped like an id, or no id starts with it (it may still name an experiment); ConfigError listing the
    candidates when several do."""
    prefix = target.strip().lower()
    if UUID_PATTERN.match(prefix):
        return prefix if ids_starting(prefix, 1) else None
    if not ID_PREFIX_PATTERN.match(prefix):
        return None
    found = list(ids_starting(prefix, 4))
    if len(found) > 1:
        raise ConfigError("", "invocation", f"{target!r} is the start of several invocation ids "
                          f"({', '.join(found[:3])}{', …' if len(found) > 3 else ''})", "give more of the id")
    return found[0] if found else None


TARGET_RULE = ("a whole invocation id is that invocation; a text holding a / is an experiment (its folder, or the "
               "name of its last part); any other text that is both an experiment (a folder here, or a name in the "
               "catalog) and the start of an invocation id (6+ hex digits) is refused, naming both")
"""How every verb reads a target that could name an experiment or an invocation (docs/results.md)."""


def named_both(target: str, experiment: str, invocation_id: str, *, folder: bool = False,
               fix: str | None = None) -> ConfigError:
    """The ConfigError for ``target`` naming both an experiment (``folder``: a folder here, not yet one in the
    catalog) and the start of invocation ``invocation_id`` (``TARGET_RULE``): one line naming both and how to say
    which."""
    t = target.strip()
    what = f"the experiment folder {experiment}/" if folder else f"experiment {experiment!r}"
    return ConfigError("", "target", f"{t!r} names both {what} and invocation {invocation_id}, whose id starts with it",
                       fix or f"write the experiment as a path (./{experiment}/ or experiments/{experiment}/) or the "
                       f"invocation by its whole id ({invocation_id})")


def resolve_invocation(target: str, catalog: Catalog) -> dict:
    """The catalog row of ``target``: an invocation id, the unique start of one (6+ hex digits,
    ``match_invocation_id``), or an experiment (folder or name) → its newest invocation, read by ``TARGET_RULE``
    (a text that is both an experiment and an id start is refused). ConfigError (naming what to run) when there
    is none or a start is ambiguous."""
    from pathlib import Path

    listing = "list them with: mirrorscan sql \"SELECT invocation_id, experiment FROM scan_invocations\""
    text = target.strip().lower()
    is_path = "/" in target or os.sep in target
    found = None
    if not is_path:
        found = match_invocation_id(target, lambda prefix, n: [row[0] for row in catalog.execute(
            "SELECT invocation_id::text FROM scan_invocations WHERE invocation_id::text LIKE %s "
            f"ORDER BY invocation_id LIMIT {int(n)}", [prefix + "%"])])
        if found is None and UUID_PATTERN.match(text):
            raise ConfigError("", "invocation", f"no invocation {target} in the catalog", listing)
    if found is not None and not UUID_PATTERN.match(text):   # a start: is it an experiment too?
        if catalog.newest(target.strip()) is not None:
            raise named_both(target, target.strip(), found)
        if os.path.isdir(target):
            raise named_both(target, target.strip(), found, folder=True)
    if found is not None:
        return catalog.get_invocation(found)
    if os.path.isdir(target):   # that folder's own invocations (another folder may share its name)
        inv = catalog.newest_from(str((Path(target) / "config.json").resolve()))
        if inv is not None:
            return inv
    name = Path(target).resolve().name if os.path.isdir(target) else Path(target).name
    inv = catalog.newest(name)
    if inv is None and not is_path and ID_PREFIX_PATTERN.match(text):
        raise ConfigError("", "invocation", f"no invocation id starts with {target.strip()!r}, and no experiment "
                          "is named so", listing)
    if inv is None:
        short = "" if is_path or not re.fullmatch(r"[0-9a-f]{1,5}", text) else (
            f", and {target.strip()!r} is too short for the start of an invocation id (that needs 6 hex digits "
            "or more)")
        raise ConfigError("", "experiment", f"experiment {name!r} has no invocation in the catalog{short}",
                          f"run: mirrorscan scan experiments/{name}/" + (", or give 6 or more hex digits of the "
                                                                          "invocation id" if short else ""))
    return inv
