"""A scan whose engine needs a package this Python lacks is refused before anything is recorded: one line naming
the model, the missing package and the extra that installs it, no invocation row, nothing in the store.

vLLM is really hidden: the scan runs in a fresh process whose import system does not find it
(``tests/hidden_packages.py``), as on a machine where mirrorscan was installed without the ``cpu``/``gpu`` extra.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import new_database
from hidden_packages import hiding
from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.scan.preflight import check_engines
from mirrorscan.grid.spec import load_spec


def experiment(root: Path, backend: str, device: str = "cpu") -> Path:
    """A forced_choice experiment of one model on ``backend`` (its weights are never reached)."""
    folder = root / "exp"
    folder.mkdir()
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\ncat_dog,cat,dog\n", encoding="utf-8")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "forced_choice": {"probe_set": "pairs.csv"},
        "models": [{"model": "/models/m", "label": "m1", "backend": backend, "device": device}]}), encoding="utf-8")
    return folder


def scan_with_hidden(names: list[str], argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """``mirrorscan ARGV`` in a fresh process where the packages ``names`` cannot be found."""
    program = hiding(names) + f"""
import runpy
_sys.argv = ["mirrorscan", *{argv!r}]
runpy.run_module("mirrorscan.jobs.cli", run_name="__main__")
"""
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_a_vllm_model_without_vllm_is_refused_in_one_line_before_anything_is_recorded(tmp_path, pg_dsn):
    dsn = new_database(pg_dsn)
    store, home = tmp_path / "store", tmp_path / "home"
    store.mkdir()
    home.mkdir()
    exp = experiment(tmp_path, "vllm", device="cuda")
    proc = scan_with_hidden(["vllm"], ["scan", str(exp), "--store", str(store), "--catalog-dsn", dsn],
                            {"MIRRORSCAN_HOME": str(home), "RAY_ADDRESS": ""})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == (f"error: {exp / 'config.json'}: models[0].backend: m1's generate engine (backend 'vllm') "
                        "needs vLLM, and module 'vllm' is not installed in this Python — fix: install it with "
                        "pip install 'mirrorscan[gpu]'")
    assert list(store.iterdir()) == []
    with Catalog(dsn) as catalog:
        assert catalog.execute("SELECT count(*) FROM scan_invocations")[0][0] == 0


def test_the_extra_named_is_the_one_for_the_models_device(tmp_path):
    spec = load_spec(experiment(tmp_path, "vllm", device="cpu"))
    program = hiding(["vllm"]) + f"""
from mirrorscan.cluster.scan.preflight import check_engines
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec
try:
    check_engines(load_spec({spec.config_path!r}))
except ConfigError as exc:
    print(exc.fix)
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "install it with pip install 'mirrorscan[cpu]'", proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
def test_with_the_package_installed_the_check_passes(tmp_path):
    check_engines(load_spec(experiment(tmp_path, "vllm")))


def test_an_engine_that_needs_no_extra_passes_with_vllm_hidden(tmp_path):
    spec = load_spec(experiment(tmp_path, "hf"))
    program = hiding(["vllm"]) + f"""
from mirrorscan.cluster.scan.preflight import check_engines
from mirrorscan.grid.spec import load_spec
check_engines(load_spec({spec.config_path!r}))
print("passed")
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "passed", proc.stderr
