"""``mirrorscan matrix | remeasure | open_scan import | open_scan export``: an open_scan experiment as a whole.

An entry point, like ``jobs/``: it reads the catalog and the store (``cluster``, imported where used), which the
rest of the instrument never touches; the numbers come from ``numbers`` and ``matrix``.

An open_scan experiment is the union of its invocations (each scan appends the cells no earlier one holds).
These verbs read every stored row of the experiment, never a copy:

  mirrorscan matrix EXPERIMENT [--series S] [--parquet F] [--csv F]   models × probes, coverage, summaries
  mirrorscan remeasure EXPERIMENT [--models A,B]                       per-model summaries from stored rows
  mirrorscan open_scan export TARGET -o FILE.jsonl                     the method's JSONL, from stored columns
  mirrorscan open_scan import FILE.jsonl --experiment NAME             a JSONL run as a new invocation

TARGET is an experiment (folder or name: its newest series, current probe versions) or one invocation id
(exactly its rows, in stored order: an imported file exports byte-identical).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from grid.errors import ConfigError, reports_user_errors

INSTRUMENT = "open_scan"
IMPORTED_SERIES = "imported"
"""Series prefix of imported runs (``imported:<sha256 of the file, 12 hex>``): never held by a scan's series."""


def _catalog(dsn: str | None):
    from cluster.catalog import Catalog, resolve_dsn

    return Catalog(resolve_dsn(dsn or os.environ.get("MIRRORSCAN_CATALOG_DSN")))


def _target(target: str, dsn: str | None) -> dict:
    from cluster.catalog import resolve_invocation

    with _catalog(dsn) as catalog:
        inv = resolve_invocation(target, catalog)
    if inv["instrument"] != INSTRUMENT:
        raise ConfigError("", "experiment", f"{target!r} is a {inv['instrument']} invocation",
                          "give an open_scan experiment or invocation")
    return inv


def experiment_rows(inv: dict, store: str | None) -> pa.Table:
    """Every stored row of ``inv``'s experiment (all invocations), with open_scan's columns."""
    from cluster.store import open_store
    from grid.instrument import resolve
    from grid.trace_schema import trace_schema

    trace_store = open_store(store or inv["store_uri"])
    return trace_store.dataset(inv["experiment"], schema=trace_schema(resolve(INSTRUMENT).columns)).to_table()


def current_view(inv: dict, rows: pa.Table, series: str | None) -> tuple[str, list[tuple[str, str]], list[str], int]:
    """(series, current (query_id, query_hash) items in file order, labels, samples) of an experiment seen
    from its newest invocation ``inv`` (or ``series`` where named)."""
    from grid.settings import upgrade

    settings = upgrade(inv["settings"])
    section = settings.get("instrument_settings", {})
    chosen = series or section.get("series")
    items = [tuple(i) for i in section.get("probes", {}).get("items", [])]
    labels = [m["label"] for m in settings.get("models", [])]
    if series and series != section.get("series") or not items:   # another series: read it from its rows
        mine = rows.filter(pc.equal(rows.column("series"), chosen))
        if mine.num_rows == 0:
            known = sorted(set(rows.column("series").drop_null().to_pylist()))
            raise ConfigError("", "--series", f"no rows in series {chosen!r}", f"use one of: {', '.join(known)}")
        newest: dict[str, tuple] = {}
        for q, h, t in zip(mine.column("query_id").to_pylist(), mine.column("query_hash").to_pylist(),
                           mine.column("created_at").to_pylist()):
            if q not in newest or t > newest[q][1]:
                newest[q] = (h, t)
        items = [(q, newest[q][0]) for q in sorted(newest)]
        labels = sorted(set(mine.column("label").to_pylist()))
    return chosen, items, labels, int(settings.get("samples", 1))


def _experiment_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments ``matrix`` and ``remeasure`` share: the experiment, its series, where to read it."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("experiment", help="experiment folder or name (or an invocation id: its experiment)")
    p.add_argument("--series", help="the series (default: the newest invocation's)")
    p.add_argument("--store", help="trace store URI (default: the invocation's)")
    p.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    return p


def _experiment_view(args) -> tuple[dict, pa.Table, str, list[tuple[str, str]], list[str], int]:
    """(newest invocation, every row of the experiment, series, current items, labels, samples) for ``args``."""
    inv = _target(args.experiment, args.catalog_dsn)
    rows = experiment_rows(inv, args.store)
    return (inv, rows, *current_view(inv, rows, args.series))


@reports_user_errors
def matrix_main(argv: list[str] | None = None, prog: str = "mirrorscan matrix") -> int:
    """``mirrorscan matrix``: models × probes with coverage and per-model summaries."""
    from instruments.open_scan.matrix import build_matrix
    from instruments.open_scan.numbers import summary_text

    p = _experiment_parser(prog, "The model × probe matrix of an open_scan experiment: which cells are answered, "
                           "missing (never shown as an empty answer) or superseded by a changed probe text, and "
                           "per-model answer length and self-report summaries.")
    p.add_argument("--parquet", metavar="FILE", help="write the long matrix (one row per label, probe, sample) here")
    p.add_argument("--csv", metavar="FILE", help="write the coverage matrix (labels × probes) here as CSV")
    args = p.parse_args(argv)
    inv, rows, series, items, labels, samples = _experiment_view(args)
    matrix = build_matrix(rows, items, labels, series, samples)
    counts = matrix.counts()
    print(f"experiment {inv['experiment']} · series {series} · {len(labels)} models × {len(items)} probes: "
          f"{counts['answered']} answered · {counts['missing']} missing · {counts['failed']} failed"
          + (f" · {matrix.superseded} superseded answers kept (older probe texts)" if matrix.superseded else ""))
    width = max([len(label) for label in labels] + [5])
    print(f"{'model':<{width}}  coverage (answered samples per probe; . = missing, x = failed)")
    for row in matrix.coverage.to_pylist():
        cells = "".join(("." if row[q] == "missing" else "x" if row[q] == "failed" else
                         (row[q] if len(row[q]) == 1 else "+")) for q in matrix.query_ids)
        print(f"{row['label']:<{width}}  {cells}")
    print(summary_text(matrix.summaries, series))
    if args.parquet:
        import pyarrow.parquet as pq

        pq.write_table(matrix.cells, args.parquet)
        print(f"wrote {args.parquet}")
    if args.csv:
        import pyarrow.csv as pacsv

        pacsv.write_csv(matrix.coverage, args.csv)
        print(f"wrote {args.csv}")
    return 0


@reports_user_errors
def remeasure_main(argv: list[str] | None = None, prog: str = "mirrorscan remeasure") -> int:
    """``mirrorscan remeasure``: per-model summaries recomputed from stored rows, labels matched exactly."""
    from instruments.open_scan.matrix import build_matrix
    from instruments.open_scan.numbers import summary_text

    p = _experiment_parser(prog, "Recompute the per-model summaries of an open_scan experiment from its stored "
                           "rows. Labels are matched exactly: a label with no rows is reported and skipped, never "
                           "counted.")
    p.add_argument("--models", help="comma-separated labels (default: every label of the newest invocation)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    args = p.parse_args(argv)
    _, rows, series, items, labels, samples = _experiment_view(args)
    wanted = [m for m in args.models.split(",")] if args.models else labels
    stored = set(rows.filter(pc.equal(rows.column("series"), series)).column("label").to_pylist()) if rows.num_rows else set()
    for label in wanted:
        if label not in stored:
            print(f"no rows for label {label} — skipped", file=sys.stderr)
    present = [label for label in wanted if label in stored]
    summaries = build_matrix(rows, items, present, series, samples).summaries
    print(json.dumps(summaries, indent=2, default=str) if args.json else summary_text(summaries, series))
    return 0


def export_lines(inv: dict, rows: pa.Table, by_invocation: bool) -> bytes:
    """The JSONL bytes of an invocation's triples (stored order) or of an experiment's newest series
    (current probe versions, by label, probe and sample)."""
    from instruments.open_scan.jsonl import Record, format_records
    from instruments.open_scan.numbers import triples

    if by_invocation:
        chosen = triples(rows.filter(pc.equal(rows.column("invocation_id"), str(inv["invocation_id"]))))
    else:
        series, items, labels, _ = current_view(inv, rows, None)
        current = set(items)
        chosen = [t for t in triples(rows.filter(pc.equal(rows.column("series"), series)))
                  if (t["query_id"], t["query_hash"]) in current]
        chosen.sort(key=lambda t: (t["run_label"], t["query_id"], t["sample"]))
    from instruments.open_scan.jsonl import KEYS

    return format_records([Record(**{k: t[k] for k in KEYS}) for t in chosen])


def import_rows(records, experiment: str, invocation_id: str, series: str) -> pa.Table:
    """Trace rows (answer, cold, post-hoc) of imported records, in file order; ratings stored as given."""
    from grid.instrument import resolve
    from grid.trace_schema import to_trace_table, trace_schema

    rows, cold_seen = [], {}
    for n, r in enumerate(records, 1):
        item_key = f"{r.query_id}@{r.query_hash[:8]}"
        base = {"invocation_id": invocation_id, "experiment": experiment, "instrument": INSTRUMENT,
                "envelope_version": IMPORTED_SERIES, "label": r.run_label, "model": r.model, "model_canonical": r.model,
                "backend": "imported", "ordering": "-", "seed": r.seed, "attempt": 1, "created_at": r.created_at,
                "query_id": r.query_id, "query_hash": r.query_hash, "locale": r.locale, "series": series}
        rows.append({**base, "probe_id": f"{r.run_label}|{item_key}|answer|-", "item_key": item_key,
                     "envelope": "answer", "sample": r.sample, "response": r.answer,
                     "error": None if r.answer is not None else "imported: no answer"})
        cold_key = (r.run_label, r.query_id, r.query_hash)
        if cold_key in cold_seen:
            first, text, rating = cold_seen[cold_key]
            if (text, rating) != (r.cold_raw, r.cold_rating):
                raise ConfigError("", f"line {n}: cold_raw", f"differs from line {first} for the same run_label and "
                                  "query (a cold self-report is one per model and query)", "make them equal")
        elif r.cold_raw is not None or r.cold_rating is not None:
            cold_seen[cold_key] = (n, r.cold_raw, r.cold_rating)
            rows.append({**base, "probe_id": f"{r.run_label}|{item_key}|cold|-", "item_key": item_key,
                         "envelope": "cold", "sample": 0, "response": r.cold_raw, "rating": r.cold_rating})
        if r.posthoc_raw is not None or r.posthoc_rating is not None:
            rows.append({**base, "probe_id": f"{r.run_label}|{item_key}~posthoc|posthoc|-",
                         "item_key": f"{item_key}~posthoc", "envelope": "posthoc", "sample": r.sample,
                         "response": r.posthoc_raw, "rating": r.posthoc_rating})
    return to_trace_table(rows, trace_schema(resolve(INSTRUMENT).columns))


@reports_user_errors
def open_scan_main(argv: list[str] | None = None, prog: str = "mirrorscan open_scan") -> int:
    """``mirrorscan open_scan import|export|matrix|remeasure``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "matrix":
        return matrix_main(argv[1:], f"{prog} matrix")
    if argv and argv[0] == "remeasure":
        return remeasure_main(argv[1:], f"{prog} remeasure")
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="write the method's JSONL from stored columns")
    exp.add_argument("target", help="experiment (newest series, current probe versions) or invocation id")
    exp.add_argument("-o", "--output", required=True, help="the .jsonl file to write")
    imp = sub.add_parser("import", help="store a JSONL run as a new invocation (reconstructed_from set)")
    imp.add_argument("file", help="the .jsonl file")
    imp.add_argument("--experiment", required=True, help="experiment name to import into")
    imp.add_argument("--store", help="trace store URI (default: $MIRRORSCAN_HOME/store)")
    for q in (exp, imp):
        q.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    exp.add_argument("--store", help="trace store URI (default: the invocation's)")
    args = p.parse_args(argv)
    if args.command == "export":
        from cluster.catalog import UUID_PATTERN

        inv = _target(args.target, args.catalog_dsn)
        data = export_lines(inv, experiment_rows(inv, args.store), bool(UUID_PATTERN.match(args.target.strip().lower())))
        Path(args.output).write_bytes(data)
        lines = data.count(b"\n")
        print(f"wrote {lines} line(s) to {args.output}")
        return 0
    return _import(args)


def _import(args) -> int:
    from cluster.home import default_store_uri
    from cluster.provenance import provenance
    from cluster.store import open_store
    from grid.ids import check_component
    from grid.settings import FORMAT, settings_hash
    from instruments.open_scan.jsonl import read_records

    path = Path(args.file)
    if not path.is_file():
        raise ConfigError(args.file, "FILE", "does not exist", "give the .jsonl file to import")
    data = path.read_bytes()
    records = read_records(data, str(path))
    if not records:
        raise ConfigError(args.file, "FILE", "holds no line", "give a file with one JSON object per line")
    experiment = check_component(args.experiment, "", "--experiment")
    sha = hashlib.sha256(data).hexdigest()
    series, invocation_id = f"{IMPORTED_SERIES}:{sha[:12]}", str(uuid.uuid4())
    table = import_rows(records, experiment, invocation_id, series)
    store_uri = args.store or default_store_uri()
    trace_store = open_store(store_uri)
    trace_store.check_writable()
    labels = sorted({r.run_label for r in records})
    settings = {"format": FORMAT, "experiment": experiment, "instrument": INSTRUMENT, "samples": 1 + max(r.sample for r in records),
                "models": [{"label": label, "model": next(r.model for r in records if r.run_label == label)} for label in labels],
                "instrument_settings": {"series": series, "imported": {"file": str(path.resolve()), "sha256": sha,
                                                                        "lines": len(records)}},
                "execution": {"store": store_uri}}
    with _catalog(args.catalog_dsn) as catalog:
        catalog.create_invocation({
            "invocation_id": invocation_id, "experiment": experiment, "instrument": INSTRUMENT, "settings": settings,
            "settings_hash": settings_hash(settings), **provenance(), "content_hashes": {"jsonl": sha},
            "store_uri": store_uri, "status": "running", "counts": {"cells": table.num_rows},
            "reconstructed_from": f"jsonl {path.resolve()} sha256:{sha}"})
        trace_store.write_part(table, experiment, invocation_id, "import")
        ok = pc.sum(pc.is_null(table.column("error")).cast(pa.int64())).as_py()
        catalog.update_progress(invocation_id, "complete", {"cells": table.num_rows, "ok": ok, "rows": table.num_rows},
                                finished=True)
    print(f"imported {len(records)} line(s) ({table.num_rows} rows) as invocation {invocation_id} of experiment "
          f"{experiment} (series {series})")
    return 0


def main(argv: list[str] | None = None, prog: str = "mirrorscan open_scan") -> int:
    """Entry point of ``mirrorscan open_scan matrix|remeasure|import|export`` (``mirrorscan matrix`` and
    ``mirrorscan remeasure`` arrive here as the first two)."""
    return open_scan_main(argv, prog)
