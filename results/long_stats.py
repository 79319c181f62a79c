"""The statistics of ``mirrorscan stats`` over a long table already read (``results.long_table``), each as one
JSON-ready dict: ``gstudy`` (ANOVA on a complete table, REML where cells are missing), ``kendall``, ``auroc``,
``null``, ``intervals`` and ``plan``. The computations are :mod:`analysis`'s (arrays in, dataclasses out); this
module builds their inputs from the table, runs them (``auroc`` per model and ``null`` as Ray tasks where asked,
through ``cluster.runtime.stats_drivers``) and shapes their results. ``path`` is the input as the user named it:
errors about the table's contents name it (``analysis.long_table.naming``) and every result records it.
Nothing is printed or written here (``result_json`` is the text ``jobs/stats.py`` writes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.long_table import (column, first_appearance, items_by_layer, naming, parse_nested, plain,
                                            split_names)


def design_of(table, path: str, score: str, object: str, facets: list[str], nested: Sequence[str] = ()):
    """(the long design (``analysis.long_design.LongDesign``) of ``table``'s ``score`` over ``object`` and
    ``facets`` with the ``--nested`` specs ``nested``, the number of rows left out for having no score, the
    table without them). Every name is checked; errors name ``path``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from mirrorscan.analysis.long_design import long_design

    dropped = 0
    with naming(path):
        if score not in table.column_names:
            raise AnalysisError(score, "no such column", "pass an existing column name")
        col = table.column(score)
        if pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_boolean(col.type):
            values = pc.cast(col, pa.float64())
            keep = pc.and_(pc.is_valid(values), pc.invert(pc.is_nan(pc.fill_null(values, 0.0))))
            dropped = table.num_rows - int(pc.sum(pc.cast(keep, pa.int64())).as_py() or 0)
            table = table.filter(keep)
            if table.num_rows == 0:
                raise AnalysisError(score, "no row has a score", "give a table with scores")
        return long_design(table, score, object, facets, parse_nested(nested)), dropped, table


def gstudy(table, *, path: str, score: str, object: str, facets: list[str], nested: Sequence[str] = (),
           fixed: Sequence[str] = (), d_study: Sequence[str] = (), target: float = 0.8,
           object_variance: float | None = None):
    """``stats gstudy``: (the result dict, the ``analysis.gtheory_report`` report its charts are drawn from):
    the G-study by ANOVA expected mean squares on a complete table, by REML where cells are missing or
    repeated, then the D-studies of ``d_study`` (``FACET=N,…`` texts) and the sizes reaching ``target``."""
    from mirrorscan.analysis.design import pivot_long
    from mirrorscan.analysis.gtheory import g_study
    from mirrorscan.analysis.gtheory_report import gtheory_report, parse_sizes

    long, dropped, table = design_of(table, path, score, object, facets, nested)
    if long.single_object:
        raise AnalysisError(object, "has 1 level; a G-study needs at least 2 objects to measure their variance",
                            "give a table with two or more objects (stats intervals gives one object's interval)",
                            file=path)
    d_studies = [parse_sizes(s) for s in d_study]
    with naming(path):
        if long.complete:
            design = pivot_long(table, score, object, facets, parse_nested(nested))
            g = g_study(design, fixed=list(fixed))
            report = gtheory_report(g, d_studies, target, object_variance)
            how = {"components_method": "anova", "missing_cells": 0, "replicate_rows": 0}
        else:
            report, how = gstudy_with_missing_cells(long, fixed, d_studies, target, object_variance)
    return {"command": "gstudy", "input": path, "score": score, **report.to_json(), **how,
            "rows_without_score": dropped}, report


def gstudy_with_missing_cells(design, fixed: Sequence[str], d_studies, target, object_variance):
    """The G-study of a table with missing cells or replicates: REML components (``analysis.reml_gstudy``), then the
    usual report; returns (report, what the estimation rests on)."""
    from mirrorscan.analysis.gtheory_report import gtheory_report
    from mirrorscan.analysis.reml_gstudy import reml_gstudy

    g, how = reml_gstudy(design, list(fixed))
    report = gtheory_report(g, d_studies, target, object_variance)
    return report, {"components_method": "reml", **how, "estimation": "REML (restricted maximum likelihood, as "
                    "lme4's lmer with REML = TRUE), random-effects model; a component on the boundary is 0"}


def kendall(table, *, path: str, score: str, object: str, rater: str, permutations: int, seed: int,
            reference_effect: float | None = None, reference_sims: int = 2000) -> dict:
    """``stats kendall``: W, W_t, χ², the permutation p of ``permutations`` draws from ``seed``, and with
    ``reference_effect`` the W of simulated designs of this shape with that object effect."""
    from mirrorscan.analysis.concordance import kendall_w, kendall_w_permutation_test, simulate_w_reference
    from mirrorscan.analysis.design import pivot_long

    with naming(path):
        design = pivot_long(table, score, object, [rater])
    ratings = design.scores                                  # (objects, raters)
    w = kendall_w(ratings)
    perm = kendall_w_permutation_test(ratings, permutations, seed)
    result = {"command": "kendall", "input": path, "score": score,
              "objects": [plain(v) for v in design.levels[object]], "n_raters": int(ratings.shape[1]),
              "kendall_w": w.to_json(), "permutation": {**perm.to_json(), "seed": seed}}
    if reference_effect is not None:
        ref = simulate_w_reference(ratings.shape[0], ratings.shape[1], reference_effect, 1.0, reference_sims, seed)
        result["reference"] = {**ref.to_json(), "observed_w_fraction_at_or_below":
                               ref.fraction_at_or_below(w.w), "note": "W of simulated designs of this shape "
                               "whose objects differ with object_sd/noise_sd = the stated effect"}
    return result


def auroc(table, *, path: str, score: str, label: str, positive: str, layer: str | None = None,
          item: str | None = None, model: str | None = None, ray: bool = False) -> dict:
    """``stats auroc``: AUROC per layer for the ``positive`` class (one curve per value of ``model`` when given;
    with ``ray`` one Ray task per model) and the best layer both ways."""
    from mirrorscan.analysis.auroc import auroc as auroc_fn, max_deviation

    with naming(path):
        if model is None:
            groups = {None: table}
        else:
            import pyarrow as pa

            models = column(table, model)
            key = models.astype(str) if models.dtype == object else models
            groups = {plain(m): table.filter(pa.array(key == m)) for m in first_appearance(key)}
        prepared = {m: items_by_layer(t, score, label, layer, item) for m, t in groups.items()}
        if ray and model is not None:
            from mirrorscan.cluster.runtime.stats_drivers import auroc_per_model_ray

            curves = auroc_per_model_ray({m: (s, lab) for m, (s, lab, _) in prepared.items()}, positive)
        else:
            curves = {m: auroc_fn(s, lab, positive) for m, (s, lab, _) in prepared.items()}
    per_model = {}
    for m, (s, lab, layers) in prepared.items():
        auc = np.atleast_1d(curves[m])
        best = max_deviation(auc)
        per_model[m] = {"n_items": int(s.shape[0]), "n_positive": int(np.sum(lab == positive)),
                        "n_negative": int(np.sum(lab != positive)), "n_layers": len(layers),
                        "auroc_by_layer": {str(l): float(a) for l, a in zip(layers, auc)},
                        "best": {**best.to_json(), "max_auroc_minus_half_layer": layers[best.signed_layer],
                                 "max_abs_auroc_minus_half_layer": layers[best.absolute_layer]}}
    head = {"command": "auroc", "input": path, "score": score, "positive_class": positive,
            "auroc": "Mann-Whitney U / (n1 n0) by mid-ranks, ties count 1/2"}
    if model is None:
        return {**head, **per_model[None]}
    return {**head, "models": {str(m): v for m, v in per_model.items()}}


def null(table, *, path: str, score: str, label: str, positive: str, layer: str | None, item: str | None = None,
         permutations: int, seed: int, shard_size: int, ray: bool = False) -> dict:
    """``stats null``: the label-permutation null of max-over-layers AUROC, in shards of ``shard_size`` draws
    seeded from ``seed`` (locally, or as Ray tasks with ``ray``: the same numbers)."""
    from mirrorscan.analysis.nulls import label_permutation_null

    with naming(path):
        scores, labels, layers = items_by_layer(table, score, label, layer, item)
        if ray:
            from mirrorscan.cluster.runtime.stats_drivers import label_permutation_null_ray

            res = label_permutation_null_ray(scores, labels, positive, permutations, seed, shard_size, layers)
        else:
            res = label_permutation_null(scores, labels, positive, permutations, seed, shard_size, layers)
    return {"command": "null", "input": path, "score": score, "n_items": int(scores.shape[0]),
            "n_permutations": permutations, "seed": seed, "shard_size": shard_size,
            "driver": "ray" if ray else "local", **res.to_json()}


def intervals(table, *, path: str, score: str, object: str, facets: list[str], nested: Sequence[str] = (),
              fixed: Sequence[str] = (), method: str = "gstudy", level: float = 0.95, draws: int = 2000,
              seed: int = 0) -> dict:
    """``stats intervals``: every object's interval over the random facets and every pair's paired difference,
    by the G-study's components (``method`` ``gstudy``) or the pigeonhole bootstrap (``bootstrap``: ``draws``
    draws from ``seed``)."""
    from mirrorscan.analysis.intervals import gstudy_intervals
    from mirrorscan.analysis.pigeonhole import pigeonhole_intervals

    design, dropped, _ = design_of(table, path, score, object, facets, nested)
    with naming(path):
        if method == "bootstrap":
            report = pigeonhole_intervals(design, list(fixed), level, draws, seed)
        else:
            report = gstudy_intervals(design, list(fixed), level)
    out = {"command": "intervals", "input": path, "score": score, **report.to_json(), "rows_without_score": dropped}
    if method == "bootstrap":
        out |= {"draws": draws, "seed": seed}
    return out


def check_costs(cost_per_cell: float | None, costs_from: str | None) -> None:
    """``stats plan`` is given a cost per cell or an invocation to measure it from, exactly one (AnalysisError)."""
    if (cost_per_cell is None) == (costs_from is None):
        raise AnalysisError("--cost-per-cell", "give a cost per cell or an invocation to measure it from",
                            "pass --cost-per-cell C or --costs-from INVOCATION (one of them)")


def search_box(text: Sequence[str], design, random) -> dict[str, int]:
    """The largest number of levels searched per random facet: ``--max`` texts (``FACET=K,…``), else 4× the
    observed levels, at least 10 more."""
    box = {f: max(4 * len(design.labels[f]), len(design.labels[f]) + 10) for f in random}
    for part in split_names(text):
        name, eq, value = part.partition("=")
        if not eq or name.strip() not in random:
            raise AnalysisError("--max", f"{part!r} is not FACET=K for a random facet of {list(random)}",
                                "write e.g. --max wrapper=60,item=800")
        try:
            box[name.strip()] = int(value)
        except ValueError:
            raise AnalysisError("--max", f"{part!r}: {value!r} is not a whole number", "give levels as integers") from None
        if box[name.strip()] < 1:
            raise AnalysisError("--max", f"{part!r}", "give at least 1 level")
    return box


def plan(table, *, path: str, score: str, object: str, facets: list[str], nested: Sequence[str] = (),
         fixed: Sequence[str] = (), cost_per_cell: float | None = None, costs_from: str | None = None,
         cost_unit: str = "seconds", coefficient: str = "g", target: float | None = None,
         budget: float | None = None, level: float = 0.95, max: Sequence[str] = ()) -> dict:
    """``stats plan``: the cheapest design reaching ``target`` on ``coefficient`` (or the best one for
    ``budget``), costed by ``cost_per_cell`` or by each object's cost measured from the inference log of the
    invocation ``costs_from`` (``cost_unit``: engine seconds or tokens per cell), searched within ``max``;
    with the frontier, trimmed to about 200 designs."""
    from mirrorscan.analysis.design_plan import ErrorModel, _Evaluator, plan as make_plan
    from mirrorscan.analysis.intervals import check_facets, fit_components
    from mirrorscan.results.long_table import costs_from as measure_costs

    check_costs(cost_per_cell, costs_from)
    design, dropped, _ = design_of(table, path, score, object, facets, nested)
    objects = [str(v) for v in design.labels[design.object]]
    measured = None
    if costs_from is not None:
        measured = measure_costs(costs_from)
        unknown = [o for o in objects if o not in measured["labels"]]
        if unknown:
            raise AnalysisError("--costs-from", f"no cost measured for {unknown} (measured: "
                                f"{sorted(measured['labels'])})", "give --cost-per-cell, or the invocation of these objects")
        key = "tokens_per_cell" if cost_unit == "tokens" else "engine_seconds_per_cell"
        per_object = {o: measured["labels"][o][key] for o in objects}
    else:
        per_object = {o: float(cost_per_cell) for o in objects}
    unit = float(sum(per_object.values()))
    with naming(path):
        random, fixed_facets = check_facets(design, list(fixed))
        comps = fit_components(design)
        fixed_sizes = {f: len(design.labels[f]) for f in fixed_facets}
        model = ErrorModel.from_components(design.object, comps.names, comps.facets, comps.estimates, fixed_sizes)
        box = search_box(max, design, model.random)
        result = make_plan(model, coefficient, target, box, unit, budget, level)
    observed = {f: len(design.labels[f]) for f in model.random}
    now = _Evaluator(model, unit, level).design(observed)
    out = {"command": "plan", "input": path, "score": score, "object": design.object,
           "components_method": comps.method, "components": dict(zip(comps.names, map(float, comps.estimates))),
           "n_rows": design.n_rows, "missing_cells": design.missing_cells, "rows_without_score": dropped,
           "cost_per_cell": per_object, "cost_unit": cost_unit if measured else "as given",
           **result.to_json(), "observed": now.to_json()}
    if measured:
        out["costs_from"] = measured
    if len(out["frontier"]) > 200:                       # keep the JSON readable: every k-th point and the ends
        front = out["frontier"]
        step = math.ceil(len(front) / 200)
        out["frontier"] = front[::step] + ([front[-1]] if (len(front) - 1) % step else [])
        out["frontier_note"] = f"{len(front)} frontier designs, every {step}th shown"
    return out


def jsonable(x: Any) -> Any:
    """JSON has no NaN/inf or numpy types: non-finite floats become None (inf sizes are already "inf")."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def result_json(result: dict) -> str:
    """A statistic's result as the JSON text ``mirrorscan stats`` writes (indented, non-ASCII kept, ``jsonable``)."""
    return json.dumps(jsonable(result), indent=2, ensure_ascii=False, allow_nan=False)
