"""The scan's progress bar through the command line: on by default where stderr is a terminal (a real
pseudo-terminal here), off by default in a pipe and in CI, and either way when a flag says so
(``cluster.scan.progress.bar_wanted``)."""

from __future__ import annotations

import json
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from mirrorscan.cluster.scan.records import Recording
from mirrorscan.cluster.scan.progress import FALLBACK_COLUMNS, LOG_TICK_S, RunProgress, bar_wanted, terminal_columns

REPO = Path(__file__).resolve().parents[2]


def one_cell_experiment(tmp_path: Path, tiny_dir: Path) -> Path:
    exp = tmp_path / "bar"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ntea_coffee,tea,coffee\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"], "orderings": ["AB"]},
        "samples": 1, "temperature": 0.0, "max_tokens": 4, "seed": 1, "batch_size": 4, "actor_pool_size": 1}))
    return exp


def scan_env(tmp_path: Path, catalog_dsn: str, **extra: str) -> dict:
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(tmp_path / "store"),
           "MIRRORSCAN_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": "", **extra}
    env.pop("CI", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def run_with_terminal_stderr(cmd: list[str], env: dict) -> tuple[int, str, str]:
    """Run ``cmd`` with stderr on a new pseudo-terminal that reports no size (0 × 0, as an unsized container or
    editor shell does; tqdm alone would draw an empty bar there), stdout a pipe; its exit code, stdout and
    what the terminal showed."""
    master, slave = pty.openpty()
    shown: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the last writer closed the terminal
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    out, _ = proc.communicate(timeout=600)
    reader.join(timeout=30)
    os.close(master)
    return proc.returncode, out, b"".join(shown).decode(errors="replace")


def test_a_scan_on_a_terminal_draws_the_bar_and_one_in_a_pipe_does_not(tmp_path, tiny_dir, catalog_dsn):
    exp = one_cell_experiment(tmp_path, tiny_dir)
    cmd = [sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(exp)]
    rc, out, terminal = run_with_terminal_stderr(cmd, scan_env(tmp_path, catalog_dsn))
    assert rc == 0, terminal[-3000:]
    assert "1 total · 1 ok" in out
    assert "scan bar" in terminal and "1/1" in terminal and "cell" in terminal, terminal[-3000:]

    piped = subprocess.run(cmd, cwd=REPO, env=scan_env(tmp_path, catalog_dsn), capture_output=True, text=True,
                           timeout=600)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "1 total · 1 ok" in piped.stdout
    assert "\r" not in piped.stderr and "1/1" not in piped.stderr and "scan bar" not in piped.stderr, piped.stderr


class Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("ci, tty, requested, wanted", [
    (None, True, None, True),          # a terminal, outside CI: drawn
    (None, False, None, False),        # a pipe or a file: not drawn
    ("true", True, None, False),       # CI (GitHub Actions, GitLab, … set CI=true): not drawn
    ("1", True, None, False),
    ("false", True, None, True),       # CI explicitly off
    ("true", False, True, True),       # --progress: drawn anyway
    (None, True, False, False),        # --no-progress
])
def test_the_bar_is_wanted_on_a_terminal_outside_ci_unless_a_flag_says_otherwise(monkeypatch, ci, tty, requested,
                                                                                 wanted):
    monkeypatch.delenv("CI", raising=False)
    if ci is not None:
        monkeypatch.setenv("CI", ci)
    assert bar_wanted(requested, Stream(tty)) is wanted


def test_a_real_terminal_counts_as_one():
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            assert bar_wanted(None, terminal) is (os.environ.get("CI", "").lower() in ("", "0", "false", "no"))
        with open(os.devnull, "w") as null:
            assert bar_wanted(None, null) is False
    finally:
        os.close(master)
        os.close(slave)


def stage_progress(experiment: str = "x") -> RunProgress:
    """A RunProgress over three cells of label ``a``, for a run that holds no lease and has no catalog."""
    recording = Recording(experiment, "", catalog=SimpleNamespace(connected=True, update_progress=lambda *a: None))
    return RunProgress(recording, pa.table({"label": ["a"] * 3}))


def drain(master: int) -> str:
    """Everything written to the terminal so far: reads until nothing more arrives within 0.5 s (one read may
    return only the first of several writes)."""
    import select

    chunks = []
    while select.select([master], [], [], 0.5)[0]:
        chunks.append(os.read(master, 65536))
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_of_no_size_gets_a_bar_of_the_fallback_width_and_a_sized_one_its_own(monkeypatch):
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            assert terminal_columns(terminal) == 0
            monkeypatch.setattr(sys, "stderr", terminal)
            progress = stage_progress("nosize")
            progress.on_part(1, 0, "a")
            progress.close()
            shown = drain(master)
            assert "scan nosize" in shown and "1/3" in shown, shown
            assert progress.bar.ncols == FALLBACK_COLUMNS
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 132, 0, 0))
            assert terminal_columns(terminal) == 132
        with open(os.devnull, "w") as null:
            assert terminal_columns(null) is None
    finally:
        os.close(master)
        os.close(slave)


def test_in_a_log_the_bar_writes_a_line_at_most_every_log_tick(monkeypatch, tmp_path):
    """A job's log (or --progress into a file) keeps each redraw as a line: ten parts landing over 1.5 s
    write the first and the last state, not ten lines."""
    with open(tmp_path / "job.log", "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        progress = RunProgress(stage_progress().recording, pa.table({"label": ["a"] * 10}))
        assert progress.tick_s == LOG_TICK_S
        for _ in range(10):
            time.sleep(0.15)
            progress.on_part(1, 0, "a")
        progress.close()
    draws = [d for d in (tmp_path / "job.log").read_text().replace("\n", "\r").split("\r") if d.strip()]
    assert len(draws) <= 3 and "10/10" in draws[-1], draws
