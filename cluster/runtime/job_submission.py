"""A client of a Ray cluster's Job Submission API, as ``mirrorscan submit`` / ``status`` / ``logs`` use it.

What a submitted job ships (the runtime env read from a profile, the staged package as ``py_modules``, the
experiment's place in the working_dir), what it runs (the scan or statistics entrypoint), and how the job
server is reached and followed (connect, submit once the job agent is up, wait for a final status, read the
invocation id the job prints). Secret-looking values are refused before anything is sent. The verbs
themselves (argument parsing and printing) are ``jobs/submit.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from mirrorscan.grid.errors import ConfigError, read_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_ENV_FILE = REPO_ROOT / "runtime_env.yaml"
"""The runtime env a submitted job ships, unless ``--runtime-env`` names another file."""

EXIT_UNREACHABLE = 3
"""The cluster's job server (dashboard, port 8265) could not be reached: nothing was submitted."""
EXIT_INTERRUPTED = 130
"""Ctrl-C while following a job: the job itself keeps running on the cluster."""

INVOCATION_LINE = re.compile(
    r"^(?:mirrorscan-invocation: |invocation )([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")
"""Lines jobs.scan prints: ``mirrorscan-invocation: <uuid> experiment=<name> new|resumed`` before any
work, and ``invocation <uuid>  experiment <name>  status <status>`` at the end."""

AGENT_WAIT_S = 120.0
"""How long ``submit`` waits for a freshly started head's job agent before giving up (seconds)."""
TERMINAL_WAIT_S = 60.0
"""How long to wait, after the log stream ends, for the job server to report a final status (seconds)."""

_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|API_KEY|ACCESS_KEY|CREDENTIAL|PRIVATE_KEY", re.I)


def secret_problem(name: str, value: str) -> str | None:
    """Why ``name=value`` looks like a secret (a phrase), or None when it does not.

    Flags values shaped like keys/tokens, URLs or DSNs carrying a password, and non-empty values of
    variables named like secrets (but not ``*_PATH``/``*_FILE``/``*_ENV``, which point at one) unless
    the value only references another variable (``${VAR}``).
    """
    from mirrorscan.grid.secret_shapes import secret_shape   # the project's one list of credential shapes

    value = str(value)
    what = secret_shape(value)
    if what:
        return f"its value looks like {what}"
    if "://" in value:
        with contextlib.suppress(ValueError):
            if urlsplit(value).password:
                return "its value is a URL with a password"
    names_a_secret = _SECRET_NAME.search(name) and not re.search(r"(_PATH|_FILE|_ENV)$", name, re.I)
    if names_a_secret and value.strip() and not re.fullmatch(r"\$\{?\w+\}?", value.strip()):
        return "its name says it holds a secret"
    return None


def refuse_secret_dsn(dsn: str | None) -> None:
    """ConfigError when a ``--catalog-dsn`` for a job carries a password (a job's entrypoint and runtime env
    are shown on the dashboard)."""
    problem = secret_problem("--catalog-dsn", dsn) if dsn else None
    if problem:
        raise ConfigError("", "--catalog-dsn", f"{problem}; a job's entrypoint and runtime env are shown on the dashboard",
                          "pass the DSN without the password and give the nodes PGPASSWORD or ~/.pgpass")


# ---- runtime env ----------------------------------------------------------------------------------

def load_runtime_env(path: str | Path = RUNTIME_ENV_FILE, working_dir: str | Path | None = None) -> dict:
    """Read a runtime_env YAML into the dict Ray's ``RuntimeEnv`` takes; working_dir made absolute.

    ``working_dir`` (if given) replaces the file's; a relative one in the file is taken relative to the
    file's folder. Raises ConfigError for an unreadable file, a field Ray rejects, or a secret-looking
    env value.
    """
    import yaml
    from ray.runtime_env import RuntimeEnv

    path = Path(path)
    try:
        env = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(path, "runtime env", f"cannot be read ({read_problem(exc)})",
                          "pass a readable YAML file with --runtime-env") from None
    if not isinstance(env, dict):
        raise ConfigError(path, "runtime env", "is not a mapping", "write fields such as working_dir, excludes, env_vars")
    if working_dir is not None:
        env["working_dir"] = str(working_dir)
    if env.get("working_dir") and "://" not in str(env["working_dir"]):
        env["working_dir"] = str((path.parent / os.path.expanduser(str(env["working_dir"]))).resolve())
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict):
        raise ConfigError(path, "env_vars", "is not a mapping", "write env_vars as NAME: \"value\" lines")
    for name, value in env_vars.items():
        problem = secret_problem(str(name), str(value))
        if problem:
            raise ConfigError(path, f"env_vars.{name}", f"{problem}; the runtime env is shown on the dashboard",
                              "keep secrets on the cluster nodes (Kubernetes Secret, ~/.pgpass, instance profile)")
    from mirrorscan.grid.secrets import reject_secrets   # every other field too (pip URLs, working_dir, …): shown as well

    reject_secrets(str(path), {k: v for k, v in env.items() if k != "env_vars"}, "",
                   "keep secrets on the cluster nodes (a pip index's netrc, Kubernetes Secret, instance profile)")
    env["env_vars"] = {str(k): str(v) for k, v in env_vars.items()}
    unknown = sorted(set(env) - RuntimeEnv.known_fields)
    if unknown:   # RuntimeEnv would take them as plugin names and the job would fail on the cluster
        raise ConfigError(path, unknown[0], "is not a runtime env field Ray knows",
                          "use Ray's fields (working_dir, excludes, env_vars, pip, py_modules, …)")
    try:
        RuntimeEnv(**env)
    except Exception as exc:   # Ray raises TypeError/ValueError/… for unknown or malformed fields
        raise ConfigError(path, "runtime env", f"Ray rejects it: {exc}", "fix the field Ray names") from None
    return env


def ship_package(runtime_env: dict, staging: Path) -> None:
    """Make the job import the mirrorscan package submitted with it: a copy of the installed package goes
    into ``staging`` and the runtime env's ``py_modules``, and the working_dir's own ``mirrorscan/`` folder
    (the package's root module only) is left out of the upload so it cannot shadow the copy."""
    from mirrorscan.cluster.runtime.package_upload import stage_package

    runtime_env["py_modules"] = [str(stage_package(staging)), *(runtime_env.get("py_modules") or [])]
    runtime_env["excludes"] = [*(runtime_env.get("excludes") or []), "/mirrorscan/"]


def experiment_in_working_dir(experiment: str, working_dir: str, excludes: list[str]) -> str:
    """The experiment's path relative to working_dir, as the job will see it; ConfigError if not shipped."""
    from ray._private.thirdparty.pathspec import PathSpec   # the matcher Ray's own upload uses

    target = Path(experiment).resolve()
    root = Path(working_dir)
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise ConfigError(experiment, "experiment", f"is outside the job's working_dir {root}",
                          "move it under experiments/ in the checkout, or pass --working-dir FOLDER that holds it") from None
    config = rel / "config.json" if target.is_dir() else rel
    if PathSpec.from_lines("gitwildmatch", excludes).match_file(str(config)):
        raise ConfigError(experiment, "experiment", "is excluded from the job's upload by the runtime env's excludes",
                          "move the experiment or narrow the excludes")
    return rel.as_posix() or "."


def scan_entrypoint(experiment_rel: str, *, resume: bool, max_attempts: int, store: str | None,
                    catalog_dsn: str | None, progress: bool, python: str = "python") -> str:
    """The shell command the job runs: ``python -m mirrorscan.jobs.scan <experiment> …`` (quoted; ``python``:
    the interpreter, already quoted, ``cluster.runtime.job_env.job_python``)."""
    args = ["-m", "mirrorscan.jobs.scan", experiment_rel, "--max-attempts", str(max_attempts)]
    if resume:
        args.append("--resume")
    if store:
        args += ["--store", store]
    if catalog_dsn:
        args += ["--catalog-dsn", catalog_dsn]
    args.append("--progress" if progress else "--quiet")   # a job's log is no terminal: the bar only when asked
    return " ".join([python, *(shlex.quote(a) for a in args)])


def analysis_entrypoint(stats_argv: list[str], python: str = "python") -> str:
    """The shell command an analysis job runs: ``python -m mirrorscan.jobs.stats <command> …`` (quoted; ``python``
    as ``cluster.runtime.job_env.job_python`` names it), with ``--ray`` added to ``null`` and to ``auroc --model`` so
    their work spreads over the cluster as Ray tasks."""
    args = list(stats_argv)
    if args and (args[0] == "null" or (args[0] == "auroc" and "--model" in args)) and "--ray" not in args:
        args.append("--ray")
    return " ".join([python, *(shlex.quote(a) for a in ["-m", "mirrorscan.jobs.stats", *args])])


# ---- the job server -------------------------------------------------------------------------------

def cluster_address(flag: str | None) -> str | None:
    """The cluster to talk to: ``--address``, else ``$RAY_ADDRESS``, else None (run locally)."""
    return flag or os.environ.get("RAY_ADDRESS") or None


class Unreachable(Exception):
    """The job server at an address did not answer; the message is one line naming the address and the fix."""


def connect(address: str):
    """A ``JobSubmissionClient`` for ``address`` (``http://HEAD:8265``, or a Ray/GCS address it resolves).

    ``address`` wins over ``$RAY_ADDRESS`` (Ray's client would otherwise prefer the environment).
    Raises :class:`Unreachable` when nothing answers there.
    """
    from ray.job_submission import JobSubmissionClient

    saved = {k: os.environ.pop(k) for k in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS") if k in os.environ}
    try:
        return JobSubmissionClient(address)
    except (ConnectionError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Unreachable(
            f"cannot reach Ray's job server at {address} ({reason}) — fix: start the cluster (ray up cluster.yaml, "
            f"or kubectl apply -f deploy/kuberay/raycluster.yaml), forward its dashboard port 8265 "
            f"(ray dashboard cluster.yaml, or kubectl port-forward svc/mirrorscan-head-svc 8265), "
            f"or correct --address / RAY_ADDRESS") from None
    finally:
        os.environ.update(saved)


def warn_if_exposed(client) -> bool:
    """Print one warning line when the cluster behind ``client`` (a JobSubmissionClient) listens beyond
    loopback with authentication off (``cluster.runtime.ray_session.job_server_warning``); whether it printed one."""
    from mirrorscan.cluster.runtime.ray_session import job_server_warning

    warning = job_server_warning(client.get_address())
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return bool(warning)


def job_info(client, job_id: str, address: str):
    try:
        return client.get_job_info(job_id)
    except RuntimeError as exc:
        if "does not exist" in str(exc) or "404" in str(exc):
            raise ConfigError("", "JOB_ID", f"no job {job_id!r} on {address}",
                              f"list the cluster's jobs with `mirrorscan status --address {address}`") from None
        raise


UPLOAD_NOTES = {"ray._private.runtime_env.working_dir": logging.ERROR, "ray._private.runtime_env.packaging": logging.WARNING,
                "ray.dashboard.modules.dashboard_sdk": logging.WARNING}
"""Ray's client-side notes while it packs and uploads a job's working_dir, and the level each logger is set to
for ``submit``: "Directory '.git' is now ignored by default" (the runtime envs exclude it already), "Ignoring
upload to cluster for these files", "Uploading package …" — nothing a user acts on; errors still show."""


def quiet_upload_notes() -> None:
    """Raise the level of Ray's upload loggers (``UPLOAD_NOTES``) for the rest of this process."""
    for name, level in UPLOAD_NOTES.items():
        logging.getLogger(name).setLevel(level)


def submit_when_ready(client, timeout_s: float = AGENT_WAIT_S, **job) -> str:
    """Submit a job, retrying every 2 s for at most ``timeout_s`` seconds while the head's job agent is
    still starting ("No available agent to submit job": the dashboard answers before its agent does,
    e.g. just after ``ray up`` or a head restart). Returns the submission id."""
    quiet_upload_notes()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return client.submit_job(**job)
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(2)


def find_invocation(text: str) -> str | None:
    """The invocation id from a job's log text (the last ``invocation <uuid>`` line), or None."""
    found = None
    for line in text.splitlines():
        m = INVOCATION_LINE.match(line.strip())
        if m:
            found = m.group(1)
    return found


BAR_LINE = re.compile(r"^scan \S.*\|\s*\d+/\d+ \[")
"""A redraw of a scan's progress bar as a job's log holds it: Ray's log reader ends a line at each ``\r``, so
every redraw (one a second while it waits) arrives as a line of its own."""


class LogFollower:
    """Writes a job's log to ``out`` as it arrives. On a terminal (``tty``), consecutive progress-bar lines
    (``BAR_LINE``) redraw one line in place, as the bar looks in a scan run here; elsewhere (a pipe, a file)
    every line is written as it came."""

    def __init__(self, out, tty: bool):
        self.out, self.tty = out, tty
        self.on_bar = False   # the cursor is at the end of a bar drawn in place

    def write(self, chunk: str) -> None:
        """Write one chunk of the log (any number of lines)."""
        if not self.tty:
            self.out.write(chunk)
        else:
            for line in chunk.splitlines(keepends=True):
                if BAR_LINE.match(line):
                    self.out.write("\r" + line.rstrip("\r\n") + "\x1b[K")
                    self.on_bar = True
                else:
                    self.out.write(("\n" if self.on_bar else "") + line)
                    self.on_bar = False
        self.out.flush()

    def close(self) -> None:
        """End a bar left on the line."""
        if self.on_bar:
            self.out.write("\n")
            self.out.flush()
            self.on_bar = False


def _is_tty(out) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


async def follow_logs(client, job_id: str, out) -> str:
    """Copy the job's log stream to ``out`` as it arrives (``LogFollower``); returns everything streamed."""
    seen = []
    follower = LogFollower(out, _is_tty(out))
    try:
        async for chunk in client.tail_job_logs(job_id):
            follower.write(chunk)
            seen.append(chunk)
    finally:
        follower.close()
    return "".join(seen)


def wait_terminal(client, job_id: str, timeout_s: float = TERMINAL_WAIT_S):
    """The job's info once its status is terminal (polls every 0.5 s for at most ``timeout_s`` seconds)."""
    deadline = time.monotonic() + timeout_s
    info = client.get_job_info(job_id)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
        info = client.get_job_info(job_id)
    return info


def job_exit_code(info) -> int:
    """The exit code ``submit`` returns for a finished job: the driver's own, else 0 SUCCEEDED / 1 otherwise."""
    if info.driver_exit_code is not None:
        return int(info.driver_exit_code)
    return 0 if str(info.status) == "SUCCEEDED" else 1


def follow_to_end(client, job_id: str, address: str, out, invocation_hint: str | None = None) -> int:
    """Stream a submitted job's output to ``out`` until it ends (``follow_logs``), print its last line
    (``invocation <uuid>  job <id>  status <STATUS>``; the uuid the job printed, else ``invocation_hint``)
    and return its exit code."""
    try:
        streamed = asyncio.run(follow_logs(client, job_id, out))
    except KeyboardInterrupt:
        print(f"\nsubmit: stopped following; job {job_id} keeps running — follow it with "
              f"`mirrorscan logs {job_id} --follow --address {address}`, stop it with `ray job stop {job_id}`", file=sys.stderr)
        return EXIT_INTERRUPTED
    info = wait_terminal(client, job_id)
    invocation = find_invocation(streamed) or find_invocation(client.get_job_logs(job_id)) or invocation_hint
    code = job_exit_code(info)
    print(f"invocation {invocation or '-'}  job {job_id}  status {info.status}", file=out)
    if not info.status.is_terminal():
        print(f"submit: job {job_id} is still {info.status} after its log stream ended; "
              f"check `mirrorscan status {job_id} --address {address}`", file=sys.stderr)
        return 1
    if code != 0 and info.message:
        print(f"submit: job {job_id} {info.status}: {info.message.strip().splitlines()[-1]}", file=sys.stderr)
    return code
