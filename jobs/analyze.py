"""``mirrorscan analyze <experiment or invocation>``: the forced-choice numbers of one invocation.

Reads the invocation's traces (one row per cell: its successful row, else its last error), uses the
classes written at scan time — or, with ``--reclassify``, classifies the stored text again under the
current classifier without touching the stored rows — and computes per model label: per-cell commit
rate, pair-commit under both rules, sharpness, position bias, the fingerprint and its 3-cycles.
Outputs go to ``<store>/<experiment>/<invocation>/analysis/forced_choice/<stamp>/`` (summary.json,
pairs.parquet, PNG charts), never overwriting earlier analyses, and a table is printed.

Subcommands (statistics over a long-format CSV/Parquet file; ``mirrorscan analyze NAME --help``):
  gstudy    variance components, Eρ² and Φ, D-study, asymptotes, sizes needed for a target
  kendall   Kendall's W with tie correction, χ² and permutation p-values
  auroc     AUROC by mid-ranks per layer (and per model), positive class explicit
  null      label-permutation null of the max-over-layers AUROC statistic (optionally on Ray)
These names (and a few more reserved for later) are refused as experiment names.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from grid.errors import ConfigError
from jobs.errors import reports_user_errors
from grid.spec import RESERVED_NAMES

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PLUMBING_NOTE = ("note: the demo model (SmolLM2-135M-Instruct) is a plumbing model: it mostly answers "
                 "UNCLEAR, so these numbers test the pipeline, not a preference.")


@dataclass
class AnalysisReport:
    """What one analysis found and where it wrote it."""

    invocation_id: str
    experiment: str
    description: str
    classifier_version: str
    reclassified: bool
    summaries: tuple
    outputs: list = field(default_factory=list)
    demo_model: bool = False


def resolve_invocation(target: str, catalog) -> dict:
    """The catalog row of ``target``: an invocation id, or an experiment (folder or name) → its newest invocation."""
    if _UUID.match(target.strip().lower()):
        inv = catalog.get_invocation(target.strip().lower())
        if inv is None:
            raise ConfigError("", "invocation", f"no invocation {target} in the catalog",
                              "check the id with: mirrorscan sql \"SELECT invocation_id, experiment FROM scan_invocations\"")
        return inv
    name = Path(target).resolve().name if os.path.isdir(target) else Path(target).name
    inv = catalog.newest(name)
    if inv is None:
        raise ConfigError("", "experiment", f"experiment {name!r} has no invocation in the catalog",
                          f"run: mirrorscan scan experiments/{name}/")
    return inv


def expected_cells(settings: dict):
    """The cells every pair should have under the invocation's frozen settings."""
    from analysis.forced_choice import ExpectedCells
    from grid.probesets import load_pairs

    pair_ids = None
    try:
        pairs = load_pairs(settings["probe_set"])
        if pairs.sha256 == settings.get("probe_set_sha256"):
            pair_ids = tuple(pairs.table.column("pair_id").to_pylist())
    except ConfigError:
        pass   # probe set moved or changed: fall back to the pairs seen in the traces
    return ExpectedCells(envelopes=tuple(settings["envelopes"]), orderings=tuple(settings["orderings"]),
                         samples=tuple(range(settings["samples"])), pair_ids=pair_ids)


def classified_cells(traces: pa.Table, settings: dict, reclassify: bool) -> tuple[pa.Table, bool]:
    """One row per cell with classes: the stored ones, or fresh ones when asked or when any is missing."""
    from analysis.classify import with_classes
    from analysis.forced_choice import latest_rows
    from grid.envelopes import envelopes_from_settings

    cells = latest_rows(traces)
    answered = pc.is_null(cells.column("error"))
    missing = pc.sum(pc.and_(answered, pc.is_null(cells.column("class"))).cast(pa.int64())).as_py() or 0
    if reclassify or missing:
        return with_classes(cells, envelopes_from_settings(settings["envelope_set"]["texts"])), True
    return cells, False


def pair_rows(summaries) -> pa.Table:
    """Per model and pair: verdicts under both rules, sharpness and the symmetric pick rate."""
    rows = []
    for s in summaries:
        majority = {p.pair_id: p for p in s.pair_commit_per_envelope_majority.pairs}
        sharp = {p.pair_id: p for p in s.sharpness.pairs}
        sym = {p.scope: p for p in s.position_bias.per_pair}
        for p in s.pair_commit_unanimity.pairs:
            rows.append({"label": s.label, "invocation_id": s.invocation_id, "pair_id": p.pair_id,
                         "word_a": p.word_a, "word_b": p.word_b, "unanimity": p.verdict,
                         "per_envelope_majority": majority[p.pair_id].verdict if p.pair_id in majority else None,
                         "n_a": sharp[p.pair_id].n_a if p.pair_id in sharp else None,
                         "n_b": sharp[p.pair_id].n_b if p.pair_id in sharp else None,
                         "sharpness": sharp[p.pair_id].sharpness if p.pair_id in sharp else None,
                         "symmetric_pick_rate_a": sym[p.pair_id].symmetric_pick_rate_a if p.pair_id in sym else None})
    return pa.Table.from_pylist(rows)


def analyze_invocation(target: str, *, store: str | None = None, catalog_dsn: str | None = None,
                       reclassify: bool = False, write: bool = True) -> AnalysisReport:
    """Compute (and with ``write`` store) the forced-choice numbers of an invocation; see the module docstring."""
    from analysis import charts
    from analysis.classify import CLASSIFIER_VERSION
    from analysis.forced_choice import summarize
    from cluster.catalog import Catalog, resolve_dsn
    from cluster.models import DEMO_MODEL_ALIAS
    from cluster.store import open_store

    with Catalog(resolve_dsn(catalog_dsn or os.environ.get("MIRRORSCAN_CATALOG_DSN"))) as catalog:
        inv = resolve_invocation(target, catalog)
    settings, inv_id, experiment = inv["settings"], str(inv["invocation_id"]), inv["experiment"]
    trace_store = open_store(store or inv["store_uri"])
    traces = trace_store.read(experiment, inv_id)
    if traces.num_rows == 0:
        raise ConfigError("", "invocation", f"invocation {inv_id} has no traces in {trace_store.uri}",
                          "point --store at the store the scan wrote to, or finish it with scan --resume")
    cells, reclassified = classified_cells(traces, settings, reclassify)
    summaries = summarize(cells, expected_cells(settings))
    report = AnalysisReport(inv_id, experiment, settings.get("description", ""), CLASSIFIER_VERSION, reclassified,
                            summaries, demo_model=any(m["model"] == DEMO_MODEL_ALIAS for m in settings["models"]))
    if write:
        stamp = f"forced_choice/{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"   # unique per analysis
        summary = {"invocation_id": inv_id, "experiment": experiment, "classifier_version": CLASSIFIER_VERSION,
                   "reclassified": reclassified, "settings_hash": inv["settings_hash"],
                   "models": [s.to_dict() for s in summaries]}
        buf = io.BytesIO()
        pq.write_table(pair_rows(summaries), buf)
        outputs = {"summary.json": json.dumps(summary, indent=2, ensure_ascii=False).encode(), "pairs.parquet": buf.getvalue(),
                   "pair_commit_split.png": charts.pair_commit_split(summaries),
                   "position_bias_by_envelope.png": charts.position_bias_by_envelope(summaries),
                   "fingerprint_agreement.png": charts.fingerprint_agreement(summaries)}
        report.outputs = [trace_store.write_analysis(experiment, inv_id, f"{stamp}/{name}", data)
                          for name, data in outputs.items()]
    return report


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def format_report(report: AnalysisReport) -> str:
    """The readable terminal table of a report."""
    lines = [f"invocation {report.invocation_id}  experiment {report.experiment}  classifier {report.classifier_version}"
             + ("  (re-classified now)" if report.reclassified else "")]
    if report.description:
        lines.append(report.description)
    header = f"{'model':<26} {'cells':>6} {'err':>4} {'commit/cell':>11}  {'pair-commit unanimity a/b/unclear (incompl.)':<44} " \
             f"{'per-env. majority a/b/unclear':<30} {'sharpness (pairs)':<18} {'pos. bias':>9} {'cycles':>6}"
    lines += [header, "-" * len(header)]
    for s in report.summaries:
        u, m = s.pair_commit_unanimity, s.pair_commit_per_envelope_majority
        bias = s.position_bias.overall.position_bias_pp
        sharp = "—" if s.sharpness.mean_sharpness is None else f"{s.sharpness.mean_sharpness:.3f}"
        lines.append(f"{s.label:<26} {s.commit_rate.n_answered:>6} {s.commit_rate.n_errors:>4} "
                     f"{_pct(s.commit_rate.per_cell_commit_rate):>11}  {u.split + f'  ({u.n_incomplete})':<44} "
                     f"{m.split:<30} {sharp + f' ({s.sharpness.n_pairs_with_picks})':<18} "
                     f"{'—' if bias is None else f'{bias:+.1f} pp':>9} {len(s.cycles):>6}")
        for c in s.cycles:
            lines.append(f"    3-cycle: {c.to_dict()}")
    if report.outputs:
        lines.append(f"outputs: {report.outputs[0].rsplit('/', 1)[0]}/ ({', '.join(p.rsplit('/', 1)[1] for p in report.outputs)})")
    if report.demo_model:
        lines.append(PLUMBING_NOTE)
    return "\n".join(lines)


def build_parser(prog: str = "mirrorscan analyze") -> argparse.ArgumentParser:
    """The analyze command's parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="experiment folder or name (its newest invocation), or an invocation id")
    p.add_argument("--reclassify", action="store_true",
                   help="classify the stored text again under the current classifier (stored rows are not touched)")
    p.add_argument("--store", help="trace store URI (default: the one recorded for the invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--no-write", action="store_true", help="print only; write no analysis files")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan analyze") -> int:
    """CLI entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("gstudy", "kendall", "auroc", "null"):
        from jobs import stats

        return stats.main(argv, prog=prog)
    if argv and argv[0] in RESERVED_NAMES:
        print(f"error: analyze {argv[0]}: the name is reserved and not implemented yet — fix: use one of "
              "gstudy, kendall, auroc, null (or `mirrorscan compare`)", file=sys.stderr)
        return 2
    args = build_parser(prog).parse_args(argv)
    report = analyze_invocation(args.target, store=args.store, catalog_dsn=args.catalog_dsn,
                                reclassify=args.reclassify, write=not args.no_write)
    if args.json:
        print(json.dumps([s.to_dict() for s in report.summaries], indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m jobs.analyze"))
