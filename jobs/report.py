"""``mirrorscan report <invocation or experiment>``: one self-contained HTML file per invocation
(``results.report_writer.report_invocations`` writes them; this module parses and prints).

The page holds the invocation's settings and provenance (catalog row and invocation.json; secrets and
DSN passwords never appear), its counts and errors, its instrument's headline numbers with their
definitions, its charts (embedded), the analysis text, a few stored rows verbatim, and beside every
number how to get it again: the ``mirrorscan sql`` query that computes it, or for a statistic the query
that selects its input and the ``mirrorscan stats …`` command with its seed.

The numbers are computed by the instrument's analysis, as ``mirrorscan analyze`` computes them, and that
analysis is written too (``<store>/<experiment>/<invocation>/analysis/<instrument>/<stamp>/``) — unless the
newest analysis of the same code and inputs is already there (its fingerprint in summary.json:
``results.analyses``), which is then read back instead of computed again, with one line saying so; the page
goes to ``<store>/<experiment>/<invocation>/report/<stamp>.html``, a new file every time (an earlier
report is never overwritten), and its path is printed.

A target that is an experiment (folder or name) means its newest invocation, as for ``analyze``;
``--all`` writes one report for each of its invocations, oldest first. The page needs nothing else to be
read: no script, no font, no link outside the file; every text from the traces or settings is escaped.
"""

from __future__ import annotations

import argparse
import sys

from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.results.report_writer import report_invocations


def build_parser(prog: str = "mirrorscan report") -> argparse.ArgumentParser:
    """The report command's parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="an invocation id (or its unique start), or an experiment folder or name "
                                  "(its newest invocation; --all: every one)")
    p.add_argument("--all", dest="every", action="store_true",
                   help="with an experiment: one report per invocation of it, oldest first")
    p.add_argument("--reannotate", action="store_true",
                   help="derive again from the stored text what the instrument wrote at scan time (as analyze "
                        "--reannotate); the report then says which queries read the stored values")
    p.add_argument("--store", help="trace store URI (default: the one recorded for the invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan report") -> int:
    """CLI entry point: prints the path of each report written; returns the exit code. On a terminal (as the
    progress bar: ``cluster.scan.progress.bar_wanted``) it also says when it computes an analysis before the wait."""
    from mirrorscan.cluster.scan.progress import bar_wanted

    args = build_parser(prog).parse_args(argv)

    def progress(i: int, n: int, invocation_id: str) -> None:
        if n > 1:
            print(f"[{i + 1}/{n}] {invocation_id}", file=sys.stderr, flush=True)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    for path in report_invocations(args.target, store=args.store, catalog_dsn=args.catalog_dsn, every=args.every,
                                   reannotate=args.reannotate, progress=progress, say=say,
                                   waiting=say if bar_wanted(None) else None):
        print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.report"))
