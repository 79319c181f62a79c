"""What the machine refuses is one line naming the path and the fix, exit 2, and nothing half-written: a CSV
field too large to read, a config whose numbers or nesting cannot be read, a full disk, a read-only store
for ``analyze`` and ``report``, a read-only home.

The disks are real: each command runs in a private mount namespace (``unshare --mount``) where the store
or the home is a read-only bind mount of itself or a tiny full tmpfs, so the test's own files and the
machine's mounts are untouched (a read-only folder made by chmod would not stop root, who runs the tests
here). The store and catalog are written as scans write them (``tests/store_world.py``)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import new_database

import store_world as world  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
UNSHARE = ["unshare", "--mount", "--propagation", "private"] + (["--map-root-user"] if os.geteuid() else [])


def namespaces_work() -> bool:
    """Whether this machine lets a process mount in a namespace of its own (root, or user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*UNSHARE, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not namespaces_work(), reason="no mount namespace here (unshare --mount)")


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path → hex digest), hidden files included."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def read_only(folder: Path) -> str:
    """Shell commands that make ``folder`` a read-only bind mount of itself (in the namespace)."""
    f = shlex.quote(str(folder))
    return f"mount --bind {f} {f} && mount -o remount,bind,ro {f} {f}"


def full_disk(folder: Path, size: str = "4m") -> str:
    """Shell commands that put ``folder``'s content on a tmpfs of ``size`` and fill what is left (in the
    namespace): reads work, the next write gets ENOSPC."""
    f, keep = shlex.quote(str(folder)), shlex.quote(str(folder) + ".copy")
    return (f"cp -a {f} {keep} && mount -t tmpfs -o size={size} tmpfs {f} && cp -a {keep}/. {f}/ && "
            f"rm -rf {keep} && (dd if=/dev/zero of={f}/.filler bs=4k 2>/dev/null || true)")


def mirrorscan(argv: list[str], *, setup: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """``mirrorscan ARGV`` in a fresh process, after ``setup`` (mount commands) in its own mount namespace."""
    command = shlex.join([sys.executable, "-m", "mirrorscan.jobs.cli", *argv])
    script = f"set -e; {setup + '; ' if setup else ''}exec {command}"
    return subprocess.run([*UNSHARE, "sh", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=600)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def made(tmp_path, pg_dsn):
    """A store holding one complete forced_choice invocation and a catalog naming it (``tests/store_world.py``)."""
    dsn = new_database(pg_dsn)
    return {**world.build(tmp_path, dsn), "dsn": dsn, "tmp": tmp_path}


def analysis_folders(made) -> list[Path]:
    base = made["store_dir"] / world.EXPERIMENT / made["invocation_id"] / "analysis"
    return sorted(p for p in base.rglob("*") if p.is_dir()) if base.exists() else []


# ---- input that cannot be read -------------------------------------------------------------------------

def write_experiment(folder: Path, config: dict, pairs: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "pairs.csv").write_text(pairs, encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


FC = {"instrument": "forced_choice", "models": [{"model": "/models/m", "label": "m1"}],
      "forced_choice": {"probe_set": "pairs.csv"}}


def test_a_csv_field_larger_than_the_reader_takes_is_one_line_naming_file_and_line(tmp_path):
    huge = "pair_id,word_a,word_b\nok,cat,dog\nbig," + "a" * 200_000 + ",b\n"
    exp = write_experiment(tmp_path / "exp", FC, huge)
    line = one_error_line(mirrorscan(["scan", str(exp), "--dry-run"]))
    assert f"{exp / 'pairs.csv'}: line 3: cannot be read as CSV" in line and "131072" in line
    assert "a" * 100 not in line   # the field is not echoed
    unclosed = "pair_id,word_a,word_b\nok,cat,dog\nbad,\"" + "b" * 150_000 + "\n"
    exp2 = write_experiment(tmp_path / "exp2", FC, unclosed)
    assert "close the quote" in one_error_line(mirrorscan(["scan", str(exp2), "--dry-run"]))


def test_a_quote_left_open_is_named_as_such_on_the_line_it_opens(tmp_path):
    """A short field whose quote never closes: csv reads the rest of the file into it, and the row was reported as
    having too few columns ("has 2 columns") instead of the open quote."""
    from mirrorscan.grid.errors import ConfigError, csv_rows

    exp = write_experiment(tmp_path / "exp", FC, 'pair_id,word_a,word_b\nok,cat,dog\nbad,"cat,dog\nsea_sky,sea,sky\n')
    line = one_error_line(mirrorscan(["scan", str(exp), "--dry-run"]))
    assert f"{exp / 'pairs.csv'}: line 3: has a quote left open" in line and "columns" not in line, line
    for dict_rows in (False, True):   # lens reads rows as dicts
        with pytest.raises(ConfigError, match="f.csv: line 2: has a quote left open"):
            csv_rows('a,b\nx,"y\nz,w\n', "f.csv", dict_rows)
    assert csv_rows('a,b\n"x\ny",z\nq"r,s\n', "f.csv") == [["a", "b"], ["x\ny", "z"], ['q"r', "s"]]   # closed, or literal


@pytest.mark.parametrize("body,problem", [
    ('{"instrument": "forced_choice", "samples": ' + "9" * 5000 + "}", "holds a number too long to read"),
    ("[" * 100_000 + "]" * 100_000, "nests arrays or objects too deeply to read"),
])
def test_a_config_whose_numbers_or_nesting_cannot_be_read_is_one_line(tmp_path, body, problem):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "config.json").write_text(body, encoding="utf-8")
    line = one_error_line(mirrorscan(["scan", str(exp), "--dry-run"]))
    assert f"{exp / 'config.json'}: (file): {problem}" in line


# ---- disks that refuse writes --------------------------------------------------------------------------

@needs_mounts
@pytest.mark.parametrize("verb", ["analyze", "report"])
def test_a_read_only_store_is_one_line_and_nothing_is_written(made, verb):
    before = tree(made["store_dir"])
    proc = mirrorscan([verb, made["invocation_id"], "--catalog-dsn", made["dsn"]], setup=read_only(made["store_dir"]))
    line = one_error_line(proc)
    assert str(made["store_dir"]) in line and "read-only file system" in line and "--store" in line
    assert tree(made["store_dir"]) == before


@needs_mounts
@pytest.mark.parametrize("verb", ["analyze", "report"])
def test_a_full_disk_is_one_line_and_leaves_no_half_written_analysis(made, verb):
    before = tree(made["store_dir"])
    proc = mirrorscan([verb, made["invocation_id"], "--catalog-dsn", made["dsn"]], setup=full_disk(made["store_dir"]))
    line = one_error_line(proc)
    assert str(made["store_dir"]) in line and "no space is left" in line
    assert tree(made["store_dir"]) == before   # the full disk was the namespace's; the real store is untouched


def test_an_analysis_folder_is_complete_or_absent(made, tmp_path):
    """In-process: the first write of an analysis folder that fails (here: a file name the disk refuses)
    leaves no folder and no temporary behind; a good one appears whole, under its final name."""
    from mirrorscan.cluster.store.traces import open_store

    store = open_store(str(made["store_dir"]))
    inv = made["invocation_id"]
    with pytest.raises(OSError):
        store.write_analysis_folder(world.EXPERIMENT, inv, "fc/one", {"summary.json": b"{}", "x" * 300 + ".png": b"1"})
    assert analysis_folders(made) == [made["store_dir"] / world.EXPERIMENT / inv / "analysis" / "fc"]
    assert not list((made["store_dir"] / world.EXPERIMENT / inv / "analysis" / "fc").iterdir())
    paths = store.write_analysis_folder(world.EXPERIMENT, inv, "fc/two", {"summary.json": b"{}", "t.parquet": b"P"})
    assert [Path(p).name for p in paths] == ["summary.json", "t.parquet"]
    assert sorted(p.name for p in (made["store_dir"] / world.EXPERIMENT / inv / "analysis" / "fc").iterdir()) == ["two"]


@needs_mounts
def test_a_read_only_home_is_one_line_naming_it(made, tmp_path):
    """``browse`` keeps its index under the home; ``sql`` without a DSN starts the embedded catalog there."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"MIRRORSCAN_HOME": str(home)}
    before = tree(home)
    for argv in (["browse", "--catalog-dsn", made["dsn"], "--port", "1"], ["sql", "SELECT 1"]):
        env_here = {**env, "MIRRORSCAN_CATALOG_DSN": ""}
        line = one_error_line(mirrorscan(argv, setup=read_only(home), env=env_here))
        assert str(home) in line and ("read-only file system" in line or "MIRRORSCAN_HOME" in line), (argv, line)
    assert tree(home) == before


@needs_mounts
@pytest.mark.parametrize("disk,problem", [("read-only", "Read-only file system"), ("full", "No space left on device")])
def test_a_scan_with_a_read_only_or_full_home_refuses_before_recording_anything(tmp_path, tiny_dir, pg_dsn, disk,
                                                                                problem):
    """A local scan's Ray keeps its token under the home: a home it cannot write is refused before the catalog
    or the store hold anything of the run."""
    from mirrorscan.cluster.catalog.client import Catalog

    dsn = new_database(pg_dsn)
    home, store = tmp_path / "home", tmp_path / "store"
    home.mkdir()
    store.mkdir()
    exp = write_experiment(tmp_path / "exp", {**FC, "models": [{"model": str(tiny_dir), "label": "tiny"}]},
                           "pair_id,word_a,word_b\ncat_dog,cat,dog\n")
    setup = read_only(home) if disk == "read-only" else full_disk(home)
    proc = mirrorscan(["scan", str(exp), "--store", str(store), "--catalog-dsn", dsn], setup=setup,
                      env={"MIRRORSCAN_HOME": str(home), "RAY_ADDRESS": ""})
    line = one_error_line(proc)
    assert line.startswith(f"error: {home}: MIRRORSCAN_HOME: cannot be written ({problem})"), line
    assert tree(store) == {} and tree(home) == {}
    with Catalog(dsn) as catalog:
        assert catalog.execute("SELECT count(*) FROM scan_invocations")[0][0] == 0
