"""``mirrorscan models prepare|list``: a packaged model is prepared as a step of its own, into
$MIRRORSCAN_HOME/models/, saying what it does and how long it took; a second run says it is already prepared.
Each test uses its own home; the demo model is linked into it (converting it again would take a minute), so
the tiny random model is what gets built here."""

from __future__ import annotations

import re

import pytest
from safetensors.numpy import load_file

from mirrorscan.cluster.models.resolve import resolve_model_source
from mirrorscan.cluster.models.tiny import build_tiny_random_model
from mirrorscan.jobs import cli


@pytest.fixture
def home(tmp_path, monkeypatch, demo_dir):
    """A fresh MIRRORSCAN_HOME holding only the (linked) prepared demo model."""
    root = tmp_path / "home"
    (root / "models").mkdir(parents=True)
    (root / "models" / demo_dir.name).symlink_to(demo_dir, target_is_directory=True)
    monkeypatch.setenv("MIRRORSCAN_HOME", str(root))
    return root


def test_prepare_builds_a_tiny_model_into_the_home_then_says_it_is_already_prepared(home, demo_dir, tmp_path, capsys):
    folder = home / "models" / "tiny-random-llama-2x32-s7"
    assert cli.main(["models", "prepare", "packaged:tiny-random-llama-2x32-s7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"models: preparing packaged:tiny-random-llama-2x32-s7 into {folder} …"
    assert re.fullmatch(rf"models: packaged:tiny-random-llama-2x32-s7 prepared in \d+\.\d s: {re.escape(str(folder))}",
                        out[1]), out
    # the folder holds that model: the same weights a build of that size and seed writes elsewhere
    expected = build_tiny_random_model(tmp_path / "expected", demo_dir, seed=7, layers=2, hidden=32)
    built, reference = load_file(folder / "model.safetensors"), load_file(expected / "model.safetensors")
    assert built.keys() == reference.keys() and all((built[k] == reference[k]).all() for k in built)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns

    assert cli.main(["models", "prepare", "tiny-random-llama-2x32-s7"]) == 0   # the prefix may be left out
    assert capsys.readouterr().out.strip() == f"models: packaged:tiny-random-llama-2x32-s7 is already prepared: {folder}"
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp   # nothing was built again

    assert cli.main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^packaged:smollm2-135m-instruct\s+prepared\s", listing, re.M), listing
    assert re.search(r"^packaged:tiny-random-llama\s+not prepared\s", listing, re.M), listing
    assert re.search(r"^packaged:tiny-random-llama-2x32-s7\s+prepared\s", listing, re.M), listing


def test_a_scan_that_must_prepare_a_model_says_so_in_one_line_first(home, capsys):
    source = resolve_model_source("packaged:tiny-random-llama-2x32-s8", "config.json", "models[0].model")
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "preparing model" in line]
    assert said == ["mirrorscan: preparing model packaged:tiny-random-llama-2x32-s8 once before its first use "
                    "(`mirrorscan models prepare packaged:tiny-random-llama-2x32-s8` does this ahead)"], err
    assert source == str(home / "models" / "tiny-random-llama-2x32-s8")
    resolve_model_source("packaged:tiny-random-llama-2x32-s8", "config.json", "models[0].model")
    assert "preparing" not in capsys.readouterr().err   # prepared: nothing to say


def test_a_name_that_is_no_packaged_model_is_one_line_and_exit_2(home, capsys):
    assert cli.main(["models", "prepare", "tiny-random-llama-2x30-s1"]) == 2   # width not a multiple of 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a packaged model" in err[0] and "packaged:tiny-random-llama-<blocks>x" in err[0]
    assert not (home / "models" / "tiny-random-llama-2x30-s1").exists()


def test_list_shows_every_packaged_model_a_shipped_experiment_names_once(home, capsys):
    """The lens design demo's two sized random Llamas were missing from a fresh home's list."""
    import json
    from pathlib import Path

    named = set()
    for config in (Path(__file__).resolve().parents[2] / "experiments").glob("*/config.json"):
        named |= {m["model"] for m in json.loads(config.read_text()).get("models", [])
                  if m["model"].startswith("packaged:")}
    assert {"packaged:tiny-random-llama-2x64-s1", "packaged:tiny-random-llama-4x96-s2"} <= named
    assert cli.main(["models", "list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert named <= set(listed) and len(listed) == len(set(listed)), listed


def test_the_docs_say_what_the_demo_models_preparation_time_depends_on():
    """It took 141 s on a busy machine where the docs said ~45 s: the docs and the help say what decides it."""
    from pathlib import Path

    from mirrorscan.jobs.models import HELP

    docs = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
    text = " ".join(docs.read_text().split())
    paragraph = text[text.index("**The demo model**"):text.index("## Local state")]
    assert all(word in paragraph for word in ("CPU", "busy", "disk", "idle")), paragraph
    assert all(word in " ".join(HELP.split()) for word in ("CPU", "load", "disk", "busy machine"))
