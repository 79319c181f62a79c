"""Size limits: every capped value is refused above its limit with one ConfigError, the grid's size is
checked by arithmetic before any cell exists, and a raised limit is recorded in the frozen settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.limits import ENV, LIMITS
from mirrorscan.grid.settings import settings_hash
from mirrorscan.grid.spec import load_spec
from test_spec import make_experiment

ROOT = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, config: dict, name: str = "exp") -> Path:
    """An experiment folder with test_spec's two pairs (the same helper, not a copy)."""
    return make_experiment(tmp_path, config, name=name)


def fc(**overrides) -> dict:
    config = {"instrument": "forced_choice", "models": [{"model": "/models/Some-Model", "label": "m1"}],
              "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]}}
    config.update(overrides)
    return config


def refused(tmp_path: Path, config: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_spec(experiment(tmp_path, config))
    return info.value


@pytest.fixture(autouse=True)
def _no_env_limits(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.mark.parametrize("key", ["samples", "batch_size", "actor_pool_size", "max_tokens"])
def test_each_top_level_size_is_refused_one_above_its_limit_and_accepted_at_it(tmp_path, key):
    cap = LIMITS[key].default
    assert getattr(load_spec(experiment(tmp_path, fc(**{key: cap}), "at")), key) == cap
    err = refused(tmp_path, fc(**{key: cap + 1}))
    assert err.field == key and str(cap) in err.problem and '"limits"' in err.fix
    assert "\n" not in str(err)


def test_a_models_max_tokens_and_pool_bounds_are_capped(tmp_path):
    err = refused(tmp_path, fc(models=[{"model": "/m", "label": "m1", "max_tokens": 10 ** 12}]))
    assert err.field == "models[0].max_tokens"
    err = refused(tmp_path, fc(models=[{"model": "/m", "label": "m1", "max_actors": 10 ** 6}]))
    assert err.field == "models[0].max_actors"


@pytest.mark.parametrize("instrument,section,key", [
    ("lens", {"positive": "deployment"}, "null_permutations"),
    ("lens", {"positive": "deployment"}, "contrastive_permutations"),
    ("lens", {"positive": "deployment"}, "bootstrap_draws"),
    ("flinch", {"corpus": "packaged:starter"}, "proxy_samples"),
])
def test_instrument_sizes_are_capped_before_the_instrument_reads_its_files(tmp_path, instrument, section, key):
    limit = {"contrastive_permutations": "null_permutations"}.get(key, key)
    config = {"instrument": instrument, "models": [{"model": "/m", "label": "m1"}],
              instrument: {**section, key: LIMITS[limit].default + 1}}
    err = refused(tmp_path, config)
    assert err.field == f"{instrument}.{key}" and "above the limit" in err.problem


def test_the_grid_size_is_checked_by_arithmetic_before_any_cell_is_built(tmp_path):
    """100 models × 8 cells × 100000 samples = 8e7 cells, each allowed alone: refused in well under the memory
    the cells would take (the address space is capped at 2 GiB in a child process)."""
    models = [{"model": "/m", "label": f"m{i}"} for i in range(100)]
    folder = experiment(tmp_path, fc(models=models, samples=LIMITS["samples"].default))
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "from mirrorscan.grid.spec import load_spec\nfrom mirrorscan.grid.errors import ConfigError\n"
            f"try:\n    load_spec({str(folder)!r})\nexcept ConfigError as e:\n    print(e.field, e.problem)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("(grid) is 80000000, above the limit of 5000000")


def test_a_raised_limit_is_accepted_and_recorded_unhashed(tmp_path, monkeypatch):
    big = LIMITS["samples"].default + 1
    spec = load_spec(experiment(tmp_path, fc(samples=big, limits={"samples": big}), "raised"))
    settings = spec.settings().to_json()
    assert settings["execution"]["limits"] == {"samples": big}
    assert "limits" not in settings and spec.samples == big
    plain = load_spec(experiment(tmp_path / "p", fc(samples=3))).settings().to_json()
    assert "limits" not in plain["execution"]
    # a raised limit that the grid does not need still changes nothing that shapes results
    a = load_spec(experiment(tmp_path / "p", fc(samples=3, limits={"batch_size": 9000}))).settings().to_json()
    assert settings_hash(a) == settings_hash(plain) and a["execution"]["limits"] == {"batch_size": 9000}
    # the environment raises it on this machine; the config's object wins where both name one
    monkeypatch.setenv(ENV, "samples=200000, grid_cells=9e6")
    spec = load_spec(experiment(tmp_path, fc(samples=big), "env"))
    assert spec.settings().to_json()["execution"]["limits"] == {"samples": 200000, "grid_cells": 9000000}


@pytest.mark.parametrize("limits,field", [({"sample": 5}, "limits.sample"), ({"samples": 0}, "limits.samples"),
                                          ({"samples": "many"}, "limits.samples"), ([1], "limits")])
def test_a_malformed_limits_object_is_refused(tmp_path, limits, field):
    assert refused(tmp_path, fc(limits=limits)).field == field


def test_a_malformed_environment_variable_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "samples")
    assert refused(tmp_path, fc()).field == ENV
    monkeypatch.setenv(ENV, "samples=-3")
    assert refused(tmp_path, fc()).field == f"{ENV}:samples"


def test_dry_run_and_scan_refuse_the_same_huge_max_tokens_with_exit_2(tmp_path):
    """``max_tokens: 10**12`` on an API model (no local context window to compare with): both refuse it."""
    config = fc(models=[{"model": "gpt-x", "label": "api", "backend": "openai",
                         "endpoint": "http://127.0.0.1:9/v1"}], max_tokens=10 ** 12)
    folder = experiment(tmp_path, config)
    env = {"MIRRORSCAN_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    for extra in (["--dry-run"], []):
        out = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(folder), *extra], capture_output=True,
                             text=True, cwd=ROOT, env=env, timeout=300)
        assert out.returncode == 2, (extra, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "max_tokens: is 1000000000000, above the limit" in lines[0], (extra, lines)
    assert not (tmp_path / "home" / "store").exists()



def test_dry_run_refuses_a_max_tokens_past_a_local_models_context_window_as_scan_does(tmp_path, tiny_dir):
    """Under the limit but past the tiny model's context window: the same check, the same line, in both."""
    import json as _json

    context = _json.loads((tiny_dir / "config.json").read_text())["max_position_embeddings"]
    folder = experiment(tmp_path, fc(models=[{"model": str(tiny_dir), "label": "tiny"}], max_tokens=context + 10))
    env = {**__import__("os").environ, "MIRRORSCAN_HOME": str(tmp_path / "home"), "RAY_ADDRESS": ""}
    lines = []
    for extra in (["--dry-run"], ["--catalog-dsn", "postgresql://nobody@127.0.0.1:1/none"]):
        out = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(folder), *extra], capture_output=True,
                             text=True, cwd=ROOT, env=env, timeout=300)
        assert out.returncode == 2, (extra, out.stderr)
        lines.append(out.stderr.strip())
    assert lines[0] == lines[1] and f"max_tokens: is {context + 10}, but" in lines[0] and "context window" in lines[0]
