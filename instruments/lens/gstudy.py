"""How much of a lens headline belongs to the model, and how much to the wrapper and the items: the G-study,
and Kendall's W of the model ranking across wrappers.

Design (Brennan 2001, ch. 3; ``analysis.gtheory``): the **model** is the object of measurement. The score
of one cell is the headline statistic — max over layers of AUROC − 0.5 — computed on one **item sample**:
the scoring set split into S disjoint samples, each holding every class in proportion (label-stratified,
seeded). Facets: model × wrapper × item_sample, all crossed; with ``wrapper_facets: crossed`` the wrapper
is split into its arms, model × evaluation × deployment × item_sample; when several implementation
variants are run, a second study crosses them as one more facet (model × wrapper × item_sample ×
variant). Reported per study: every component with its share, the model's share and the share of effects
that carry a wrapper facet, the D-study of the design a probe paper uses — one wrapper, one item sample —
beside the observed sizes, both asymptotes, the wrappers needed and σ²mw/σ²mi (``design``), the full
report of ``analysis.gtheory_report``, and across variants the implementation's share. It needs ≥ 2 models,
and every model's vectors for the same scoring items.

The scores every study was fitted on are returned as one long table (``score_rows``: study, model, variant,
wrapper and its arms, item sample or item, layer, score), so the design can be refitted elsewhere.
"""

from __future__ import annotations

import numpy as np

from mirrorscan.analysis.concordance import kendall_w, kendall_w_permutation_test
from mirrorscan.analysis.gtheory import g_study
from mirrorscan.analysis.gtheory_report import gtheory_report
from mirrorscan.analysis.plotting import gstudy_charts
from mirrorscan.instruments.lens.design import TARGET, design_numbers, implementation_shares, published_object_variance
from mirrorscan.instruments.lens.directions import framing_projections, layer_curve, layers_in_max, wrapper_projections
from mirrorscan.instruments.lens.spec import LensConfig

WRAPPER_FACETS = {"pair": ("wrapper",), "crossed": ("evaluation", "deployment")}


def item_samples(labels: list, n_samples: int, seed: np.random.SeedSequence) -> list[list[int]]:
    """Indices of ``n_samples`` disjoint label-stratified samples covering every item: within each class the
    items are shuffled (seeded) and dealt round-robin."""
    rng = np.random.default_rng(seed)
    samples: list[list[int]] = [[] for _ in range(n_samples)]
    for cls in sorted(set(labels)):
        idx = [i for i, l in enumerate(labels) if l == cls]
        for k, i in enumerate(rng.permutation(idx)):
            samples[k % n_samples].append(int(i))
    return [sorted(s) for s in samples]


def sample_scores(ex, wrappers: list[tuple[str, str]], samples: list[list[int]], positive: str,
                  layer_set: str) -> tuple[np.ndarray, np.ndarray]:
    """((wrappers, samples) headline of each wrapper on each item sample, (wrappers, samples) its best layer)."""
    layers = layers_in_max(ex.n_layers, layer_set)
    projected = framing_projections(ex.scoring, ex.framing_means())
    out = np.empty((len(wrappers), len(samples)))
    best = np.empty((len(wrappers), len(samples)), dtype=np.int64)
    for w, (e, d) in enumerate(wrappers):
        scores = wrapper_projections(projected, e, d)[:, layers]
        for s, idx in enumerate(samples):
            curve = layer_curve(scores[idx], [ex.labels[i] for i in idx], positive, layers, ex.n_layers - 1)
            out[w, s], best[w, s] = curve.max_auroc_minus_half, curve.max_layer
    return out, best


def object_variance(value: float | tuple[float, ...] | None) -> float | None:
    """The hypothesised model variance of the config's ``object_variance`` (squared headline units): a number as
    given, or the sample variance of published per-model scores; None when not given."""
    if value is None or isinstance(value, (int, float)):
        return value
    return published_object_variance(value)


def _study(scores: np.ndarray, facets: tuple[str, ...], wrapper_facets: tuple[str, ...], design: str,
           charts: bool = True, hypothesised: float | None = None) -> tuple[dict, dict]:
    g = g_study(scores, facets)
    report = gtheory_report(g, target=TARGET)
    total = g.total_variance
    wrapper_var = sum(c.estimate_used for c in g.components if c.facets & set(wrapper_facets))
    return ({"design": design, "design_name": design, "model_share": g.share("model") if total > 0 else None,
             "wrapper_share": wrapper_var / total if total > 0 else None,
             "design_numbers": design_numbers(g, hypothesised) if total > 0 else None,
             "implementation_shares": implementation_shares(g),
             "report": report.to_json()}, gstudy_charts(report) if charts else {})


def wrapper_gstudies(by_model: dict, wrappers: list[tuple[str, str]], settings: LensConfig
                     ) -> tuple[dict, dict, list]:
    """(study name → numbers or ``missing``, chart name → PNG, the long table's rows): per variant the headline
    study (key: the variant) and the per-item projection study (``<variant> items``), and one across variants
    (``all variants``, fitted on the variants' own rows) when several were run."""
    from mirrorscan.instruments.lens.resampling import seed_for

    positive, n_samples = settings.positive, settings.item_samples
    kind = settings.wrapper_facets
    hypothesised = object_variance(settings.object_variance)
    variants = list(settings.variants)
    labels = sorted({label for label, _ in by_model})
    out: dict[str, dict] = {}
    charts: dict[str, bytes] = {}
    per_variant: dict[str, np.ndarray] = {}
    rows: list[dict] = []
    for variant in variants:
        models = [l for l in labels if (l, variant) in by_model]
        if len(models) < 2:
            out[variant] = {"missing": f"needs at least 2 models as the object of measurement, has {len(models)}"}
            continue
        lacking = set().union(*(_lacking(by_model[(m, variant)], wrappers) for m in models))
        if lacking:
            out[variant] = {"missing": f"a model has no task text for framing(s) {', '.join(sorted(lacking))} "
                            "(failed rows?)"}
            continue
        exs, left_out = on_shared_items([by_model[(m, variant)] for m in models])
        if left_out is None:
            out[variant] = {"missing": "the models share too few scoring items (failed rows?)"}
            continue
        first = exs[0]
        samples = item_samples(first.labels, n_samples, seed_for(settings.seed, "item-samples"))
        layer_set = settings.variants[variant].layers
        fitted = [sample_scores(ex, wrappers, samples, positive, layer_set) for ex in exs]
        scores = np.stack([f[0] for f in fitted])
        rows += [{"study": variant, "model": m, "variant": variant, "wrapper": f"{e}×{d}", "evaluation": e,
                  "deployment": d, "item_sample": s, "item": None, "layer": int(best[w, s]), "score": float(sc[w, s])}
                 for m, (sc, best) in zip(models, fitted) for w, (e, d) in enumerate(wrappers) for s in range(n_samples)]
        per_variant[variant] = scores
        n_e, n_d = len(settings.framings.evaluation), len(settings.framings.deployment)
        facets: tuple[str, ...]
        if kind == "crossed":
            shaped, facets = scores.reshape(len(models), n_e, n_d, n_samples), ("model", "evaluation", "deployment", "item_sample")
        else:
            shaped, facets = scores, ("model", "wrapper", "item_sample")
        out[variant], study_charts = _study(shaped, facets, WRAPPER_FACETS[kind], " × ".join(facets),
                                            hypothesised=hypothesised)
        out[variant].update({"models": models, "item_samples": [len(s) for s in samples], "items_left_out": left_out,
                             "scores_table": {
            "table": "gstudy_scores.parquet", "rows": f"study = '{variant}'", "score": HEADLINE_SCORE}})
        charts.update({f"{variant}-{k.removesuffix('.png')}": v for k, v in study_charts.items()})
    for variant in variants:
        study, study_charts, item_rows = item_gstudy(by_model, wrappers, settings, variant)
        out[f"{variant} items"] = study
        rows += item_rows
        charts.update(study_charts)
    shapes = {v.shape for v in per_variant.values()}
    if len(per_variant) >= 2 and len(shapes) == 1:
        stacked = np.stack([per_variant[v] for v in per_variant], axis=-1)
        out["all variants"], study_charts = _study(stacked, ("model", "wrapper", "item_sample", "variant"),
                                                   ("wrapper",), "model × wrapper × item_sample × variant",
                                                   hypothesised=hypothesised)
        out["all variants"]["variants"] = list(per_variant)
        out["all variants"]["scores_table"] = {
            "table": "gstudy_scores.parquet", "score": HEADLINE_SCORE,
            "rows": "study in (" + ", ".join(f"'{v}'" for v in per_variant) + ")"}
        charts.update({f"all-variants-{k.removesuffix('.png')}": v for k, v in study_charts.items()})
    elif len(per_variant) >= 2:
        out["all variants"] = {"missing": "the variants were run on different models: no crossed design"}
    return out, charts, rows


HEADLINE_SCORE = "max over the layers in the max of AUROC − 0.5 on the item sample (layer: where it was reached)"
ITEM_SCORE = "projection of the item onto the wrapper's unit direction at the layer (activation units)"


def concordance(rows: list[dict], variants: list[str], permutations: int, seed: int) -> dict:
    """variant → Kendall's W (tie-corrected) of the models' headlines ranked within each wrapper, with its
    permutation p (``permutations`` draws, at least 1, seeded from root ``seed``); variants with fewer than 2
    models are left out."""
    from mirrorscan.instruments.lens.resampling import seed_for

    out: dict[str, dict] = {}
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        models = sorted({r["label"] for r in mine})
        wrappers = sorted({r["wrapper"] for r in mine})
        value = {(r["label"], r["wrapper"]): r["max_auroc_minus_half"] for r in mine}
        if len(models) < 2 or any((m, w) not in value for m in models for w in wrappers):
            continue
        ratings = np.array([[value[(m, w)] for w in wrappers] for m in models])
        w = kendall_w(ratings)
        if w.w_tie_corrected != w.w_tie_corrected:
            out[variant] = {"missing": "every wrapper ties the models: no ranking to agree on"}
            continue
        test = kendall_w_permutation_test(ratings, max(permutations, 1), seed_for(seed, "w", variant))
        out[variant] = {"w": w.w_tie_corrected, "p_value": test.p_value, "n_models": len(models),
                        "n_wrappers": len(wrappers), "chi2_p_value": w.p_value_tie_corrected}
    return out


def item_gstudy(by_model: dict, wrappers: list[tuple[str, str]], settings: LensConfig, variant: str
                ) -> tuple[dict, dict, list]:
    """The second, separately named study of one variant: per-item projections at a fixed layer. The score of
    a cell is scoring item i projected onto the unit direction of (model, wrapper) at the layer (activation
    units); facets model × wrapper × item, crossed. The layer is ``item_layer`` of the config, else per model
    the median of its wrappers' best layers (recorded per model). Returns (numbers, charts, long-table rows)."""
    from mirrorscan.instruments.lens.directions import unit_direction

    labels = sorted(label for label, v in by_model if v == variant)
    if len(labels) < 2:
        return {"missing": f"needs at least 2 models as the object of measurement, has {len(labels)}"}, {}, []
    exs, left_out = on_shared_items([by_model[(m, variant)] for m in labels])
    if left_out is None:
        return {"missing": "the models share too few scoring items (failed rows?)"}, {}, []
    if any(_lacking(ex, wrappers) for ex in exs):
        return {"missing": "a model has no task text for some framing (failed rows?)"}, {}, []
    chosen = {}
    scores = np.empty((len(labels), len(wrappers), len(exs[0].item_ids)))
    for m, (label, ex) in enumerate(zip(labels, exs)):
        layer = settings.item_layer
        if layer is None:
            layer = _median_best_layer(ex, wrappers, settings, variant)
        layer = min(int(layer), ex.n_layers - 1)
        chosen[label] = layer
        means = ex.framing_means()
        for w, (e, d) in enumerate(wrappers):
            direction = unit_direction(means[e][layer], means[d][layer])
            scores[m, w] = ex.scoring[:, layer] @ direction
    name = f"{variant} items"
    rows = [{"study": name, "model": label, "variant": variant, "wrapper": f"{e}×{d}", "evaluation": e,
             "deployment": d, "item_sample": None, "item": item, "layer": chosen[label], "score": float(scores[m, w, i])}
            for m, label in enumerate(labels) for w, (e, d) in enumerate(wrappers)
            for i, item in enumerate(exs[0].item_ids)]
    study, charts = _study(scores, ("model", "wrapper", "item"), ("wrapper",), "model × wrapper × item (projections)",
                           charts=False, hypothesised=None)   # charts: the headline study's; σ²m: headline units only
    study.update({"layer": chosen, "items_left_out": left_out,
                  "score": "projection of the item onto the unit direction at the layer",
                  "scores_table": {"table": "gstudy_scores.parquet", "rows": f"study = '{name}'", "score": ITEM_SCORE}})
    return study, {f"{variant}-items-{k.removesuffix('.png')}": v for k, v in charts.items()}, rows


def on_shared_items(exs: list) -> tuple[list, int | None]:
    """Each model's extraction restricted to the scoring items every model holds (in the first model's order),
    and how many items some model lacked (its rows failed); (exs, None) when fewer than two items of each class
    are shared. A crossed design needs every model on every item: the items a model lost are left out for all,
    not read as zero, and the count is reported beside the study."""
    import dataclasses

    shared = set(exs[0].item_ids).intersection(*(ex.item_ids for ex in exs[1:]))
    every = set().union(*(ex.item_ids for ex in exs))
    order = [i for i in exs[0].item_ids if i in shared]
    labels = [exs[0].labels[exs[0].item_ids.index(i)] for i in order]
    if len(set(labels)) < 2 or min(labels.count(c) for c in set(labels)) < 2:
        return exs, None
    if len(shared) == len(every) and all(ex.item_ids == order for ex in exs):
        return exs, 0
    out = []
    for ex in exs:
        at = {item: k for k, item in enumerate(ex.item_ids)}
        keep = [at[i] for i in order]
        out.append(dataclasses.replace(ex, item_ids=order, labels=[ex.labels[k] for k in keep],
                                       subsets=[ex.subsets[k] for k in keep], texts=[ex.texts[k] for k in keep],
                                       scoring=ex.scoring[keep]))
    return out, len(every) - len(shared)


def _median_best_layer(ex, wrappers, settings: LensConfig, variant: str) -> int:
    layers = layers_in_max(ex.n_layers, settings.variants[variant].layers)
    projected = framing_projections(ex.scoring, ex.framing_means())
    best = [layer_curve(wrapper_projections(projected, e, d)[:, layers], ex.labels, settings.positive, layers,
                        ex.n_layers - 1).max_layer for e, d in wrappers]
    return int(np.median(best))


def _lacking(ex, wrappers: list[tuple[str, str]]) -> set[str]:
    """The wrappers' framings that ``ex`` holds no task text for (every row of the framing failed)."""
    return {f for w in wrappers for f in w} - set(ex.framing_means())
