"""``mirrorscan reproduce <invocation>``: rerun an invocation's exact grid as a new invocation, then diff the two.

The spec is rebuilt from the invocation's frozen settings (either settings format): models and their
sources, backends, endpoints and overrides, the instrument's frozen section (envelopes or framings, items,
orderings), sampling, seeds and batch size. Items come from the item files when their hashes match what was
frozen, else from the coordinates stored in the traces. Every difference that cannot be restored is printed
as a warning first: result-shaping settings that come out differently today, a changed item set, model
sources that resolve elsewhere, weights whose recorded identity differs (or was never recorded: "unknown"),
package versions, a different or dirty git tree.

The grid then runs in full as a new invocation of the same experiment, in the original's store and catalog,
with ``reproduces`` = the original's id recorded (a reproduction never holds cells for an appending
instrument such as open_scan, and none count as held for it). It ends with ``mirrorscan diff`` of the two.

A reproduction that was interrupted (Ctrl-C, SIGTERM, a crash) is finished by the same command with
``--resume``: the spec and cells are rebuilt from the original again, and only the cells the reproduction
has not stored run, later stages included, in the same invocation. ``<invocation>`` may name the original
(its newest unfinished reproduction is finished) or the unfinished reproduction itself.

Exit codes: as ``scan`` (0 every cell has a successful row; 1 some errored or are missing; 2 bad input;
130 interrupted); with ``--expect-exact``, 1 also when the diff is not an exact match.
"""

from __future__ import annotations

import argparse
import json
import sys

from mirrorscan.jobs.errors import reports_user_errors


def build_parser(prog: str = "mirrorscan reproduce") -> argparse.ArgumentParser:
    """The reproduce command's parser."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("invocation", help="invocation id (or its unique start, 6+ hex digits), or an experiment → its newest")
    p.add_argument("--dry-run", action="store_true", help="rebuild the spec and print it with its warnings; run nothing")
    p.add_argument("--resume", action="store_true", help="finish an unfinished reproduction of the invocation (or the "
                                                         "unfinished reproduction named) instead of starting one")
    p.add_argument("--store", help="trace store URI (default: the one the invocation recorded; the reproduction "
                                   "is written there too)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--ray-address", help="join this Ray cluster (default: $RAY_ADDRESS, else start Ray locally)")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N", help="attempts per cell (default 3)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the progress bar on stderr, or not (default: only when stderr is a terminal and $CI "
                        "is unset)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no notes")
    p.add_argument("--expect-exact", action="store_true", help="exit 1 unless every cell gives the same answer")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan reproduce") -> int:
    """CLI entry point; returns the exit code."""
    from mirrorscan.cluster.catalog.client import resolve_dsn
    from mirrorscan.cluster.scan.progress import bar_wanted
    from mirrorscan.cluster.scan.records import ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun, stop_like_ctrl_c_on_sigterm
    from mirrorscan.jobs.scan import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, print_summary
    from mirrorscan.results.diff import diff_targets, format_diff
    from mirrorscan.results.reproduce import describe, plan

    args = build_parser(prog).parse_args(argv)
    dsn = resolve_dsn(args.catalog_dsn)
    rebuilt = plan(args.invocation, store=args.store, dsn=dsn, resume=args.resume)
    run = ScanRun(rebuilt.spec, ScanOptions(max_attempts=args.max_attempts, catalog_dsn=dsn,
                                            ray_address=args.ray_address, quiet=args.quiet,
                                            progress=bar_wanted(args.progress), reproduction=rebuilt.reproduction()))
    # the cells each stage runs and the sampling they carry, as the run itself plans them (the full grid)
    print(describe(rebuilt, run.plan(count_tokens=False)), file=sys.stderr if not args.dry_run else sys.stdout)
    if args.dry_run:
        return EXIT_OK
    stop_like_ctrl_c_on_sigterm()   # as scan: a job stopped by its scheduler ends `interrupted`, resumable
    try:
        result = run.execute()
    except KeyboardInterrupt:
        print(f"interrupted: finished parts are kept; run mirrorscan reproduce {rebuilt.original.invocation_id} "
              f"--resume to finish it", file=sys.stderr)
        return EXIT_INTERRUPTED
    print_summary(result, out=sys.stderr if args.json else sys.stdout)
    d = diff_targets(rebuilt.original.invocation_id, result.invocation_id, store=args.store, dsn=dsn)
    print(json.dumps(d.to_dict(), indent=2, ensure_ascii=False) if args.json else format_diff(d))
    if result.status != "complete":
        return EXIT_INCOMPLETE
    return EXIT_INCOMPLETE if args.expect_exact and not d.exact else EXIT_OK


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.reproduce"))
