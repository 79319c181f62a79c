"""The long table a ``mirrorscan stats`` command reads: a CSV or Parquet file, or an invocation's stored traces
(when the input names an invocation or a scanned experiment), and the catalog's measured cost per cell of an
invocation's models (``stats plan --costs-from``); a result stored beside the invocation's analysis. Unreadable
input raises ``AnalysisError`` naming the file. What is computed from the table is ``analysis.long_table``'s."""

from __future__ import annotations

from pathlib import Path

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.grid.errors import read_problem


def read_table(path: str):
    """A CSV or Parquet file as a pyarrow Table; unreadable input → AnalysisError naming the file."""
    import pyarrow as pa

    p = Path(path)
    if not p.is_file():
        raise AnalysisError("--input", f"no such file {path!r}", "give the path of a .csv or .parquet file")
    suffix = p.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return pq.read_table(p)
        if suffix in (".csv", ".tsv", ".txt"):
            import pyarrow.csv as pcsv

            parse = pcsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            return pcsv.read_csv(p, parse_options=parse)
    except (pa.ArrowException, OSError) as exc:
        raise AnalysisError("--input", f"cannot be read: {read_problem(exc)}",
                            "give a well-formed CSV (header row) or Parquet file", file=str(path)) from None
    raise AnalysisError("--input", f"unknown file type {suffix or '(none)'!r}",
                        "give a .csv, .tsv or .parquet file", file=str(path))


def invocation_source(target: str) -> dict | None:
    """The catalog row of ``target`` when it names an invocation id or an experiment (folder or name) that
    has been scanned; None when it is meant as a file. The experiment's traces then are the input table."""
    from mirrorscan.cluster.catalog.client import ID_PREFIX_PATTERN, Catalog, resolve_dsn, resolve_invocation

    is_id = ID_PREFIX_PATTERN.match(target.strip().lower())   # a whole id or its start, as every verb reads ids
    if Path(target).is_file() or not (is_id or Path(target, "config.json").is_file()):
        return None

    with Catalog(resolve_dsn()) as catalog:
        return resolve_invocation(target, catalog)


def read_input(invocation: dict | None, path: str):
    """The input table: the traces of ``invocation`` (a catalog row, ``invocation_source``) when given, else the
    CSV/Parquet file at ``path``."""
    if invocation:
        from mirrorscan.cluster.store.traces import open_store
        from mirrorscan.grid.instrument import resolve
        from mirrorscan.grid.settings import Settings
        from mirrorscan.grid.trace_schema import trace_schema

        columns = resolve(Settings.from_json(invocation["settings"]).instrument).columns
        return open_store(invocation["store_uri"]).read(invocation["experiment"], str(invocation["invocation_id"]),
                                                        schema=trace_schema(columns))
    return read_table(path)


def costs_from(target: str, dsn: str | None = None) -> dict[str, dict]:
    """Measured cost per cell of each model label of an invocation, from the catalog's inference log: engine
    seconds per cell (each engine batch's time counted once, spread over the cells it answered) and tokens
    (prompt + completion) per cell. Raises AnalysisError when the invocation logged nothing."""
    from mirrorscan.cluster.catalog.client import Catalog, resolve_dsn, resolve_invocation

    with Catalog(resolve_dsn(dsn)) as catalog:
        inv = resolve_invocation(target, catalog)
        rows = catalog.execute(
            "SELECT label, COUNT(DISTINCT (probe_id, sample)), "
            "SUM(COALESCE(prompt_tokens, 0) + COALESCE(completion_tokens, 0)), "
            "(SELECT SUM(t) FROM (SELECT DISTINCT started_at, total_ms AS t FROM inference_log b "
            " WHERE b.invocation_id = a.invocation_id AND b.label = a.label AND b.status = 'ok') s) "
            "FROM inference_log a WHERE invocation_id = %s AND status = 'ok' GROUP BY invocation_id, label",
            [str(inv["invocation_id"])])
    out = {}
    for label, cells, tokens, total_ms in rows:
        if cells:
            out[label] = {"cells": int(cells), "engine_seconds_per_cell": float(total_ms or 0) / 1000 / cells,
                          "tokens_per_cell": float(tokens or 0) / cells}
    if not out:
        raise AnalysisError("--costs-from", f"invocation {inv['invocation_id']} has no successful inference_log rows",
                            "give --cost-per-cell, or an invocation whose engines logged their requests")
    return {"invocation_id": str(inv["invocation_id"]), "labels": out}


def write_beside(invocation: dict, command: str, text: str) -> str:
    """Store a statistic's JSON ``text`` under ``<invocation>/analysis/<command>/<stamp>/result.json`` of
    ``invocation`` (a catalog row; never overwritten) and return where it went."""
    import time
    import uuid

    from mirrorscan.cluster.store.traces import open_store

    return open_store(invocation["store_uri"]).write_analysis(
        invocation["experiment"], str(invocation["invocation_id"]),
        f"{command}/{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}/result.json", text.encode())
