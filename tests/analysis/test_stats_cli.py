"""`mirrorscan stats gstudy|kendall|auroc|null` on small CSVs written here, and on reference data.

No Ray here (the `--ray` paths are tested with the drivers, in tests/cluster/test_stats_drivers.py).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest

from analysis_refdata import REPO, load_json, ref_path, within, last_digit_unit
from mirrorscan.jobs import cli

BRENNAN = REPO.parent / "shared" / "reference-data" / "brennan2001_synthetic"


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def run(capsys, *argv):
    """(exit code, parsed JSON or None, stderr) of `mirrorscan stats ARGV` in this process."""
    rc = cli.main(["stats", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and out.strip() else None), err


@pytest.fixture
def crossed(tmp_path):
    """model × wrapper × item, 4 × 3 × 5, with a model effect and a wrapper × model interaction."""
    rng = np.random.default_rng(1)
    m, w = rng.normal(0, 1, 4), rng.normal(0, 1, (4, 3))
    rows = [(f"m{a}", f"w{b}", c, m[a] + w[a, b] + rng.normal(0, 0.5))
            for a in range(4) for b in range(3) for c in range(5)]
    return write_csv(tmp_path / "crossed.csv", ["model", "wrapper", "item", "score"], rows), rows


def test_gstudy_json_shape_and_plots(capsys, tmp_path, crossed):
    path, rows = crossed
    rc, out, err = run(capsys, "gstudy", "--input", path, "--score", "score", "--object", "model",
                       "--facets", "wrapper,item", "--d-study", "wrapper=1,item=400", "--d-study", "wrapper=36",
                       "--plots", tmp_path / "plots")
    assert rc == 0, err
    assert set(out["components"]) == {"model", "wrapper", "item", "model:wrapper", "model:item",
                                      "wrapper:item", "residual"}
    for c in out["components"].values():
        assert {"estimate", "df", "mean_square", "share"} <= set(c)
    assert out["components"]["model"]["df"] == 3 and out["components"]["residual"]["df"] == 3 * 2 * 4
    assert abs(sum(c["share"] for c in out["components"].values()) - 1) < 1e-12
    assert 0 <= out["phi"] <= out["g_coefficient"] <= 1
    assert out["sizes"] == {"wrapper": 3, "item": 5}
    assert [d["sizes"] for d in out["d_study"]] == [{"wrapper": 1, "item": 400}, {"wrapper": 36, "item": 5}]
    assert set(out["asymptotes"]) == {"wrapper", "item"} and out["asymptotes"]["item"]["sizes"]["item"] == "inf"
    assert set(out["needed"]["wrapper"]) == {"g_coefficient", "phi"}
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["d_study_item.png", "d_study_wrapper.png", "variance_components.png"]
    for p in (tmp_path / "plots").iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the same through --out, and the same numbers from a Parquet copy of the file
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    pq.write_table(pcsv.read_csv(path), tmp_path / "crossed.parquet")
    rc, _, _ = run(capsys, "gstudy", "--input", tmp_path / "crossed.parquet", "--score", "score", "--object",
                   "model", "--facets", "wrapper,item", "--out", tmp_path / "r.json")
    assert rc == 0
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["components"]["model"] == out["components"]["model"]


def test_gstudy_object_variance_is_marked_hypothetical(capsys, crossed):
    rc, out, _ = run(capsys, "gstudy", "--input", crossed[0], "--score", "score", "--object", "model",
                     "--facets", "wrapper", "--facets", "item", "--object-variance", "2.5", "--target", "0.9")
    assert rc == 0 and out["target"] == 0.9
    hyp = out["hypothetical"]
    assert hyp["object_variance"] == 2.5 and hyp["observed"]["hypothetical"] is True
    assert hyp["observed"]["universe_score_variance"] == 2.5


def _one_line_error(rc, err, *words):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    for w in words:
        assert w in lines[0]


def test_missing_cells_are_estimated_by_reml_and_counted(capsys, tmp_path, crossed):
    """Two cells gone (rows dropped) and one row without a score: REML components, every gap counted."""
    _, rows = crossed
    rows = list(rows[:-2])
    rows[5] = (*rows[5][:3], "")
    path = write_csv(tmp_path / "unbalanced.csv", ["model", "wrapper", "item", "score"], rows)
    rc, out, _ = run(capsys, "gstudy", "--input", path, "--score", "score", "--object", "model",
                     "--facets", "wrapper,item")
    assert rc == 0
    assert out["components_method"] == "reml" and out["estimation"].startswith("REML")
    assert out["missing_cells"] == 3 and out["rows_without_score"] == 1 and out["replicate_rows"] == 0
    assert set(out["components"]) == {"model", "wrapper", "item", "model:wrapper", "model:item", "wrapper:item",
                                      "residual"}
    assert 0 <= out["phi"] <= out["g_coefficient"] <= 1


def test_replicated_rows_give_the_top_interaction_its_own_component(tmp_path, crossed):
    _, rows = crossed
    path = write_csv(tmp_path / "dup.csv", ["model", "wrapper", "item", "score"], rows + rows[:1])
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "stats", "gstudy", "--input", path, "--score",
                           "score", "--object", "model", "--facets", "wrapper,item"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["replicate_rows"] == 1 and "model:wrapper:item" in out["components"]


def test_kendall_still_refuses_an_unbalanced_table(capsys, tmp_path, crossed):
    _, rows = crossed
    path = write_csv(tmp_path / "unbalanced.csv", ["model", "wrapper", "item", "score"], rows[:-2])
    rc, _, err = run(capsys, "kendall", "--input", path, "--score", "score", "--object", "model",
                     "--rater", "wrapper")
    _one_line_error(rc, err, "unbalanced design", "unbalanced.csv")


def test_unknown_column_and_non_numeric_scores(capsys, tmp_path, crossed):
    rc, _, err = run(capsys, "gstudy", "--input", crossed[0], "--score", "score", "--object", "model",
                     "--facets", "wrapper,prompt")
    _one_line_error(rc, err, "prompt", "no such column")
    rc, _, err = run(capsys, "kendall", "--input", crossed[0], "--score", "points", "--object", "model",
                     "--rater", "wrapper")
    _one_line_error(rc, err, "points", "no such column")
    path = write_csv(tmp_path / "text.csv", ["model", "wrapper", "score"],
                     [("a", "x", "1.0"), ("a", "y", "high"), ("b", "x", "2"), ("b", "y", "3")])
    rc, _, err = run(capsys, "gstudy", "--input", path, "--score", "score", "--object", "model", "--facets", "wrapper")
    _one_line_error(rc, err, "non-numeric score 'high'")
    rc, _, err = run(capsys, "gstudy", "--input", tmp_path / "missing.csv", "--score", "s", "--object", "m",
                     "--facets", "w")
    _one_line_error(rc, err, "no such file")


def test_brennan_synthetic_data_through_the_cli(capsys):
    exact = load_json("brennan2001_synthetic", "expected.json", exact=True)
    rc, out, err = run(capsys, "gstudy", "--input", BRENNAN / "synthetic1_p_x_i.csv", "--score", "score",
                       "--object", "p", "--facets", "i", "--d-study", "i=20")
    assert rc == 0, err
    ref = exact["synthetic1_p_x_i"]
    for name, key in (("p", "p"), ("i", "i"), ("residual", "pi")):
        assert within(out["components"][name]["estimate"], ref["variance_components"][key], "1e-6")
        published = ref["published"]["variance_components"][key]
        assert within(out["components"][name]["estimate"], published, last_digit_unit(published))
    assert within(out["g_coefficient"], ref["published"]["Erho2_n12"], Decimal("0.001"))
    assert within(out["d_study"][0]["g_coefficient"], ref["d_study"]["n_i=20"]["Erho2"], "1e-6")

    # p × (r:t), raters nested in tasks (Brennan's synthetic data set 4)
    rc, out, err = run(capsys, "gstudy", "--input", BRENNAN / "synthetic4_p_x_r_in_t.csv", "--score", "score",
                       "--object", "p", "--facets", "t,r", "--nested", "r:t")
    assert rc == 0, err
    ref4 = exact["synthetic4_p_x_r_in_t"]["variance_components"]
    assert within(out["components"]["p"]["estimate"], ref4["p"], "1e-6")
    assert out["design"]["facets"]["r"]["nested_in"] == ["t"]


def test_kendall_on_anxiety_reproduces_irr(capsys, tmp_path):
    src = ref_path("kendall_w", "anxiety_irr.csv")
    with open(src) as f:
        wide = list(csv.DictReader(f))
    rows = [(r["subject"], rater, r[rater]) for r in wide for rater in ("rater1", "rater2", "rater3")]
    path = write_csv(tmp_path / "anxiety_long.csv", ["subject", "rater", "rating"], rows)
    rc, out, err = run(capsys, "kendall", "--input", path, "--score", "rating", "--object", "subject",
                       "--rater", "rater", "--permutations", "2000", "--seed", "3", "--reference-effect", "1",
                       "--reference-sims", "200")
    assert rc == 0, err
    ref = load_json("kendall_w", "expected.json", exact=True)
    assert within(out["kendall_w"]["w_tie_corrected"], ref["tie_corrected"]["Wt"], "1e-6")
    # (expected.json's uncorrected W is inconsistent with its own χ²: see test_concordance; check χ²)
    assert within(out["kendall_w"]["chi2"], ref["uncorrected"]["chisq"], "1e-6")
    assert within(out["kendall_w"]["p_value_tie_corrected"], ref["tie_corrected"]["p_value"], "1e-6")
    assert out["permutation"]["n_draws"] == 2000 and 0 < out["permutation"]["p_value"] < 0.2
    assert out["reference"]["n_sims"] == 200 and out["n_raters"] == 3


@pytest.fixture
def probe_csv(tmp_path):
    """12 items × 4 layers in long format (layers listed out of lexical order), with ties at layer L2."""
    rng = np.random.default_rng(7)
    labels = ["deployment"] * 5 + ["testing"] * 7
    scores = rng.normal(0, 1, (12, 4))
    scores[:5, 0] += 1.5
    scores[:, 1] = np.round(scores[:, 1])               # ties
    layers = ["L2", "L10", "L1", "L3"]
    rows = [(f"q{i}", layers[l], labels[i], scores[i, l]) for l in range(4) for i in range(12)]
    return write_csv(tmp_path / "probe.csv", ["question_id", "layer", "type", "mean_score"], rows), scores, labels, layers


def _rank_sum_auroc(x, pos):
    """Independent AUROC: U/(n1 n0) by pairwise comparison (ties ½)."""
    p, n = x[pos], x[~pos]
    return float((np.sum(p[:, None] > n[None, :]) + 0.5 * np.sum(p[:, None] == n[None, :])) / (p.size * n.size))


def test_auroc_per_layer_and_positive_class(capsys, probe_csv):
    path, scores, labels, layers = probe_csv
    pos = np.array(labels) == "deployment"
    for item in ([], ["--item", "question_id"]):
        rc, out, err = run(capsys, "auroc", "--input", path, "--score", "mean_score", "--label", "type",
                           "--positive", "deployment", "--layer", "layer", *item)
        assert rc == 0, err
        assert list(out["auroc_by_layer"]) == layers                 # order of appearance in the file
        for l, name in enumerate(layers):
            assert out["auroc_by_layer"][name] == _rank_sum_auroc(scores[:, l], pos)
        assert out["n_positive"] == 5 and out["n_negative"] == 7 and out["best"]["n_layers"] == 4
    rc, flipped, _ = run(capsys, "auroc", "--input", path, "--score", "mean_score", "--label", "type",
                         "--positive", "testing", "--layer", "layer")
    assert all(abs(flipped["auroc_by_layer"][k] + out["auroc_by_layer"][k] - 1) < 1e-15 for k in layers)
    rc, _, err = run(capsys, "auroc", "--input", path, "--score", "mean_score", "--label", "type",
                     "--positive", "Deployment", "--layer", "layer")
    _one_line_error(rc, err, "no item has label 'Deployment'")


def test_auroc_per_model_and_one_row_per_item(capsys, tmp_path):
    rows = [("a", i, i % 2, float(i)) for i in range(6)] + [("b", i, i % 2, float(-i)) for i in range(6)]
    path = write_csv(tmp_path / "models.csv", ["model", "item", "label", "score"], rows)
    rc, out, err = run(capsys, "auroc", "--input", path, "--score", "score", "--label", "label",
                       "--positive", "1", "--model", "model")
    assert rc == 0, err
    assert out["models"]["a"]["auroc_by_layer"]["all"] == _rank_sum_auroc(np.arange(6.0), np.arange(6) % 2 == 1)
    assert out["models"]["b"]["auroc_by_layer"]["all"] == _rank_sum_auroc(-np.arange(6.0), np.arange(6) % 2 == 1)


def test_null_matches_the_library_and_is_reproducible(capsys, probe_csv):
    from mirrorscan.analysis.nulls import label_permutation_null

    path, scores, labels, layers = probe_csv
    argv = ("null", "--input", path, "--score", "mean_score", "--label", "type", "--positive", "deployment",
            "--layer", "layer", "--permutations", "1500", "--seed", "11", "--shard-size", "400")
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    lib = label_permutation_null(scores, np.array(labels), "deployment", 1500, 11, 400, layers).to_json()
    assert out["null_absolute"] == lib["null_absolute"] and out["null_signed"] == lib["null_signed"]
    assert out["n_permutations"] == 1500 and out["driver"] == "local"
    assert out["null_absolute"]["floor"] > 0 and 0 < out["null_absolute"]["p_value"] <= 1
    rc, again, _ = run(capsys, *argv)
    assert again == out


def test_help_explains_each_subcommand(capsys):
    for name, words in (("gstudy", ["--d-study", "--nested", "--plots", "Eρ²"]),
                        ("kendall", ["--rater", "permutation"]), ("auroc", ["--positive", "mid-ranks"]),
                        ("null", ["--ray", "floor"])):
        with pytest.raises(SystemExit) as exc:
            cli.main(["stats", name, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert all(w in text for w in words), (name, text)


def test_the_older_analyze_spelling_still_runs_a_statistic_with_a_notice(tmp_path, capsys):
    path = tmp_path / "s.csv"
    path.write_text("model,wrapper,score\n" + "".join(f"m{m},w{w},{m + 0.1 * w}\n" for m in range(3) for w in range(2)))
    assert cli.main(["analyze", "kendall", "--input", str(path), "--score", "score", "--object", "model",
                     "--rater", "wrapper"]) == 0
    captured = capsys.readouterr()
    assert "now `mirrorscan stats kendall`" in captured.err and json.loads(captured.out)["kendall_w"]["n_objects"] == 3


def test_other_reserved_names_are_refused_with_the_available_ones(capsys):
    assert cli.main(["analyze", "dstudy"]) == 2
    err = capsys.readouterr().err
    assert "reserved and not implemented" in err and "gstudy, kendall, auroc, null" in err


def test_importing_the_cli_and_drivers_does_not_import_ray():
    code = ("import sys, mirrorscan.jobs.stats, mirrorscan.cluster.runtime.stats_drivers, mirrorscan.analysis.plotting; "
            "assert 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
