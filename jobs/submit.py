"""``mirrorscan submit`` / ``status`` / ``logs``: run an experiment on a Ray cluster as a Ray job.

``submit`` validates the experiment here (a bad config exits 2 before anything reaches the cluster),
then hands ``python -m mirrorscan.jobs.scan <experiment> …`` to Ray's Job Submission API with the runtime env of
``runtime_env.yaml`` or another profile (working_dir = this checkout, minus caches; ``cluster/runtime/job_env.py``
says where the job writes), streams the job's output and exits
with the job's exit code. Without a cluster address (``--address`` or ``$RAY_ADDRESS``) it runs the
scan in this process instead, exactly as ``mirrorscan scan`` would.

The three verbs share this module because they share one thing, the job server connection
(``cluster/runtime/job_submission.py``; a job is assembled and sent by ``cluster/runtime/job_launch.py``);
``jobs/cli.py`` maps each verb here and :func:`main` dispatches on the verb in ``prog``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from mirrorscan.cluster.runtime.job_launch import analysis_job, scan_job, send
from mirrorscan.cluster.runtime.job_submission import (
    EXIT_INTERRUPTED, EXIT_UNREACHABLE, Unreachable, cluster_address, connect, find_invocation, follow_logs,
    job_info, refuse_secret_dsn)
from mirrorscan.cluster.runtime.ray_session import LOOPBACK_HEAD_COMMAND
from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors


# ---- verbs ----------------------------------------------------------------------------------------

SUBMIT_HELP = f"""\
Run an experiment's grid on a Ray cluster as a Ray job (or here, without an address).

The experiment is validated first (exit 2 on a bad config, nothing submitted). The job runs
`python -m mirrorscan.jobs.scan EXPERIMENT …` with a runtime env: the checkout as working_dir (the experiment must be
inside it). The default profile (runtime_env.yaml) is for a Ray head on this machine: the job uses this
machine's home, its local store, catalog and prepared models. `--profile cluster` (runtime_env.cluster.yaml)
names a shared store and catalog for a cluster on other machines; a job for one must name both (profile,
config, --store/--catalog-dsn), or submit says which setting to change. Its output streams here; the last
line is `invocation <uuid>  job <id>  status <STATUS>`.

Exit codes: the job's (0 complete, 1 incomplete, 2 bad input); 2 bad input found here; 3 cluster
unreachable; 130 Ctrl-C (the job keeps running: `mirrorscan logs JOB_ID --follow`).

A Ray head for this machine alone, on loopback (a plain `ray start --head` binds every interface, and
submit then warns that anyone who reaches it can run code):
  {LOOPBACK_HEAD_COMMAND}
  mirrorscan submit experiments/demo/ --address http://127.0.0.1:8265

`mirrorscan submit stats COMMAND …` (or `submit analyze`) runs a statistics command (gstudy, kendall, auroc, null) on the
cluster instead, reading the invocation's traces from the store: see `mirrorscan submit stats --help`.
"""


def _submit_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=SUBMIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", help="experiment folder holding config.json (inside the working_dir)")
    p.add_argument("--address", help="the cluster's job server, e.g. http://HEAD:8265 (default $RAY_ADDRESS; "
                                     "neither: run locally)")
    p.add_argument("--resume", action="store_true", help="finish the newest unfinished invocation (see `mirrorscan scan --help`)")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N", help="with --resume: attempts per cell (default 3)")
    p.add_argument("--store", help="trace store URI for the job (default: the runtime env's MIRRORSCAN_STORE)")
    p.add_argument("--catalog-dsn", help="catalog DSN for the job, without a password (default: the runtime env's)")
    _runtime_env_options(p)
    p.add_argument("--working-dir", help="ship this folder instead of the runtime env's working_dir")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the scan's progress bar in the job's log, or not (default: when submit follows the job "
                        "on a terminal outside CI, where the bar redraws in place)")
    p.add_argument("--no-wait", action="store_true", help="print the job id and return without following the job")
    return p


def _runtime_env_options(p: argparse.ArgumentParser) -> None:
    """``--profile`` / ``--runtime-env``: which runtime env the job ships (cluster/runtime/job_env.py)."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--profile", metavar="NAME", help="runtime env profile: local (default, runtime_env.yaml: a head "
                                                        "on this machine, this machine's store and catalog) or cluster "
                                                        "(runtime_env.cluster.yaml: a shared store and catalog)")
    which.add_argument("--runtime-env", metavar="FILE", help="a runtime env YAML of your own instead of a profile")


def _runtime_env_file(args: argparse.Namespace) -> str:
    """The runtime env YAML that ``--runtime-env`` or ``--profile`` names (default: the local profile's)."""
    from mirrorscan.cluster.runtime.job_env import profile_file

    return args.runtime_env or str(profile_file(args.profile))


def job_progress(requested: bool | None, no_wait: bool, out) -> bool:
    """Whether the job draws its progress bar: ``requested`` (``--progress`` / ``--no-progress``), else only
    when submit follows the job on a terminal outside CI (``cluster.scan.progress.bar_wanted`` of ``out``), which
    redraws it in place (``cluster.runtime.job_submission.LogFollower``); a job nobody follows logs no bar."""
    from mirrorscan.cluster.scan.progress import bar_wanted

    return requested if requested is not None else (not no_wait and bar_wanted(None, out))


def job_scan_env(spec) -> dict[str, str]:
    """What a scan job learns of its submitter (it runs from an uploaded copy of working_dir, at a new path each
    time, with no git repository): the config.json it was submitted from, and this checkout's git commit and
    dirty state, which its invocation records as its own."""
    from mirrorscan.cluster.runtime.provenance import SUBMITTED_GIT_ENV, git_state_text
    from mirrorscan.cluster.scan.inputs import CONFIG_ORIGIN_ENV

    git = git_state_text()
    return {CONFIG_ORIGIN_ENV: str(Path(spec.config_path).resolve()), **({SUBMITTED_GIT_ENV: git} if git else {})}


def submit(argv: list[str], prog: str = "mirrorscan submit", out=None) -> int:
    """``mirrorscan submit``: validate, submit, follow; returns the job's exit code (see SUBMIT_HELP)."""
    from mirrorscan.grid.spec import load_spec

    out = out or sys.stdout
    if argv and argv[0] in ("stats", "analyze"):   # `submit analyze` is the older spelling of `submit stats`
        return submit_analysis(argv[1:], prog=f"{prog} {argv[0]}", out=out)
    args = _submit_parser(prog).parse_args(argv)
    spec = load_spec(args.experiment)   # ConfigError → exit 2 before anything is submitted
    if args.max_attempts < 1:
        raise ConfigError("", "--max-attempts", f"is {args.max_attempts}", "use 1 or more")
    address = cluster_address(args.address)
    if not address:
        from mirrorscan.jobs import scan

        local = [args.experiment, "--max-attempts", str(args.max_attempts)] + (["--resume"] if args.resume else []) \
            + (["--store", args.store] if args.store else []) + (["--catalog-dsn", args.catalog_dsn] if args.catalog_dsn else [])
        print("submit: no --address and no RAY_ADDRESS: running the scan in this process", file=sys.stderr)
        return scan.main(local, prog=prog)
    refuse_secret_dsn(args.catalog_dsn)
    job = scan_job(spec, args.experiment, address, _runtime_env_file(args), working_dir=args.working_dir,
                   resume=args.resume, max_attempts=args.max_attempts, store=args.store, catalog_dsn=args.catalog_dsn,
                   progress=job_progress(args.progress, args.no_wait, out), env_vars=job_scan_env(spec))
    return send(job, address, args.no_wait, out)


ANALYZE_HELP = """\
Run a statistics command of `mirrorscan stats` (gstudy, kendall, auroc, null) on a Ray cluster as a
Ray job, reading an invocation's traces where they are stored (e.g. s3://…): the job's driver reads
the sweep's Parquet from the store and `null` (and `auroc --model`) run their shards (or models) as
Ray tasks on the cluster's nodes (`--ray` is implied). The result JSON streams here and is stored
beside the traces under <invocation>/analysis/<command>/ (so `--out`, a file on the cluster, is refused).

example: mirrorscan submit stats --address http://HEAD:8265 null --input INVOCATION_ID \\
           --score mean_score --label type --positive deployment --layer layer

Options of this verb (--address, --catalog-dsn, --runtime-env, --working-dir, --no-wait) may stand
anywhere; everything else is the statistics command, checked here before anything is submitted.
Without an address it runs in this process.
"""


def submit_analysis(argv: list[str], prog: str = "mirrorscan submit analyze", out=None) -> int:
    """``mirrorscan submit analyze …``: check the statistics command here, run it as a Ray job (or in this
    process without an address) and follow it; returns the job's exit code (see ANALYZE_HELP)."""
    from mirrorscan.jobs import stats

    out = out or sys.stdout
    p = argparse.ArgumentParser(prog=prog, description=ANALYZE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage=f"{prog} [--address URL] [--catalog-dsn DSN] {{gstudy,kendall,auroc,null}} ...")
    p.add_argument("--address", help="the cluster's job server (default $RAY_ADDRESS; neither: run here)")
    p.add_argument("--catalog-dsn", help="catalog DSN for the job, without a password (default: the runtime env's)")
    _runtime_env_options(p)
    p.add_argument("--working-dir", help="ship this folder instead of the runtime env's working_dir")
    p.add_argument("--no-wait", action="store_true", help="print the job id and return without following the job")
    args, stats_argv = p.parse_known_args(argv)
    if not stats_argv or stats_argv[0] not in stats.RUN:
        raise ConfigError("", "command", f"is {stats_argv[0] if stats_argv else 'missing'!r}",
                          f"name one of {', '.join(stats.RUN)}, e.g. `{prog} null --input INVOCATION …`")
    parsed = stats.build_parser(f"{prog}").parse_args(stats_argv)   # bad options exit 2 here, not on the cluster
    address = cluster_address(args.address)
    if not address:
        print("submit: no --address and no RAY_ADDRESS: running the analysis in this process", file=sys.stderr)
        if args.catalog_dsn:
            os.environ["MIRRORSCAN_CATALOG_DSN"] = args.catalog_dsn
        return stats.main(stats_argv, prog=prog)
    if getattr(parsed, "out", None):
        raise ConfigError("", "--out", "names a file on the cluster node that runs the job",
                          "drop --out: the result streams here and is stored beside the invocation's traces")
    job = analysis_job(stats_argv, parsed.command, parsed.input, address, _runtime_env_file(args),
                       working_dir=args.working_dir, catalog_dsn=args.catalog_dsn)
    return send(job, address, args.no_wait, out)


def _when(ms) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if ms else "-"


def status(argv: list[str], prog: str = "mirrorscan status", out=None) -> int:
    """``mirrorscan status [JOB_ID]``: the cluster's submitted jobs, or one job in detail; returns 0."""
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog=prog, description="List the cluster's submitted jobs, or show one.")
    p.add_argument("job_id", nargs="?", help="a job's submission id (as `mirrorscan submit` printed it)")
    p.add_argument("--address", help="the cluster's job server (default $RAY_ADDRESS)")
    args = p.parse_args(argv)
    address = _required_address(args.address)
    client = connect(address)
    if args.job_id is None:
        jobs = sorted((j for j in client.list_jobs() if j.submission_id), key=lambda j: j.start_time or 0)
        print(f"{'JOB_ID':<44}{'STATUS':<11}{'STARTED (UTC)':<22}{'EXPERIMENT':<20}", file=out)
        for j in jobs:
            print(f"{j.submission_id:<44}{str(j.status):<11}{_when(j.start_time):<22}"
                  f"{(j.metadata or {}).get('mirrorscan_experiment', '-'):<20}", file=out)
        if not jobs:
            print("(no submitted jobs)", file=out)
        return 0
    info = job_info(client, args.job_id, address)
    invocation = find_invocation(client.get_job_logs(args.job_id))
    for key, value in [("job", args.job_id), ("status", info.status), ("message", (info.message or "").strip()),
                       ("experiment", (info.metadata or {}).get("mirrorscan_experiment", "-")),
                       ("invocation", invocation or "-"), ("entrypoint", info.entrypoint),
                       ("started", _when(info.start_time)), ("ended", _when(info.end_time)),
                       ("exit code", "-" if info.driver_exit_code is None else info.driver_exit_code)]:
        print(f"{key + ':':<12}{value}", file=out)
    return 0


def logs(argv: list[str], prog: str = "mirrorscan logs", out=None) -> int:
    """``mirrorscan logs JOB_ID [--follow]``: a job's output so far, or followed to its end; returns 0."""
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog=prog, description="Print a job's output (stdout and stderr of its driver).")
    p.add_argument("job_id", help="a job's submission id")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--address", help="the cluster's job server (default $RAY_ADDRESS)")
    args = p.parse_args(argv)
    address = _required_address(args.address)
    client = connect(address)
    job_info(client, args.job_id, address)   # an unknown id is a one-line error, exit 2
    if args.follow:
        try:
            asyncio.run(follow_logs(client, args.job_id, out))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    else:
        out.write(client.get_job_logs(args.job_id))
        out.flush()
    return 0


def _required_address(flag: str | None) -> str:
    address = cluster_address(flag)
    if not address:
        raise ConfigError("", "--address", "no cluster address given",
                          "pass --address http://HEAD:8265 or set RAY_ADDRESS")
    return address


VERB_FUNCTIONS = {"submit": submit, "status": status, "logs": logs}


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan submit") -> int:
    """CLI entry point for the verb named last in ``prog`` (submit, status or logs); returns the exit code."""
    verb = prog.split()[-1] if prog.split()[-1] in VERB_FUNCTIONS else "submit"
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return VERB_FUNCTIONS[verb](argv, prog=prog)
    except Unreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    # python -m mirrorscan.jobs.submit [submit|status|logs] ARGS…
    _argv = sys.argv[1:]
    _verb = _argv.pop(0) if _argv and _argv[0] in VERB_FUNCTIONS else "submit"
    sys.exit(main(_argv, prog=f"python -m mirrorscan.jobs.submit {_verb}"))
