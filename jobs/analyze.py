"""``mirrorscan analyze <experiment or invocation>``: an invocation's numbers, as its instrument defines them.

Reads the invocation's frozen settings from the catalog and its traces from the store, asks the
invocation's instrument for its analysis (``Instrument.analyze``: numbers, tables, charts and text, no
I/O), prints the text and writes the outputs to
``<store>/<experiment>/<invocation>/analysis/<instrument>/<stamp>/`` (summary.json, one Parquet file per
table, one PNG per chart), never overwriting an earlier analysis. ``--reannotate`` (or ``--reclassify``) asks the instrument to
derive again, from the stored text, what its in-actor step wrote at scan time (forced_choice: the
classes); stored rows are never touched.

The statistics over long-format files moved to ``mirrorscan stats``; ``mirrorscan analyze gstudy|kendall|
auroc|null …`` still runs them, with a deprecation notice, for one release.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.formatting import printable
from mirrorscan.grid.instrument import Analysis
from mirrorscan.grid.spec import RESERVED_NAMES
from mirrorscan.jobs.errors import reports_user_errors

STATS_COMMANDS = ("gstudy", "kendall", "auroc", "null")
"""The statistics verbs that ``analyze`` still forwards to ``mirrorscan stats``."""


@dataclass
class AnalysisReport:
    """What one analysis found and where it wrote it."""

    invocation_id: str
    experiment: str
    instrument: str
    analysis: Analysis
    outputs: list = field(default_factory=list)


def load_invocation(target: str, *, store: str | None = None, catalog_dsn: str | None = None):
    """(catalog row, frozen settings (``grid.settings.Settings``), traces, store) of ``target`` (an invocation id
    or an experiment → its newest invocation); ConfigError when it has no traces in the store."""
    from mirrorscan.results.invocations import load

    inv = load(target, store=store, dsn=catalog_dsn)
    return inv.row, inv.settings, inv.traces, inv.store


def analyze_invocation(target: str, *, store: str | None = None, catalog_dsn: str | None = None,
                       reannotate: bool = False, write: bool = True, waiting=None) -> AnalysisReport:
    """Compute (and with ``write`` store) the instrument's analysis of an invocation; see the module docstring.
    ``waiting(line)`` is called once the invocation is found, before the computation (seconds for lens's nulls
    and bootstraps, with nothing else to show)."""
    from mirrorscan.results.analyses import analyze, write_analysis
    from mirrorscan.results.invocations import load

    inv = load(target, store=store, dsn=catalog_dsn)
    if waiting is not None:
        waiting(f"analysing {inv.invocation_id} ({inv.instrument.name}, experiment {inv.experiment})")
    analysis = with_design_plans(analyze(inv, reannotate=reannotate), inv.invocation_id, catalog_dsn)
    report = AnalysisReport(inv.invocation_id, inv.experiment, inv.instrument.name, analysis)
    if write:
        report.outputs = write_analysis(inv, analysis, reannotate=reannotate)
    return report


def with_design_plans(analysis, invocation_id: str, catalog_dsn: str | None):
    """The analysis with, where its headline numbers carry intervals, the cheapest design reaching Eρ² 0.8 under
    each one's G-study (``analysis.headline_intervals.headline_plans``), costed by the engine seconds per row this
    invocation's inference log measured (rows where it has none): in the text after the intervals, and in
    ``numbers["intervals"]["plans"]``."""
    import dataclasses

    from mirrorscan.analysis.headline_intervals import format_plans, headline_plans

    result = analysis.numbers.get("intervals") if isinstance(analysis.numbers, dict) else None
    if not result or not result.get("headlines"):
        return analysis
    try:
        from mirrorscan.jobs.stats_intervals import costs_from

        measured = costs_from(invocation_id, catalog_dsn)["labels"]
        cost_per_row = {label: v["engine_seconds_per_cell"] for label, v in measured.items()}
    except ConfigError:
        cost_per_row = None                       # nothing logged (an imported or older invocation): rows
    plans = headline_plans(result, cost_per_row)
    text = format_plans(plans, {k: h.get("title", k) for k, h in result["headlines"].items()})
    if not text:
        return analysis
    result["plans"] = plans
    return dataclasses.replace(analysis, text=f"{analysis.text}\n{text}")


def format_report(report: AnalysisReport) -> str:
    """The instrument's text, the files written, and the notes a reader must see."""
    lines = [report.analysis.text]
    if report.outputs:
        lines.append(f"outputs: {report.outputs[0].rsplit('/', 1)[0]}/ "
                     f"({', '.join(p.rsplit('/', 1)[1] for p in report.outputs)})")
    lines += list(report.analysis.notes)
    return "\n".join(lines)


def build_parser(prog: str = "mirrorscan analyze") -> argparse.ArgumentParser:
    """The analyze command's parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="experiment folder or name (its newest invocation), or an invocation id")
    p.add_argument("--reannotate", "--reclassify", dest="reannotate", action="store_true",
                   help="derive again from the stored text what the instrument wrote at scan time "
                        "(forced_choice: the classes, under the current classifier); stored rows are not touched")
    p.add_argument("--store", help="trace store URI (default: the one recorded for the invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--no-write", action="store_true", help="print only; write no analysis files")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON instead of the table")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan analyze") -> int:
    """CLI entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in STATS_COMMANDS:
        from mirrorscan.jobs import stats

        print(f"note: `mirrorscan analyze {argv[0]}` is now `mirrorscan stats {argv[0]}`; this spelling goes in "
              "the next release", file=sys.stderr)
        return stats.main(argv, prog="mirrorscan stats")
    if argv and argv[0] in RESERVED_NAMES:
        print(f"error: analyze {argv[0]}: the name is reserved and not implemented yet — fix: use "
              f"`mirrorscan stats` ({', '.join(STATS_COMMANDS)}) or `mirrorscan compare`", file=sys.stderr)
        return 2
    from mirrorscan.cluster.scan.progress import bar_wanted

    args = build_parser(prog).parse_args(argv)
    waiting = (lambda line: print(line, file=sys.stderr, flush=True)) if bar_wanted(None) else None   # a terminal
    report = analyze_invocation(args.target, store=args.store, catalog_dsn=args.catalog_dsn,
                                reannotate=args.reannotate, write=not args.no_write, waiting=waiting)
    if args.json:
        view = report.analysis.json_view if report.analysis.json_view is not None else report.analysis.numbers
        print(printable(json.dumps(view, indent=2, ensure_ascii=False), "\n", json_text=True))
    else:
        print(printable(format_report(report), "\n"))   # a description or an answer may hold an ESC
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.analyze"))
