"""lens's headline intervals over framings and scoring items: the cell scores average to the headline the
analysis reports, the items' influence values carry DeLong's variance of an AUROC, headline − floor is the
headline moved by a constant, the model comparisons carry the same paired differences, and a scan with error
rows or a framing lost for one model gets REML intervals that count the missing cells.

Traces are built by hand (``test_lens_numbers``), so nothing starts Ray or loads a model."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import t

from mirrorscan.grid.formatting import fixed
from mirrorscan.instruments.lens.intervals import influence_values
from mirrorscan.instruments.lens.numbers import analyze
from test_lens_numbers import (charts_not_rendered, lens_ref, planted_direction_vectors,  # noqa: F401 (fixture)
                               traces_table, write_experiment)


def test_influence_values_average_to_the_auroc_and_carry_delongs_variance():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    labels = ["deployment"] * 23 + ["testing"] * 41
    scores = np.round(rng.normal(size=64) + 0.8 * (np.array(labels) == "deployment"), 1)   # rounded: ties
    values = influence_values(scores, labels, "deployment")
    positive = np.array(labels) == "deployment"
    assert values.mean() == pytest.approx(roc_auc_score(positive, scores) - 0.5, abs=1e-12)
    # DeLong's variance, from the pairwise comparisons here: S10/m + S01/n
    pos, neg = scores[positive], scores[~positive]
    beats = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    delong = beats.mean(axis=1).var(ddof=1) / pos.size + beats.mean(axis=0).var(ddof=1) / neg.size
    naive = values.var(ddof=1) / values.size   # the items' influence values as independent draws
    assert naive == pytest.approx(delong, rel=0.06)   # (m − 1)/m and N/(N − 1) apart, no more


def three_models(tmp_path, **section):
    write_experiment(tmp_path, evaluation=("e1", "e2", "e3"), deployment=("d1", "d2", "d3"))
    ref = lens_ref(tmp_path, item_samples=2, seed=3, **section)
    return ref, traces_table(ref.frozen, ["m1", "m2", "m3"], planted_direction_vectors(seed=11, item_shift=0.3))


def test_the_estimate_is_the_mean_headline_and_the_floor_moves_it_by_a_constant(tmp_path):
    ref, traces = three_models(tmp_path, null_permutations=50, bootstrap_draws=20)
    result = analyze(traces, ref.spec)
    models, iv = result.numbers["models"], result.numbers["intervals"]
    head, minus = iv["headlines"]["headline/base"], iv["headlines"]["headline_minus_floor/base"]
    assert head["random"] == ["evaluation", "deployment", "item"] and head["components_method"] == "anova"
    assert head["missing_cells"] == 0 and head["n_rows"] == 3 * 9 * 40
    assert "components" not in minus   # the floors move the models' own component: the headline's are not its own
    for o, m in zip(head["objects"], minus["objects"]):
        numbers = models[f"{o['object']}/base"]
        per_wrapper = [r["max_auroc_minus_half"] for r in result.tables["wrappers"].to_pylist()
                       if r["label"] == o["object"]]
        assert o["estimate"] == pytest.approx(np.mean(per_wrapper), abs=1e-12)
        assert o["estimate"] == pytest.approx(numbers["headline"]["mean"], abs=1e-12)
        assert o["interval"][0] < o["estimate"] < o["interval"][1]
        floor = numbers["layer_selection_floor"]["floor_mean"]
        assert m["estimate"] == pytest.approx(o["estimate"] - floor, abs=1e-12)
        assert m["interval"] == pytest.approx([o["interval"][0] - floor, o["interval"][1] - floor], abs=1e-12)
        line = next(x for x in result.text.splitlines() if x.startswith(f"    {o['object']} "))
        assert fixed(o["estimate"]) in line.split()
    floors = {k.split("/")[0]: m["layer_selection_floor"]["floor_mean"] for k, m in models.items()}
    for d, e in zip(head["differences"], minus["differences"]):
        shift = floors[d["a"]] - floors[d["b"]]
        assert e["estimate"] == pytest.approx(d["estimate"] - shift, abs=1e-12)
        assert e["interval"][1] - e["interval"][0] == pytest.approx(d["interval"][1] - d["interval"][0], abs=1e-12)
        se = (d["interval"][1] - d["interval"][0]) / 2 / t.ppf(0.975, d["df"])
        assert d["p_value"] == pytest.approx(2 * t.sf(abs(d["estimate"]) / se, d["df"]), rel=1e-9)
        assert e["p_value"] == pytest.approx(2 * t.sf(abs(e["estimate"]) / se, d["df"]), rel=1e-9)
    assert sorted(e["p_holm"] for e in minus["differences"]) == pytest.approx(
        np.maximum.accumulate([min(1, p * (3 - k)) for k, p in enumerate(sorted(e["p_value"] for e in minus["differences"]))]))
    # the model comparisons carry the same paired differences beside their wrapper-permutation null
    comparisons = result.numbers["claims"]["base"]["comparisons"]
    assert [(c["a"], c["b"]) for c in comparisons] == [(d["a"], d["b"]) for d in head["differences"]]
    for c, d in zip(comparisons, head["differences"]):
        assert c["paired"] == d and c["p_value"] is not None
        assert c["mean_difference"] == pytest.approx(d["estimate"], abs=1e-12)
        assert f"{c['a']} − {c['b']} (base) paired over framings and items: {d['estimate']:+.3f}" in result.text
    assert "random: evaluation, deployment, item; ANOVA" in result.text
    assert "evaluation has 3 level(s), under 6" in result.text


def test_without_the_label_null_headline_minus_floor_says_why_it_has_no_interval(tmp_path):
    ref, traces = three_models(tmp_path, null_permutations=0)
    result = analyze(traces, ref.spec)
    heads = result.numbers["intervals"]["headlines"]
    assert heads["headline_minus_floor/base"]["skipped"] == "no scoring-label floor (null_permutations: 0)"
    assert "headline − floor (base): no interval (no scoring-label floor (null_permutations: 0))" in result.text
    assert len(heads["headline/base"]["objects"]) == 3


def test_error_rows_and_a_framing_lost_for_one_model_go_to_reml_with_the_missing_cells_counted(tmp_path):
    write_experiment(tmp_path, evaluation=("e1", "e2", "e3"), deployment=("d1", "d2", "d3"))   # 40 scoring items
    ref = lens_ref(tmp_path, null_permutations=20, item_samples=2, seed=3)
    rows = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=7, item_shift=0.5)).to_pylist()
    for r in rows:
        if r["label"] == "m2" and r["item_id"] == "s03":
            r["error"] = "engine failed"   # one scoring item fails for m2
        if r["label"] == "m2" and r["framing"] == "e3":
            r["error"] = "engine failed"   # every text in framing e3 fails for m2: its 3 wrappers are lost
    traces = pa.Table.from_pylist(rows, schema=traces_table(ref.frozen, [], None).schema)

    result = analyze(traces, ref.spec)

    head = result.numbers["intervals"]["headlines"]["headline/base"]
    assert head["components_method"] == "reml" and head["missing_cells"] == 3 * 40 + 6 * 1
    assert "(random: evaluation, deployment, item; REML, 126 cell(s) missing)" in result.text
    by = {o["object"]: o for o in head["objects"]}
    assert by["m1"]["n_cells"] == 9 * 40 and by["m2"]["n_cells"] == 6 * 39
    # m1 is complete: its full-design mean is its own mean over wrappers; m2's fills its missing cells by the fit
    assert by["m1"]["estimate"] == pytest.approx(result.numbers["models"]["m1/base"]["headline"]["mean"], abs=1e-9)
    assert result.numbers["models"]["m2/base"]["headline"]["n"] == 6
    for o in head["objects"]:
        assert o["interval"][0] < o["estimate"] < o["interval"][1]
    assert len(head["differences"]) == 1 and head["differences"][0]["verdict"]
    assert result.numbers["gstudy"]["base"]["missing"] == "a model has no task text for framing(s) e3 (failed rows?)"


def test_a_missing_cell_design_too_large_for_reml_on_the_arms_takes_the_wrapper_as_one_facet_and_says_so(
        tmp_path, monkeypatch):
    import mirrorscan.instruments.lens.intervals as lens_intervals

    write_experiment(tmp_path, evaluation=("e1", "e2", "e3"), deployment=("d1", "d2", "d3"), scoring_labels=[
        "testing", "deployment"] * 8)
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, seed=3)
    rows = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=7, item_shift=0.5)).to_pylist()
    for r in rows:
        if r["label"] == "m2" and r["item_id"] == "s03":
            r["error"] = "engine failed"
    traces = pa.Table.from_pylist(rows, schema=traces_table(ref.frozen, [], None).schema)
    # the crossed design here: 2 models, 3 + 3 framings, 16 items; every effect's levels but the largest (e:d:item)
    crossed = 2 + 3 + 3 + 16 + 6 + 6 + 32 + 9 + 48 + 48 + 18 + 96 + 96
    assert lens_intervals._dense_levels({"object": ["m1", "m2"], "evaluation": ["e1", "e3"], "deployment": ["d1", "d3"],
                                         "item": ["s1", "s2"]}) == 4 * 2 + 6 * 4 + 4 * 8 - 8   # the largest left out
    monkeypatch.setattr(lens_intervals, "CROSSED_REML_LEVELS", crossed - 1)

    head = analyze(traces, ref.spec).numbers["intervals"]["headlines"]["headline/base"]

    assert head["random"] == ["wrapper", "item"] and head["components_method"] == "reml"
    assert head["missing_cells"] == 9 and head["warnings"][0].startswith(
        f"wrapper taken as one facet (the {crossed:,} levels of evaluation × deployment × item")
