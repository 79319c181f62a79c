"""``mirrorscan flinch compare``: per-axis tables, totals over the common axes only, the baseline's
differences, warnings for other corpora or aggregations, and one-line errors for bad files."""

from __future__ import annotations

import json

import pytest

from grid.errors import ConfigError
from instruments.flinch.compare import compare, format_table
from jobs.cli import main as cli


def result(model: str, flinch: dict, corpus: str = "c" * 64, aggregation: str = "axis_lp_mean") -> dict:
    """One model's result in the method's shape (plus our corpus hash and aggregation)."""
    return {"model": model, "total_flinch": sum(flinch.values()), "corpus_sha256": corpus,
            "aggregation": aggregation,
            "axes": {k: {"label": k.title(), "flinch": v, "terms": []} for k, v in flinch.items()}}


def write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_totals_are_over_the_axes_every_input_has_and_the_rest_is_named(tmp_path):
    summary = write(tmp_path / "summary.json", {"corpus_sha256": "c" * 64, "aggregation": "axis_lp_mean",
                                                "models": [result("a", {"x": 10.0, "y": 20.0, "z": 30.0}),
                                                           result("b", {"x": 15.0, "y": 5.0, "z": 1.0})]})
    single = write(tmp_path / "c.json", result("c", {"x": 40.0, "y": 2.0}))
    out = compare([summary, single])
    assert out["common_axes"] == ["x", "y"]
    assert [(r["model"], r["total"]) for r in out["rows"]] == [("a", 30.0), ("b", 20.0), ("c", 42.0)]
    assert out["warnings"] == ["axes left out of the comparison (not in every input): z"]
    text = format_table(out)
    assert "2 common axes (x, y)" in text and "warning: axes left out" in text


def test_the_baseline_gives_each_model_its_difference_per_axis_and_in_total(tmp_path):
    runs = write(tmp_path / "runs.json", result("m", {"x": 12.5, "y": 30.0}))
    base = write(tmp_path / "base.json", result("base", {"x": 10.0, "y": 35.0}))
    out = compare([runs], baseline=base)
    row = out["rows"][0]
    assert row["delta_axes"] == {"x": 2.5, "y": -5.0} and row["delta_total"] == -2.5
    assert "12.5 (+2.5)" in format_table(out) and "[baseline]" in format_table(out)
    two = write(tmp_path / "two.json", {"models": [result("p", {"x": 1.0}), result("q", {"x": 2.0})]})
    with pytest.raises(ConfigError, match="holds 2 models"):
        compare([runs], baseline=two)


def test_other_corpora_and_aggregations_are_warnings_not_silence(tmp_path):
    a = write(tmp_path / "a.json", result("m", {"x": 1.0}))
    b = write(tmp_path / "b.json", result("m", {"x": 2.0}, corpus="d" * 64, aggregation="clipped_term_mean"))
    out = compare([a, b])
    assert any("corpus hash" in w for w in out["warnings"]) and any("aggregation" in w for w in out["warnings"])
    assert [r["model"] for r in out["rows"]] == ["m (a.json)", "m (b.json)"]   # same name: told apart by file
    assert compare([a, a])["warnings"] == []


def test_bad_inputs_are_one_line_errors_naming_file_and_field(tmp_path, capsys):
    bad_axis = write(tmp_path / "bad.json", {"model": "m", "axes": {"x": {"label": "X"}}})
    with pytest.raises(ConfigError) as info:
        compare([bad_axis])
    assert info.value.file == bad_axis and info.value.field == "axes.x.flinch"
    other = write(tmp_path / "other.json", {"hello": 1})
    disjoint = write(tmp_path / "d.json", result("n", {"w": 1.0}))
    ok = write(tmp_path / "ok.json", result("m", {"x": 1.0}))
    for args in ([other], [ok, disjoint], [str(tmp_path / "missing.json")]):
        assert cli(["flinch", "compare", *args, "--out", str(tmp_path / "r.png")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "fix:" in err


def test_the_verb_prints_the_table_and_writes_the_overlay_radar(tmp_path, capsys):
    a = write(tmp_path / "a.json", result("fp32", {"x": 10.0, "y": 20.0}))
    b = write(tmp_path / "b.json", result("bf16", {"x": 11.0, "y": 19.0}))
    png = tmp_path / "charts" / "radar.png"
    assert cli(["flinch", "compare", a, b, "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert "fp32" in out and "bf16" in out and str(png) in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
