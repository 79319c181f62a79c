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

Output: ``table`` escapes control characters (``grid.formatting.printable``: an ESC, BEL or CR in a stored
response shows as ``\\x1b``, ``\\x07``, ``\\r``, never acts on the terminal), ``json`` writes them as JSON
escapes (``\\u001b``; the values parse back unchanged) and ``csv`` escapes them only when stdout is a terminal.
``table`` prints at most ``--limit`` rows (default 10,000; a ``note:`` on stderr says how many were left out),
``csv`` and ``json`` every row unless ``--limit`` is given. ``table`` prints timestamps, dates and times as
ISO text (``2025-01-02T03:04:05+00:00``) and intervals as durations in DuckDB's own wording (``1 day
03:00:00``); ``json`` writes them the same way, as strings; ``csv`` writes intervals the same way and lists or
structs as JSON text. A column name that occurs twice (``SELECT 1 AS a, 2 AS a``, or ``*`` over a join) keeps
its first occurrence; the next ones become ``a_2``, ``a_3``, … in every format, and a ``note:`` line on stderr
lists the renames (name the columns with AS to choose).
"""

from __future__ import annotations

import argparse
import sys

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.results.sql import DEFAULT_TIMEOUT_S, EXIT_INTERRUPTED, query
from mirrorscan.results.sql_output import (
    TABLE_ROWS, csv_ready, format_table, json_lines, limited, with_unique_names, write_csv)

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
    p.add_argument("--limit", type=int, metavar="N",
                   help=f"print at most N rows, with a note on stderr saying how many were left out (default: "
                        f"{TABLE_ROWS:,} for table, every row for csv and json; 0 = every row)")
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
    if args.limit is not None and args.limit < 0:
        raise ConfigError("", "--limit", f"is {args.limit}", "pass 0 (every row) or a number of rows")
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
    total = table.num_rows
    table = limited(table, TABLE_ROWS if args.limit is None and args.format == "table" else args.limit or 0)
    if args.format == "csv":
        write_csv(csv_ready(table))
    elif args.format == "json":
        for line in json_lines(table):
            print(line)
    else:
        print(format_table(table, total=total))
    if table.num_rows < total:
        print(f"note: printed the first {table.num_rows:,} of {total:,} rows ({total - table.num_rows:,} left out); "
              "--limit 0 prints every row, and --format csv or json with > FILE writes them all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.sql"))
