"""``mirrorscan analyze <experiment or invocation>``: an invocation's numbers, as its instrument defines them.

Reads the invocation's frozen settings from the catalog and its traces from the store
(``results.analyses.analyze_invocation``), asks the invocation's instrument for its analysis (``Instrument.analyze``: numbers, tables, charts and text, no
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

from mirrorscan.grid.formatting import printable
from mirrorscan.grid.spec import RESERVED_NAMES
from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.results.analyses import AnalysisReport, analyze_invocation

STATS_COMMANDS = ("gstudy", "kendall", "auroc", "null")
"""The statistics verbs that ``analyze`` still forwards to ``mirrorscan stats``."""


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
