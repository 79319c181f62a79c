"""A local Ray started by mirrorscan is closed to the network: during a scan, every listening socket of every
process of the run (the driver, GCS, raylet, agents, workers) is on a loopback address, and Ray's token
authentication is on, its token in a file only its owner can read and never in the environment by value."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def listening(pids: set[int]) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of ``pids``, from the OS's socket table."""
    import psutil

    out = set()
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.Error:
                name = "?"
            out.add((conn.laddr.ip, conn.laddr.port, name))
    return out


def descendants(pid: int) -> set[int]:
    """``pid`` and every process it started (Ray's GCS, raylet, agents and workers among them)."""
    import psutil

    try:
        me = psutil.Process(pid)
        return {pid} | {p.pid for p in me.children(recursive=True)}
    except psutil.Error:
        return set()


def is_loopback(address: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(address.removeprefix("::ffff:")).is_loopback


@pytest.mark.timeout(300)
def test_a_local_scan_listens_on_loopback_only_with_token_auth_on(tmp_path, tiny_dir, catalog_dsn):
    """``mirrorscan scan`` as a user runs it (a fresh process, no Ray settings in its environment); a watcher
    reads the socket table every 0.3 s while it runs."""
    import psutil

    exp = tmp_path / "fl"
    exp.mkdir()
    (exp / "corpus.json").write_text(json.dumps({"version": "t", "axes": {"a": {"label": "A", "terms": [
        {"word": w, "carriers": ["The story ended when the hero was {BLANK}."]} for w in ("gone", "home")]}}}))
    (exp / "config.json").write_text(json.dumps({"instrument": "flinch", "models": [{"model": str(tiny_dir)}],
                                                 "flinch": {"corpus": "corpus.json"}, "batch_size": 2}))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["MIRRORSCAN_HOME"] = str(home)
    proc = subprocess.Popen([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(exp), "--store", str(tmp_path / "store"),
                             "--catalog-dsn", catalog_dsn, "--quiet"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set = set()
    environments: list[dict] = []
    try:
        while proc.poll() is None:
            family = descendants(proc.pid)
            seen.update(listening(family))
            for pid in family:
                try:
                    p = psutil.Process(pid)
                    if p.name() in ("raylet", "gcs_server") or p.name().startswith("ray::"):
                        found = p.environ()
                        if found:   # agents retitle themselves over their environment block: nothing to read
                            environments.append({**found, "__name": p.name()})
                except psutil.Error:
                    pass
            time.sleep(0.3)
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    names = {name for _, _, name in seen}
    assert {"gcs_server", "raylet"} <= names, names   # the watcher really saw Ray's own processes
    assert any(n.startswith("ray::") for n in names), names
    open_sockets = sorted(s for s in seen if not is_loopback(s[0]))
    assert not open_sockets, f"listening beyond loopback: {open_sockets}"

    token_file = home / "ray-auth-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and len(token_file.read_text()) == 64
    read = {e["__name"] for e in environments}
    assert {"raylet", "gcs_server"} <= read and any(n.startswith("ray::") for n in read), read
    assert all(e.get("RAY_AUTH_MODE") == "token" for e in environments)
    assert all(e.get("RAY_AUTH_TOKEN_PATH") == str(token_file) for e in environments)
    assert not any(token_file.read_text() in json.dumps(e) for e in environments)   # by path, never by value
