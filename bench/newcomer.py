"""Benchmark: the steps a newcomer runs, timed as a user runs them.

Each step is the command a user types (``mirrorscan …`` of this checkout's environment, run from the
repository root), in a process of its own: wall time by the monotonic clock, CPU time (user + system) and
peak RSS of the process and every child it waited for, from ``os.wait4``, and beside them the same over its
whole process tree, sampled (``TreeSampler``: a scan's Ray workers are ended without being reaped by it, so
``wait4`` misses their CPU). Processes a step did not start (the Ray head a submitted job runs in, the
catalog's PostgreSQL) are in neither figure.

Steps, in order (``--only STEP``, repeatable, runs a subset; a step that needs another's output runs that one
first as untimed setup, marked so in the table):

  demo-scan        ``mirrorscan scan experiments/demo/`` (``make demo``'s scan: Ray started by the scan)
  demo-analyze     ``mirrorscan analyze experiments/demo/`` (``make demo``'s analyze)
  open-scan        ``mirrorscan scan experiments/open-scan-demo/``
  reproduce        ``mirrorscan reproduce <the demo's invocation>``
  submit           ``mirrorscan submit experiments/demo/`` to a Ray head this script starts (``ray start --head``
                   on 127.0.0.1, 2 CPUs, its own ports and temp dir) and stops (every process of that head's
                   session and any job driver it ran; never ``ray stop``, which ends every Ray on the machine)
  one-cell-ray     a one-cell scan of the demo model with that head already running (``--ray-address``)
  engines-up       ``mirrorscan engines up`` of a one-cell experiment on that head: its warm engine loaded
  one-cell-warm    the one-cell scan on that head with the warm engine up (its batch goes to the engine: no
                   model load in the scan's actor); then ``engines down --all``
  demo-ray         ``mirrorscan scan experiments/demo/`` on that head, with its own engine actor
  demo-warm        the same on that head after ``engines up experiments/demo/`` (untimed setup); then
                   ``engines down --all``
  one-cell         the same one-cell scan starting its own Ray
  analyze-open     ``mirrorscan analyze experiments/open-scan-demo/``
  analyze-flinch   ``mirrorscan analyze experiments/flinch-demo/`` (its scan is untimed setup)
  analyze-lens     ``mirrorscan analyze experiments/lens-demo/`` (its scan is untimed setup)
  sql              the query the demo scan's summary suggests
  report           ``mirrorscan report experiments/demo/``

Nothing is written into the repository: a temporary ``$MIRRORSCAN_HOME`` (its own store and catalog) gets a
copy of the converted demo model (``--model``, default the checkout's ``.mirrorscan/models/``), and the
one-cell experiment is written under it. Its catalog server is stopped and the folder removed at the end
(``--keep`` keeps it). Each step has a time limit (``--timeout``); a step that fails or runs over prints its
last output lines and the run goes on with the steps that do not need it. Exit 0 when every step passed, 1
otherwise. ``--json FILE`` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "smollm2-135m-instruct"
STEPS = ["demo-scan", "demo-analyze", "open-scan", "reproduce", "submit", "one-cell-ray", "engines-up", "one-cell-warm",
         "demo-ray", "demo-warm", "one-cell",
         "analyze-open", "analyze-flinch", "analyze-lens", "sql", "report"]
NEEDS = {"demo-analyze": ["demo-scan"], "reproduce": ["demo-scan"], "sql": ["demo-scan"],
         "report": ["demo-scan"], "analyze-open": ["open-scan"], "analyze-flinch": ["flinch-scan"],
         "analyze-lens": ["lens-scan"], "one-cell-warm": ["engines-up"]}
"""The steps whose output a step reads; they run first (untimed setup unless asked for)."""
ONE_CELL_PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\n"


@dataclass
class Timing:
    """One step's figures: wall and CPU seconds, peak RSS in MiB (``os.wait4``: the process and the children
    it reaped; largest single process), the same over its whole process tree (``TreeSampler``: CPU summed,
    RSS summed at its peak), exit code, and whether it was setup."""
    step: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    rc: int
    setup: bool = False
    note: str = ""
    tree_cpu_s: float = 0.0
    tree_peak_rss_mib: float = 0.0


class TreeSampler:
    """The CPU seconds and peak RSS of a process and every descendant it has (Ray's GCS, raylet and workers a
    scan starts), read with ``psutil`` every ``SAMPLE_S``: each process's last reading, keyed by pid and start
    time, summed (less at most the last ``SAMPLE_S`` of a process that exited between two readings); peak RSS
    = the largest sum over one reading. ``os.wait4`` sees only the processes the step reaps, and a scan's Ray
    workers are ended without being reaped by it."""

    SAMPLE_S = 0.5

    def __init__(self, pid: int):
        import psutil

        self.root = psutil.Process(pid)
        self.cpu: dict[tuple[int, float], float] = {}
        self.peak_rss = 0

    def sample(self) -> None:
        import psutil

        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        rss = 0
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self.cpu[(p.pid, p.create_time())] = t.user + t.system
                    rss += p.memory_info().rss
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, rss)

    def cpu_s(self) -> float:
        return sum(self.cpu.values())


def run(step: str, argv: list[str], env: dict, timeout_s: float, setup: bool, log: Path) -> tuple[Timing, str]:
    """Run ``argv`` from the repository root with ``env``; its output goes to ``log`` (returned too). Over
    ``timeout_s`` its process group is killed and the exit code is 124."""
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        tree, next_sample = TreeSampler(proc.pid), 0.0
        deadline, rc, usage = started + timeout_s, None, None
        while rc is None:
            if time.monotonic() >= next_sample:
                tree.sample()
                next_sample = time.monotonic() + TreeSampler.SAMPLE_S
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                rc = 124
            else:
                time.sleep(0.05)
    proc.returncode = rc   # reaped by wait4: Popen must not wait again
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    return Timing(step, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, rc, setup,
                  tree_cpu_s=max(tree.cpu_s(), usage.ru_utime + usage.ru_stime),
                  tree_peak_rss_mib=max(tree.peak_rss / 2**20, usage.ru_maxrss / 1024)), text


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Head:
    """A Ray head of this script's own on 127.0.0.1 (``ray start --head --block`` in a session of its own):
    ``address`` (the job server) and ``gcs`` (for ``--ray-address``) once started; ``stop()`` ends every process
    of its session and every job driver pointed at it, by pid."""

    def __init__(self, env: dict, folder: Path):
        self.ports = {n: free_port() for n in ("port", "dashboard-port", "ray-client-server-port",
                                               "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                               "runtime-env-agent-port", "metrics-export-port",
                                               "node-manager-port", "object-manager-port")}
        self.temp_dir = tempfile.mkdtemp(prefix="nc-ray-", dir="/tmp")   # Ray's socket paths must fit 107 bytes
        self.env = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        self.log = folder / "ray-head.log"
        self.address = f"http://127.0.0.1:{self.ports['dashboard-port']}"
        self.gcs = f"127.0.0.1:{self.ports['port']}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> float:
        """Start it and wait until its job server answers; returns the seconds that took."""
        import urllib.request

        cmd = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
               "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "2", "--num-gpus", "0",
               "--temp-dir", self.temp_dir, "--disable-usage-stats",
               *[a for name, port in self.ports.items() for a in (f"--{name}", str(port))]]
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True, stdin=subprocess.DEVNULL)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited ({self.proc.returncode}): see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.address}/api/version", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the Ray head's job server did not answer in {timeout_s:.0f} s: see {self.log}")
            time.sleep(1)

    def _processes(self) -> list[int]:
        out = []
        port = f":{self.ports['port']}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z" and int(fields[3]) == self.proc.pid:
                    out.append(int(name))
                    continue
                environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            if any(e.startswith(b"RAY_ADDRESS=") and e.endswith(port) for e in environ):
                out.append(int(name))
        return out

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s, to every process of this head (never another Ray's)."""
        if self.proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            for pid in self._processes():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self._processes() and time.monotonic() < deadline:
                time.sleep(0.5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def write_one_cell(home: Path, name: str) -> Path:
    """A forced_choice experiment ``name`` of one cell of the demo model (one pair, one envelope, one ordering);
    each one-cell step has its own, as a catalog holds one folder per experiment name."""
    folder = home / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(ONE_CELL_PAIRS)
    config = {"instrument": "forced_choice", "models": [{"model": f"packaged:{MODEL}", "dtype": "float32"}],
              "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"], "orderings": ["AB"]},
              "samples": 1, "temperature": 0.0, "max_tokens": 24, "seed": 1, "batch_size": 16, "actor_pool_size": 1}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class Walk:
    """The steps, their setup and the figures: ``run_step(name)`` runs one (and what it needs)."""

    def __init__(self, home: Path, timeout_s: float, asked: list[str]):
        self.home, self.timeout_s, self.asked = home, timeout_s, asked
        self.env = {**os.environ, "MIRRORSCAN_HOME": str(home), "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        for name in ("RAY_ADDRESS", "CI"):
            self.env.pop(name, None)
        self.logs = home / "bench-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.timings: list[Timing] = []
        self.outputs: dict[str, str] = {}
        self.failed: set[str] = set()
        self.head: Head | None = None

    def mirrorscan(self, step: str, *args: str, setup: bool = False, env: dict | None = None) -> bool:
        """Time ``mirrorscan ARGS``; record it; False (and its tail printed) when it failed."""
        timing, text = run(step, [str(BIN / "mirrorscan"), *args], env or self.env, self.timeout_s, setup,
                           self.logs / f"{step}.log")
        return self.record(timing, text)

    def record(self, timing: Timing, text: str) -> bool:
        self.timings.append(timing)
        self.outputs[timing.step] = text
        if timing.rc != 0 and timing.note.startswith("skipped"):
            self.failed.add(timing.step)
            print(f"SKIPPED {timing.step}: {timing.note}", file=sys.stderr)
            return False
        if timing.rc != 0:
            self.failed.add(timing.step)
            why = f"over its {self.timeout_s:.0f} s limit" if timing.rc == 124 else f"exit {timing.rc}"
            tail = "\n".join("    " + line for line in text.splitlines()[-15:])
            print(f"FAILED {timing.step} ({why}); its last lines (all in {self.logs}/{timing.step}.log):\n{tail}",
                  file=sys.stderr)
        print(f"  {timing.step:<16} {timing.wall_s:7.1f} s wall  rc {timing.rc}", file=sys.stderr, flush=True)
        return timing.rc == 0

    def done(self, step: str) -> bool:
        return step in self.outputs and step not in self.failed

    def run_step(self, step: str, setup: bool = False) -> bool:
        """Run ``step`` once (its needs first, as setup); whether it passed."""
        if step in self.outputs:
            return self.done(step)
        for need in NEEDS.get(step, []):
            if not self.run_step(need, setup=need not in self.asked):
                self.record(Timing(step, 0, 0, 0, 1, setup, f"skipped: {need} failed"), "")
                return False
        return getattr(self, "step_" + step.replace("-", "_"))(step, setup)

    def step_demo_scan(self, step, setup):
        return self.mirrorscan(step, "scan", "experiments/demo/", setup=setup)

    def step_demo_analyze(self, step, setup):
        return self.mirrorscan(step, "analyze", "experiments/demo/", setup=setup)

    def step_open_scan(self, step, setup):
        return self.mirrorscan(step, "scan", "experiments/open-scan-demo/", setup=setup)

    def step_flinch_scan(self, step, setup):
        return self.mirrorscan(step, "scan", "experiments/flinch-demo/", setup=setup)

    def step_lens_scan(self, step, setup):
        return self.mirrorscan(step, "scan", "experiments/lens-demo/", setup=setup)

    def step_analyze_open(self, step, setup):
        return self.mirrorscan(step, "analyze", "experiments/open-scan-demo/", setup=setup)

    def step_analyze_flinch(self, step, setup):
        return self.mirrorscan(step, "analyze", "experiments/flinch-demo/", setup=setup)

    def step_analyze_lens(self, step, setup):
        return self.mirrorscan(step, "analyze", "experiments/lens-demo/", setup=setup)

    def demo_invocation(self) -> str:
        found = re.search(r"mirrorscan-invocation: (\S+)", self.outputs.get("demo-scan", ""))
        return found.group(1) if found else ""

    def step_reproduce(self, step, setup):
        return self.mirrorscan(step, "reproduce", self.demo_invocation(), setup=setup)

    def step_sql(self, step, setup):
        found = re.search(r'^query:\s+mirrorscan sql "(.*)"\s*$', self.outputs.get("demo-scan", ""), re.M)
        if not found:
            self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no query in the demo scan's summary"), "")
            return False
        return self.mirrorscan(step, "sql", found.group(1), setup=setup)

    def step_report(self, step, setup):
        return self.mirrorscan(step, "report", "experiments/demo/", setup=setup)

    def started_head(self) -> Head | None:
        if self.head is None:
            self.head = Head(self.env, self.logs)
            try:
                took = self.head.start(min(self.timeout_s, 300))
            except RuntimeError as e:
                print(f"FAILED ray start --head: {e}", file=sys.stderr)
                self.head.stop()
                return None
            self.timings.append(Timing("ray start --head", took, 0, 0, 0, True, "until its job server answers"))
        return self.head

    def step_submit(self, step, setup):
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        return self.mirrorscan(step, "submit", "experiments/demo/", "--address", head.address, setup=setup)

    def step_one_cell_ray(self, step, setup):
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        folder = write_one_cell(self.home, "one-cell-ray")
        return self.mirrorscan(step, "scan", str(folder), "--ray-address", head.gcs, setup=setup)

    def step_engines_up(self, step, setup):
        """``mirrorscan engines up`` of the one-cell-warm experiment on the script's head."""
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        folder = write_one_cell(self.home, "one-cell-warm")
        return self.mirrorscan(step, "engines", "up", str(folder), "--address", head.gcs, setup=setup)

    def step_one_cell_warm(self, step, setup):
        """The one-cell scan with its warm engine up; fails unless ``engines list`` shows the engine answered the
        cell; the engines are stopped after it."""
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        ok = self.mirrorscan(step, "scan", str(self.home / "one-cell-warm"), "--ray-address", head.gcs, setup=setup)
        # the cell must have gone to the warm engine, not a model of its own
        return self.warm_engine_answered(step, head, ok, r" 1 \(1 cells\) ", "the warm engine answered no cell")

    def step_demo_ray(self, step, setup):
        """The demo's scan on the script's head, with the scan's own engine actor."""
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        return self.mirrorscan(step, "scan", "experiments/demo/", "--ray-address", head.gcs, setup=setup)

    def step_demo_warm(self, step, setup):
        """The demo's scan on the script's head with its warm engine up (started as untimed setup); fails unless the
        engine answered all of its cells; the engines are stopped after it."""
        head = self.started_head()
        if head is None:
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: no Ray head"), "")
        if not self.mirrorscan("demo-engines-up", "engines", "up", "experiments/demo/", "--address", head.gcs,
                               setup=True):
            return self.record(Timing(step, 0, 0, 0, 1, setup, "skipped: engines up failed"), "")
        ok = self.mirrorscan(step, "scan", "experiments/demo/", "--ray-address", head.gcs, setup=setup)
        return self.warm_engine_answered(step, head, ok, r" \d+ \(96 cells\) ",
                                         "the warm engine did not answer the 96 cells")

    def warm_engine_answered(self, step, head, ok, answered, failure):
        """``ok`` unless ``engines list`` lacks ``answered`` (a regex of its requests column), in which case the
        step is marked failed with ``failure``; the engines are stopped either way."""
        listed = subprocess.run([str(BIN / "mirrorscan"), "engines", "list", "--address", head.gcs], env=self.env,
                                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False).stdout
        if ok and not re.search(answered, listed):
            self.timings[-1].rc, self.timings[-1].note = 1, failure
            self.failed.add(step)
            print(f"FAILED {step}: {failure}:\n{listed}", file=sys.stderr)
            ok = False
        subprocess.run([str(BIN / "mirrorscan"), "engines", "down", "--all", "--address", head.gcs], env=self.env,
                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
        return ok

    def step_one_cell(self, step, setup):
        if self.head is not None:   # a Ray of its own: none other on this machine that it could join
            self.head.stop()
            self.head = None
        folder = write_one_cell(self.home, "one-cell")
        return self.mirrorscan(step, "scan", str(folder), setup=setup)

    def close(self) -> None:
        if self.head is not None:
            self.head.stop()
        subprocess.run([str(BIN / "mirrorscan"), "catalog", "stop"], env=self.env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)


def table(timings: list[Timing]) -> str:
    """The figures as one fixed-width table."""
    lines = [f"{'step':<18} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'tree CPU s':>11} {'tree RSS MiB':>13} "
             f"{'rc':>4}  note", "-" * 100]
    for t in timings:
        note = "; ".join(x for x in ("setup for a step asked for" if t.setup else "", t.note) if x)
        lines.append(f"{t.step:<18} {t.wall_s:8.1f} {t.cpu_s:8.1f} {t.peak_rss_mib:13.0f} {t.tree_cpu_s:11.1f} "
                     f"{t.tree_peak_rss_mib:13.0f} {t.rc:>4}  {note}")
    lines.append("CPU s, peak RSS: os.wait4 (the step's process and the children it reaped; RSS of the largest one). "
                 "tree: its process tree sampled every 0.5 s (Ray's processes a scan starts; not a submitted job's, "
                 "which run in the head's).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="steps: " + ", ".join(STEPS))
    p.add_argument("--only", action="append", choices=STEPS, metavar="STEP",
                   help="run this step (and, untimed, what it needs); repeat for several; default every step")
    p.add_argument("--timeout", type=float, default=900, help="seconds each step may run (default 900)")
    p.add_argument("--model", type=Path, default=ROOT / ".mirrorscan" / "models" / MODEL,
                   help="the converted demo model's folder, copied into the temporary home")
    p.add_argument("--keep", action="store_true", help="keep the temporary home (its path is printed)")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args(argv)
    if not (args.model / "config.json").exists():
        print(f"error: no converted demo model at {args.model}; run `make demo-model` (or pass --model)",
              file=sys.stderr)
        return 2
    asked = args.only or STEPS
    home = Path(tempfile.mkdtemp(prefix="newcomer-"))
    home.chmod(0o755)   # the catalog's PostgreSQL runs as its own system user when this runs as root: it must enter
    shutil.copytree(args.model, home / "models" / MODEL)
    print(f"home {home}  (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})", file=sys.stderr)
    walk = Walk(home, args.timeout, asked)
    try:
        for step in STEPS:
            if step in asked:
                walk.run_step(step)
    finally:
        walk.close()
        load = os.getloadavg()
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(table(walk.timings))
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"timings": [asdict(t) for t in walk.timings], "load_after": load}, indent=1))
    asked_failed = [t.step for t in walk.timings if t.rc != 0]
    return 1 if asked_failed else 0


if __name__ == "__main__":
    sys.exit(main())
