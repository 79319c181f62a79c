"""The numbers of a lens invocation: per model × variant × wrapper AUROC curves, their spread over wrappers,
and how much of the headline belongs to the prompt.

* **Headline** of one (model, variant, wrapper): max over layers of AUROC − 0.5 (positive class named in
  every output) and of |AUROC − 0.5|, with the layer and relative depth (``directions``). Per model and
  variant it is reported as a distribution over wrappers (median, sd, range), never one wrapper's value.
* **Scoring-label floor** (null a): per wrapper, the scoring labels permuted and the max over layers retaken
  (``analysis.nulls``); its mean is the layer-selection floor a headline must clear, with headline − floor and
  z = (headline − floor) / null sd per wrapper and as medians per model.
* **Swap null** (null b, ``resampling``): z, one-sided and two-sided p per wrapper and for the mean over wrappers.
* **Argmax-layer bootstrap**: the share of the layer stack the best layer moves across (median and max over
  wrappers), the distinct best layers, and the verdict against ``ARGMAX_ROBUST``.
* **Cosines**: within a wrapper (directions from the two halves of the task texts, at the wrapper's best
  layer), across wrappers (mean over pairs, at each model's median best layer), and one-item recovery (one
  task text's direction against the full set's).
* **G-study** per variant (``gstudy``): the score of a cell is the headline on one item sample — the
  scoring set split into ``item_samples`` disjoint label-stratified samples — with facets model × wrapper ×
  item_sample (wrapper crossed as evaluation × deployment with ``wrapper_facets: crossed``), and ×
  variant over all variants when several are run; its D-study for the single-wrapper design (``design``), and
  the scores it was fitted on as the ``gstudy_scores`` table.
* **Intervals** (``intervals``): per variant, each model's headline — here the mean over wrappers — and
  headline − floor with a 95 % interval over evaluation framings, deployment framings and scoring items (each
  item as its influence value on the wrapper's AUROC), and every pair of models' paired difference with Holm p;
  the model comparisons carry the same differences.
* **Kendall's W** of the model ranking across wrappers, with its permutation p (≥ 2 models).
* **Surface-form check**: the bag-of-words out-of-fold AUROC of the scoring texts alone (whole set and each
  subset; warning above ``analysis.surface.SURFACE_WARNING``), and content-free directions scored the same
  way: ``contrastive_permutations`` random directions, and the surface-only direction (each framing around an
  empty task).

The printed text (``report``) says in words which way AUROC points for the configured positive class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.analysis.nulls import label_permutation_null
from mirrorscan.grid.instrument import Analysis
from mirrorscan.instruments.lens.directions import (cosine, framing_projections, layer_curve, layers_in_max,
                                         wrapper_projections)
from mirrorscan.instruments.lens.items import EMPTY_TASK
from mirrorscan.instruments.lens.resampling import seed_for

GSTUDY_SCORES = pa.schema([
    ("study", pa.string()), ("model", pa.string()), ("variant", pa.string()), ("wrapper", pa.string()),
    ("evaluation", pa.string()), ("deployment", pa.string()), ("item_sample", pa.int32()), ("item", pa.string()),
    ("layer", pa.int32()), ("score", pa.float64())])
"""``gstudy_scores.parquet``: one row per cell of every G-study (item_sample for the headline studies, item for
the per-item ones; layer: where the cell's max was reached, or the per-item study's layer)."""
COLUMNS = ("label", "variant", "framing", "arm", "item_id", "item_label", "subset", "user_text", "layer_vectors",
           "model_parameters", "model_canonical", "request_params")


@dataclass(frozen=True)
class Extracted:
    """One model × variant's stored vectors, arranged for the analysis (arrays in float64)."""

    tasks: dict
    """framing → {task id → (layers, hidden)}: each framed task text's vectors (the empty task left out)."""
    empty: dict
    """framing → (layers, hidden): the framing around an empty task."""
    item_ids: list
    labels: list
    subsets: list
    texts: list
    scoring: np.ndarray
    """(items, layers, hidden): the scoring items' vectors."""
    parameters: int | None = None
    """The model's parameter count, as its rows recorded it (None for rows without it)."""
    source: str | None = None
    """Where the model was loaded from (``model_canonical``)."""
    dtype: str | None = None
    """The weights' dtype the engine ran in (from ``request_params``)."""

    @property
    def n_layers(self) -> int:
        """Vectors per text: the blocks plus the embedding output."""
        return self.scoring.shape[1]

    def framing_means(self) -> dict:
        """framing → (layers, hidden): mean over its task texts."""
        return {f: np.mean(list(v.values()), axis=0) for f, v in self.tasks.items() if v}


def latest_rows(traces: pa.Table) -> pa.Table:
    """Each cell's last successful attempt."""
    ok = traces.filter(pc.is_null(traces.column("error")))
    if "attempt" in ok.column_names and ok.num_rows:
        order = pc.sort_indices(ok, [("probe_id", "ascending"), ("attempt", "descending")])
        ok = ok.take(order)
        probe = ok.column("probe_id").to_pylist()
        keep = [i for i, p in enumerate(probe) if i == 0 or probe[i - 1] != p]
        ok = ok.take(pa.array(keep, pa.int64()))
    return ok


def _vectors(column) -> np.ndarray:
    rows = column.to_pylist()
    return np.asarray(rows, dtype=np.float64)


def extracted(traces: pa.Table) -> dict[tuple[str, str], Extracted]:
    """(model label, variant) → its vectors, from the invocation's rows (last successful attempt per cell)."""
    rows = latest_rows(traces.select([c for c in COLUMNS + ("probe_id", "attempt", "error") if c in traces.column_names]))
    out = {}
    for label in sorted(set(rows.column("label").to_pylist())):
        for variant in sorted(set(rows.filter(pc.equal(rows.column("label"), label)).column("variant").to_pylist())):
            part = rows.filter(pc.and_(pc.equal(rows.column("label"), label), pc.equal(rows.column("variant"), variant)))
            vectors = _vectors(part.column("layer_vectors"))
            meta = part.select(["framing", "arm", "item_id", "item_label", "subset", "user_text"]).to_pylist()
            tasks: dict[str, dict[str, np.ndarray]] = {}
            empty: dict[str, np.ndarray] = {}
            scoring: list[tuple[dict, np.ndarray]] = []
            for m, v in zip(meta, vectors):
                if m["arm"] == "scoring":
                    scoring.append((m, v))
                elif m["item_id"] == EMPTY_TASK:
                    empty[m["framing"]] = v
                else:
                    tasks.setdefault(m["framing"], {})[m["item_id"]] = v
            scoring.sort(key=lambda mv: mv[0]["item_id"])
            params = ({p for p in part.column("model_parameters").to_pylist() if p is not None}
                      if "model_parameters" in part.column_names else set())
            first = part.slice(0, 1).to_pylist()[0] if part.num_rows else {}
            out[(label, variant)] = Extracted(
                parameters=params.pop() if len(params) == 1 else None, source=first.get("model_canonical"),
                dtype=json.loads(first.get("request_params") or "{}").get("dtype"),
                tasks=tasks, empty=empty, item_ids=[m["item_id"] for m, _ in scoring],
                labels=[m["item_label"] for m, _ in scoring], subsets=[m["subset"] for m, _ in scoring],
                texts=[m["user_text"] for m, _ in scoring], scoring=np.stack([v for _, v in scoring]))
    return out


def summary(values) -> dict:
    """Median, mean, sd (ddof 1), min, max, quartiles and count of a list of numbers."""
    a = np.asarray(values, dtype=np.float64)
    q25, q50, q75 = np.percentile(a, [25, 50, 75])
    return {"n": int(a.size), "median": float(q50), "mean": float(a.mean()),
            "sd": float(a.std(ddof=1)) if a.size > 1 else None, "min": float(a.min()), "max": float(a.max()),
            "q25": float(q25), "q75": float(q75)}


def halves_cosine(ex: Extracted, evaluation: str, deployment: str, layer: int) -> float | None:
    """Cosine, at ``layer``, of the wrapper's directions built from the two halves of the task texts (sorted
    ids, alternating), or None with fewer than 2 shared task texts."""
    shared = sorted(set(ex.tasks.get(evaluation, {})) & set(ex.tasks.get(deployment, {})))
    if len(shared) < 2:
        return None
    halves = [shared[0::2], shared[1::2]]
    dirs = [np.mean([ex.tasks[evaluation][t][layer] - ex.tasks[deployment][t][layer] for t in h], axis=0) for h in halves]
    return float(cosine(dirs[0][None], dirs[1][None])[0])


def one_item_recovery(ex: Extracted, evaluation: str, deployment: str, layer: int) -> float | None:
    """Mean over task texts of the cosine, at ``layer``, between one text's direction and the full set's."""
    shared = sorted(set(ex.tasks.get(evaluation, {})) & set(ex.tasks.get(deployment, {})))
    if not shared:
        return None
    per = np.array([ex.tasks[evaluation][t][layer] - ex.tasks[deployment][t][layer] for t in shared])
    full = per.mean(axis=0)
    return float(np.nanmean(cosine(per, np.broadcast_to(full, per.shape))))


def model_numbers(ex: Extracted, wrappers: list[tuple[str, str]], key: str, *, positive: str, layer_set: str,
                  permutations: int, seed: int, swaps: int = 0, boots: int = 0) -> tuple[dict, list[dict], dict]:
    """(numbers, per-wrapper rows, wrapper → curve) of one model × variant (``key``: ``<label>/<variant>``):
    AUROCs with ``positive`` as the positive class over the layers of ``layer_set``; ``permutations``,
    ``swaps`` and ``boots`` draws of the label null, the contrastive null and the argmax bootstrap (0 skips
    one), seeded from root ``seed``."""
    from mirrorscan.instruments.lens.resampling import (argmax_stability, contrastive_null, contrastive_summary,
                                             per_text_projections)

    layers = layers_in_max(ex.n_layers, layer_set)
    n_blocks = ex.n_layers - 1
    means = ex.framing_means()
    projected = framing_projections(ex.scoring, means)
    rows, curves, swapped = [], {}, []
    for e, d in wrappers:
        if e not in projected or d not in projected:
            continue
        scores = wrapper_projections(projected, e, d)[:, layers]
        curve = layer_curve(scores, ex.labels, positive, layers, n_blocks)
        row = {"evaluation": e, "deployment": d, "wrapper": f"{e}×{d}", **{k: v for k, v in curve.to_json().items()
                                                                         if k != "auroc_by_layer"}}
        if permutations:
            null = label_permutation_null(scores, ex.labels, positive, permutations, seed_for(seed, key, e, d))
            row.update({"label_floor": null.signed.floor, "label_floor_sd": null.signed.null_sd,
                        "label_p": null.signed.p_value, "abs_label_floor": null.absolute.floor,
                        "headline_minus_floor": null.signed.floor_corrected,
                        "label_z": None if null.signed.z != null.signed.z else null.signed.z})
        if swaps:
            swap_null = contrastive_null(per_text_projections(ex.scoring, ex.tasks[e], ex.tasks[d], layers), ex.labels,
                                         positive, swaps, seed_for(seed, key, "contrastive"))   # same flips per wrapper
            swapped.append(swap_null[:, 0])
            c = contrastive_summary(curve.max_auroc_minus_half, swap_null[:, 0], "max over layers of AUROC − 0.5")
            row.update({"contrastive_floor": c["floor"], "contrastive_sd": c["sd"], "contrastive_z": c["z"],
                        "contrastive_p": c["p_value"], "contrastive_p_two_sided": c["p_two_sided"]})
        if boots:
            stability = argmax_stability(scores, ex.labels, positive, layers, boots, seed_for(seed, key, e, d, "argmax"))
            row.update({"argmax_spread": stability["spread"], "argmax_distinct_layers": stability["distinct_layers"]})
        row["halves_cosine"] = halves_cosine(ex, e, d, curve.max_layer)
        row["one_item_recovery"] = one_item_recovery(ex, e, d, curve.max_layer)
        rows.append(row)
        curves[(e, d)] = curve
    heads = [r["max_auroc_minus_half"] for r in rows]
    best_layers = [r["layer"] for r in rows]
    typical = int(np.median(best_layers))
    units = [means[e][typical] - means[d][typical] for e, d in curves]
    pair_cos = [float(cosine(a[None], b[None])[0]) for i, a in enumerate(units) for b in units[i + 1:]]
    random_heads = random_directions(ex, layers, positive, max(swaps, 1), seed_for(seed, key, "random-direction"))
    surface_only = [layer_curve(np.einsum("ild,ld->il", ex.scoring, ex.empty[e] - ex.empty[d])[:, layers], ex.labels,
                                positive, layers, n_blocks).max_auroc_minus_half
                    for e, d in wrappers if e in ex.empty and d in ex.empty]
    numbers = {
        "n_layers": ex.n_layers, "layers_in_max": f"{layers[0]}…{layers[-1]}", "n_scoring_items": len(ex.item_ids),
        "headline": summary(heads), "abs_headline": summary([r["max_abs_auroc_minus_half"] for r in rows]),
        "best_layer": summary(best_layers), "best_relative_depth": summary([r["relative_depth"] for r in rows]),
        "label_floor": summary([r["label_floor"] for r in rows]) if permutations else None,
        "wrappers_above_floor_p05": sum(r["label_p"] <= 0.05 for r in rows) if permutations else None,
        "layer_selection_floor": layer_selection_floor(rows) if permutations else None,
        "contrastive_null": (contrastive_summary(float(np.mean(heads)), np.mean(swapped, axis=0),
                                                 "mean over wrappers of max over layers of AUROC − 0.5")
                             if swapped else None),
        "argmax_bootstrap": argmax_summary(rows, boots) if boots else None,
        "cosines": {"within_wrapper_halves": _mean([r["halves_cosine"] for r in rows]),
                    "across_wrappers": _mean(pair_cos), "across_wrappers_layer": typical,
                    "one_item_recovery": _mean([r["one_item_recovery"] for r in rows])},
        "content_free": {"random_direction": {**summary(random_heads), "p95": float(np.percentile(random_heads, 95))},
                         "surface_only": summary(surface_only) if surface_only else None},
    }
    return numbers, rows, curves


ARGMAX_ROBUST = 0.10
"""The paper's robustness threshold: the best layer moves across less than this share of the layer stack."""


def random_directions(ex: Extracted, layers: list[int], positive: str, n: int, seed, chunk: int = 32) -> list[float]:
    """Max over layers of AUROC − 0.5 of ``n`` random Gaussian directions (one per layer each), scored like a
    wrapper's: what a direction that holds no framing reaches on these items. Drawn ``chunk`` at a time and
    projected as one batched matrix product per layer."""
    from mirrorscan.analysis.auroc import auroc

    rng = np.random.default_rng(seed)
    by_layer = np.ascontiguousarray(ex.scoring[:, layers].transpose(1, 0, 2))          # (layers, items, hidden)
    out = []
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        directions = rng.standard_normal((k, ex.n_layers, ex.scoring.shape[2]))[:, layers]   # (k, layers, hidden)
        projected = by_layer @ directions.transpose(1, 2, 0)                               # (layers, items, k)
        auc = auroc(projected.transpose(1, 2, 0).reshape(by_layer.shape[1], -1), ex.labels, positive)
        out += np.max(auc.reshape(k, len(layers)) - 0.5, axis=1).tolist()
    return out


def layer_selection_floor(rows: list[dict]) -> dict:
    """Per model: the scoring-label null's mean of the max over layers (the floor selection alone reaches), the
    headline minus it and the z against it — each per wrapper, summarised as median over wrappers (headline
    units; z in null sds), with the mean over wrappers of the floor."""
    z = [r["label_z"] for r in rows if r["label_z"] is not None]
    return {"floor_mean": _mean([r["label_floor"] for r in rows]),
            "floor_median": float(np.median([r["label_floor"] for r in rows])),
            "headline_minus_floor": summary([r["headline_minus_floor"] for r in rows]),
            "z_against_floor": summary(z) if z else None}


def argmax_summary(rows: list[dict], draws: int) -> dict:
    """The argmax-layer bootstrap over wrappers: the share of the layer stack the best layer moves across
    (median and max over wrappers), the number of distinct best layers (range over wrappers), and the verdict
    against ``ARGMAX_ROBUST``."""
    spread = [r["argmax_spread"] for r in rows if r["argmax_spread"] == r["argmax_spread"]]
    distinct = [r["argmax_distinct_layers"] for r in rows]
    median = float(np.median(spread)) if spread else None
    return {"spread": summary(spread) if spread else None, "distinct_layers": summary(distinct), "draws": draws,
            "median_share": median, "max_share": float(np.max(spread)) if spread else None,
            "distinct_range": [int(min(distinct)), int(max(distinct))], "threshold": ARGMAX_ROBUST,
            "wrappers_below_threshold": sum(s < ARGMAX_ROBUST for s in spread),
            "robust": None if median is None else bool(median < ARGMAX_ROBUST)}


def _mean(values) -> float | None:
    v = [x for x in values if x is not None and x == x]
    return float(np.mean(v)) if v else None


def analyze(traces: pa.Table, spec) -> Analysis:
    """Every number of the module docstring for one invocation (no I/O)."""
    from mirrorscan.analysis.surface import SURFACE_WARNING
    from mirrorscan.instruments.lens.baseline import plumbing_note, surface_lines, surface_numbers
    from mirrorscan.instruments.lens.charts import auroc_by_layer, headline_spread, scaling_by_wrapper
    from mirrorscan.instruments.lens.claims import claims_by_variant
    from mirrorscan.instruments.lens.gstudy import concordance, wrapper_gstudies
    from mirrorscan.instruments.lens.intervals import lens_intervals
    from mirrorscan.instruments.lens.predict import prediction_basis
    from mirrorscan.instruments.lens.report import (claim_lines, direction_words, gstudy_lines, interval_lines,
                                                    model_lines)

    config = spec.config
    positive = config.positive
    wrappers = config.framings.wrappers()
    by_model = extracted(traces)
    models, table_rows, curves, documents, directions = {}, [], {}, {}, []
    for (label, variant), ex in by_model.items():
        key = f"{label}/{variant}"
        numbers, rows, model_curves = model_numbers(
            ex, wrappers, key, positive=positive, layer_set=config.variants[variant].layers,
            permutations=config.null_permutations, seed=config.seed, swaps=config.contrastive_permutations,
            boots=config.bootstrap_draws)
        layer = numbers["cosines"]["across_wrappers_layer"]
        basis, units = prediction_basis(ex, list(model_curves), layer, positive)
        documents[f"predict-{_safe(label)}-{_safe(variant)}"] = {
            "label": label, "variant": variant, "extraction": config.variants[variant].as_dict(), **basis,
            "layer_choice": "the median over wrappers of the best layer"}
        directions += [{"label": label, "variant": variant, **u} for u in units]
        models[key] = {"label": label, "variant": variant, **numbers}
        table_rows += [{"label": label, "variant": variant, **r} for r in rows]
        curves[(label, variant)] = model_curves
    intervals = lens_intervals(by_model, table_rows, models, positive, list(config.variants))   # over framings, items
    gstudies, gstudy_charts, gstudy_rows = wrapper_gstudies(by_model, wrappers, config)
    concord = concordance(table_rows, list(config.variants), config.null_permutations, config.seed)
    cell = lambda r: (r["label"], r["variant"], r["wrapper"])
    claims = claims_by_variant(by_model, wrappers, config, {cell(r): r["max_auroc_minus_half"] for r in table_rows},
                               {cell(r): r["label_floor"] for r in table_rows if r.get("label_floor") is not None},
                               intervals)
    surface = surface_numbers(traces, spec)   # bag-of-words, out of fold, groups kept whole (``baseline``)
    other = next((c for c in config.scoring_set.classes if c != positive), None)
    lines = [f"lens: {len(wrappers)} wrappers (framings {config.framings.version}), "
             f"{len(models)} (model, variant) pair{'' if len(models) == 1 else 's'}", *direction_words(positive, other), *model_lines(models),
             *interval_lines(intervals), *gstudy_lines(gstudies), *claim_lines(concord, claims, len(wrappers))]
    lines += surface_lines(surface)
    plumbing = plumbing_note({label: ex.source for (label, _), ex in by_model.items()})   # printed with the notes
    numbers = {"positive_class": positive, "statistic": "max over layers of (AUROC − 0.5)",
               "definitions": {"headline": "per wrapper: max over the layers in the max of AUROC − 0.5 (positive "
                               "class above); reported per model as a distribution over wrappers",
                               "label_floor": "mean of the scoring-label permutation null of that max (max retaken "
                               "per permutation)", "relative_depth": "best layer / number of blocks",
                               "layer_selection_floor": "per wrapper the label floor, headline − floor and (headline "
                               "− floor) / null sd; median over wrappers",
                               "contrastive_null": "each task text's framings swapped at random; p one-sided (above "
                               "the null) and two-sided (2 × the smaller tail)",
                               "argmax_bootstrap": "share of the layer stack the best layer moves across over item "
                               "bootstraps; robust when the median over wrappers is below the threshold",
                               "gstudy": "design_numbers.single_wrapper is the design of one wrapper and one item "
                               "sample (the paper's headline); observed is the fitted sizes"},
               "direction": direction_words(positive, other),
               "tables": {"gstudy_scores": "gstudy_scores.parquet"} if gstudy_rows else {},
               "models": models, "intervals": intervals, "gstudy": gstudies,
               "concordance": concord, "claims": claims, "surface": surface}
    tables = {"wrappers": pa.Table.from_pylist(table_rows)} if table_rows else {}
    long = [{"label": l, "variant": v, "wrapper": f"{e}×{d}", "layer": layer, "auroc": float(a)}
            for (l, v), cs in curves.items() for (e, d), c in cs.items() for layer, a in zip(c.layers, c.auroc)]
    if long:
        tables["auroc_by_layer"] = pa.Table.from_pylist(long)
    if gstudy_rows:   # the scores every G-study was fitted on, to refit the design elsewhere
        tables["gstudy_scores"] = pa.Table.from_pylist(gstudy_rows, schema=GSTUDY_SCORES)
    if directions:   # what `mirrorscan lens predict` projects new texts on
        tables["directions"] = pa.Table.from_pylist(directions, schema=pa.schema([
            ("label", pa.string()), ("variant", pa.string()), ("wrapper", pa.string()), ("layer", pa.int32()),
            ("direction", pa.list_(pa.float32()))]))
    charts = {f"auroc-by-layer-{_safe(l)}-{_safe(v)}": auroc_by_layer(cs, f"{l} ({v}), positive = {positive}")
              for (l, v), cs in curves.items()}
    if models:
        charts["headline-spread"] = headline_spread(table_rows, positive)
    charts.update({f"gstudy-{_safe(k)}": png for k, png in gstudy_charts.items()})
    for variant, c in claims.items():
        if "parameters" in c["scaling"]:
            charts[f"scaling-{_safe(variant)}"] = scaling_by_wrapper(c["scaling"]["parameters"], table_rows, variant,
                                                                     positive)
    notes = tuple(f"surface baseline of {name} above {SURFACE_WARNING}: the probe may be reading the prompt's surface"
                  for name, s in surface.items() if name != "missing" and s["warning"]) + ((plumbing,) if plumbing else ())
    return Analysis(text="\n".join(lines), numbers=numbers, tables=tables, charts=charts, notes=notes,
                    documents=documents, detail=models)


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _safe(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._@-]", "_", text)
