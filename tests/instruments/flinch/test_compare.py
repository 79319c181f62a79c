"""``mirrorscan flinch compare``: per-axis tables, totals over the common axes only, the baseline's
differences, warnings for other corpora or aggregations, and one-line errors for bad files."""

from __future__ import annotations

import json

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.flinch.compare import compare, format_table
from mirrorscan.jobs.cli import main as cli


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
    assert out["warnings"][0] == "axes left out of the comparison: z (not in every input)"
    assert "not each input's own total: a: 2 of 3 axes; b: 2 of 3 axes" in out["warnings"][1]
    assert out["ranked"] == ["c", "a", "b"]
    text = format_table(out)
    assert "over 2 axes (x, y)" in text and "warning: axes left out" in text


def test_the_baseline_gives_each_model_its_difference_per_axis_and_in_total(tmp_path):
    runs = write(tmp_path / "runs.json", result("m", {"x": 12.5, "y": 30.0}))
    base = write(tmp_path / "base.json", result("base", {"x": 10.0, "y": 35.0}))
    out = compare([runs], baseline=base)
    row = out["rows"][0]
    assert row["delta_axes"] == {"x": 2.5, "y": -5.0} and row["delta_total"] == -2.5
    assert "12.5 (+2.5)" in format_table(out) and "[baseline]" in format_table(out)
    assert out["baseline"]["model"] == "base [baseline]"
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


def test_a_model_lacking_an_axis_or_with_a_partial_one_gets_no_total_and_is_not_ranked(tmp_path):
    whole = result("whole", {"x": 10.0, "y": 20.0})
    failed = {"model": "failed", "total_flinch": None, "axes": {}, "axis_set": ["x", "y"]}   # every carrier failed
    partial = result("partial", {"x": 5.0, "y": 1.0})
    partial["axes"]["y"]["complete"] = False    # a term of y without a scored carrier
    lacking = result("lacking", {"x": 7.0})
    summary = write(tmp_path / "s.json", {"axes": ["x", "y"], "models": [whole, partial, lacking]})
    out = compare([summary], axes=["x", "y"])
    rows = {r["model"]: r for r in out["rows"]}
    assert rows["whole"]["total"] == 30.0 and rows["whole"]["total_of"] == "2 of 2 axes"
    assert rows["partial"]["total"] is None and "y incomplete" in rows["partial"]["no_total"]
    assert rows["lacking"]["total"] is None and rows["lacking"]["no_total"] == "lacks y"
    assert rows["lacking"]["axes"] == {"x": 7.0, "y": None}
    assert out["ranked"] == ["whole"]
    text = format_table(out)
    assert "lacking: no total (lacks y)" in text and "not ranked: partial, lacking" in text
    # a result whose carriers all failed: never a total of 0.0
    with pytest.raises(ConfigError, match="share no axis"):
        compare([write(tmp_path / "f.json", failed), summary])
    out = compare([write(tmp_path / "f.json", failed), summary], axes=["x"])
    assert out["rows"][0]["total"] is None and out["rows"][0]["no_total"] == "lacks x"


def reference_csv() -> dict:
    """The shipped table, read here with the csv module (not through the code under test)."""
    import csv
    from importlib import resources

    text = resources.files("mirrorscan.instruments.flinch").joinpath("data/reference_baselines.csv").read_text(encoding="utf-8")
    return {r["model"]: r for r in csv.DictReader(text.splitlines())}


def test_the_shipped_reference_table_is_the_methods_published_one():
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference-data" / "flinch_reference" / "baselines.csv"
    if shared.is_file():
        from importlib import resources

        assert resources.files("mirrorscan.instruments.flinch").joinpath("data/reference_baselines.csv").read_bytes() \
            == shared.read_bytes()
    table = reference_csv()
    assert {m: float(r["total"]) for m, r in table.items()} == {
        "pythia-12b": 176, "olmo-2-13b": 214, "qwen3.5-9b-base": 244, "gpt-oss-20b": 269, "gemma-4-31b-pt": 222,
        "gemma-2-9b": 347, "heretic-v2-9b": 258}
    for r in table.values():   # the published total is the sum of the six axes, rounded
        assert abs(sum(float(r[k]) for k in ("anti_china", "anti_america", "anti_europe", "slurs", "sexual",
                                              "violence")) - float(r["total"])) <= 0.5


def test_the_reference_delta_is_the_tables_difference_axis_by_axis(capsys):
    from mirrorscan.instruments.flinch.reference import delta
    from mirrorscan.jobs.cli import main as cli

    table = reference_csv()
    axes = ["anti_china", "anti_america", "anti_europe", "slurs", "sexual", "violence"]
    want = {k: float(table["heretic-v2-9b"][k]) - float(table["gemma-2-9b"][k]) for k in axes}
    got = delta("heretic-v2-9b", "gemma-2-9b")
    assert got["axes"] == pytest.approx(want) and got["total"] == pytest.approx(sum(want.values()))
    assert got["total"] == pytest.approx(-88.4)
    # the method's "abliteration adds +14.3": heretic-v2-9b over qwen3.5-9b-base, summed over the six axes
    plus = sum(float(table["heretic-v2-9b"][k]) - float(table["qwen3.5-9b-base"][k]) for k in axes)
    assert plus == pytest.approx(14.3) and delta("heretic-v2-9b", "qwen3.5-9b-base")["total"] == pytest.approx(plus)
    out = compare(["reference:heretic-v2-9b"], baseline="reference:gemma-2-9b")
    (row,) = out["rows"]
    assert row["delta_axes"] == pytest.approx(want) and row["delta_total"] == pytest.approx(sum(want.values()))
    assert out["warnings"] == []   # two reference rows: one corpus, nothing indicative about it
    assert cli(["flinch", "compare", "reference:nope-9b"]) == 2
    assert "no reference model 'nope-9b'" in capsys.readouterr().err


def test_a_run_beside_the_reference_is_compared_axis_by_axis_and_marked_indicative(tmp_path, capsys):
    from mirrorscan.jobs.cli import main as cli

    table = reference_csv()
    # an older run of the starter corpus: five axes, one under the old key clinical_sexual
    run = write(tmp_path / "run.json", result("mine", {"anti_china": 20.0, "anti_america": 21.0, "anti_europe": 22.0,
                                                      "violence": 30.0, "clinical_sexual": 40.0}))
    out = compare([run], baseline="reference:gemma-2-9b", references=["heretic-v2-9b"])
    five = ["anti_china", "anti_america", "anti_europe", "violence", "sexual"]
    assert out["axes"] == five   # the axes both have; clinical_sexual followed as sexual
    mine, heretic = out["rows"]
    assert mine["delta_axes"]["sexual"] == pytest.approx(40.0 - float(table["gemma-2-9b"]["sexual"]))
    assert heretic["total"] == pytest.approx(sum(float(table["heretic-v2-9b"][k]) for k in five))
    assert heretic["total_of"] == "5 of 6 axes"
    assert any("indicative only" in w for w in out["warnings"])
    assert any("clinical_sexual → sexual" in w for w in out["warnings"])
    assert any("slurs" in w and "left out" in w for w in out["warnings"])
    png = tmp_path / "radar.png"
    assert cli(["flinch", "compare", run, "--reference", "gemma-2-9b", "heretic-v2-9b", "--out", str(png)]) == 0
    text = capsys.readouterr().out
    assert "gemma-2-9b [reference]" in text and "indicative only" in text and png.read_bytes()[:4] == b"\x89PNG"
