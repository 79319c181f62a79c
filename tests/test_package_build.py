"""The package builds the way ``make install`` builds it, quietly and whole: the wheel of the tracked files
holds every data file the parts read at run time (migrations, instrument data, browse's stylesheet, each
instrument's README), and the build backend warns about nothing in our configuration (no wall of "package
would be ignored" or deprecation notices on a newcomer's first ``make demo``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = ("cluster/catalog/migrations/", "results/browse/static/", "instruments/forced_choice/data/",
        "instruments/flinch/data/", "instruments/lens/data/", "instruments/open_scan/data/")
"""Folders whose every tracked file is read at run time from the installed package."""


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_wheel_holds_every_data_file_and_the_build_warns_about_nothing(tmp_path):
    source = tmp_path / "src"
    files = tracked()
    for rel in files:   # the tracked tree only: the build never writes into the shared checkout
        if (REPO / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, source / rel)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(tmp_path / "out"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    output = built.stdout + built.stderr
    assert "BuildBackendWarning" not in output and "SetuptoolsDeprecationWarning" not in output, output[-4000:]

    (wheel,) = (tmp_path / "out").glob("mirrorscan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [rel for rel in files if rel.startswith(DATA)]
    wanted += [rel for rel in files if rel.startswith("instruments/") and rel.count("/") == 2
               and rel.endswith("/README.md")]
    assert len(wanted) > 30
    missing = [rel for rel in wanted if f"mirrorscan/{rel}" not in names]
    assert not missing, f"tracked data files the wheel lacks (pyproject.toml packages / package-data): {missing}"


def test_make_install_shows_the_long_install_moving():
    """``make demo`` on a fresh machine starts with the dependency install (minutes of downloads): it says
    what it installs, and pip is not silenced for it (its lines and download bars are what moves on screen)."""
    plan = subprocess.run(["make", "-n", "-B", "install"], cwd=REPO, capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "MIRRORSCAN_HOME": "/nonexistent"}).stdout.splitlines()
    (deps,) = [line for line in plan if "pip install" in line and ".[cpu,dev]" in line]
    assert " -q" not in deps.split("#")[0], deps
    said = plan[plan.index(deps) - 1]
    assert said.startswith("echo ") and "minutes" in said, said
