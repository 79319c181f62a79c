"""One job for a Ray cluster, assembled and sent: what ``mirrorscan submit`` (a scan) and ``mirrorscan submit stats``
(a statistics command) hand the job server.

``scan_job`` and ``analysis_job`` build a :class:`Job` from already-parsed options: the runtime env read from its
profile (``job_submission.load_runtime_env``) with the job's own variables, the placement prefix
(``job_env.place_job``: where the job writes, refused before anything is contacted), the entrypoint
(``job_submission.scan_entrypoint`` / ``analysis_entrypoint``), a fresh job id and the metadata ``status`` lists.
``send`` ships the package, connects (warning once about an exposed cluster), submits and, unless told not to
wait, follows the job to its end (``job_submission.follow_to_end``). The verbs themselves (parsing, the
local fallback without an address, printing) are ``jobs/submit.py``.
"""

from __future__ import annotations

import re
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from mirrorscan.cluster.runtime.job_env import describe, job_python, place_job
from mirrorscan.cluster.runtime.job_submission import (
    analysis_entrypoint, connect, experiment_in_working_dir, follow_to_end, load_runtime_env, refuse_secret_dsn,
    scan_entrypoint, ship_package, submit_when_ready, warn_if_exposed)
from mirrorscan.cluster.runtime.ray_session import EXPOSURE_WARNED_ENV
from mirrorscan.grid.errors import ConfigError

UUID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
"""An invocation id: a statistics job whose ``--input`` is one says it before its own output does."""


@dataclass
class Job:
    """A job ready to submit. Not frozen: ``send`` adds to ``runtime_env``'s variables what it learns on
    connecting."""

    prefix: str
    """The entrypoint's placement prefix (``job_env.place_job``): the environment the job's command runs under."""
    entrypoint: str
    """The whole command the job runs, prefix included."""
    runtime_env: dict
    """Ray's runtime env of the job (working_dir, excludes, env_vars, …)."""
    job_id: str
    """The submission id, ``mirrorscan-<experiment>-<8 hex>`` or ``mirrorscan-analyze-<command>-<8 hex>``."""
    metadata: dict
    """Job metadata (``mirrorscan_experiment`` … ) that ``mirrorscan status`` shows."""
    invocation_hint: str | None = None
    """The invocation the job reads, when known before it prints one (a statistics job over an invocation id)."""


def scan_job(spec, experiment: str, address: str, env_file: str, *, working_dir: str | None, resume: bool,
             max_attempts: int, store: str | None, catalog_dsn: str | None, progress: bool,
             env_vars: dict[str, str]) -> Job:
    """The job that scans ``experiment`` (its validated ``spec``) on the cluster at ``address`` under the runtime
    env of ``env_file`` (``working_dir`` overriding its folder); ConfigError before anything is contacted for a
    runtime env without working_dir, an experiment outside it, or a placement the cluster cannot reach (the
    caller refuses a secret in ``catalog_dsn`` first: ``job_submission.refuse_secret_dsn``). ``progress``: whether
    the job draws its progress bar; ``env_vars``: what the job learns of its submitter, added to the runtime env's."""
    runtime_env = load_runtime_env(env_file, working_dir)
    if not runtime_env.get("working_dir"):
        raise ConfigError(env_file, "working_dir", "is missing", "set working_dir: . (the checkout)")
    rel = experiment_in_working_dir(experiment, runtime_env["working_dir"], runtime_env.get("excludes") or [])
    prefix = place_job(runtime_env, env_file, address, store=store, catalog_dsn=catalog_dsn,
                       config_store=spec.store, config_catalog_dsn=spec.catalog_dsn)
    entrypoint = prefix + scan_entrypoint(rel, resume=resume, max_attempts=max_attempts, store=store,
                                          catalog_dsn=catalog_dsn, progress=progress, python=job_python(prefix))
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env_vars}
    job_id = f"mirrorscan-{re.sub(r'[^A-Za-z0-9_-]', '-', spec.experiment)}-{uuid.uuid4().hex[:8]}"
    return Job(prefix, entrypoint, runtime_env, job_id,
               {"mirrorscan_experiment": spec.experiment, "mirrorscan_resume": str(resume).lower()})


def analysis_job(stats_argv: list[str], command: str, input: str, address: str, env_file: str, *,
                 working_dir: str | None, catalog_dsn: str | None) -> Job:
    """The job that runs ``mirrorscan stats`` with ``stats_argv`` (already checked: its ``command`` and
    ``--input``) on the cluster at ``address`` under the runtime env of ``env_file``."""
    runtime_env = load_runtime_env(env_file, working_dir)
    if catalog_dsn:
        refuse_secret_dsn(catalog_dsn)
        runtime_env["env_vars"]["MIRRORSCAN_CATALOG_DSN"] = catalog_dsn
    prefix = place_job(runtime_env, env_file, address, catalog_dsn=catalog_dsn, needs_store=False)
    entrypoint = prefix + analysis_entrypoint(stats_argv, python=job_python(prefix))
    job_id = f"mirrorscan-analyze-{command}-{uuid.uuid4().hex[:8]}"
    hint = input if UUID.fullmatch(input.strip()) else None
    return Job(prefix, entrypoint, runtime_env, job_id, {"mirrorscan_analysis": command, "mirrorscan_input": input},
               hint)


def send(job: Job, address: str, no_wait: bool, out) -> int:
    """Ship the package, connect (warning once about an exposed cluster), submit ``job`` and, unless ``no_wait``,
    follow it to its end; returns the exit code ``submit`` returns (the job's, or 0 without waiting)."""
    staging = tempfile.TemporaryDirectory(prefix="mirrorscan-job-")
    ship_package(job.runtime_env, Path(staging.name))
    client = connect(address)
    if warn_if_exposed(client):   # said here: the job, which joins the same cluster, does not say it again
        job.runtime_env["env_vars"] = {**job.runtime_env.get("env_vars", {}), EXPOSURE_WARNED_ENV: "1"}
    if describe(job.prefix):   # the job uses this machine's home (a head on this machine)
        print(describe(job.prefix), file=sys.stderr)
    submit_when_ready(client, entrypoint=job.entrypoint, runtime_env=job.runtime_env, submission_id=job.job_id,
                      metadata=job.metadata)
    print(f"submit: job {job.job_id} on {address}: {job.entrypoint}", file=sys.stderr)
    if no_wait:
        print(f"job {job.job_id}", file=out)
        return 0
    return follow_to_end(client, job.job_id, address, out, invocation_hint=job.invocation_hint)
