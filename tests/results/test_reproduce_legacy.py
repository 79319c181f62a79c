"""Reproduce rebuilds the spec of an invocation stored by older code (tests/fixtures/legacy_fc: settings format
1, a catalog made by the old migrations) and says what it cannot restore."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"
REPO = Path(__file__).resolve().parents[2]


def test_the_legacy_spec_is_rebuilt_with_what_cannot_be_restored(legacy, demo_dir):
    from mirrorscan.grid.settings import shaping_differences, upgrade
    from mirrorscan.results.reproduce import ITEMS_FROM_FILES, plan

    root, dsn = legacy
    p = plan(FINISHED, dsn=dsn)
    frozen = p.original.row["settings"]
    assert frozen["format"] == 1
    rebuilt = p.spec.settings().to_json()
    assert rebuilt["format"] == 2 and shaping_differences(frozen, rebuilt) == []   # every shaping field restored
    # (its hash is not the old one: today's model entries also name add_bos and tokenizer, as null)
    assert rebuilt["instrument_settings"] == upgrade(frozen)["instrument_settings"]
    assert [m.label for m in p.spec.models] == ["smollm2-135m-instruct"] and p.spec.models[0].dtype == "float32"
    assert (p.spec.seed, p.spec.batch_size, p.spec.max_tokens) == (7, 4, 12)
    assert p.spec.store == str(root / "store")
    assert p.items_from == ITEMS_FROM_FILES and p.cells is None and p.n_cells == 12   # the pair file still matches
    assert p.model_sources["smollm2-135m-instruct"] == str(demo_dir)
    warnings = "\n".join(p.warnings)
    assert "model smollm2-135m-instruct: weights unknown (the original recorded no weight identity" in warnings
    assert "git: the original ran commit 086397ef65ffa8d15cf8deeeaf338a4027701f28" in warnings
    assert any(w.startswith("package ") for w in p.warnings)   # its versions are not today's (torch 2.13.0+cpu …)
    assert p.submitted == {"reproduces": FINISHED}   # no config file was recorded before migration 0004


def test_a_changed_pair_file_makes_the_legacy_plan_use_the_stored_coordinates(legacy, demo_dir):
    from mirrorscan.results.reproduce import ITEMS_FROM_TRACES, plan

    root, dsn = legacy
    pairs = root / "experiments" / "legacy_fc" / "pairs.csv"
    pairs.write_text(pairs.read_text() + "rum_gin,rum,gin\n")
    p = plan(FINISHED, dsn=dsn)
    assert p.items_from == ITEMS_FROM_TRACES
    assert any(w.startswith(f"items: {pairs}: probe_set: changed since the invocation was frozen") or
               ("changed since the invocation was frozen" in w and "stored in the traces" in w) for w in p.warnings)
    stored = p.original.traces
    assert sorted(zip(p.cells["probe_id"].to_pylist(), p.cells["sample"].to_pylist())) == \
        sorted(set(zip(stored["probe_id"].to_pylist(), stored["sample"].to_pylist())))
    assert p.n_cells == 12 and "rum" not in set(p.cells["word_a"].to_pylist())


def test_the_cli_dry_run_prints_the_rebuilt_spec(legacy, demo_dir):
    root, dsn = legacy
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "reproduce", FINISHED[:8], "--dry-run", "--catalog-dsn", dsn],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"reproduce {FINISHED}  experiment legacy_fc  instrument forced_choice  (settings format 1)" in out
    assert "12 cells from the item files; samples 1, seed 7, batch_size 4" in out
    assert "warning: model smollm2-135m-instruct: weights unknown" in out
