"""``mirrorscan stats intervals`` and ``mirrorscan stats plan``, and the missing-cell path of ``stats gstudy``.

``intervals``: every object's estimate with a 95 % interval that treats the named facets as random (and the
naive interval beside it), and every pair's paired difference with Holm-adjusted p and a verdict. ``plan``: the
cheapest design (levels per random facet) that reaches a target, or the best one for a budget, with the
frontier. Both read the long table as ``stats gstudy`` does; rows without a score (a scan's error rows) are
left out and counted, so the design may have missing cells (REML then estimates the components).
The computations are in :mod:`analysis.intervals`, :mod:`analysis.pigeonhole`, :mod:`analysis.design_plan`.
"""

from __future__ import annotations

import math

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.jobs.stats_table import naming, numeric_scores, parse_nested, read_input

INTERVALS_HELP = """Every object's estimate with an interval for a claim about it on new prompts and items of the same kind.

The named facets (--facets) are random unless --fixed: the interval generalises over them. Default method
gstudy: the error variance of the object's mean for the observed design from the variance components (ANOVA on
a complete table, REML when cells are missing or repeated), absolute for an object's own score, relative for a
paired difference (shared facets cancel), t quantile on Satterthwaite df. --method bootstrap: the pigeonhole
bootstrap (every random facet's levels resampled independently; crossed facets only). Beside each interval:
the naive one (cells as independent) and the ratio of widths. Every pair of objects: the difference, its
interval, p, Holm-adjusted p and a verdict ("indistinguishable at this design" when the adjusted p is not
below 1 - level). Rows without a score are left out and counted as missing cells.

JSON: {"level", "method", "facets", "n_rows", "missing_cells", "objects": [{"object", "estimate", "interval",
"naive_interval", …}], "differences": [{"a", "b", "estimate", "interval", "p_value", "p_holm", "verdict"}],
"warnings": [...]}

example: mirrorscan stats intervals --input scores.csv --score score --object model --facets wrapper,item"""

PLAN_HELP = """The cheapest design that reaches a target, from this table's G-study and a cost per cell.

A design is a number of levels per random facet; its cost is objects x product of levels x cost per cell (each
object's own cost per cell with --costs-from). Targets: --coefficient g (relative Er2, default) or phi
(absolute) >= --target, or halfwidth: the half-width of a paired difference <= --target (score units; normal
quantile at --level). With --budget instead, the design with the least error the budget buys. Exact: every
combination of the other facets within --max is searched and the smallest last facet that meets the target is
solved for. The frontier lists every design of the box that no cheaper one beats; next_step says which facet's
next level buys the most per unit of cost.

JSON: {"design": {facet: levels}, "cost", "coefficient", "value", "frontier": [{"design", "cost",
"coefficient", …}], "next_step", …}

example: mirrorscan stats plan --input scores.csv --score score --object model --facets wrapper,item \\
           --target 0.8 --cost-per-cell 0.02 --max wrapper=60,item=800"""


def _split(specs) -> list[str]:
    return [s.strip() for spec in (specs or []) for s in spec.split(",") if s.strip()]


def read_design(args):
    """The long design of ``args`` (input, score, object, facets, nested), the number of rows left out for
    having no score, and the table without them. Every name is checked; errors name the input file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from mirrorscan.analysis.long_design import long_design

    facets = _split(args.facets)
    if not facets:
        raise AnalysisError("--facets", "no facet given", "name the facet columns, e.g. --facets wrapper,item")
    table = numeric_scores(read_input(args), args.score)
    dropped = 0
    with naming(args.input):
        if args.score not in table.column_names:
            raise AnalysisError(args.score, "no such column", "pass an existing column name")
        col = table.column(args.score)
        if pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_boolean(col.type):
            values = pc.cast(col, pa.float64())
            keep = pc.and_(pc.is_valid(values), pc.invert(pc.is_nan(pc.fill_null(values, 0.0))))
            dropped = table.num_rows - int(pc.sum(pc.cast(keep, pa.int64())).as_py() or 0)
            table = table.filter(keep)
            if table.num_rows == 0:
                raise AnalysisError(args.score, "no row has a score", "give a table with scores")
        return long_design(table, args.score, args.object, facets, parse_nested(args.nested)), dropped, table


def intervals(args) -> dict:
    """Run ``stats intervals``: intervals per object and paired differences (JSON dict)."""
    from mirrorscan.analysis.intervals import gstudy_intervals
    from mirrorscan.analysis.pigeonhole import pigeonhole_intervals

    design, dropped, _ = read_design(args)
    with naming(args.input):
        if args.method == "bootstrap":
            report = pigeonhole_intervals(design, _split(args.fixed), args.level, args.draws, args.seed)
        else:
            report = gstudy_intervals(design, _split(args.fixed), args.level)
    out = {"command": "intervals", "input": args.input, "score": args.score, **report.to_json(),
           "rows_without_score": dropped}
    if args.method == "bootstrap":
        out |= {"draws": args.draws, "seed": args.seed}
    return out


def _box(text: list[str], design, random) -> dict[str, int]:
    box = {f: max(4 * len(design.labels[f]), len(design.labels[f]) + 10) for f in random}
    for part in _split(text):
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


def costs_from(target: str, dsn: str | None = None) -> dict[str, dict]:
    """Measured cost per cell of each model label of an invocation, from the catalog's inference log: engine
    seconds per cell (each engine batch's time counted once, spread over the cells it answered) and tokens
    (prompt + completion) per cell. Raises AnalysisError when the invocation logged nothing."""
    from mirrorscan.cluster.catalog.client import Catalog, resolve_dsn, resolve_invocation

    with Catalog(resolve_dsn(dsn)) as catalog:
        inv = resolve_invocation(target, catalog)
        rows = catalog.execute(
            "SELECT label, COUNT(DISTINCT (probe_id, sample)), "
            "SUM(COALESCE(prompt_tokens, 0) + COALESCE(completion_tokens, 0)), "
            "(SELECT SUM(t) FROM (SELECT DISTINCT started_at, total_ms AS t FROM inference_log b "
            " WHERE b.invocation_id = a.invocation_id AND b.label = a.label AND b.status = 'ok') s) "
            "FROM inference_log a WHERE invocation_id = %s AND status = 'ok' GROUP BY invocation_id, label",
            [str(inv["invocation_id"])])
    out = {}
    for label, cells, tokens, total_ms in rows:
        if cells:
            out[label] = {"cells": int(cells), "engine_seconds_per_cell": float(total_ms or 0) / 1000 / cells,
                          "tokens_per_cell": float(tokens or 0) / cells}
    if not out:
        raise AnalysisError("--costs-from", f"invocation {inv['invocation_id']} has no successful inference_log rows",
                            "give --cost-per-cell, or an invocation whose engines logged their requests")
    return {"invocation_id": str(inv["invocation_id"]), "labels": out}


def plan(args) -> dict:
    """Run ``stats plan``: the cheapest design for a target or the best for a budget (JSON dict)."""
    from mirrorscan.analysis.design_plan import ErrorModel, plan as make_plan
    from mirrorscan.analysis.intervals import check_facets, fit_components

    if (args.cost_per_cell is None) == (args.costs_from is None):
        raise AnalysisError("--cost-per-cell", "give a cost per cell or an invocation to measure it from",
                            "pass --cost-per-cell C or --costs-from INVOCATION (one of them)")
    design, dropped, _ = read_design(args)
    objects = [str(v) for v in design.labels[design.object]]
    measured = None
    if args.costs_from is not None:
        measured = costs_from(args.costs_from)
        unknown = [o for o in objects if o not in measured["labels"]]
        if unknown:
            raise AnalysisError("--costs-from", f"no cost measured for {unknown} (measured: "
                                f"{sorted(measured['labels'])})", "give --cost-per-cell, or the invocation of these objects")
        key = "tokens_per_cell" if args.cost_unit == "tokens" else "engine_seconds_per_cell"
        per_object = {o: measured["labels"][o][key] for o in objects}
    else:
        per_object = {o: float(args.cost_per_cell) for o in objects}
    unit = float(sum(per_object.values()))
    with naming(args.input):
        random, fixed = check_facets(design, _split(args.fixed))
        comps = fit_components(design)
        fixed_sizes = {f: len(design.labels[f]) for f in fixed}
        model = ErrorModel.from_components(design.object, comps.names, comps.facets, comps.estimates, fixed_sizes)
        box = _box(args.max, design, model.random)
        result = make_plan(model, args.coefficient, args.target, box, unit, args.budget, args.level)
    observed = {f: len(design.labels[f]) for f in model.random}
    from mirrorscan.analysis.design_plan import _Evaluator

    now = _Evaluator(model, unit, args.level).design(observed)
    out = {"command": "plan", "input": args.input, "score": args.score, "object": design.object,
           "components_method": comps.method, "components": dict(zip(comps.names, map(float, comps.estimates))),
           "n_rows": design.n_rows, "missing_cells": design.missing_cells, "rows_without_score": dropped,
           "cost_per_cell": per_object, "cost_unit": args.cost_unit if measured else "as given",
           **result.to_json(), "observed": now.to_json()}
    if measured:
        out["costs_from"] = measured
    if len(out["frontier"]) > 200:                       # keep the JSON readable: every k-th point and the ends
        front = out["frontier"]
        step = math.ceil(len(front) / 200)
        out["frontier"] = front[::step] + ([front[-1]] if (len(front) - 1) % step else [])
        out["frontier_note"] = f"{len(front)} frontier designs, every {step}th shown"
    return out


def gstudy_with_missing_cells(args, design, d_studies, target, object_variance):
    """The G-study of a table with missing cells or replicates: REML components (``analysis.reml_gstudy``), then the
    usual report; returns (report, what the estimation rests on)."""
    from mirrorscan.analysis.gtheory_report import gtheory_report
    from mirrorscan.analysis.reml_gstudy import reml_gstudy

    g, how = reml_gstudy(design, _split(args.fixed))
    report = gtheory_report(g, d_studies, target, object_variance)
    return report, {"components_method": "reml", **how, "estimation": "REML (restricted maximum likelihood, as "
                    "lme4's lmer with REML = TRUE), random-effects model; a component on the boundary is 0"}


def add_design_options(sp, level: bool = True) -> None:
    """The options naming a long table's design: --object, --facets, --nested, --fixed (and --level)."""
    sp.add_argument("--object", required=True, metavar="COL", help="object of measurement (e.g. model)")
    sp.add_argument("--facets", required=True, action="append", metavar="COL,COL",
                    help="the other facet columns, comma-separated (e.g. wrapper,item)")
    sp.add_argument("--nested", action="append", default=[], metavar="CHILD:PARENT",
                    help="CHILD is nested in PARENT (Brennan's i:p is --nested item:model); repeatable")
    sp.add_argument("--fixed", action="append", default=[], metavar="COL",
                    help="a facet whose observed levels are its whole universe (fixed, not generalised over); repeatable")
    if level:
        sp.add_argument("--level", type=float, default=0.95, help="coverage level (default 0.95)")


def add_parsers(sub, common, fmt, epilog: str) -> None:
    """Add the ``intervals`` and ``plan`` subcommands to the ``stats`` parser."""
    design_options = add_design_options

    i = sub.add_parser("intervals", formatter_class=fmt, epilog=epilog, description=INTERVALS_HELP,
                       help="estimates with intervals over random facets, paired differences (Holm)")
    common(i)
    design_options(i)
    i.add_argument("--method", choices=("gstudy", "bootstrap"), default="gstudy",
                   help="gstudy (variance components, Satterthwaite t; default) or bootstrap (pigeonhole)")
    i.add_argument("--draws", type=int, default=2000, metavar="N", help="bootstrap draws (default 2000)")
    i.add_argument("--seed", type=int, default=0, metavar="S", help="bootstrap root seed (default 0)")

    p = sub.add_parser("plan", formatter_class=fmt, epilog=epilog, description=PLAN_HELP,
                       help="the cheapest design (levels per facet) reaching a target, or the best for a budget")
    common(p)
    design_options(p)
    p.add_argument("--target", type=float, metavar="T",
                   help="Er2 or Phi to reach (0-1), or the paired half-width to get under (score units)")
    p.add_argument("--coefficient", choices=("g", "phi", "halfwidth"), default="g",
                   help="what --target is on: g (relative Er2, default), phi (absolute) or halfwidth")
    p.add_argument("--cost-per-cell", type=float, metavar="C", help="cost of one cell of one object (any unit)")
    p.add_argument("--costs-from", metavar="INVOCATION",
                   help="measure each object's cost per cell from this invocation's inference log")
    p.add_argument("--cost-unit", choices=("seconds", "tokens"), default="seconds",
                   help="with --costs-from: engine seconds (default) or tokens per cell")
    p.add_argument("--max", action="append", default=[], metavar="FACET=K,...",
                   help="largest number of levels searched per facet (default: 4x observed, at least +10)")
    p.add_argument("--budget", type=float, metavar="B", help="instead of a target: the best design costing at most B")
