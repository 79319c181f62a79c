"""``scan --dry-run``: cells per model, a token bound, and what --resume would run — with nothing started or
written (no Ray, no engine, no embedded catalog, no file)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.jobs.dry_run import dry_run
from mirrorscan.cluster.scan.stages import grid_cells

REPO = Path(__file__).resolve().parents[2]
PAIRS = "pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\ntc,tea,coffee\n"


def experiment(tmp_path: Path, tiny_dir: Path) -> Path:
    exp = tmp_path / "dry"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice",
        "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 10},
                   {"model": "gpt-x", "backend": "openai", "endpoint": "http://127.0.0.1:9/v1", "label": "api"}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]},
        "samples": 2, "max_tokens": 32}))
    return exp


def files_under(*roots: Path) -> set[str]:
    return {str(p) for root in roots if root.exists() for p in root.rglob("*")}


def test_dry_run_counts_cells_and_bounds_tokens_and_starts_nothing(tmp_path, tiny_dir, monkeypatch, capsys):
    home, store = tmp_path / "home", tmp_path / "store"
    monkeypatch.setenv("MIRRORSCAN_HOME", str(home))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN", raising=False)
    exp = experiment(tmp_path, tiny_dir)
    before = files_under(tmp_path)
    dry_run(str(exp), store=str(store))
    out = capsys.readouterr().out
    per_model = 3 * 2 * 2 * 2   # pairs × envelopes × orderings × samples
    assert "tiny" in out and f"{per_model} cells" in out and f"≤ {per_model * 10} generated tokens (bound)" in out
    assert f"≤ {per_model * 32} generated tokens" in out          # the API model keeps the experiment's max_tokens
    assert f"{2 * per_model} cells" in out and "API model 'gpt-x' at http://127.0.0.1:9/v1" in out
    assert "not running" in out and "never starts it" in out
    assert files_under(tmp_path) == before                        # no home, no store, no catalog folder


def test_a_dry_run_imports_neither_ray_nor_an_engine(tmp_path, tiny_dir):
    exp = experiment(tmp_path, tiny_dir)
    code = ("import sys; from mirrorscan.jobs.dry_run import dry_run; "
            f"dry_run({str(exp)!r}, store={str(tmp_path / 'store')!r}); "
            "loaded = [m for m in ('ray', 'torch', 'vllm') if m in sys.modules]; print('loaded', loaded)")
    env = {**os.environ, "MIRRORSCAN_HOME": str(tmp_path / "home")}
    env.pop("MIRRORSCAN_CATALOG_DSN", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "loaded []" in proc.stdout and "dry run" in proc.stdout


def test_dry_run_reads_an_unfinished_invocation_and_says_what_resume_would_run(tmp_path, tiny_dir, catalog_dsn,
                                                                              capsys):
    exp, store = experiment(tmp_path, tiny_dir), str(tmp_path / "store")
    spec = load_spec(exp)
    spec = dataclasses.replace(spec, store=store)
    settings = spec.settings().to_json()
    invocation_id = str(uuid.uuid4())
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "dry", "instrument": "forced_choice",
                                   "settings": settings, "settings_hash": "x", "store_uri": store,
                                   "status": "interrupted", "counts": {}})
    cells = grid_cells(spec.settings()).slice(0, 5).to_pylist()
    rows = [{"probe_id": c["probe_id"], "sample": c["sample"], "invocation_id": invocation_id, "experiment": "dry",
             "error": None if i < 3 else "RuntimeError: boom"} for i, c in enumerate(cells)]
    open_store(store).write_part(to_trace_table(rows), "dry", invocation_id, "t")
    before = files_under(tmp_path)
    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn, max_attempts=1)
    out = capsys.readouterr().out
    total = 2 * 3 * 2 * 2 * 2
    # 3 cells are done; 2 have an error row and, with one attempt allowed, are given up
    assert f"invocation {invocation_id} (interrupted) would run {total - 5} cell(s); 2 given up" in out
    assert files_under(tmp_path) == before
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "interrupted"

    (exp / "config.json").write_text((exp / "config.json").read_text().replace('"samples": 2', '"samples": 3'))
    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn)
    assert "resume: refused — samples differ from the frozen settings" in capsys.readouterr().out


def test_a_changed_pair_file_blocks_resume_naming_the_file_not_the_fields_derived_from_it(tmp_path, tiny_dir,
                                                                                          catalog_dsn, capsys):
    """The refusal names the input whose content changed (the config key of the file), not the frozen
    fields computed from it, and does not tell the user to restore values that are not in config.json."""
    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.cluster.scan.inputs import content_hashes
    from mirrorscan.jobs.scan import run_scan

    exp, store = experiment(tmp_path, tiny_dir), str(tmp_path / "store")
    spec = load_spec(exp)
    spec = dataclasses.replace(spec, store=store)
    invocation_id = str(uuid.uuid4())
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "dry", "instrument": "forced_choice",
                                   "settings": spec.settings().to_json(), "settings_hash": "x", "store_uri": store,
                                   "content_hashes": content_hashes(spec), "status": "interrupted", "counts": {}})
    (exp / "pairs.csv").write_text(PAIRS + "sun_moon,sun,moon\n")   # one more pair: a different item set
    with pytest.raises(ConfigError) as info:
        run_scan(str(exp), resume=True, store=store, catalog_dsn=catalog_dsn, quiet=True)
    err = info.value
    assert err.field == "probe_set" and f"changed since invocation {invocation_id}" in str(err)
    assert "n_items" not in str(err) and "sha256" not in err.field and "config.json" not in err.fix
    assert "put the file back" in err.fix
    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn)
    out = capsys.readouterr().out
    assert "resume: refused — file content changed (probe_set SHA-256" in out and "n_items" not in out


def test_dry_run_from_the_command_line_exits_0_or_2(tmp_path, tiny_dir, monkeypatch, capsys):
    from mirrorscan.jobs import scan

    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN", raising=False)
    exp = experiment(tmp_path, tiny_dir)
    assert scan.main([str(exp), "--dry-run", "--store", str(tmp_path / "store")]) == 0
    assert "dry run" in capsys.readouterr().out
    (exp / "config.json").write_text(json.dumps({"instrument": "forced_choice", "models": [], "max_token": 3}))
    assert scan.main([str(exp), "--dry-run"]) == 2
    assert "error:" in capsys.readouterr().err


def test_as_names_an_experiment_whose_folder_name_is_not_a_name(tmp_path, tiny_dir, monkeypatch, capsys):
    """A folder called "my exp" is refused as a name, and the refusal points at ``--as``; with ``--as my-exp`` the
    folder is read under that name (the scan and its dry run alike): ``--as`` exists for exactly this."""
    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.jobs import scan

    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN", raising=False)
    exp = experiment(tmp_path, tiny_dir).rename(tmp_path / "my exp")
    with pytest.raises(ConfigError, match="experiment folder name.*--as NAME"):
        load_spec(exp)
    assert load_spec(exp, experiment="my-exp").experiment == "my-exp"
    with pytest.raises(ConfigError, match="--as"):
        load_spec(exp, experiment="my exp")   # the name given must itself be a name
    assert scan.main([str(exp), "--as", "my-exp", "--dry-run", "--store", str(tmp_path / "store")]) == 0
    assert "experiment my-exp " in capsys.readouterr().out
    assert scan.main([str(exp), "--dry-run", "--store", str(tmp_path / "store")]) == 2
    assert "--as" in capsys.readouterr().err
