"""``mirrorscan matrix | remeasure | open_scan import | open_scan export``: an open_scan experiment as a whole.

An entry point, like ``jobs/``: it reads the catalog and the store through the ``grid.reader.Reader`` the command
line hands it (the instrument imports neither); the numbers come from ``numbers`` and ``matrix``.

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
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.errors import ConfigError, reports_user_errors
from mirrorscan.grid.formatting import printable, with_article
from mirrorscan.grid.reader import Reader
from mirrorscan.instruments.open_scan.spec import IMPORTED_PREFIX, spec_from_frozen

INSTRUMENT = "open_scan"


def _target(reader: Reader, target: str, dsn: str | None) -> dict:
    inv = reader.invocation(target, dsn)
    if inv["instrument"] != INSTRUMENT:
        raise ConfigError("", "experiment", f"{target!r} is {with_article(inv['instrument'])} invocation",
                          "give an open_scan experiment or invocation")
    return inv


def experiment_rows(reader: Reader, inv: dict, store: str | None) -> pa.Table:
    """Every stored row of ``inv``'s experiment (all invocations), with open_scan's columns."""
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema

    trace_store = reader.store(store or inv["store_uri"])
    return trace_store.dataset(inv["experiment"], schema=trace_schema(resolve(INSTRUMENT).columns)).to_table()


def invocations_of(catalog, experiment: str) -> list[dict]:
    """The experiment's open_scan invocations, oldest first, each with ``kind``: ``scan``, ``import`` (a file's
    rows, its own series) or ``reproduction`` (reruns another's grid; never the current probe set), and its
    ``settings`` (``grid.settings.Settings``) and ``spec`` (its section, ``spec.OpenScanSpec``)."""
    from mirrorscan.grid.settings import Settings

    out = []
    for inv_id, started, settings, reproduces, instrument in catalog.execute(
            "SELECT invocation_id::text, started_at, settings, reproduces::text, instrument FROM scan_invocations "
            "WHERE experiment = %s ORDER BY started_at, invocation_id", [experiment]):
        if instrument != INSTRUMENT:
            continue
        settings = Settings.from_json(settings)
        spec = spec_from_frozen(settings.instrument_settings)
        kind = ("import" if spec.is_import else "reproduction" if reproduces or settings.execution.reproduces
                else "scan")
        out.append({"invocation_id": inv_id, "started_at": started, "settings": settings, "spec": spec, "kind": kind})
    return out


@dataclass(frozen=True)
class View:
    """What ``matrix``, ``remeasure`` and ``export`` show of an experiment."""

    series: str
    """The main series: the newest scan's (or the one asked for; an import's where nothing was scanned)."""
    items: list[tuple[str, str]]
    """The current (query_id, query_hash) pairs in file order: the newest scan's probe set."""
    groups: list
    """The matrix's rows (``matrix.Row``): the main series' labels, then each imported file's."""
    samples: dict[str, int]
    """Series → the samples a complete cell holds."""
    history: tuple = ({}, {})
    """``history.probe_history`` of the scans (versions and sequence per query_id)."""


def current_view(invocations: list[dict], rows: pa.Table, series: str | None) -> View:
    """The view of an experiment from its ``invocations`` (``invocations_of``) and stored ``rows``: the newest
    scan's series and probe set, its labels, and every imported file's rows side by side (``series`` names one
    series alone)."""
    from mirrorscan.instruments.open_scan.history import Use, probe_history
    from mirrorscan.instruments.open_scan.matrix import Row

    scans = [i for i in invocations if i["kind"] == "scan" and i["spec"].probe_set is not None]
    history = probe_history([Use(i["invocation_id"], i["started_at"], i["spec"].probe_set.items)
                             for i in scans if i["spec"].probe_set.items])
    imports: dict[str, dict] = {}
    for i in invocations:
        if i["kind"] == "import":
            imports[i["spec"].series] = i
    stored = set(rows.column("series").drop_null().to_pylist()) if rows.num_rows else set()

    def labels_in(chosen: str) -> list[str]:
        mine = rows.filter(pc.equal(rows.column("series"), chosen))
        return sorted(set(mine.column("label").to_pylist()))

    def imported_source(chosen: str) -> str:
        info = imports[chosen]["spec"].imported
        return f"imported {Path((info.file if info is not None else None) or '?').name}"

    samples = {i["spec"].series: i["settings"].samples for i in invocations if i["kind"] != "reproduction"}
    newest_of = {i["spec"].series: i for i in scans}
    chosen = series or (scans[-1]["spec"].series if scans else next(reversed(imports), None))
    if chosen is None or (chosen not in stored and chosen not in newest_of):
        known = sorted(stored)
        raise ConfigError("", "--series", f"no rows in series {chosen!r}",
                          f"use one of: {', '.join(known)}" if known else "scan or import into the experiment first")
    if scans:
        items = list(scans[-1]["spec"].probe_set.items)
    else:   # only imports: each probe id's newest text among the chosen file's rows
        mine = rows.filter(pc.equal(rows.column("series"), chosen))
        newest: dict[str, tuple] = {}
        for q, h, t in zip(mine.column("query_id").to_pylist(), mine.column("query_hash").to_pylist(),
                           mine.column("created_at").to_pylist()):
            if q not in newest or t > newest[q][1]:
                newest[q] = (h, t)
        items = [(q, newest[q][0]) for q in sorted(newest)]
    if chosen in newest_of:
        groups = [Row(chosen, m.label, "scan") for m in newest_of[chosen]["settings"].models]
    else:
        groups = [Row(chosen, label, imported_source(chosen) if chosen in imports else "scan")
                  for label in labels_in(chosen)]
    if series is None:   # every imported file beside the scan, labelled, never merged into it
        groups += [Row(s, label, imported_source(s)) for s in imports if s != chosen and s in stored
                   for label in labels_in(s)]
    return View(chosen, items, groups, samples, history)


def _experiment_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments ``matrix`` and ``remeasure`` share: the experiment, its series, where to read it."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("experiment", help="experiment folder or name (or an invocation id: its experiment)")
    p.add_argument("--series", help="one series alone (default: the newest scan's, with every imported file beside it)")
    p.add_argument("--store", help="trace store URI (default: the invocation's)")
    p.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    return p


def _experiment_view(reader: Reader, args) -> tuple[dict, pa.Table, View]:
    """(newest invocation, every row of the experiment, its view) for ``args``."""
    inv = _target(reader, args.experiment, args.catalog_dsn)
    with reader.catalog(args.catalog_dsn) as catalog:
        invocations = invocations_of(catalog, inv["experiment"])
    rows = without_reproductions(experiment_rows(reader, inv, args.store), invocations)
    return inv, rows, current_view(invocations, rows, args.series)


def without_reproductions(rows: pa.Table, invocations: list[dict]) -> pa.Table:
    """``rows`` without those of reproductions: a reproduction reruns another invocation's grid to check it
    (``mirrorscan diff`` compares the two); it adds nothing to the experiment's series, as it holds no cells."""
    copies = [i["invocation_id"] for i in invocations if i["kind"] == "reproduction"]
    if not copies or rows.num_rows == 0:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows.column("invocation_id"), pa.array(copies, pa.string()))))


def say(text: str) -> None:
    """Print ``text`` with the control characters of stored values (a probe text, a file name) escaped
    (``grid.formatting.printable``)."""
    print(printable(text, "\n"))


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if hasattr(value, "strftime") else str(value)


@reports_user_errors
def matrix_main(argv: list[str], prog: str, reader: Reader) -> int:
    """``mirrorscan matrix``: models × probes with coverage and per-model summaries."""
    from mirrorscan.instruments.open_scan.history import describe
    from mirrorscan.instruments.open_scan.intervals import intervals_text, rating_intervals
    from mirrorscan.instruments.open_scan.matrix import build_matrix
    from mirrorscan.instruments.open_scan.numbers import summary_text

    p = _experiment_parser(prog, "The model × probe matrix of an open_scan experiment: which cells are answered, "
                           "missing (never shown as an empty answer) or superseded by a changed probe text, and "
                           "per-model answer length and self-report summaries with the rating means' intervals "
                           "over probes. Imported files are rows of their own, labelled, beside the scanned models.")
    p.add_argument("--parquet", metavar="FILE", help="write the long matrix (one row per label, probe, sample) here")
    p.add_argument("--csv", metavar="FILE", help="write the coverage matrix (labels × probes) here as CSV")
    args = p.parse_args(argv)
    inv, rows, view = _experiment_view(reader, args)
    matrix = build_matrix(rows, view.items, view.groups, view.series, view.samples)
    counts = matrix.counts()
    say(f"experiment {inv['experiment']} · series {view.series} · {len(matrix.rows)} models × {len(view.items)} "
          f"probes: {counts['answered']} answered · {counts['missing']} missing · {counts['failed']} failed"
          + (f" · {matrix.superseded} superseded answers kept (other probe texts)" if matrix.superseded else ""))
    versions, sequence = view.history
    for query_id, _ in view.items:
        line = describe(query_id, versions.get(query_id, []), sequence.get(query_id, []), _when)
        if line:
            say(line)
    width = max([len(name) for name in matrix.labels] + [5])
    say(f"{'model':<{width}}  coverage (answered samples per probe; . = missing, x = failed)")
    for name, row in zip(matrix.labels, matrix.coverage.to_pylist()):
        cells = "".join(("." if row[q] == "missing" else "x" if row[q] == "failed" else
                         (row[q] if len(row[q]) == 1 else "+")) for q in matrix.query_ids)
        say(f"{name:<{width}}  {cells}")
    say(summary_text(matrix.summaries, view.series))
    say(intervals_text(rating_intervals(matrix.current)))
    if args.parquet:
        import pyarrow.parquet as pq

        pq.write_table(matrix.cells, args.parquet)
        say(f"wrote {args.parquet}")
    if args.csv:
        import pyarrow.csv as pacsv

        pacsv.write_csv(matrix.coverage, args.csv)
        say(f"wrote {args.csv}")
    return 0


@reports_user_errors
def remeasure_main(argv: list[str], prog: str, reader: Reader) -> int:
    """``mirrorscan remeasure``: per-model summaries recomputed from stored rows, labels matched exactly."""
    from mirrorscan.instruments.open_scan.matrix import Row, build_matrix
    from mirrorscan.instruments.open_scan.numbers import summary_text

    p = _experiment_parser(prog, "Recompute the per-model summaries of an open_scan experiment from its stored "
                           "rows. Labels are matched exactly: a label with no rows is reported and skipped, never "
                           "counted.")
    p.add_argument("--models", help="comma-separated labels (default: every label of the newest invocation)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    args = p.parse_args(argv)
    _, rows, view = _experiment_view(reader, args)
    scanned = [g for g in view.groups if g.series == view.series]
    wanted = [m for m in args.models.split(",")] if args.models else [g.label for g in scanned]
    stored = set(rows.filter(pc.equal(rows.column("series"), view.series)).column("label").to_pylist()) \
        if rows.num_rows else set()
    for label in wanted:
        if label not in stored:
            print(f"no rows for label {label} — skipped", file=sys.stderr)
    present = [Row(view.series, label, "scan") for label in wanted if label in stored]
    summaries = build_matrix(rows, view.items, present, view.series, view.samples).summaries
    say(json.dumps(summaries, indent=2, default=str) if args.json else summary_text(summaries, view.series))
    return 0


def export_lines(inv: dict, rows: pa.Table, by_invocation: bool, view: View | None = None) -> bytes:
    """The JSONL bytes of an invocation's triples (stored order) or of an experiment's newest series
    (current probe versions, by label, probe and sample)."""
    from mirrorscan.instruments.open_scan.jsonl import Record, format_records
    from mirrorscan.instruments.open_scan.numbers import triples

    if by_invocation:
        chosen = triples(rows.filter(pc.equal(rows.column("invocation_id"), str(inv["invocation_id"]))))
    else:
        assert view is not None   # an experiment's export is given its view
        current = set(view.items)
        chosen = [t for t in triples(rows.filter(pc.equal(rows.column("series"), view.series)))
                  if (t["query_id"], t["query_hash"]) in current]
        chosen.sort(key=lambda t: (t["run_label"], t["query_id"], t["sample"]))
    from mirrorscan.instruments.open_scan.jsonl import KEYS

    return format_records([Record(**{k: t[k] for k in KEYS}) for t in chosen])


@reports_user_errors
def open_scan_main(argv: list[str], prog: str, reader: Reader) -> int:
    """``mirrorscan open_scan import|export|matrix|remeasure``."""
    if argv and argv[0] == "matrix":
        return matrix_main(argv[1:], f"{prog} matrix", reader)
    if argv and argv[0] == "remeasure":
        return remeasure_main(argv[1:], f"{prog} remeasure", reader)
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="write the method's JSONL from stored columns")
    exp.add_argument("target", help="experiment (newest series, current probe versions) or invocation id")
    exp.add_argument("-o", "--output", required=True, help="the .jsonl file to write")
    imp = sub.add_parser("import", help="store a JSONL run as a new invocation (reconstructed_from set)")
    imp.add_argument("file", help="the .jsonl file")
    imp.add_argument("--experiment", required=True, help="experiment name to import into")
    imp.add_argument("--store", help="trace store URI (default: $MIRRORSCAN_STORE, else $MIRRORSCAN_HOME/store)")
    for q in (exp, imp):
        q.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    exp.add_argument("--store", help="trace store URI (default: the invocation's)")
    args = p.parse_args(argv)
    if args.command == "export":
        inv = _target(reader, args.target, args.catalog_dsn)
        rows = experiment_rows(reader, inv, args.store)
        by_invocation = reader.is_invocation_id(args.target)
        view = None
        if not by_invocation:
            with reader.catalog(args.catalog_dsn) as catalog:
                invocations = invocations_of(catalog, inv["experiment"])
            rows = without_reproductions(rows, invocations)
            view = current_view(invocations, rows, None)
        data = export_lines(inv, rows, by_invocation, view)
        Path(args.output).write_bytes(data)
        lines = data.count(b"\n")
        say(f"wrote {lines} line(s) to {args.output}")
        return 0
    return _import(reader, args)


def experiment_context(catalog, experiment: str) -> dict:
    """What an import joins to in ``experiment``: its scanned models' labels, its current probe set (query_id →
    query_hash, from its newest scan) and its rating scales (that scan's templates, else the packaged ones)."""
    from mirrorscan.instruments.open_scan.templates import load_templates

    scans = [i for i in invocations_of(catalog, experiment) if i["kind"] == "scan" and i["spec"].probe_set is not None]
    labels = sorted({m.label for i in scans for m in i["settings"].models})
    newest = scans[-1]["spec"] if scans else None
    templates = newest.templates if newest is not None else load_templates("packaged:v1")
    scales = {"cold": (templates.cold.low, templates.cold.high), "posthoc": (templates.posthoc.low, templates.posthoc.high)}
    current = dict(newest.probe_set.items) if newest is not None else {}
    return {"labels": labels, "current": current, "scales": scales}


def _import(reader: Reader, args) -> int:
    from datetime import datetime, timezone

    from mirrorscan.grid.names import check_experiment_name
    from mirrorscan.grid.settings import FORMAT, settings_hash
    from mirrorscan.instruments.open_scan.importing import IMPORTER_VERSION, import_rows, plan_import, read_import

    path = Path(args.file)
    if not path.is_file():
        raise ConfigError(args.file, "FILE", "does not exist", "give the .jsonl file to import")
    data = path.read_bytes()
    lines = read_import(data, str(path))
    if not lines:
        raise ConfigError(args.file, "FILE", "holds no line", "give a file with one JSON object per line")
    experiment = check_experiment_name(args.experiment, "", "--experiment")
    sha = hashlib.sha256(data).hexdigest()
    series, invocation_id = f"{IMPORTED_PREFIX}{sha[:12]}", str(uuid.uuid4())
    store_uri = reader.store_uri(args.store)   # as scan resolves it
    trace_store = reader.store(store_uri)
    trace_store.check_writable()
    with reader.catalog(args.catalog_dsn) as catalog:
        context = experiment_context(catalog, experiment)
        plan = plan_import(lines, str(path), **context)
        for line in plan.dropped + plan.disagreements:
            print(line, file=sys.stderr)
        for query_id, n in sorted(plan.other_versions.items()):
            print(f"{n} line(s) of {query_id} carry another text than the probe set's: stored as that text's own "
                  f"version, never as the current one", file=sys.stderr)
        if not plan.kept:
            raise ConfigError(args.file, "FILE", f"none of its {len(lines)} line(s) joins experiment {experiment!r}",
                              "give the models' labels the experiment uses (see the dropped lines above)")
        table = import_rows(plan, experiment, invocation_id, series, datetime.now(timezone.utc))
        kept = [ln for ln, *_ in plan.kept]
        labels = sorted({ln.label for ln in kept})
        settings = {"format": FORMAT, "experiment": experiment, "instrument": INSTRUMENT,
                    "samples": 1 + max(ln.sample for ln in kept),
                    "models": [{"label": label, "model": next(ln.model for ln in kept if ln.label == label)}
                               for label in labels],
                    "instrument_settings": {"series": series, "imported": {
                        "file": path.name, "path": str(path.resolve()), "sha256": sha, "lines": len(lines),
                        "kept": len(kept), "dropped": len(plan.dropped), "shape": lines[0].shape,
                        "importer_version": IMPORTER_VERSION, "scales": context["scales"],
                        "rating_disagreements": len(plan.disagreements)}},
                    "execution": {"store": store_uri}}
        catalog.create_invocation({
            "invocation_id": invocation_id, "experiment": experiment, "instrument": INSTRUMENT, "settings": settings,
            "settings_hash": settings_hash(settings), **reader.provenance(), "content_hashes": {"jsonl": sha},
            "store_uri": store_uri, "status": "running", "counts": {"cells": table.num_rows},
            "reconstructed_from": f"jsonl {path.resolve()} sha256:{sha} importer {IMPORTER_VERSION}"})
        trace_store.write_part(table, experiment, invocation_id, "import")
        ok = pc.sum(pc.is_null(table.column("error")).cast(pa.int64())).as_py()
        catalog.update_progress(invocation_id, "complete", {"cells": table.num_rows, "ok": ok, "rows": table.num_rows},
                                finished=True)
    say(f"imported {len(kept)} of {len(lines)} line(s) ({table.num_rows} rows) as invocation {invocation_id} of "
          f"experiment {experiment} (series {series}, from {path.name})")
    return 0


def main(argv: list[str], prog: str, reader: Reader) -> int:
    """Entry point of ``mirrorscan open_scan matrix|remeasure|import|export`` (``mirrorscan matrix`` and
    ``mirrorscan remeasure`` arrive here as the first two); ``reader`` reaches the catalog and the store."""
    return open_scan_main(argv, prog, reader)
