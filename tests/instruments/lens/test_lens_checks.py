"""Every per-model number of lens analyze against a value computed here, in numpy, from the stored vectors or
from the planted design: the three cosines, the scoring-label null on one layer (its mean and sd known in
closed form), the swap null on identical task differences (every draw is ± the observed value), the argmax
bootstrap on two layers that trade places, the floor-corrected scaling correlation, and the implementation's
share of variance (variance components solved here by least squares and the EMS equations).

Vectors are synthetic and seeded; nothing starts Ray or loads a model."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.instruments.lens.numbers import analyze
from test_lens_numbers import (TRACE_SCHEMA, charts_not_rendered,  # noqa: F401 (fixture)
                               lens_ref, planted_direction_vectors, write_experiment)


def table(frozen: dict, models: list[str], vector, variants=("base",), parameters: dict | None = None) -> pa.Table:
    """One row per (model, variant, framing × (task + empty task) or scoring item); ``vector(model, variant, arm,
    framing, item_id, item_label)`` gives the (layers, hidden) array."""
    from mirrorscan.instruments.lens.items import load_items

    tasks = [f"t{i}" for i in range(frozen["tasks"]["n"])] + ["_empty"]
    scoring = load_items(frozen["scoring_set"]["source"], "scoring_set", True).items
    rows = []
    for model, variant in itertools.product(models, variants):
        cells = [(arm, f, t, None) for arm in ("evaluation", "deployment") for f in frozen["framings"][arm] for t in tasks]
        cells += [("scoring", "score", s.id, s.label) for s in scoring]
        for arm, framing, item_id, item_label in cells:
            v = np.asarray(vector(model, variant, arm, framing, item_id, item_label), dtype=np.float32)
            rows.append({"probe_id": f"{model}|{variant}/{framing}|{item_id}|-|-", "attempt": 1, "error": None,
                         "label": model, "variant": variant, "framing": framing, "arm": arm, "item_id": item_id,
                         "item_label": item_label, "subset": None, "user_text": f"{framing}|{item_id}",
                         "layer_vectors": v.tolist()})
    out = pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)
    if parameters:
        out = out.append_column("model_parameters", pa.array([parameters[m] for m in out.column("label").to_pylist()],
                                                              pa.int64()))
    return out


def stored(traces: pa.Table, model: str, variant: str = "base") -> dict:
    """(framing or 'score', item id) → (layers, hidden) float64, read back from the table as stored."""
    out = {}
    for r in traces.to_pylist():
        if r["label"] == model and r["variant"] == variant:
            out[(r["framing"], r["item_id"])] = np.asarray(r["layer_vectors"], dtype=np.float64)
    return out


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """P(positive > negative) + ½ P(tie), over all pairs."""
    pos, neg = scores[positive], scores[~positive]
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size))


# --------------------------------------------------------------------------------------------------------------
# cosines

def test_the_three_cosines_equal_numpy_on_the_stored_vectors(tmp_path):
    write_experiment(tmp_path, evaluation=("e1", "e2", "e3"), deployment=("d1", "d2"), n_tasks=7)
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2)
    planted = planted_direction_vectors(seed=5, item_shift=0.8)
    traces = table(ref.frozen, ["m1"], lambda m, v, *a: planted(m, *a))
    result = analyze(traces, ref.spec)

    vec = stored(traces, "m1")
    tasks = [f"t{i}" for i in range(7)]
    rows = {r["wrapper"]: r for r in result.tables["wrappers"].to_pylist()}
    halves, ones, units, best = [], [], [], []
    for e, d in itertools.product(("e1", "e2", "e3"), ("d1", "d2")):
        layer = rows[f"{e}×{d}"]["layer"]
        best.append(layer)
        delta = {t: vec[(e, t)][layer] - vec[(d, t)][layer] for t in tasks}
        first, second = [delta[t] for t in sorted(tasks)[0::2]], [delta[t] for t in sorted(tasks)[1::2]]
        halves.append(cos(np.mean(first, axis=0), np.mean(second, axis=0)))
        full = np.mean(list(delta.values()), axis=0)
        ones.append(np.mean([cos(delta[t], full) for t in tasks]))
        assert rows[f"{e}×{d}"]["halves_cosine"] == pytest.approx(halves[-1], abs=1e-9)
        assert rows[f"{e}×{d}"]["one_item_recovery"] == pytest.approx(ones[-1], abs=1e-9)
    typical = int(np.median(best))
    for e, d in itertools.product(("e1", "e2", "e3"), ("d1", "d2")):
        units.append(np.mean([vec[(e, t)][typical] for t in tasks], axis=0)
                     - np.mean([vec[(d, t)][typical] for t in tasks], axis=0))
    across = np.mean([cos(a, b) for a, b in itertools.combinations(units, 2)])
    c = result.numbers["models"]["m1/base"]["cosines"]
    assert c["across_wrappers_layer"] == typical
    assert c["within_wrapper_halves"] == pytest.approx(np.mean(halves), abs=1e-9)
    assert c["one_item_recovery"] == pytest.approx(np.mean(ones), abs=1e-9)
    assert c["across_wrappers"] == pytest.approx(across, abs=1e-9)
    assert "one task text against the full set" in result.text


# --------------------------------------------------------------------------------------------------------------
# nulls with a known answer

def one_block_vectors(seed: int, identical_deltas: bool):
    """Two vectors per text (embedding output, one block), so exactly one layer enters the max. At the block,
    deployment-framed task texts sit at base_t + (−1, 0, 0, 0) and evaluation-framed ones at base_t; with
    ``identical_deltas`` the base_t are multiples of ¼ (exact in float32), so every task text's difference is
    exactly (1, 0, 0, 0). Scoring items: noise, with deployment items shifted by −0.6 on axis 0 (they project
    below testing items on evaluation − deployment)."""
    rng = np.random.default_rng(seed)
    base, cache = {}, {}

    def vector(model, variant, arm, framing, item_id, item_label):
        if (model, framing, item_id) in cache:
            return cache[(model, framing, item_id)]
        v = np.zeros((2, 4))
        if arm == "scoring":
            v[1] = rng.standard_normal(4)
            v[1, 0] += -0.6 if item_label == "deployment" else 0.0
        else:
            if item_id not in base:
                base[item_id] = (rng.integers(-8, 8, size=4) / 4.0 if identical_deltas else rng.standard_normal(4))
            v[1] = base[item_id] + (np.array([-1.0, 0, 0, 0]) if arm == "deployment" else 0.0)
            if not identical_deltas:
                v[1] += 0.3 * rng.standard_normal(4)
        cache[(model, framing, item_id)] = v
        return v

    return vector


def test_the_label_null_on_one_layer_has_the_mann_whitney_mean_and_sd(tmp_path):
    """On one layer the label-permutation null of AUROC − 0.5 has mean 0 and sd √((n₁ + n₀ + 1)/(12 n₁ n₀))
    (no ties); with 4000 permutations the estimates lie within 4 standard errors of those values."""
    write_experiment(tmp_path)   # 20 testing, 20 deployment
    ref = lens_ref(tmp_path, null_permutations=4000, item_samples=2, seed=7)
    traces = table(ref.frozen, ["m1"], one_block_vectors(3, identical_deltas=False))
    result = analyze(traces, ref.spec)

    n1 = n0 = 20
    sd = math.sqrt((n1 + n0 + 1) / (12 * n1 * n0))
    B = 4000
    for r in result.tables["wrappers"].to_pylist():
        assert abs(r["label_floor"]) <= 4 * sd / math.sqrt(B)
        assert r["label_floor_sd"] == pytest.approx(sd, rel=4 / math.sqrt(2 * (B - 1)))
        assert r["label_z"] == pytest.approx((r["max_auroc_minus_half"] - r["label_floor"]) / r["label_floor_sd"])
        assert r["headline_minus_floor"] == pytest.approx(r["max_auroc_minus_half"] - r["label_floor"])
        assert r["label_z"] == pytest.approx(r["max_auroc_minus_half"] / sd, abs=0.15)
    floor = result.numbers["models"]["m1/base"]["layer_selection_floor"]
    rows = result.tables["wrappers"].to_pylist()
    assert floor["z_against_floor"]["median"] == pytest.approx(np.median([r["label_z"] for r in rows]))


def test_the_swap_null_of_identical_task_differences_draws_only_plus_or_minus_the_observed_value(tmp_path):
    """Every task text's difference is the same vector, and there are 7 (odd): a draw's direction is that vector
    times a nonzero sum of signs, so on one layer every draw is +h or −h (h the observed headline). Hence
    mean² + (B − 1)/B · sd² = h²; h is below 0 here (the case where a one-sided p of 1 hides the result), so the
    two-sided p is twice the share of draws at h."""
    write_experiment(tmp_path, n_tasks=7)
    B = 301
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, contrastive_permutations=B, seed=2)
    traces = table(ref.frozen, ["m1"], one_block_vectors(4, identical_deltas=True))
    result = analyze(traces, ref.spec)

    vec = stored(traces, "m1")
    deployment = np.array([r["item_label"] == "deployment" for r in traces.to_pylist() if r["arm"] == "scoring"])
    items = sorted(k[1] for k in vec if k[0] == "score")
    projections = np.array([vec[("score", i)][1] @ np.array([1.0, 0, 0, 0]) for i in items])
    h = auroc(projections, deployment) - 0.5
    assert h < -0.1   # deployment items project below testing items: AUROC(deployment) below 0.5
    for r in result.tables["wrappers"].to_pylist():
        assert r["max_auroc_minus_half"] == pytest.approx(h, abs=1e-12)
        mean, sd = r["contrastive_floor"], r["contrastive_sd"]
        assert mean ** 2 + (B - 1) / B * sd ** 2 == pytest.approx(h * h, rel=1e-9)
        at_h = round(B * (1 + mean / h) / 2)          # draws equal to h (the rest equal −h > h)
        assert 0 < at_h < B
        # h < 0: every draw is ≥ h, so the one-sided p (above the null) is 1; the lower tail holds the draws at h
        assert r["contrastive_p"] == 1.0
        assert r["contrastive_p_two_sided"] == pytest.approx(min(1.0, 2 * (at_h + 1) / (B + 1)))
        assert r["contrastive_z"] == pytest.approx((h - mean) / sd)
    assert "p 2-sided" in result.text and "swap z" in result.text
    # contrastive_permutations random directions are drawn, not one
    assert result.numbers["models"]["m1/base"]["content_free"]["random_direction"]["n"] == B
    # a draw swaps the same task texts' framings in every wrapper: here every wrapper's differences are the same,
    # so draw b is the same in every wrapper and the mean over wrappers has the one wrapper's null (independent
    # draws per wrapper would shrink its sd by about √4)
    rows = result.tables["wrappers"].to_pylist()
    swap = result.numbers["models"]["m1/base"]["contrastive_null"]
    assert swap["sd"] == pytest.approx(rows[0]["contrastive_sd"], rel=1e-9)
    assert swap["floor"] == pytest.approx(rows[0]["contrastive_floor"], abs=1e-12)
    assert swap["p_two_sided"] == pytest.approx(rows[0]["contrastive_p_two_sided"])


# --------------------------------------------------------------------------------------------------------------
# argmax bootstrap

def test_the_argmax_bootstrap_reports_two_layers_trading_places_as_a_third_of_the_stack(tmp_path):
    """Blocks 1…4. Every wrapper's direction is (1, 0) at blocks 2 and 3 and zero at 1 and 4 (AUROC 0.5 there).
    Scoring items are separated perfectly at blocks 2 and 3 except one testing item placed above every
    deployment item: item A at block 2, item B at block 3. In a resample the block whose outlier is drawn fewer
    times wins (2 on ties), so the best layer moves between 2 and 3 only: (3 − 2)/(4 − 1) of the stack, 2 layers."""
    write_experiment(tmp_path)
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, bootstrap_draws=200, seed=1)
    testing = sorted(i for i, lab in zip([f"s{i:02d}" for i in range(40)], ["testing", "deployment"] * 20)
                     if lab == "testing")
    outlier = {2: testing[0], 3: testing[1]}

    def vector(model, variant, arm, framing, item_id, item_label):
        v = np.zeros((5, 2))
        if arm == "deployment":
            v[2:4, 0] = -1.0
        if arm == "scoring":
            for layer in (2, 3):
                v[layer, 0] = (1.0 if item_label == "deployment" else -1.0) + int(item_id[1:]) / 100
                if item_id == outlier[layer]:
                    v[layer, 0] = 5.0
        return v

    result = analyze(table(ref.frozen, ["m1"], vector), ref.spec)
    for r in result.tables["wrappers"].to_pylist():
        assert r["layer"] == 2 and r["max_auroc_minus_half"] == pytest.approx(0.5 - 1 / 20)
        assert r["argmax_spread"] == pytest.approx(1 / 3) and r["argmax_distinct_layers"] == 2
    a = result.numbers["models"]["m1/base"]["argmax_bootstrap"]
    assert a["median_share"] == pytest.approx(1 / 3) and a["max_share"] == pytest.approx(1 / 3)
    assert a["distinct_range"] == [2, 2] and a["robust"] is False and a["wrappers_below_threshold"] == 0
    assert "not robust" in result.text


def test_the_argmax_verdict_reads_the_median_share_over_wrappers():
    """Two of three wrappers keep their best layer within 5 % of the stack, one moves across half of it: the
    median share is 0.05 (robust, below 10 %), the max 0.5; a wrapper with one layer in the max (NaN) is left out."""
    from mirrorscan.instruments.lens.numbers import argmax_summary

    rows = [{"argmax_spread": s, "argmax_distinct_layers": k}
            for s, k in ((0.05, 2), (0.5, 6), (0.05, 1), (float("nan"), 1))]
    a = argmax_summary(rows, 100)
    assert a["median_share"] == pytest.approx(0.05) and a["max_share"] == pytest.approx(0.5)
    assert a["robust"] is True and a["wrappers_below_threshold"] == 2 and a["distinct_range"] == [1, 6]
    assert argmax_summary([{"argmax_spread": float("nan"), "argmax_distinct_layers": 1}], 100)["robust"] is None


# --------------------------------------------------------------------------------------------------------------
# floor-corrected scaling

def test_the_floor_corrected_scaling_correlation_equals_numpy_on_the_wrapper_table(tmp_path):
    write_experiment(tmp_path, evaluation=("e1", "e2", "e3"), deployment=("d1", "d2"))
    ref = lens_ref(tmp_path, null_permutations=200, item_samples=2, seed=4)
    planted = {m: planted_direction_vectors(seed=s, item_shift=shift)
               for m, s, shift in (("m1", 1, 0.2), ("m2", 2, 0.5), ("m3", 3, 0.9), ("m4", 4, 0.4))}
    params = {"m1": 10 ** 8, "m2": 5 * 10 ** 8, "m3": 3 * 10 ** 9, "m4": 7 * 10 ** 9}
    result = analyze(table(ref.frozen, list(params), lambda m, v, *a: planted[m](m, *a), parameters=params),
                     ref.spec)

    rows = result.tables["wrappers"].to_pylist()
    models = sorted(params)
    x = np.log10([params[m] for m in models])
    raw = np.array([np.mean([r["max_auroc_minus_half"] for r in rows if r["label"] == m]) for m in models])
    corrected = np.array([np.mean([r["max_auroc_minus_half"] - r["label_floor"] for r in rows if r["label"] == m])
                          for m in models])
    sc = result.numbers["claims"]["base"]["scaling"]
    assert sc["correlation_raw"] == pytest.approx(np.corrcoef(x, raw)[0, 1], abs=1e-12)
    assert sc["correlation_floor_corrected"] == pytest.approx(np.corrcoef(x, corrected)[0, 1], abs=1e-12)
    per_wrapper = {w: np.corrcoef(x, [next(r["max_auroc_minus_half"] - r["label_floor"] for r in rows
                                           if r["label"] == m and r["wrapper"] == w) for m in models])[0, 1]
                   for w in {r["wrapper"] for r in rows}}
    assert sc["by_wrapper_floor_corrected"]["pearson"]["n_positive"] == sum(v > 0 for v in per_wrapper.values())
    assert "floor-corrected" in result.text


# --------------------------------------------------------------------------------------------------------------
# the implementation's share of variance

def components_by_least_squares(y: np.ndarray, facets: tuple[str, ...]) -> dict[frozenset, float]:
    """Random-effects variance components of a fully crossed array, one observation per cell, computed
    independently of analysis.gtheory: each effect's sum of squares from least-squares fits on indicator
    matrices (the fit on α's level combinations minus the fits of its sub-effects, by inclusion–exclusion of
    nested column spaces), then the EMS equations E[MS(α)] = Σ_{β ⊇ α} Π_{f ∉ β} n_f σ²(β) solved as one
    linear system."""
    n = dict(zip(facets, y.shape))
    idx = np.array(list(itertools.product(*[range(k) for k in y.shape])))
    flat = y.reshape(-1)
    effects = [frozenset(c) for k in range(1, len(facets) + 1) for c in itertools.combinations(facets, k)]

    def fitted_ss(subset: frozenset) -> float:
        if not subset:
            return flat.size * flat.mean() ** 2
        cols = [facets.index(f) for f in facets if f in subset]
        keys = [tuple(row) for row in idx[:, cols]]
        levels = sorted(set(keys))
        X = np.zeros((flat.size, len(levels)))
        X[np.arange(flat.size), [levels.index(k) for k in keys]] = 1.0
        beta, *_ = np.linalg.lstsq(X, flat, rcond=None)
        return float(np.sum((X @ beta) ** 2))

    ss = {}
    for a in effects:   # SS(α) = Σ_{β ⊆ α} (−1)^{|α|−|β|} ‖P_β y‖²
        ss[a] = sum((-1) ** (len(a) - k) * fitted_ss(frozenset(b)) for k in range(len(a) + 1)
                    for b in itertools.combinations(sorted(a), k))
    ms = np.array([ss[a] / math.prod(n[f] - 1 for f in a) for a in effects])
    A = np.array([[math.prod(n[f] for f in facets if f not in b) if a <= b else 0 for b in effects] for a in effects])
    return dict(zip(effects, np.linalg.solve(A, ms)))


def test_the_implementation_share_equals_components_solved_here(tmp_path):
    write_experiment(tmp_path, evaluation=("e1", "e2"), deployment=("d1", "d2"))
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, seed=6,
                   variants={"base": {}, "last": {"pooling": "last_token"}})
    shift = {"base": 0.3, "last": 1.2}   # the 'last' variant separates the classes far better
    planted = {(m, v): planted_direction_vectors(seed=k, item_shift=shift[v] * (1 + 0.3 * k))
               for k, (m, v) in enumerate(itertools.product(("m1", "m2", "m3"), shift))}
    traces = table(ref.frozen, ["m1", "m2", "m3"], lambda m, v, *a: planted[(m, v)](m, *a), variants=tuple(shift))
    result = analyze(traces, ref.spec)

    scores = result.tables["gstudy_scores"].to_pylist()
    models, wrappers, variants = ["m1", "m2", "m3"], sorted({r["wrapper"] for r in scores}), ["base", "last"]
    y = np.empty((3, len(wrappers), 2, 2))
    for r in scores:
        if r["study"] in variants:
            y[models.index(r["model"]), wrappers.index(r["wrapper"]), r["item_sample"], variants.index(r["variant"])] = r["score"]
    comps = components_by_least_squares(y, ("model", "wrapper", "item_sample", "variant"))
    total = sum(max(v, 0.0) for v in comps.values())
    share = lambda *f: max(comps[frozenset(f)], 0.0) / total
    g = result.numbers["gstudy"]["all variants"]
    imp = g["implementation_shares"]
    assert imp["implementation"] == pytest.approx(share("variant"), abs=1e-9)
    assert imp["implementation"] > 0.2
    assert imp["model"] == pytest.approx(share("model"), abs=1e-9)
    assert imp["model_wrapper"] == pytest.approx(share("model", "wrapper"), abs=1e-9)
    assert imp["item"] == pytest.approx(share("item_sample"), abs=1e-9)
    assert imp["implementation_related"] == pytest.approx(
        sum(max(v, 0.0) for k, v in comps.items() if "variant" in k) / total, abs=1e-9)
    assert f"implementation {100 * share('variant'):.1f}%" in result.text
    assert g["scores_table"]["rows"] == "study in ('base', 'last')"


def test_every_gstudy_score_is_the_headline_on_its_item_sample_alone(tmp_path):
    """Each row of the headline study in gstudy_scores is max over blocks 1…L of AUROC − 0.5 of the wrapper's
    direction (mean evaluation-framed minus mean deployment-framed task vector), computed here in numpy on the
    items of that row's item sample only; the samples partition the scoring set, each class dealt evenly."""
    from mirrorscan.instruments.lens.gstudy import item_samples
    from mirrorscan.instruments.lens.resampling import seed_for

    write_experiment(tmp_path)   # 20 testing, 20 deployment
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=3, seed=8)
    planted = {m: planted_direction_vectors(seed=s, item_shift=0.4 * s) for m, s in (("m1", 1), ("m2", 2), ("m3", 3))}
    traces = table(ref.frozen, list(planted), lambda m, v, *a: planted[m](m, *a))
    result = analyze(traces, ref.spec)

    positive = ref.frozen["positive"]
    scoring = sorted((r["item_id"], r["item_label"]) for r in traces.to_pylist()
                     if r["arm"] == "scoring" and r["label"] == "m1")
    labels = np.array([lab for _, lab in scoring])
    samples = item_samples(list(labels), 3, seed_for(8, "item-samples"))
    assert sorted(i for s in samples for i in s) == list(range(len(scoring)))
    assert all(sorted((labels[s] == c).sum() for s in samples) == [6, 7, 7] for c in ("testing", "deployment"))
    tasks = [f"t{i}" for i in range(ref.frozen["tasks"]["n"])]
    rows = [r for r in result.tables["gstudy_scores"].to_pylist() if r["study"] == "base"]
    assert len(rows) == 3 * 4 * 3
    whole_set = {(r["label"], r["wrapper"]): r["max_auroc_minus_half"] for r in result.tables["wrappers"].to_pylist()}
    differs = 0
    for model in planted:
        vec = stored(traces, model)
        x = np.stack([vec[("score", i)] for i, _ in scoring])           # (items, layers, hidden)
        for r in (r for r in rows if r["model"] == model):
            e, d, idx = r["evaluation"], r["deployment"], samples[r["item_sample"]]
            direction = (np.mean([vec[(e, t)] for t in tasks], axis=0)
                         - np.mean([vec[(d, t)] for t in tasks], axis=0))   # (layers, hidden)
            per_layer = {layer: auroc(x[idx, layer] @ direction[layer], labels[idx] == positive) - 0.5
                         for layer in range(1, x.shape[1])}
            assert r["score"] == pytest.approx(max(per_layer.values()), abs=1e-9)
            assert per_layer[r["layer"]] == pytest.approx(r["score"], abs=1e-9)
            differs += abs(r["score"] - whole_set[(model, r["wrapper"])]) > 1e-6
    assert differs > 0   # a sample's headline is not the whole set's


# --------------------------------------------------------------------------------------------------------------
# the hypothesised model variance and the direction of AUROC in words

def test_published_scores_set_the_hypothesised_variance_and_the_direction_is_said_in_words(tmp_path):
    write_experiment(tmp_path)
    published = [0.62, 0.71, 0.58, 0.66]
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, object_variance=published)
    planted = {m: planted_direction_vectors(seed=s, item_shift=0.5 * s) for m, s in (("m1", 1), ("m2", 2), ("m3", 3))}
    result = analyze(table(ref.frozen, ["m1", "m2", "m3"], lambda m, v, *a: planted[m](m, *a)), ref.spec)

    h = result.numbers["gstudy"]["base"]["design_numbers"]["hypothetical"]
    assert h["object_variance"] == pytest.approx(float(np.var(published, ddof=1)))
    d = result.numbers["gstudy"]["base"]["design_numbers"]
    mw = next(c["variance"] for c in d["components"] if c["effect"] == "model:wrapper")
    mi = next(c["variance"] for c in d["components"] if c["effect"] == "model:item_sample")
    res = next(c["variance"] for c in d["components"] if c["effect"] == "residual")
    v = h["object_variance"]
    assert h["single_wrapper"]["g_coefficient"] == pytest.approx(v / (v + mw + mi + res))
    assert result.numbers["gstudy"]["base items"]["design_numbers"]["hypothetical"] is None   # other units
    words = result.numbers["direction"][0]
    assert "positive class = deployment" in words and "below 0.5: testing items do" in words
    assert words in result.text and "under a hypothesised model variance" in result.text


@pytest.mark.parametrize("value", [[0.6], -1.0, "wide", [0.6, True]])
def test_an_object_variance_that_is_not_a_variance_or_a_score_list_is_refused(tmp_path, value):
    from mirrorscan.grid.errors import ConfigError

    write_experiment(tmp_path)
    with pytest.raises(ConfigError, match="object_variance"):
        lens_ref(tmp_path, object_variance=value)


def test_random_directions_are_scored_like_one_wrapper_each():
    """The batched random directions equal the same Gaussian draws projected one at a time and scored with
    scikit-learn's AUROC; their count is the number asked for."""
    from sklearn.metrics import roc_auc_score

    from mirrorscan.instruments.lens.numbers import Extracted, random_directions

    rng = np.random.default_rng(0)
    scoring = rng.standard_normal((30, 4, 6))
    labels = ["deployment", "testing"] * 15
    ex = Extracted(tasks={}, empty={}, item_ids=[], labels=labels, subsets=[], texts=[], scoring=scoring)
    got = random_directions(ex, [1, 2, 3], "deployment", 40, 9, chunk=16)

    draws = np.random.default_rng(9)
    expected = []
    for start in range(0, 40, 16):
        block = draws.standard_normal((min(16, 40 - start), 4, 6))
        for direction in block:
            per_layer = [roc_auc_score([l == "deployment" for l in labels], scoring[:, layer] @ direction[layer])
                         for layer in (1, 2, 3)]
            expected.append(max(per_layer) - 0.5)
    assert len(got) == 40
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
