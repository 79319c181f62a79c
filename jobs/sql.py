"""``mirrorscan sql "SELECT …"``: DuckDB SQL over the trace store and the catalog.

Views:
  traces            every complete trace part in the store (pyarrow dataset; nothing is copied), plus
                    ``experiment_version``, an alias of ``invocation_id`` (the method's name for it)
  scan_invocations  the catalog's invocations (read through psycopg into Arrow); ``settings``,
                    ``counts``, ``package_versions`` and ``content_hashes`` are JSON
  inference_log     one row per engine/tap request: the catalog's table UNION the Parquet parts spilled
                    beside the traces when the catalog was unreachable; ``stored_in`` says which
                    ('catalog' | 'spill'), ``request_headers`` is JSON

The dialect is DuckDB's. JSON fields read with ``->>`` (text) and ``->`` (JSON), e.g. the method's
query joining a trace to the settings it ran under:

  SELECT si.settings->>'max_tokens' AS max_tokens, t.response
  FROM traces t JOIN scan_invocations si ON si.invocation_id::text = t.experiment_version
  WHERE t.probe_id = 'smollm2-135m-instruct|vodka|whiskey|english_strict|AB'

DuckDB never downloads an extension here (autoinstall and autoload are off; JSON and Parquet are built in).
"""

from __future__ import annotations

import argparse
import json
import sys

import pyarrow as pa

from jobs.errors import reports_user_errors

JSON_COLUMNS = ("settings", "counts", "package_versions", "content_hashes")


def connect(store_uri: str, catalog_dsn: str | None):
    """A DuckDB connection with the ``traces``, ``scan_invocations`` and ``inference_log`` views registered."""
    import duckdb

    from cluster import inference_log
    from cluster.catalog import Catalog, resolve_dsn
    from cluster.store import open_store

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    store = open_store(store_uri)
    con.register("traces_parts", store.dataset())
    con.execute("CREATE VIEW traces AS SELECT *, invocation_id AS experiment_version FROM traces_parts")
    with Catalog(resolve_dsn(catalog_dsn)) as catalog:
        invocations = catalog.invocations_arrow()
        log_rows = inference_log.catalog_arrow(catalog.execute)
    con.register("inference_log_catalog", log_rows)
    con.register("inference_log_spill", inference_log.spill_dataset(store))
    con.execute(inference_log.view_sql("inference_log_catalog", "inference_log_spill"))
    con.register("scan_invocations_arrow", invocations)
    casts = ", ".join(f"CAST({c} AS JSON) AS {c}" for c in JSON_COLUMNS if c in invocations.column_names)
    con.execute(f"CREATE VIEW scan_invocations AS SELECT * REPLACE ({casts}) FROM scan_invocations_arrow")
    return con


def query(sql: str, store_uri: str, catalog_dsn: str | None) -> pa.Table:
    """Run one SQL statement over the views; the result as an Arrow table."""
    con = connect(store_uri, catalog_dsn)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def format_table(table: pa.Table, max_width: int = 60) -> str:
    """A plain aligned text rendering of a result (cells cut to ``max_width`` characters)."""
    def cell(v) -> str:
        s = "NULL" if v is None else v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
        s = s.replace("\n", "\\n")
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    cols = table.column_names
    rows = [[cell(v) for v in r.values()] for r in table.to_pylist()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(lines)


def build_parser(prog: str = "mirrorscan sql") -> argparse.ArgumentParser:
    """The sql command's argument parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", help="one SQL statement (DuckDB dialect) over traces, scan_invocations and inference_log")
    p.add_argument("--store", help="trace store URI (default: $MIRRORSCAN_STORE, else the one make demo used)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (aligned, long cells cut), csv, or json (one object per line, nothing cut)")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan sql") -> int:
    """CLI entry point; returns the exit code (2 for a bad query or input)."""
    import os

    import duckdb

    from cluster.home import default_store_uri

    args = build_parser(prog).parse_args(argv)
    store = args.store or os.environ.get("MIRRORSCAN_STORE") or default_store_uri()
    dsn = args.catalog_dsn or os.environ.get("MIRRORSCAN_CATALOG_DSN")
    try:
        table = query(args.query, store, dsn)
    except duckdb.Error as exc:
        print(f"sql error: {exc}", file=sys.stderr)
        return 2
    if args.format == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sys.stdout.buffer)
    elif args.format == "json":
        for row in table.to_pylist():
            print(json.dumps(row, default=str, ensure_ascii=False))
    else:
        print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m jobs.sql"))
