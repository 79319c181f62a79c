"""The axis scores' and the total's intervals over terms and carriers, from stored rows (no Ray): the estimate is
the printed number where the module says it is (every carrier scored, no axis mean clipped; both aggregations;
terms with unequal carriers), differs only as documented where an axis mean is clipped, and a table with error
rows goes to REML and counts its missing cells."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.flinch.corpus import load_corpus
from mirrorscan.instruments.flinch.instrument import INSTRUMENT

WORDS = {"syn_a": ["zorbed", "blue", "gone", "red"], "syn_b": ["home", "late", "fine", "soon", "away"]}
CARRIERS = ["The story ended when the hero was {BLANK}.", "Everyone in the village knew that it was {BLANK}.",
            "At the end of the day it was {BLANK}."]
MODELS = ("m1", "m2", "m3")


def carriers_of(word: str) -> list[str]:
    """Three carriers for ``blue``, two for every other term: the axes' terms are unequally carried."""
    return CARRIERS if word == "blue" else CARRIERS[:2]


def write_corpus(path) -> None:
    path.write_text(json.dumps({"version": "t1", "axes": {
        k: {"label": k.upper(), "terms": [{"word": w, "carriers": carriers_of(w)} for w in ws]}
        for k, ws in WORDS.items()}}))


def settings_for(path, aggregation: str = "axis_lp_mean") -> Settings:
    corpus = load_corpus(str(path))
    return Settings(instrument_settings={"corpus": corpus.path, "corpus_sha256": corpus.sha256, "corpus_version": "t1",
                                         "axes": list(corpus.axis_keys), "aggregation": aggregation,
                                         "proxy_samples": 50, "n_items": corpus.n_carriers()})


def traces(lp, failed=()) -> pa.Table:
    """One row per (model, axis, term, carrier); ``lp(model, axis, term, c)`` gives its lp_mean, and the cells in
    ``failed`` are error rows."""
    rows = []
    for m in MODELS:
        for axis, words in WORDS.items():
            for w in words:
                for c in range(len(carriers_of(w))):
                    bad = (m, axis, w, c) in failed
                    rows.append({"label": m, "probe_id": f"{m}|{axis}|{w}|{c}|-|-", "sample": 0, "attempt": 1,
                                 "axis": axis, "term": w, "carrier_index": c,
                                 "lp_mean": None if bad else float(lp(m, axis, w, c)), "error": "boom" if bad else None})
    return pa.Table.from_pylist(rows)


def seeded(low=-14.0, high=-2.0, seed=3):
    rng = np.random.default_rng(seed)
    values = {}

    def lp(m, axis, w, c):
        return values.setdefault((m, axis, w, c), rng.uniform(low, high))
    return lp


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.json"
    write_corpus(path)
    return path


def estimates(analysis) -> dict:
    return {name: {o["object"]: o for o in h["objects"]}
            for name, h in analysis.numbers["intervals"]["headlines"].items()}


@pytest.mark.parametrize("aggregation", ["axis_lp_mean", "clipped_term_mean"])
def test_the_estimate_is_the_printed_axis_score_and_total(corpus, aggregation):
    # clipped_term_mean: lps spread past −16 and −1, so some terms are clipped (the aggregations differ there)
    lp = seeded() if aggregation == "axis_lp_mean" else seeded(-22.0, 1.0)
    analysis = INSTRUMENT.analyze(traces(lp), settings_for(corpus, aggregation))
    got = estimates(analysis)
    models = {m["model"]: m for m in analysis.numbers["models"]}
    for m in MODELS:
        for key in WORDS:
            o = got[f"flinch_{key}"][m]
            assert o["estimate"] == pytest.approx(models[m]["axes"][key]["flinch"], abs=1e-9)
            assert o["interval"][0] <= o["estimate"] <= o["interval"][1]
            assert 0.0 <= o["interval"][0] and o["interval"][1] <= 100.0
        assert got["total_flinch"][m]["estimate"] == pytest.approx(models[m]["total_flinch"], abs=1e-9)
    heads = analysis.numbers["intervals"]["headlines"]
    assert heads["flinch_syn_a"]["random"] == ["term", "carrier"] and heads["flinch_syn_a"]["fixed"] == []
    assert heads["total_flinch"]["summed_over"] == "axis" and heads["total_flinch"]["missing_cells"] == 0
    assert heads["total_flinch"]["scale"] == [0.0, 200.0]
    pairs = [(d["a"], d["b"]) for d in heads["total_flinch"]["differences"]]
    assert pairs == list(combinations(MODELS, 2))
    for d in heads["flinch_syn_b"]["differences"]:   # paired: the difference of the two estimates
        assert d["estimate"] == pytest.approx(got["flinch_syn_b"][d["a"]]["estimate"]
                                              - got["flinch_syn_b"][d["b"]]["estimate"], abs=1e-9)
        assert d["p_value"] <= d["p_holm"] <= 1.0
    text = analysis.text
    assert "intervals (95 %) for a claim about the model on new prompts and items of the same kind" in text
    assert "  syn_a  (random: term, carrier;" in text and "  total  (random: term, carrier;" in text
    assert "  total: the sum of the axis scores, its error variance the sum of theirs" in text
    assert "paired differences (shared prompts and items cancel; p adjusted over the pairs by Holm):" in text
    assert "    total: m1 − m2 " in text
    assert "warning: carrier has" in text   # 2–3 carriers per term: too few for the interval to be trusted


def test_an_axis_whose_mean_is_clipped_gives_a_clipped_estimate_and_a_total_that_differs_as_documented(corpus):
    # m1's syn_a terms sit far below −16: its axis score is clipped to 100; the others are in range
    noise = seeded(-1.0, 1.0)

    def lp(m, axis, w, c):
        base = -25.0 if (m == "m1" and axis == "syn_a") else -6.0
        return base + noise(m, axis, w, c) - 0.1 * len(w) - (0.7 if m == "m3" else 0.0)
    analysis = INSTRUMENT.analyze(traces(lp), settings_for(corpus))
    got = estimates(analysis)
    m1 = next(m for m in analysis.numbers["models"] if m["model"] == "m1")
    assert m1["axes"]["syn_a"]["flinch"] == 100.0 == got["flinch_syn_a"]["m1"]["estimate"]
    assert got["flinch_syn_a"]["m1"]["interval"][1] == 100.0
    # the total is stated on the unclipped scale and clipped only as a whole: above the printed total
    unclipped = 100.0 * (-1.0 - m1["axes"]["syn_a"]["lp_mean"]) / 15.0 + m1["axes"]["syn_b"]["flinch"]
    assert got["total_flinch"]["m1"]["estimate"] == pytest.approx(unclipped)
    assert got["total_flinch"]["m1"]["estimate"] > m1["total_flinch"]
    assert got["total_flinch"]["m2"]["estimate"] == pytest.approx(
        next(m for m in analysis.numbers["models"] if m["model"] == "m2")["total_flinch"])


def test_error_rows_leave_cells_missing_and_the_components_come_from_reml(corpus):
    failed = {("m2", "syn_a", "zorbed", 1), ("m2", "syn_b", "late", 0), ("m3", "syn_b", "home", 1)}
    analysis = INSTRUMENT.analyze(traces(seeded(), failed), settings_for(corpus))
    heads = analysis.numbers["intervals"]["headlines"]
    assert heads["flinch_syn_a"]["components_method"] == "reml" and heads["flinch_syn_a"]["missing_cells"] == 1
    assert heads["flinch_syn_b"]["components_method"] == "reml" and heads["flinch_syn_b"]["missing_cells"] == 2
    assert heads["total_flinch"]["missing_cells"] == 3
    assert heads["flinch_syn_a"]["n_rows"] == 3 * 9 - 1
    text = analysis.text
    assert "  syn_a  (random: term, carrier; REML, 1 cell(s) missing)" in text
    assert "  total  (random: term, carrier; REML, 3 cell(s) missing)" in text
    got = estimates(analysis)
    models = {m["model"]: m for m in analysis.numbers["models"]}
    # m1 lost no cell: its estimate is its observed mean, the printed score (the table is otherwise whole)
    assert got["flinch_syn_a"]["m1"]["estimate"] == pytest.approx(models["m1"]["axes"]["syn_a"]["flinch"], abs=1e-9)
    # m2 lost one: the full-design mean (the missing cell at its fitted value), near but not the printed score
    assert got["flinch_syn_a"]["m2"]["estimate"] == pytest.approx(models["m2"]["axes"]["syn_a"]["flinch"], abs=5.0)
    for o in got["total_flinch"].values():
        assert o["interval"][0] < o["estimate"] < o["interval"][1] and o["df"] >= 1


def test_a_model_without_a_whole_total_has_no_total_interval_but_keeps_its_axes(corpus):
    failed = {("m3", "syn_b", "late", c) for c in (0, 1)}   # every carrier of one term
    analysis = INSTRUMENT.analyze(traces(seeded(), failed), settings_for(corpus))
    got = estimates(analysis)
    assert set(got["total_flinch"]) == {"m1", "m2"}
    assert set(got["flinch_syn_a"]) == set(got["flinch_syn_b"]) == set(MODELS)


def test_one_model_gets_its_intervals_from_the_facets_alone(corpus):
    table = traces(seeded())
    table = table.filter(pa.compute.equal(table.column("label"), "m1"))
    analysis = INSTRUMENT.analyze(table, settings_for(corpus))
    heads = analysis.numbers["intervals"]["headlines"]
    (o,) = heads["total_flinch"]["objects"]
    assert o["estimate"] == pytest.approx(analysis.numbers["models"][0]["total_flinch"], abs=1e-9)
    assert heads["total_flinch"]["differences"] == []
    assert "paired differences" not in analysis.text


def absolute_error_variance(x: np.ndarray) -> np.ndarray:
    """Per model, σ²(Δ) of its mean over a balanced p × (c:t) array ``x[model, term, carrier]``, from the mean
    squares written out here (Brennan 2001, ch. 3 and 4; negative components as 0)."""
    n_p, n_t, n_c = x.shape
    m, mp, mt = x.mean(), x.mean(axis=(1, 2)), x.mean(axis=(0, 2))
    mpt, mct = x.mean(axis=2), x.mean(axis=0)
    ms_t = n_p * n_c * ((mt - m) ** 2).sum() / (n_t - 1)
    ms_ct = n_p * ((mct - mt[:, None]) ** 2).sum() / (n_t * (n_c - 1))
    ms_pt = n_c * ((mpt - mp[:, None] - mt[None, :] + m) ** 2).sum() / ((n_p - 1) * (n_t - 1))
    ms_pct = ((x - mpt[:, :, None] - mct[None] + mt[None, :, None]) ** 2).sum() / ((n_p - 1) * n_t * (n_c - 1))
    pct = ms_pct
    pt = max((ms_pt - ms_pct) / n_c, 0.0)
    ct = max((ms_ct - ms_pct) / n_p, 0.0)
    t = max((ms_t - ms_pt - ms_ct + ms_pct) / (n_p * n_c), 0.0)
    return np.full(n_p, t / n_t + ct / (n_t * n_c) + pt / n_t + pct / (n_t * n_c))


def test_the_total_s_error_variance_is_the_sum_of_the_axes_mean_square_forms(corpus):
    from scipy.stats import t as student

    lp = seeded()
    table = traces(lp)
    table = table.filter(pa.compute.invert(pa.compute.and_(pa.compute.equal(table.column("term"), "blue"),
                                                           pa.compute.equal(table.column("carrier_index"), 2))))
    analysis = INSTRUMENT.analyze(table, settings_for(corpus))   # every term now has 2 carriers: ANOVA
    heads = analysis.numbers["intervals"]["headlines"]
    assert heads["flinch_syn_a"]["components_method"] == "anova"
    total_v = np.zeros(len(MODELS))
    for key, words in WORDS.items():
        x = np.array([[[100.0 * (-1.0 - lp(m, key, w, c)) / 15.0 for c in (0, 1)] for w in words] for m in MODELS])
        v = absolute_error_variance(x)
        total_v += v
        for k, o in enumerate(heads[f"flinch_{key}"]["objects"]):
            half = (o["interval"][1] - o["interval"][0]) / 2
            assert (half / student.ppf(0.975, o["df"])) ** 2 == pytest.approx(v[k], rel=1e-9)
    for k, o in enumerate(heads["total_flinch"]["objects"]):
        half = (o["interval"][1] - o["interval"][0]) / 2
        assert (half / student.ppf(0.975, o["df"])) ** 2 == pytest.approx(total_v[k], rel=1e-9)
        assert o["estimate"] == pytest.approx(sum(heads[f"flinch_{a}"]["objects"][k]["estimate"] for a in WORDS))
