"""SQL over the trace store and the catalog: the DuckDB connection ``mirrorscan sql`` and the instruments'
suggested queries run against, and the read-only rules it enforces.

``connect`` registers the views (``traces``, ``traces_<instrument>``, ``scan_invocations``, ``inference_log``:
see ``jobs/sql.py`` for what each holds) over pyarrow datasets and Arrow tables, with DuckDB's own file
access off and its configuration locked; ``query`` runs exactly one read-only statement under a time limit
and can be stopped from another thread. Rendering the result (table, CSV, JSON lines) is ``results/sql_output.py``;
printing it, the command line's (``jobs/sql.py``).
"""

from __future__ import annotations

import sys

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError

JSON_COLUMNS = ("settings", "counts", "package_versions", "content_hashes", "model_weights")
VIEWS = ("traces", "scan_invocations", "inference_log")
QUERY_TYPES = ("SELECT", "EXPLAIN")
"""DuckDB statement types the verb runs (DESCRIBE, SHOW, SUMMARIZE, VALUES and FROM-first parse as SELECT)."""
SANDBOX = {
    "enable_external_access": False,        # no file, directory, URL or database opened by DuckDB itself
    "autoinstall_known_extensions": False,  # never download an extension
    "autoload_known_extensions": False,
    "python_enable_replacements": False,    # a FROM name is a registered view, never a Python variable
}
"""DuckDB settings of every sql connection; ``lock_configuration`` is set once the views exist."""
DEFAULT_TIMEOUT_S = 300.0
"""How long one query may run by default (seconds of wall clock); ``--timeout 0`` lifts the limit."""
EXIT_INTERRUPTED = 130


def trace_stores(store_uri: str | None, invocations: pa.Table, default_store: str) -> tuple[list, list[str]]:
    """The stores ``sql`` reads: ``store_uri`` alone when given (it must exist); else the default store and
    every store the catalog's invocations name. Returns (open stores, notes about stores left out)."""
    from mirrorscan.cluster.store.traces import open_store

    if store_uri is not None:
        return [open_store(store_uri, create=False)], []
    named = [u for u in dict.fromkeys(invocations.column("store_uri").to_pylist()) if u] \
        if "store_uri" in invocations.column_names else []
    stores, notes, seen = [], [], set()
    for uri in [default_store, *named]:
        try:
            store = open_store(uri, create=False)
        except ConfigError as exc:
            if uri != default_store:
                notes.append(f"store {uri} named by an invocation is not readable here ({exc.problem})")
            continue
        if store.uri not in seen:
            seen.add(store.uri)
            stores.append(store)
    return stores, notes


def connect(store_uri: str | None, catalog_dsn: str | None, default_store: str | None = None):
    """A sandboxed in-memory DuckDB connection with the ``traces``, ``scan_invocations`` and
    ``inference_log`` views registered, over the stores ``trace_stores`` picks (``store_uri`` alone when
    given, else ``default_store`` and every store an invocation names).

    External access is off (DuckDB opens no file: no COPY … TO, ATTACH, INSTALL/LOAD, read_csv, glob)
    and the configuration is locked, so no statement can turn it back on. The store is read by pyarrow
    (a lazy dataset registered as Arrow), which external access does not restrict."""
    import duckdb

    from mirrorscan.cluster.catalog import inference_view
    from mirrorscan.cluster.catalog.client import Catalog
    import pyarrow.dataset as pads

    from mirrorscan.cluster.home import default_store_uri
    from mirrorscan.grid.instrument import known_trace_schema, registered
    from mirrorscan.grid.trace_schema import trace_schema

    with Catalog(catalog_dsn) as catalog:   # the flag, else $MIRRORSCAN_CATALOG_DSN, else the embedded one
        invocations = catalog.invocations_arrow()
        log_rows = inference_view.catalog_arrow(catalog.execute)
    stores, notes = trace_stores(store_uri, invocations, default_store or default_store_uri())
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if len(stores) > 1:
        print("note: traces read from " + ", ".join(s.display(s.root) for s in stores), file=sys.stderr)
    con = duckdb.connect(config=dict(SANDBOX))
    instruments = registered()

    def union(datasets: list, schema: pa.Schema):
        """One dataset over the stores' datasets (an empty one when no store exists yet)."""
        if not datasets:
            return pads.dataset([], schema=schema, format="parquet")
        return datasets[0] if len(datasets) == 1 else pads.dataset(datasets)

    core = known_trace_schema()
    con.register("traces_parts", union([s.dataset() for s in stores], core))   # core + registered instruments' columns
    con.execute("CREATE VIEW traces AS SELECT *, invocation_id AS experiment_version FROM traces_parts")
    for inst in instruments:   # every column of one instrument, its rows only
        schema = trace_schema(inst.columns)
        con.register(f"traces_{inst.name}_parts", union([s.dataset(schema=schema) for s in stores], schema))
        con.execute(f"CREATE VIEW traces_{inst.name} AS SELECT *, invocation_id AS experiment_version "
                    f"FROM traces_{inst.name}_parts WHERE instrument = '{inst.name}'")
    con.register("inference_log_catalog", log_rows)
    con.register("inference_log_spill", union([inference_view.spill_dataset(s) for s in stores],
                                              inference_view.SPILL_SCHEMA))
    con.execute(inference_view.view_sql("inference_log_catalog", "inference_log_spill"))
    con.register("scan_invocations_arrow", invocations)
    casts = ", ".join(f"CAST({c} AS JSON) AS {c}" for c in JSON_COLUMNS if c in invocations.column_names)
    con.execute(f"CREATE VIEW scan_invocations AS SELECT * REPLACE ({casts}) FROM scan_invocations_arrow")
    con.execute("SET lock_configuration = true")
    return con


def one_line(exc: Exception) -> str:
    """A DuckDB error message on one line (the caret marker lines dropped, the rest joined with ``; ``)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line and set(line) != {"^"})


def statement_keyword(text: str) -> str:
    """The keyword a statement begins with, as the user wrote it, upper-cased (``INSTALL``, ``FORCE INSTALL``,
    ``RESET``), leading comments skipped; "" when it begins with none. DuckDB's statement type is coarser
    (INSTALL is a LOAD, RESET and USE a SET, CHECKPOINT a CALL), so a refusal names this instead."""
    import re

    found = re.match(r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)*((?:FORCE\s+)?[A-Za-z]+)", text, re.S | re.I)
    return " ".join(found.group(1).upper().split()) if found else ""


def check_statement(con, sql: str) -> None:
    """Raise ConfigError unless ``sql`` is exactly one query statement (see QUERY_TYPES)."""
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise ConfigError("", "query", one_line(exc), "correct the statement (DuckDB dialect)") from None
    if len(statements) != 1:
        raise ConfigError("", "query", f"{len(statements)} SQL statements given, exactly one is run",
                          "pass one statement (no ';' between two)")
    try:
        kind = statements[0].type.name
    except ValueError:   # a type DuckDB's Python API cannot name (UPDATE EXTENSIONS): not a query either
        kind = ""
    if kind not in QUERY_TYPES:
        from mirrorscan.grid.formatting import with_article

        name = statement_keyword(statements[0].query) or kind
        raise ConfigError("", "query", f"{with_article(name)} statement is refused; mirrorscan sql only reads",
                          f"write one SELECT (or DESCRIBE/SHOW/SUMMARIZE/EXPLAIN) over {', '.join(VIEWS)}")


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (at most 15 bytes) in the operating system too, where ``ps -L`` and
    ``top -H`` show it (Linux; elsewhere nothing happens)."""
    import ctypes
    import ctypes.util
    import sys as _sys

    if not _sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)   # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass


STOP_GRACE_S = 10.0
"""How long a query may take to honour its interrupt (seconds) before the command stops waiting for it."""


def stop(con, done, grace_s: float | None = None) -> bool:
    """Interrupt the query running on ``con`` until ``done`` (a threading.Event its thread sets when it ends)
    is set (an interrupt sent just before the query starts is lost, so it is repeated). Returns whether the
    query ended within ``grace_s`` seconds (None: ``STOP_GRACE_S``); past that its thread is left running (a
    daemon thread the process does not wait for)."""
    import time

    deadline = time.monotonic() + (STOP_GRACE_S if grace_s is None else grace_s)
    while True:
        con.interrupt()
        if done.wait(max(0.0, min(0.25, deadline - time.monotonic()))):
            return True
        if time.monotonic() >= deadline:
            return False


def close_unless_busy(con) -> None:
    """Close ``con``; a connection whose query ignored its interrupt is busy and is left open (DuckDB refuses to
    close it, and that refusal must not replace the Ctrl-C or time-limit message the user is owed)."""
    import duckdb

    try:
        con.close()
    except duckdb.ResourceInUseException:
        pass


def run_stoppable(con, sql: str, timeout_s: float | None) -> pa.Table:
    """``con.sql(sql)`` as an Arrow table, run in a worker thread so that the main thread stays free to take
    Ctrl-C (DuckDB holds no Python signal check while it runs): on KeyboardInterrupt the query is interrupted
    (``con.interrupt()``) and the KeyboardInterrupt re-raised; past ``timeout_s`` seconds (wall clock; None or 0
    = no limit) it is interrupted and ConfigError raised. DuckDB errors propagate as raised.

    The main thread waits on an Event, not ``Thread.join``: a join cut short by KeyboardInterrupt can mark a
    running thread as ended (CPython 3.11), and closing the connection under a running query aborts."""
    import threading
    import time

    outcome: dict = {}
    done = threading.Event()

    def work() -> None:
        name_os_thread("mirrorscan-sql")
        try:
            outcome["table"] = con.sql(sql).to_arrow_table()
        except BaseException as exc:   # handed to the main thread
            outcome["error"] = exc
        finally:
            done.set()

    deadline = time.monotonic() + timeout_s if timeout_s else None
    threading.Thread(target=work, name="mirrorscan-sql", daemon=True).start()
    try:
        while not done.wait(0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))):
            if deadline is not None and time.monotonic() >= deadline:
                stop(con, done)
                raise ConfigError("", "query", f"ran longer than the time limit of {timeout_s:g} s and was stopped",
                                  "narrow it (WHERE, LIMIT), or pass --timeout SECONDS (0 = no limit)")
    except KeyboardInterrupt:
        stop(con, done)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["table"]


def query(sql: str, store_uri: str | None, catalog_dsn: str | None, default_store: str | None = None,
          timeout_s: float | None = None) -> pa.Table:
    """Run one read-only SQL statement over the views; the result as an Arrow table.

    ConfigError (one line) for zero or several statements, a statement that is not a query, any error
    DuckDB reports (syntax, unknown column, a refused file access), and a query running past ``timeout_s``
    seconds (None = no limit). Ctrl-C stops the query and raises KeyboardInterrupt."""
    import duckdb

    con = connect(store_uri, catalog_dsn, default_store)
    try:
        check_statement(con, sql)
        try:
            return run_stoppable(con, sql, timeout_s)
        except duckdb.PermissionException as exc:
            raise ConfigError("", "query", one_line(exc),
                              f"read only the views {', '.join(VIEWS)}; mirrorscan sql opens no file") from None
        except duckdb.Error as exc:
            raise ConfigError("", "query", one_line(exc),
                              "correct the statement (DuckDB dialect; DESCRIBE traces lists the columns)") from None
    finally:
        close_unless_busy(con)
