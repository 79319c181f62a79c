"""Where ``mirrorscan flinch compare`` writes its overlay radar: beside the first input file (a summary.json sits
in its analysis folder), never in whatever folder the command runs from, and never over an existing file."""

from __future__ import annotations

import json
import os

from mirrorscan.jobs.cli import main as cli

PNG = b"\x89PNG\r\n\x1a\n"


def summary(folder, model: str) -> str:
    """One model's result in the method's shape, as ``folder/summary.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "summary.json"
    path.write_text(json.dumps({"model": model, "total_flinch": 30.0, "corpus_sha256": "c" * 64,
                                "aggregation": "axis_lp_mean",
                                "axes": {k: {"label": k, "flinch": v, "terms": []} for k, v in (("x", 10.0), ("y", 20.0))}}))
    return str(path)


def test_the_radar_goes_beside_the_first_input_and_an_earlier_one_is_kept(tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    analysis = tmp_path / "store" / "exp" / "inv" / "analysis" / "flinch" / "stamp"
    a, b = summary(analysis, "a"), summary(tmp_path / "b", "b")
    assert cli(["flinch", "compare", a, b]) == 0
    first = analysis / "flinch-compare.png"
    assert f"radar: {first}" in capsys.readouterr().out and first.read_bytes()[:8] == PNG
    first.write_bytes(PNG + b"earlier")
    assert cli(["flinch", "compare", a, b]) == 0
    second = analysis / "flinch-compare-2.png"
    assert f"radar: {second}" in capsys.readouterr().out and second.read_bytes()[:8] == PNG
    assert first.read_bytes() == PNG + b"earlier"   # kept
    assert os.listdir(elsewhere) == []   # nothing in the current folder


def test_an_existing_out_file_is_refused_and_left_as_it_was(tmp_path, capsys):
    a = summary(tmp_path / "a", "a")
    out = tmp_path / "mine.png"
    out.write_bytes(b"mine")
    assert cli(["flinch", "compare", a, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: {out}: --out: already exists") and "fix: " in captured.err
    assert out.read_bytes() == b"mine"


def test_reference_rows_alone_chart_into_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli(["flinch", "compare", "reference:heretic-v2-9b", "--baseline", "reference:gemma-2-9b"]) == 0
    assert (tmp_path / "flinch-compare.png").read_bytes()[:8] == PNG
