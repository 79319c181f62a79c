"""The home folder is found the same way from any working folder, and ``mirrorscan catalog status|stop``
reports and stops the embedded catalog server of that home (a real PostgreSQL)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mirrorscan.cluster.catalog import embedded_pg
from mirrorscan.cluster.home import PROJECT_FOLDER, locate_home, user_data_home

MIRRORSCAN = str(Path(sys.executable).parent / "mirrorscan")


def test_the_nearest_project_folder_above_the_working_folder_is_the_home(tmp_path, monkeypatch):
    monkeypatch.delenv("MIRRORSCAN_HOME", raising=False)
    (tmp_path / "proj" / PROJECT_FOLDER).mkdir(parents=True)
    deep = tmp_path / "proj" / "experiments" / "demo"
    deep.mkdir(parents=True)
    assert locate_home(deep) == tmp_path / "proj" / PROJECT_FOLDER
    assert locate_home(tmp_path / "proj") == tmp_path / "proj" / PROJECT_FOLDER
    (deep / PROJECT_FOLDER).mkdir()   # a nearer one wins
    assert locate_home(deep) == deep / PROJECT_FOLDER
    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "elsewhere"))   # the variable wins over both
    assert locate_home(deep) == tmp_path / "elsewhere"


def test_without_a_project_folder_the_home_is_the_per_user_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("MIRRORSCAN_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    lonely = Path(tempfile.mkdtemp(prefix="no-home-"))   # under /tmp: no .mirrorscan above it
    try:
        found = locate_home(lonely)
        assert found == user_data_home()
        if os.geteuid() == 0:   # root's own home is closed to the catalog's system user
            assert found == Path("/var/lib/mirrorscan")
        else:
            assert found == tmp_path / "xdg" / "mirrorscan"
        assert not found.exists() or found.is_dir()   # located, never created by locating
    finally:
        shutil.rmtree(lonely)


@pytest.fixture
def home_with_catalog():
    """A home folder (outside pytest's 0700 tmp folders: the server may run as another user) whose embedded
    catalog runs; stopped and removed after the test."""
    base = Path(tempfile.mkdtemp(prefix="mirrorscan-home-"))
    base.chmod(0o755)
    home = base / PROJECT_FOLDER
    home.mkdir()
    try:
        yield home, embedded_pg.ensure_running(home / "catalog", durable=False)
    finally:
        embedded_pg.stop(home / "catalog")
        shutil.rmtree(base, ignore_errors=True)


def run_cli(*args, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MIRRORSCAN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_catalog_status_and_stop_from_a_subfolder_of_the_project(home_with_catalog):
    home, dsn = home_with_catalog
    sub = home.parent / "experiments" / "demo"
    sub.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MIRRORSCAN_HOME", "MIRRORSCAN_CATALOG_DSN")}
    pid, port = embedded_pg.server_process(home / "catalog")

    status = run_cli("catalog", "status", cwd=sub, env=env)
    assert status.returncode == 0, status.stderr
    assert f"home:    {home}" in status.stdout and f"running, pid {pid}, port {port}" in status.stdout
    assert dsn in status.stdout and "note:" not in status.stdout

    pointed = run_cli("catalog", "status", cwd=sub, env={**env, "MIRRORSCAN_CATALOG_DSN":
                                                         "postgresql://u:hunter2@db.example:5432/x"})
    assert "runs use postgresql://u@db.example:5432/x" in pointed.stdout and "hunter2" not in pointed.stdout

    stopped = run_cli("catalog", "stop", cwd=sub, env=env)
    assert stopped.returncode == 0 and f"stopped (pid {pid}" in stopped.stdout, stopped.stderr
    assert embedded_pg.server_process(home / "catalog") is None   # no live postgres (a zombie may linger)
    after = run_cli("catalog", "status", cwd=sub, env=env)
    assert "server:  not running" in after.stdout
    assert run_cli("catalog", "stop", cwd=sub, env=env).stdout.startswith("catalog: not running")
    assert run_cli("catalog", "restart", cwd=sub, env=env).returncode == 2   # argparse names the choices
