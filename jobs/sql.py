"""``mirrorscan sql "SELECT …"``: DuckDB SQL over the trace store and the catalog.

Views:
  traces            every complete trace part in the store, of every instrument (pyarrow dataset; nothing
                    is copied): the core columns plus the union of the registered instruments' columns
                    (null where a row's instrument lacks one; per-layer vector columns left out), plus
                    ``experiment_version``, an alias of ``invocation_id`` (the method's name for it)
  traces_<name>     one registered instrument's rows with all of its columns (e.g. traces_forced_choice)
  scan_invocations  the catalog's invocations (read through psycopg into Arrow); ``settings``,
                    ``counts``, ``package_versions``, ``content_hashes`` and
                    ``model_weights`` are JSON
  inference_log     one row per engine/tap request: the catalog's table UNION the Parquet parts spilled
                    beside the traces when the catalog was unreachable; ``stored_in`` says which
                    ('catalog' | 'spill'), ``request_headers`` is JSON

The dialect is DuckDB's. JSON fields read with ``->>`` (text) and ``->`` (JSON), e.g. the method's
query joining a trace to the settings it ran under:

  SELECT si.settings->>'max_tokens' AS max_tokens, t.response
  FROM traces t JOIN scan_invocations si ON si.invocation_id::text = t.experiment_version
  WHERE t.probe_id = 'smollm2-135m-instruct|vodka|whiskey|english_strict|AB'

Read-only: exactly one statement runs, and only a query (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW,
SUMMARIZE or EXPLAIN); anything else (COPY, ATTACH, INSTALL/LOAD, SET, CREATE, a second statement) is
refused with one line and exit code 2. DuckDB itself opens no file (``enable_external_access`` off,
configuration locked): ``read_csv('…')``, ``'file.parquet'`` in FROM, ``glob`` and the like are refused.
The traces still reach it in full, lazily, as a pyarrow dataset that pyarrow reads; nothing is copied
into memory beforehand. DuckDB never downloads an extension (JSON and Parquet are built in).

Time: a query runs at most ``--timeout`` seconds (default 300; 0 = no limit), then it is stopped with one
``error:`` line and exit code 2. Ctrl-C (SIGINT) stops a running query at once: one ``interrupted:`` line,
exit code 130. Nothing is written either way.

Output: ``table`` prints timestamps, dates and times as ISO text (``2025-01-02T03:04:05+00:00``) and
intervals as durations in DuckDB's own wording (``1 day 03:00:00``); ``json`` writes them the same way,
as strings; ``csv`` writes intervals the same way and lists or structs as JSON text. A column name that
occurs twice (``SELECT 1 AS a, 2 AS a``, or ``*`` over a join) keeps its first occurrence; the next ones
become ``a_2``, ``a_3``, … in every format, and a ``note:`` line on stderr lists the renames (name the
columns with AS to choose).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import sys

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors

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
    from mirrorscan.cluster.store import open_store

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

    from mirrorscan.cluster import inference_log
    from mirrorscan.cluster.catalog import Catalog
    import pyarrow.dataset as pads

    from mirrorscan.cluster.home import default_store_uri
    from mirrorscan.grid.instrument import known_trace_schema, registered
    from mirrorscan.grid.trace_schema import trace_schema

    with Catalog(catalog_dsn) as catalog:   # the flag, else $MIRRORSCAN_CATALOG_DSN, else the embedded one
        invocations = catalog.invocations_arrow()
        log_rows = inference_log.catalog_arrow(catalog.execute)
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
    con.register("inference_log_spill", union([inference_log.spill_dataset(s) for s in stores],
                                              inference_log.SPILL_SCHEMA))
    con.execute(inference_log.view_sql("inference_log_catalog", "inference_log_spill"))
    con.register("scan_invocations_arrow", invocations)
    casts = ", ".join(f"CAST({c} AS JSON) AS {c}" for c in JSON_COLUMNS if c in invocations.column_names)
    con.execute(f"CREATE VIEW scan_invocations AS SELECT * REPLACE ({casts}) FROM scan_invocations_arrow")
    con.execute("SET lock_configuration = true")
    return con


def one_line(exc: Exception) -> str:
    """A DuckDB error message on one line (the caret marker lines dropped, the rest joined with ``; ``)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line and set(line) != {"^"})


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
    kind = statements[0].type.name
    if kind not in QUERY_TYPES:
        from mirrorscan.grid.formatting import with_article

        raise ConfigError("", "query", f"{with_article(kind)} statement is refused; mirrorscan sql only reads",
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


def stop(con, done) -> None:
    """Interrupt the query running on ``con`` until ``done`` (a threading.Event its thread sets when it ends)
    is set (an interrupt sent just before the query starts is lost, so it is repeated), giving up after 10 s."""
    for _ in range(40):
        con.interrupt()
        if done.wait(0.25):
            return


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
        con.close()


def unique_names(names: list[str]) -> list[str]:
    """``names`` with each repeated name suffixed ``_2``, ``_3``, … (the first occurrence keeps its name;
    a suffix already used by another column is skipped)."""
    taken, out = set(names), []
    seen: set[str] = set()
    for name in names:
        new = name
        if name in seen:
            k = 2
            while f"{name}_{k}" in taken or f"{name}_{k}" in seen:
                k += 1
            new = f"{name}_{k}"
        seen.add(new)
        out.append(new)
    return out


def with_unique_names(table: pa.Table) -> tuple[pa.Table, list[tuple[str, str]]]:
    """The table with repeated column names made unique (``unique_names``) and the renames made, as
    (old, new) pairs in column order (empty when every name was unique)."""
    new = unique_names(table.column_names)
    renames = [(old, n) for old, n in zip(table.column_names, new) if old != n]
    return (table.rename_columns(new) if renames else table), renames


def format_interval(months: int, days: int, nanoseconds: int) -> str:
    """An interval as DuckDB words it (``1 year 2 months 3 days 04:05:06.5``, ``-1 day -01:30:00``, ``00:00:00``)."""
    parts = []
    years, rest = int(months / 12), months - int(months / 12) * 12   # both truncate toward zero, as DuckDB
    for n, unit in ((years, "year"), (rest, "month"), (days, "day")):
        if n:
            parts.append(f"{n} {unit}{'' if n in (1, -1) else 's'}")
    if nanoseconds or not parts:
        sign, ns = ("-" if nanoseconds < 0 else ""), abs(nanoseconds)
        seconds, frac = divmod(ns, 1_000_000_000)
        hours, seconds = divmod(seconds, 3600)
        minutes, seconds = divmod(seconds, 60)
        clock = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
        if frac:
            clock += "." + f"{frac:09d}".rstrip("0")
        parts.append(clock)
    return " ".join(parts)


def plain(value):
    """A result value as JSON-ready Python: timestamps, dates and times as ISO text, intervals and
    durations as ``format_interval`` text, lists/structs/maps recursively; other values unchanged."""
    if isinstance(value, pa.MonthDayNano):
        return format_interval(value.months, value.days, value.nanoseconds)
    if isinstance(value, dt.timedelta):
        return format_interval(0, value.days, (value.seconds * 1_000_000 + value.microseconds) * 1000)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def row_values(table: pa.Table) -> list[list]:
    """The table's rows as lists of ``plain`` values, by column position (so repeated names lose nothing)."""
    columns = [[plain(v) for v in col.to_pylist()] for col in table.columns]
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(table.num_rows)]


def json_lines(table: pa.Table) -> list[str]:
    """One JSON object per row, keys in column order; repeated column names made unique (``unique_names``)."""
    names = unique_names(table.column_names)
    return [json.dumps(dict(zip(names, r)), default=str, ensure_ascii=False) for r in row_values(table)]


def csv_ready(table: pa.Table) -> pa.Table:
    """The table with the columns CSV cannot hold as text: intervals/durations as ``format_interval``
    text, lists/structs/maps as JSON text; repeated names made unique."""
    table, _ = with_unique_names(table)
    for i, field in enumerate(table.schema):
        t = field.type
        if pa.types.is_interval(t) or pa.types.is_duration(t) or pa.types.is_nested(t):
            values = [None if v is None else v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
                      for v in (plain(x) for x in table.column(i).to_pylist())]
            table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(values, pa.string()))
    return table


def format_table(table: pa.Table, max_width: int = 60) -> str:
    """A plain aligned text rendering of a result (cells cut to ``max_width`` characters).

    NULL for null; strings, decimals, timestamps, dates, times (ISO) and intervals (``format_interval``) without
    quotes; numbers and booleans as JSON; lists and structs as JSON. Repeated column names are made
    unique (``unique_names``)."""
    def cell(v) -> str:
        s = ("NULL" if v is None else v if isinstance(v, str) else str(v) if isinstance(v, decimal.Decimal)
             else json.dumps(v, default=str, ensure_ascii=False))
        s = s.replace("\n", "\\n")
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    cols = unique_names(table.column_names)
    rows_ = [[cell(v) for v in r] for r in row_values(table)]
    widths = [max([len(c)] + [len(r[i]) for r in rows_]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows_]
    lines.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(lines)


def build_parser(prog: str = "mirrorscan sql") -> argparse.ArgumentParser:
    """The sql command's argument parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", help="one SQL statement (DuckDB dialect) over traces, scan_invocations and inference_log")
    p.add_argument("--store", help="read only this trace store (default: $MIRRORSCAN_STORE, else the home "
                   "store, plus every store the catalog's invocations name; a note on stderr says which)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (aligned, long cells cut), csv, or json (one object per line, nothing cut). "
                        "Timestamps print as ISO text, intervals as durations ('1 day 03:00:00'); a repeated "
                        "column name becomes name_2, name_3, … in every format, with a note on stderr")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"stop a query running longer than this (default {DEFAULT_TIMEOUT_S:g} s; 0 = no limit)")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan sql") -> int:
    """CLI entry point; returns the exit code (2 for a refused, failing or timed-out query, one ``error:``
    line; 130 after Ctrl-C, one ``interrupted:`` line)."""
    import os

    from mirrorscan.cluster.home import default_store_uri

    args = build_parser(prog).parse_args(argv)
    if not args.timeout >= 0:
        raise ConfigError("", "--timeout", f"is {args.timeout:g}", "pass 0 (no limit) or more seconds")
    default = os.environ.get("MIRRORSCAN_STORE") or default_store_uri()
    try:
        table = query(args.query, args.store, args.catalog_dsn, default, timeout_s=args.timeout or None)
    except KeyboardInterrupt:
        print("interrupted: the query was stopped (Ctrl-C); nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    table, renames = with_unique_names(table)
    if renames:
        print("note: repeated column names renamed: " + ", ".join(f"{old} → {new}" for old, new in renames)
              + " (name the columns with AS to choose)", file=sys.stderr)
    if args.format == "csv":
        import pyarrow.csv as pacsv

        sys.stdout.flush()
        pacsv.write_csv(csv_ready(table), sys.stdout.buffer)
    elif args.format == "json":
        for line in json_lines(table):
            print(line)
    else:
        print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.sql"))
