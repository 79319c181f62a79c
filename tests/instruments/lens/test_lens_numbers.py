"""lens numbers against things known from outside the code: Manek (2026)'s per-item probe scores on SAD
stages-oversight (AUROC by layer, peak, depth), a planted direction that must be found (and a shuffled
labelling that must not), and planted variance components that the per-item G-study must recover.

Every vector here is synthetic and seeded; the traces table is built by hand with the columns
``numbers.analyze`` reads, so nothing starts Ray or loads a model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.grid.instrument import ref_from_section
from mirrorscan.instruments.lens.directions import layer_curve
from mirrorscan.instruments.lens.instrument import SECTION_KEYS
from mirrorscan.instruments.lens.numbers import analyze

REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference-data" / "sad_oversight_probe_scores_manek2026"
"""/work/shared/reference-data/…: the test file is /work/main/tests/instruments/lens/<this>."""

TRACE_SCHEMA = pa.schema([
    ("probe_id", pa.string()), ("attempt", pa.int32()), ("error", pa.string()), ("label", pa.string()),
    ("variant", pa.string()), ("framing", pa.string()), ("arm", pa.string()), ("item_id", pa.string()),
    ("item_label", pa.string()), ("subset", pa.string()), ("user_text", pa.string()),
    ("layer_vectors", pa.list_(pa.list_(pa.float32()))),
])


@pytest.fixture(autouse=True)
def charts_not_rendered(monkeypatch):
    """Charts are not under test here, and rendering them (matplotlib's savefig) is ~80 % of an analysis's
    time: every figure is built as usual but closed unrendered."""
    import mirrorscan.analysis.plotting
    import mirrorscan.instruments.lens.charts

    def closed(fig) -> bytes:
        import matplotlib.pyplot as plt

        plt.close(fig)
        return b""

    monkeypatch.setattr(mirrorscan.analysis.plotting, "png", closed)
    monkeypatch.setattr(mirrorscan.instruments.lens.charts, "png", closed)


# --------------------------------------------------------------------------------------------------------------
# helpers: an experiment folder, its spec, and a traces table of planted vectors

def write_experiment(folder: Path, evaluation=("e1", "e2"), deployment=("d1", "d2"), n_tasks=6,
                     scoring_labels=None) -> None:
    """Framings (one ``{task}`` slot each), ``n_tasks`` task texts t0…, and a scoring set s00… labelled by
    ``scoring_labels`` (default 20 testing then 20 deployment, interleaved)."""
    for arm, names in (("evaluation", evaluation), ("deployment", deployment)):
        (folder / "framings" / arm).mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / "framings" / arm / f"{name}.txt").write_text(f"[{arm} framing {name}]\n{{task}}\n",
                                                                   encoding="utf-8")
    (folder / "tasks.jsonl").write_text("".join(json.dumps({"id": f"t{i}", "text": f"task text number {i}"}) + "\n"
                                                for i in range(n_tasks)), encoding="utf-8")
    if scoring_labels is None:
        scoring_labels = ["testing", "deployment"] * 20
    (folder / "scoring.jsonl").write_text("".join(
        json.dumps({"id": f"s{i:02d}", "text": f"scoring item {i} about topic {i % 7}", "label": label}) + "\n"
        for i, label in enumerate(scoring_labels)), encoding="utf-8")


SKIP_EXTRA_DRAWS = {k: 0 for k in ("contrastive_permutations", "bootstrap_draws") if k in SECTION_KEYS}
"""Resampling these tests do not read, switched off where the section has it (keeps the file fast)."""


def lens_ref(folder: Path, **section):
    return ref_from_section("lens", {"framings": "framings", "tasks": "tasks.jsonl", "scoring_set": "scoring.jsonl",
                                     **SKIP_EXTRA_DRAWS, **section}, str(folder))


def traces_table(frozen: dict, models: list[str], vector) -> pa.Table:
    """One row per (model, framing × (task + empty task), scoring item) of the frozen spec, variant ``base``;
    ``vector(model, arm, framing, item_id, item_label)`` gives the (layers, hidden) array of a row."""
    from mirrorscan.instruments.lens.items import load_items

    tasks = [f"t{i}" for i in range(frozen["tasks"]["n"])] + ["_empty"]
    scoring = load_items(frozen["scoring_set"]["source"], "scoring_set", True).items
    rows = []
    for model in models:
        cells = [(arm, f, t, None, f"{f}|{t}") for arm in ("evaluation", "deployment")
                 for f in frozen["framings"][arm] for t in tasks]
        cells += [("scoring", "score", s.id, s.label, s.text) for s in scoring]
        for arm, framing, item_id, item_label, text in cells:
            v = np.asarray(vector(model, arm, framing, item_id, item_label), dtype=np.float32)
            rows.append({"probe_id": f"{model}|base/{framing}|{item_id}|-|-", "attempt": 1, "error": None,
                         "label": model, "variant": "base", "framing": framing, "arm": arm, "item_id": item_id,
                         "item_label": item_label, "subset": None, "user_text": text,
                         "layer_vectors": v.tolist()})
    return pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)


def with_item_labels(traces: pa.Table, labels: dict) -> pa.Table:
    """``traces`` with the scoring rows' item_label replaced by ``labels[item_id]``."""
    col = [labels[i] if a == "scoring" else l for a, i, l in zip(traces.column("arm").to_pylist(),
                                                                  traces.column("item_id").to_pylist(),
                                                                  traces.column("item_label").to_pylist())]
    return traces.set_column(traces.schema.get_field_index("item_label"), "item_label", pa.array(col, pa.string()))


def auroc_at(analysis, layer: int) -> dict:
    """(model, wrapper) → AUROC at ``layer``, from the analysis's ``auroc_by_layer`` table."""
    return {(r["label"], r["wrapper"]): r["auroc"] for r in analysis.tables["auroc_by_layer"].to_pylist()
            if r["layer"] == layer}


# --------------------------------------------------------------------------------------------------------------
# 1. Manek (2026): per-item scores → AUROC by layer, peak and depth

def manek_models() -> list[str]:
    if not (REFERENCE / "recomputed_auroc_by_layer.json").is_file():
        return []
    models = json.loads((REFERENCE / "recomputed_auroc_by_layer.json").read_text())["models"]
    return [m for m in models if (REFERENCE / f"{m}.csv").is_file()]


PUBLISHED_DEPTH_DISAGREES = {"Qwen2.5-7B-Instruct"}
"""Manek's figure data gives relative depth 0.56 for Qwen2.5-7B, but its own peak layer (15 of 28 blocks, the
same in the recomputed JSON, which gives 0.536) has depth 0.536; no layer/L rule gives 0.56 for this model
and also the other ten, so the published depth is checked against the recomputed one only."""


@pytest.mark.skipif(not manek_models(), reason=f"reference data absent: {REFERENCE} (shared/reference-data not "
                                                "checked out next to this repository)")
@pytest.mark.parametrize("model", manek_models() or ["none"])
def test_layer_curve_reproduces_manek_2026_on_sad_oversight(model):
    ref = json.loads((REFERENCE / "recomputed_auroc_by_layer.json").read_text())["models"][model]
    with open(REFERENCE / f"{model}.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    columns = [c for c in rows[0] if c.startswith("L")]
    k = len(columns)
    assert columns == [f"L{i}" for i in range(1, k + 1)] and len(rows) == 400
    scores = np.array([[float(r[c]) for c in columns] for r in rows])
    labels = [r["type"] for r in rows]
    assert sorted(set(labels)) == ["deployment", "testing"]

    curve = layer_curve(scores, labels, "deployment", list(range(1, k + 1)), ref["n_layers_model"])

    assert curve.layers == tuple(range(1, k + 1))
    np.testing.assert_allclose(curve.auroc, ref["auroc_by_layer_deployment_positive"], rtol=0, atol=1e-6)
    published = ref["published_manek2026"]
    assert 0.5 + curve.max_auroc_minus_half == pytest.approx(published["peak_auroc"], abs=0.0006)
    assert curve.max_layer == ref["peak_layer"]
    # The recomputed depth is given to 3 decimals.
    assert curve.relative_depth == pytest.approx(ref["peak_relative_depth"], abs=0.0005 + 1e-9)
    if model not in PUBLISHED_DEPTH_DISAGREES:
        # Published depths are rounded to 2 or 3 decimals: allow half a unit of the last printed decimal
        # (0.001 where three are printed, as asked; 0.005 where only two are).
        decimals = len(repr(published["peak_relative_depth"]).split(".")[1])
        tolerance = 0.001 if decimals >= 3 else 0.5 * 10 ** -decimals + 1e-9
        assert curve.relative_depth == pytest.approx(published["peak_relative_depth"], abs=tolerance)


# --------------------------------------------------------------------------------------------------------------
# 2. a planted direction is found at its layer; shuffled labels are not

HIDDEN, N_LAYERS = 8, 3
AXIS = 5
"""The planted direction u is the unit vector along this hidden dimension."""


def planted_direction_vectors(seed: int, framing_shift: float = 3.0, item_shift: float = 1.5):
    """Noise N(0, 1) everywhere; at layer 2 deployment-framed task texts add +framing_shift·u, so the direction
    (evaluation − deployment) points along −u; scoring items of class deployment carry −item_shift·u and those
    of class testing +item_shift·u, so deployment items project above testing items."""
    rng = np.random.default_rng(seed)
    cache = {}

    def vector(model, arm, framing, item_id, item_label):
        key = (model, framing, item_id)
        if key not in cache:
            v = rng.standard_normal((N_LAYERS, HIDDEN))
            if arm == "deployment" and item_id != "_empty":
                v[2, AXIS] += framing_shift
            if arm == "scoring":
                v[2, AXIS] += -item_shift if item_label == "deployment" else item_shift
            cache[key] = v
        return cache[key]

    return vector


def test_a_planted_direction_is_found_at_its_layer_by_every_wrapper(tmp_path):
    write_experiment(tmp_path)
    ref = lens_ref(tmp_path, null_permutations=200, item_samples=2, seed=3)
    traces = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=11))

    result = analyze(traces, ref.spec)

    wrappers = {f"{e}×{d}" for e in ("e1", "e2") for d in ("d1", "d2")}
    at_2 = auroc_at(result, 2)
    assert set(at_2) == {(m, w) for m in ("m1", "m2") for w in wrappers}
    assert all(a >= 0.95 for a in at_2.values()), at_2
    rows = result.tables["wrappers"].to_pylist()
    assert len(rows) == 8
    for r in rows:
        assert r["layer"] == 2 and r["relative_depth"] == pytest.approx(1.0)
        assert r["label_p"] <= 0.05, r
    assert result.numbers["positive_class"] == "deployment"
    assert all(m["wrappers_above_floor_p05"] == 4 for m in result.numbers["models"].values())


def test_a_perfectly_separated_scoring_set_is_analysed(tmp_path):
    """A strong planted direction (every item sample separated perfectly in every wrapper): the headline is
    0.5 everywhere, the G-study has nothing to apportion, and the analysis must still come back."""
    write_experiment(tmp_path)
    ref = lens_ref(tmp_path, null_permutations=0, item_samples=2)
    traces = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=11, item_shift=6.0))

    result = analyze(traces, ref.spec)

    assert all(r["max_auroc_minus_half"] == 0.5 for r in result.tables["wrappers"].to_pylist())
    assert result.numbers["gstudy"]["base"]["model_share"] is None
    assert "G-study 'base' (model × wrapper × item_sample): every score is the same" in result.text


def test_with_the_other_class_positive_the_planted_direction_ranks_below_chance(tmp_path):
    """Same vectors, positive = testing: the AUROC at layer 2 flips to ≤ 0.05 (AUROC(testing) = 1 − AUROC
    (deployment) without ties)."""
    write_experiment(tmp_path)
    by_positive = {}
    for positive in ("deployment", "testing"):
        ref = lens_ref(tmp_path, null_permutations=0, item_samples=2, positive=positive)
        by_positive[positive] = analyze(traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=11)),
                                        ref.spec)
    deployment, testing = by_positive["deployment"], by_positive["testing"]
    a, b = auroc_at(deployment, 2), auroc_at(testing, 2)
    assert set(a) == set(b) and all(b[k] <= 0.05 for k in b)
    assert all(a[k] + b[k] == pytest.approx(1.0, abs=1e-12) for k in a)
    assert testing.numbers["positive_class"] == "testing"


def test_shuffled_scoring_labels_stay_inside_the_label_null(tmp_path):
    """The same planted vectors with the scoring labels reassigned at random (seeded): the labels no longer
    carry the planted component, so no wrapper's headline clears the 95th percentile of its label null.

    The reassignment is balanced against the planted classes (half of each planted class gets each label),
    so the planted u component is uninformative by construction; what is left is noise, and whether a
    particular wrapper lands above its 95th percentile is a 5 % event per wrapper (of reassignment seeds 0–11,
    all but seed 1 keep all 8 wrappers above p = 0.05). The seeds are fixed (vectors 11, reassignment 5, null
    seed 3), so the outcome is deterministic."""
    write_experiment(tmp_path)
    ref = lens_ref(tmp_path, null_permutations=200, item_samples=2, seed=3)
    planted = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=11))
    ids = [f"s{i:02d}" for i in range(40)]
    classes = ["testing", "deployment"] * 20
    rng = np.random.default_rng(5)
    shuffled = {}
    for cls in ("testing", "deployment"):
        members = rng.permutation([i for i, c in zip(ids, classes) if c == cls])
        shuffled.update({i: ("testing" if k < len(members) // 2 else "deployment") for k, i in enumerate(members)})
    assert sum(shuffled[i] == c for i, c in zip(ids, classes)) == 20       # exactly chance agreement

    result = analyze(with_item_labels(planted, shuffled), ref.spec)

    rows = result.tables["wrappers"].to_pylist()
    assert len(rows) == 8
    for r in rows:
        assert r["label_p"] > 0.05, r
        assert r["max_auroc_minus_half"] < 0.25, r
    # the planted run on the same vectors and null seed does clear its null: the shuffle is what changed
    assert all(r["label_p"] <= 0.05 for r in analyze(planted, ref.spec).tables["wrappers"].to_pylist())


# --------------------------------------------------------------------------------------------------------------
# 3. planted G-study components of the per-item projections

PLANTED_SD = {"model": 1.0, "wrapper": 0.7, "item": 0.5, "residual": 0.2}
"""Standard deviations of the planted effects of the per-item projection study (activation units)."""


def standardised(rng, n: int, sd: float) -> np.ndarray:
    """n seeded normal draws, centred and scaled to sample sd (ddof 1) exactly ``sd``."""
    x = rng.standard_normal(n)
    x -= x.mean()
    return x * sd / x.std(ddof=1)


def double_centred(rng, shape, sd: float) -> np.ndarray:
    """Seeded normal (models, items) array with zero mean over every row and column, scaled to cell sd ``sd``."""
    x = rng.standard_normal(shape)
    x = x - x.mean(0, keepdims=True) - x.mean(1, keepdims=True) + x.mean()
    return x * sd / np.sqrt((x ** 2).mean())


def planted_projection_vectors(models, items, item_layer: int, seed: int, signal_layer: int = 2):
    """Vectors whose projection onto each (model, wrapper) unit direction at ``item_layer`` is exactly

        score[m, (e, d), i] = a_m + c_i + b_e + b_d + σ_e ρ[m, i] + σ_d ρ'[m, i]      (σ_e1 = +1, σ_e2 = −1; d alike)

    with a, c and b_w = b_e + b_d of planted sample sd (``PLANTED_SD``) and the residual ρ, ρ' centred over
    models, items and arms, so it is a pure model × wrapper × item effect. (A wrapper's direction is
    μ_e − μ_d, additive in its arms, so a residual of the pair design can only be additive in the arms too.)

    Layout at the item layer, per model m: framing means μ_e = λ_m (½ e0 + ε f_e), μ_d = λ_m (−½ e0 + ε g_d)
    with f_e, g_d orthonormal axes 1…4, so every direction μ_e − μ_d has length λ_m √(1 + 2ε²) (λ_m differs
    per model: an unnormalised projection would scale each model's scores). Task vectors scatter around μ_f
    with noise centred exactly over the task texts; the item vectors hold the score's parts on e0, f_e, g_d and
    noise on the axes 5…7 the directions do not touch. Other layers are noise, except that ``signal_layer``
    holds a planted label direction (as ``planted_direction_vectors``), so every wrapper's best layer — and
    the median a missing ``item_layer`` would fall back to — is ``signal_layer``, not ``item_layer``."""
    rng = np.random.default_rng(seed)
    n_m, n_i = len(models), len(items)
    a = standardised(rng, n_m, PLANTED_SD["model"])
    c = standardised(rng, n_i, PLANTED_SD["item"])
    # b_w = b_e + b_d over the 4 wrappers: values ±x ± y have sample variance 4(x² + y²)/3
    x = 0.5
    y = np.sqrt(0.75 * PLANTED_SD["wrapper"] ** 2 - x ** 2)
    b_e, b_d = {"e1": x, "e2": -x}, {"d1": y, "d2": -y}
    sign = {"e1": 1.0, "e2": -1.0, "d1": 1.0, "d2": -1.0}
    # residual cell sd: (σ_e ρ + σ_d ρ') has variance 2 sd_ρ²
    rho = double_centred(rng, (n_m, n_i), PLANTED_SD["residual"] / np.sqrt(2))
    rho2 = double_centred(rng, (n_m, n_i), PLANTED_SD["residual"] / np.sqrt(2))
    lam = np.linspace(0.5, 3.0, n_m)
    eps = 0.5
    norm = np.sqrt(1 + 2 * eps ** 2)
    axis = {"e1": 1, "e2": 2, "d1": 3, "d2": 4}
    n_tasks = 4
    task_noise = rng.standard_normal((n_m, 4, n_tasks, N_LAYERS, HIDDEN))
    task_noise -= task_noise.mean(axis=2, keepdims=True)
    framing_index = {"e1": 0, "e2": 1, "d1": 2, "d2": 3}
    noise = {}

    def background(key):
        if key not in noise:
            noise[key] = rng.standard_normal((N_LAYERS, HIDDEN))
        return noise[key].copy()

    def vector(model, arm, framing, item_id, item_label):
        m = models.index(model)
        v = background((model, framing, item_id))
        if arm == "deployment" and item_id != "_empty":
            v[signal_layer, AXIS] += 3.0
        if arm == "scoring":
            v[signal_layer, AXIS] += -1.5 if item_label == "deployment" else 1.5
        if arm == "scoring":
            i = items.index(item_id)
            at = np.zeros(HIDDEN)
            at[0] = norm * (a[m] + c[i])
            for e in ("e1", "e2"):
                at[axis[e]] = norm * (b_e[e] + sign[e] * rho[m, i]) / eps
            for d in ("d1", "d2"):
                at[axis[d]] = -norm * (b_d[d] + sign[d] * rho2[m, i]) / eps
            at[5:] = v[item_layer, 5:]
            v[item_layer] = at
        elif item_id != "_empty":
            mean = np.zeros(HIDDEN)
            mean[0] = 0.5 if arm == "evaluation" else -0.5
            mean[axis[framing]] = eps
            v[item_layer] = lam[m] * mean + task_noise[m, framing_index[framing], int(item_id[1:]), item_layer]
        return v

    total = sum(s ** 2 for s in PLANTED_SD.values())
    planted_share = {k: s ** 2 / total for k, s in PLANTED_SD.items()}
    score = (a[:, None, None] + c[None, None, :]
             + np.array([b_e[e] + b_d[d] for e in ("e1", "e2") for d in ("d1", "d2")])[None, :, None]
             + np.array([[sign[e] * rho[m] + sign[d] * rho2[m] for e in ("e1", "e2") for d in ("d1", "d2")]
                         for m in range(n_m)]))
    return vector, planted_share, score


def test_the_per_item_gstudy_recovers_planted_model_wrapper_and_item_shares(tmp_path):
    models = [f"m{k}" for k in range(6)]
    items = [f"s{i:02d}" for i in range(30)]
    write_experiment(tmp_path, n_tasks=4, scoring_labels=["testing", "deployment"] * 15)
    ref = lens_ref(tmp_path, item_layer=1, null_permutations=0, item_samples=3, seed=1)
    vector, planted_share, _ = planted_projection_vectors(models, items, item_layer=1, seed=7)

    result = analyze(traces_table(ref.frozen, models, vector), ref.spec)

    gstudy = result.numbers["gstudy"]
    headline = gstudy["base"]
    assert "missing" not in headline and headline["design"] == "model × wrapper × item_sample"
    assert set(headline["report"]["design"]["facets"]) == {"model", "wrapper", "item_sample"}
    study = gstudy["base items"]
    assert "missing" not in study
    assert study["layer"] == {m: 1 for m in models}
    assert {r["layer"] for r in result.tables["wrappers"].to_pylist()} == {2}     # the best layer is elsewhere
    report = study["report"]
    assert report["design"]["facets"]["model"]["n"] == 6 and report["design"]["facets"]["wrapper"]["n"] == 4
    assert report["design"]["facets"]["item"]["n"] == 30
    components, total = report["components"], report["total_variance"]
    assert total > 0
    share = {name: c["estimate_used"] / total for name, c in components.items()}
    for name in ("model", "wrapper", "item"):
        assert share[name] == pytest.approx(planted_share[name], abs=0.10), (name, share, planted_share)
    # the two-way interactions were planted at exactly zero; the residual small
    for name in ("model:wrapper", "model:item", "wrapper:item"):
        assert share[name] < 0.02, (name, share)
    assert share["residual"] < 0.05
    assert study["model_share"] == pytest.approx(share["model"])


def test_the_planted_projection_table_has_the_planted_variances():
    """The construction above, on its own: the score table's main-effect sample sds are those planted, and the
    residual is orthogonal to every main effect and two-way interaction."""
    models = [f"m{k}" for k in range(6)]
    items = [f"s{i:02d}" for i in range(30)]
    _, _, score = planted_projection_vectors(models, items, item_layer=1, seed=7)
    grand = score.mean()
    assert score.mean(axis=(1, 2)).std(ddof=1) == pytest.approx(PLANTED_SD["model"])
    assert score.mean(axis=(0, 2)).std(ddof=1) == pytest.approx(PLANTED_SD["wrapper"])
    assert score.mean(axis=(0, 1)).std(ddof=1) == pytest.approx(PLANTED_SD["item"])
    additive = (score.mean(axis=(1, 2))[:, None, None] + score.mean(axis=(0, 2))[None, :, None]
                + score.mean(axis=(0, 1))[None, None, :] - 2 * grand)
    residual = score - additive
    for axis in (0, 1, 2):
        assert np.abs(residual.mean(axis=axis)).max() < 1e-12
    assert np.sqrt((residual ** 2).mean()) == pytest.approx(PLANTED_SD["residual"])


# --------------------------------------------------------------------------------------------------------------
# 4. wrapper_facets: crossed

def test_crossed_wrapper_facets_split_the_wrapper_into_its_arms(tmp_path):
    """2 evaluation × 3 deployment framings; the signal is planted in e1 only (its direction lies along u, the
    other framings' means are noise orthogonal to u), so the headlines vary with the evaluation framing and
    the crossed study's evaluation component must carry them, not the deployment component."""
    write_experiment(tmp_path, deployment=("d1", "d2", "d3"))
    ref = lens_ref(tmp_path, wrapper_facets="crossed", null_permutations=0, item_samples=4, seed=2)
    rng = np.random.default_rng(13)

    def vector(model, arm, framing, item_id, item_label):
        v = rng.standard_normal((N_LAYERS, HIDDEN))
        v[:, AXIS] = 0.0
        if framing == "e1" and item_id != "_empty":
            v[:, AXIS] = 3.0
        if arm == "scoring":
            v[:, AXIS] = 3.0 if item_label == "deployment" else -3.0
        return v

    result = analyze(traces_table(ref.frozen, ["m1", "m2", "m3"], vector), ref.spec)

    study = result.numbers["gstudy"]["base"]
    assert "missing" not in study
    assert study["design"] == "model × evaluation × deployment × item_sample"
    facets = study["report"]["design"]["facets"]
    assert set(facets) == {"model", "evaluation", "deployment", "item_sample"}
    assert facets["evaluation"]["n"] == 2 and facets["deployment"]["n"] == 3 and facets["item_sample"]["n"] == 4
    components = study["report"]["components"]
    assert "wrapper" not in components
    assert components["evaluation"]["estimate_used"] > 0.5 * study["report"]["total_variance"]
    assert components["evaluation"]["estimate_used"] > 10 * components["deployment"]["estimate_used"]
    heads = {r["wrapper"]: r["max_auroc_minus_half"] for r in result.tables["wrappers"].to_pylist()}
    assert all(v == pytest.approx(0.5) for w, v in heads.items() if w.startswith("e1"))
    # the framings of each arm needed, the other arm at one framing; the long table names both arms of each cell
    assert set(study["design_numbers"]["wrappers_needed"]) == {"evaluation", "deployment"}
    assert "evaluation framings needed for Eρ² 0.80: at 1 item sample:" in result.text
    rows = [r for r in result.tables["gstudy_scores"].to_pylist() if r["study"] == "base"]
    assert len(rows) == 3 * 2 * 3 * 4
    assert {(r["evaluation"], r["deployment"]) for r in rows} == {(e, d) for e in ("e1", "e2") for d in ("d1", "d2", "d3")}
    # the default pair design on the same vectors names one wrapper facet
    pair = analyze(traces_table(ref.frozen, ["m1", "m2", "m3"], vector),
                   lens_ref(tmp_path, null_permutations=0, item_samples=4, seed=2).spec)
    assert set(pair.numbers["gstudy"]["base"]["report"]["design"]["facets"]) == {"model", "wrapper", "item_sample"}


def test_failed_scoring_rows_leave_their_items_out_of_the_gstudies_instead_of_refusing(tmp_path):
    """m2's vectors of two scoring items failed (no row): both G-studies run on the 38 items every model holds and
    say that 2 were left out; without the failure they use all 40."""
    write_experiment(tmp_path)
    ref = lens_ref(tmp_path, null_permutations=20, item_samples=2, seed=3)
    traces = traces_table(ref.frozen, ["m1", "m2"], planted_direction_vectors(seed=11))
    whole = analyze(traces, ref.spec).numbers["gstudy"]
    assert whole["base"]["items_left_out"] == 0 and "missing" not in whole["base items"]
    keep = [not (m == "m2" and i in ("s03", "s04")) for m, i in zip(traces.column("label").to_pylist(),
                                                                   traces.column("item_id").to_pylist())]
    result = analyze(traces.filter(pa.array(keep)), ref.spec)
    studies = result.numbers["gstudy"]
    assert studies["base"]["items_left_out"] == 2 and studies["base items"]["items_left_out"] == 2
    assert sum(studies["base"]["item_samples"]) == 38
    assert "2 scoring item(s) left out" in result.text
