"""Packaging promises: imports stay light, every engine in the registry loads, the CLIs explain themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mirrorscan.actors.registry import ENGINES, engine_class

REPO = Path(__file__).resolve().parents[1]
MIRRORSCAN = str(Path(sys.executable).parent / "mirrorscan")


def test_importing_packages_imports_neither_torch_nor_vllm():
    code = ("import sys, grid, grid.spec, grid.cells, cluster.store.traces, cluster.catalog.client, cluster.scan.pipeline, "
            "cluster.models.resolve, actors.registry, jobs.scan, jobs.sql, jobs.cli, analysis; "
            "bad = [m for m in ('torch', 'vllm', 'transformers') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind, backend", sorted(ENGINES))
def test_every_registered_engine_imports_and_is_callable(kind, backend):
    from mirrorscan.grid.instrument import ENGINE_KINDS

    assert kind in ENGINE_KINDS
    cls = engine_class(backend, kind)
    assert callable(getattr(cls, "__call__", None)) and cls.__init__.__doc__


def test_a_backend_without_an_engine_of_the_kind_is_a_config_error():
    from mirrorscan.grid.errors import ConfigError

    with pytest.raises(ConfigError, match="has no 'activations' engine"):
        engine_class("anthropic", "activations")


@pytest.mark.parametrize("argv, expected", [
    ([MIRRORSCAN, "--help"], "verbs:"),
    ([MIRRORSCAN, "scan", "--help"], "--resume   finishes the newest unfinished invocation"),
    ([sys.executable, "-m", "mirrorscan.jobs.scan", "--help"], "Rerun semantics"),
    ([MIRRORSCAN, "sql", "--help"], "experiment_version"),
    ([MIRRORSCAN, "prepare-demo", "--help"], "demo"),
])
def test_help_explains(argv, expected):
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and expected in proc.stdout, proc.stdout + proc.stderr


def test_unknown_verb_exits_2():
    proc = subprocess.run([MIRRORSCAN, "frobnicate"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2


def test_options_before_the_verb_belong_to_the_verb():
    from mirrorscan.jobs.cli import verb_first

    assert verb_first(["--store", "/s", "sql", "SELECT 1"]) == ["sql", "--store", "/s", "SELECT 1"]
    assert verb_first(["sql", "--store", "/s", "SELECT 1"]) == ["sql", "--store", "/s", "SELECT 1"]
    assert verb_first(["--help"]) == ["--help"] and verb_first(["--store", "/s"]) == ["--store", "/s"]


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in (REPO / "experiments").glob("*/config.json")))
def test_every_shipped_experiment_loads(folder):
    from mirrorscan.grid.spec import load_spec

    spec = load_spec(REPO / "experiments" / folder)
    assert spec.experiment == folder and spec.instrument.n_items(spec.instrument_spec) > 0
