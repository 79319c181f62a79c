"""``mirrorscan scan`` / ``python -m mirrorscan.jobs.scan``: run an experiment's grid and store every cell.

The command parses its flags, validates config.json (exit 2 on any problem, nothing written), hands the spec
and its options to the run (``cluster.scan.run.ScanRun``: record the invocation, run each stage's grid minus
the cells already stored through one actor pool per model, record the outcome) and prints its summary;
``--dry-run`` prints the same run's plan instead (``jobs.dry_run``).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from mirrorscan.cluster.runtime.ray_session import quiet_ray_warnings
from mirrorscan.cluster.scan.progress import bar_wanted
from mirrorscan.cluster.scan.records import ScanResult
from mirrorscan.cluster.scan.run import InterruptedBeforeRecording, run_scan, stop_like_ctrl_c_on_sigterm
from mirrorscan.jobs.errors import reports_user_errors

EXIT_OK, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 130

HELP = """\
Run the grid of one experiment (experiments/<name>/config.json) and store every cell.

Rerun semantics:
  scan DIR            a NEW invocation of the full grid; its traces sit beside those of earlier
                      invocations (nothing is overwritten, nothing is skipped).
  scan DIR --resume   finishes the newest unfinished invocation of this experiment, rebuilding the
                      grid from its FROZEN settings. If config.json now differs from them, it exits
                      with code 2 and lists the differing fields. Cells with a successful row are
                      skipped; cells whose rows are all errors are retried until they have had
                      --max-attempts attempts. After a crash (even kill -9) a resume leaves every cell
                      exactly once among the successful rows.

Where things go: traces to <store>/<experiment>/<invocation_id>/traces/*.parquet (store from --store,
config "store", $MIRRORSCAN_STORE, else $MIRRORSCAN_HOME/store); the invocation record to the catalog
(--catalog-dsn, config "catalog_dsn", $MIRRORSCAN_CATALOG_DSN, else an embedded PostgreSQL under
$MIRRORSCAN_HOME started on demand).

Exit codes: 0 every cell has a successful row; 1 some cells errored or are missing; 2 bad input
(config, probe set, envelopes, flags), nothing written; 130 interrupted.
"""


def build_parser(prog: str = "mirrorscan scan") -> argparse.ArgumentParser:
    """The scan command's argument parser (shared by ``mirrorscan scan`` and ``python -m mirrorscan.jobs.scan``)."""
    p = argparse.ArgumentParser(prog=prog, description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", help="experiment folder holding config.json (or the config.json itself)")
    p.add_argument("--resume", action="store_true", help="finish the newest unfinished invocation (see above)")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N",
                   help="with --resume: attempts per cell before it is given up (default 3)")
    p.add_argument("--store", help="trace store URI (local folder or s3://bucket/prefix)")
    p.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    p.add_argument("--ray-address", help="join this Ray cluster (default: $RAY_ADDRESS, else start Ray locally)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the progress bar on stderr, or not (default: only when stderr is a terminal and $CI "
                        "is unset, so pipes, log files and CI logs get none)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no notes, and no warning Ray itself raises")
    p.add_argument("--as", dest="as_name", metavar="NAME",
                   help="the experiment's name (default: the folder's name). A folder whose name already belongs "
                        "to another folder's runs is refused; --as names it explicitly")
    p.add_argument("--accept-changed-probes", action="store_true",
                   help="appending instruments (open_scan): accept probes whose text changed under the same id as new "
                        "versions (recorded in the invocation; older rows are kept and marked superseded)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and print the cells per model, a bound on generated tokens and what --resume "
                        "would run; start nothing (no Ray, no engine, no catalog server) and write nothing")
    return p


def print_summary(result: ScanResult, out=None) -> None:
    """Print the invocation id, cells by status and where the Parquet is (on ``out``, default stdout)."""
    out = sys.stdout if out is None else out
    c = result.counts
    if not result.invocation_id:   # an appending instrument with nothing left: no invocation was made
        print(f"nothing to do: every cell of experiment {result.experiment!r} is already held by an earlier "
              f"invocation in this series (no new invocation was made)", file=out)
        return
    print(f"invocation {result.invocation_id}  experiment {result.experiment}  status {result.status}", file=out)
    print(f"cells: {c.get('cells', 0)} total · {c.get('ok', 0)} ok · {c.get('error', 0)} error · "
          f"{c.get('missing', 0)} missing  ({c.get('rows', 0)} rows, {c.get('error_rows', 0)} error rows)"
          + (f" · {c['held_elsewhere']} held by earlier invocations" if c.get("held_elsewhere") else ""), file=out)
    print(f"traces: {result.traces_path}/", file=out)
    if result.log_path:
        print(f"log:    {result.log_path}", file=out)
    print(f"query:  mirrorscan sql \"{summary_query(result)}\"", file=out)


def summary_query(result: ScanResult) -> str:
    """The ``mirrorscan sql`` query the summary suggests for the result's invocation (its instrument's own,
    ``Presenter.suggested_query``), on one line."""
    from mirrorscan.grid.instrument import Presenter, resolve

    presenter = resolve(result.instrument) if result.instrument else Presenter()
    return " ".join(presenter.suggested_query(result.invocation_id).split())


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan scan") -> int:
    """CLI entry point; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    if args.dry_run:
        from mirrorscan.jobs.dry_run import dry_run

        dry_run(args.experiment, store=args.store, catalog_dsn=args.catalog_dsn, max_attempts=args.max_attempts,
                as_name=args.as_name)
        return EXIT_OK
    stop_like_ctrl_c_on_sigterm()
    if args.quiet:
        quiet_ray_warnings()
    try:
        result = run_scan(args.experiment, resume=args.resume, max_attempts=args.max_attempts, store=args.store,
                          catalog_dsn=args.catalog_dsn, ray_address=args.ray_address, quiet=args.quiet,
                          progress=bar_wanted(args.progress), as_name=args.as_name,
                          accept_changed_probes=args.accept_changed_probes)
    except InterruptedBeforeRecording:
        print(f"interrupted before the invocation was recorded: nothing was recorded, so there is nothing to "
              f"resume; run mirrorscan scan {shlex.quote(args.experiment)} again", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("interrupted: finished parts are kept; run again with --resume to finish the grid", file=sys.stderr)
        return EXIT_INTERRUPTED
    print_summary(result)
    return EXIT_OK if result.status == "complete" else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.scan"))
