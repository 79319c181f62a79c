"""``mirrorscan stats gstudy|kendall|auroc|null``: statistics that belong to no instrument, on a long table.

Input is a long table (one row per observation), CSV or Parquet, read with pyarrow. Output is JSON on
stdout, or in ``--out``. Bad input (an unknown column, a non-numeric score, an unbalanced design, a
positive class that does not occur) is one line ``error: …`` naming the file, the column and the fix,
exit code 2.

  gstudy   variance components (ANOVA/EMS) of a balanced design, Eρ² and Φ, D-studies, asymptotes,
           sizes needed for a target; ``--plots DIR`` writes the component bars and D-study curves
  kendall  Kendall's W (tie-corrected) of object rankings across raters, χ² and permutation p
  auroc    AUROC (mid-ranks, ties ½) per layer for an explicit positive class, best layer both ways
  null     label-permutation null of max-over-layers AUROC: p, z, layer-selection floor
  intervals, plan  intervals over random facets, paired differences, cheapest design (their options and help:
                   jobs/stats_intervals.py)

The computations live in :mod:`analysis` (arrays in, dataclasses out), run over the table by
``results.long_stats``; this module parses the command line, reads the input (``results.long_table``), calls
them and writes the JSON (``stats_output``). About a third
of it is the ``--help`` text of the four parsers, kept beside the options it explains.
"""

from __future__ import annotations

HELP = """Statistics that belong to no instrument, computed from a long table (one row per observation).

Input (--input): a CSV or Parquet file, e.g. what `mirrorscan sql --format csv "SELECT ..." > input.csv`
writes or a table an analysis wrote (a report names the query and the stats command behind each of its
numbers); or an invocation id or experiment folder, whose stored traces are then the table and beside whose
analysis the JSON is also kept. Output: JSON on stdout, or in the file --out names. Bad input (an unknown
column, a non-numeric score, an unbalanced design, a positive class that does not occur) prints one line
`error: ...` naming the file, the column and the fix, and exits with code 2.

  gstudy   variance components (ANOVA/EMS) of a balanced design, Eρ² and Φ, D-studies, asymptotes,
           sizes needed for a target; --plots DIR writes the component bars and D-study curves
  kendall  Kendall's W (tie-corrected) of object rankings across raters, χ² and permutation p
  auroc    AUROC (mid-ranks, ties count 1/2) per layer for a positive class you name, best layer both ways
  null     label-permutation null of the max-over-layers AUROC: p, z, layer-selection floor
  intervals  every object's estimate with an interval over the random facets (and the naive one), and
           every pair's difference with Holm-adjusted p and a verdict
  plan     the cheapest design (levels per facet) reaching a target Er2, Phi or half-width, or the best
           for a budget, with the frontier

Tables with missing cells (a scan's error rows, a failed variant) are analysed by REML; rows without a score
are left out and counted.

`mirrorscan stats STATISTIC --help` lists the columns and options of one statistic.
"""

import argparse
import sys
from pathlib import Path


from mirrorscan.analysis.long_table import numeric_scores, split_facets, split_names
from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.jobs.stats_output import emit, write_beside
from mirrorscan.results import long_stats
from mirrorscan.results.long_table import invocation_source, read_input

COMMANDS = ("gstudy", "kendall", "auroc", "null", "intervals", "plan")

_EPILOG = ("Input: a long-format .csv or .parquet file (one row per observation), or an invocation id or\n"
           "experiment folder: then its traces are the table and the JSON is also stored beside the\n"
           "invocation's analysis (<invocation>/analysis/<command>/). Errors exit 2 with one line.")


# ---- commands: the options to results.long_stats, the table read first --------------------------------

def _table(args):
    """The input table (``results.long_table.read_input``) with a text score column parsed as numbers."""
    return numeric_scores(read_input(args.invocation, args.input), args.score)


def _design(args) -> dict:
    """The options naming a long table's design, the facets checked before the input is read."""
    facets = split_facets(args.facets)
    return {"path": args.input, "score": args.score, "object": args.object, "facets": facets,
            "nested": args.nested, "fixed": split_names(args.fixed)}


def gstudy(args) -> dict:
    """Run ``stats gstudy`` (``results.long_stats.gstudy``) and with --plots write its PNG charts."""
    design = _design(args)
    result, report = long_stats.gstudy(_table(args), **design, d_study=args.d_study, target=args.target,
                                       object_variance=args.object_variance)
    if args.plots:
        from mirrorscan.analysis.plotting import gstudy_charts

        folder = Path(args.plots)
        folder.mkdir(parents=True, exist_ok=True)
        result["plots"] = []
        for name, png in gstudy_charts(report).items():
            (folder / name).write_bytes(png)
            result["plots"].append(str(folder / name))
    return result


def kendall(args) -> dict:
    """Run ``stats kendall`` (``results.long_stats.kendall``)."""
    return long_stats.kendall(_table(args), path=args.input, score=args.score, object=args.object, rater=args.rater,
                              permutations=args.permutations, seed=args.seed, reference_effect=args.reference_effect,
                              reference_sims=args.reference_sims)


def auroc(args) -> dict:
    """Run ``stats auroc`` (``results.long_stats.auroc``)."""
    return long_stats.auroc(_table(args), path=args.input, score=args.score, label=args.label, positive=args.positive,
                            layer=args.layer, item=args.item, model=args.model, ray=args.ray)


def null(args) -> dict:
    """Run ``stats null`` (``results.long_stats.null``), locally or with --ray as Ray tasks."""
    return long_stats.null(_table(args), path=args.input, score=args.score, label=args.label, positive=args.positive,
                           layer=args.layer, item=args.item, permutations=args.permutations, seed=args.seed,
                           shard_size=args.shard_size, ray=args.ray)


def intervals(args) -> dict:
    """Run ``stats intervals`` (``results.long_stats.intervals``)."""
    design = _design(args)
    return long_stats.intervals(_table(args), **design, method=args.method, level=args.level, draws=args.draws,
                                seed=args.seed)


def plan(args) -> dict:
    """Run ``stats plan`` (``results.long_stats.plan``); the costs are checked before the input is read."""
    long_stats.check_costs(args.cost_per_cell, args.costs_from)
    design = _design(args)
    return long_stats.plan(_table(args), **design, cost_per_cell=args.cost_per_cell, costs_from=args.costs_from,
                           cost_unit=args.cost_unit, coefficient=args.coefficient, target=args.target,
                           budget=args.budget, level=args.level, max=args.max)


# ---- parser -------------------------------------------------------------------------------------------

def build_parser(prog: str = "mirrorscan stats") -> argparse.ArgumentParser:
    """Parser of the four statistics subcommands (``prog gstudy …`` etc.)."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog=prog, description=HELP, formatter_class=fmt)
    sub = p.add_subparsers(dest="command", required=True, metavar="{gstudy,kendall,auroc,null,intervals,plan}")

    def common(sp, out: bool = True):
        sp.add_argument("--input", required=True, metavar="FILE",
                        help="long-format .csv or .parquet file, or an invocation id / experiment folder (its traces)")
        sp.add_argument("--score", required=True, metavar="COL", help="numeric score column")
        if out:
            sp.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")

    g = sub.add_parser("gstudy", formatter_class=fmt, epilog=_EPILOG,
                       help="variance components, Eρ², Φ, D-studies (REML where cells are missing)",
                       description="G-study by ANOVA expected mean squares (Brennan 2001) on a complete table, by\n"
                       "REML (as lme4) where cells are missing or repeated; then D-studies. Rows without a score\n"
                       "are left out and counted (rows_without_score); missing_cells says how many cells are empty.\n"
                       "JSON: components keyed by effect (model, wrapper, model:wrapper, ..., residual) with\n"
                       "estimate, df, mean_square, share; g_coefficient (relative Eρ²) and phi (absolute Φ) of\n"
                       "the observed design with the sizes behind them; asymptotes per random facet; the\n"
                       "--d-study designs; the smallest n' per facet reaching --target (or unreachable).\n\n"
                       "example: mirrorscan stats gstudy --input scores.csv --score score --object model \\\n"
                       "           --facets wrapper,item --d-study wrapper=1,item=400 --plots plots/")
    common(g)
    from mirrorscan.jobs.stats_intervals import add_design_options

    add_design_options(g, level=False)
    g.add_argument("--d-study", action="append", default=[], metavar="FACET=N,...",
                   help="extra D-study sizes, e.g. wrapper=1,item=400; repeatable")
    g.add_argument("--target", type=float, default=0.8, help="coefficient target for sizes needed (default 0.8)")
    g.add_argument("--object-variance", type=float, metavar="V",
                   help="hypothesised σ² of the object (squared score units): adds a hypothetical D-study set")
    g.add_argument("--plots", metavar="DIR", help="write variance_components.png and d_study_<facet>.png here")

    k = sub.add_parser("kendall", formatter_class=fmt, epilog=_EPILOG,
                       help="Kendall's W of object rankings across raters (wrappers)",
                       description="Kendall's coefficient of concordance W (and tie-corrected W_t): do the raters\n"
                       "(e.g. wrappers) rank the objects (e.g. models) alike? With the χ² test and a permutation\n"
                       "p-value (ranks shuffled within raters, p = (b+1)/(m+1)). One score per object x rater.\n\n"
                       "example: mirrorscan stats kendall --input s.csv --score score --object model --rater wrapper")
    common(k)
    k.add_argument("--object", required=True, metavar="COL", help="the objects ranked (e.g. model)")
    k.add_argument("--rater", required=True, metavar="COL", help="the raters ranking them (e.g. wrapper)")
    k.add_argument("--permutations", type=int, default=10_000, metavar="N", help="permutations (default 10000)")
    k.add_argument("--seed", type=int, default=0, metavar="S", help="root seed (default 0)")
    k.add_argument("--reference-effect", type=float, metavar="D",
                   help="also simulate W for this shape with a real object effect object_sd/noise_sd = D")
    k.add_argument("--reference-sims", type=int, default=2000, metavar="N", help="simulated designs (default 2000)")

    def probe(sp, need_layer: bool):
        sp.add_argument("--label", required=True, metavar="COL", help="class label column")
        sp.add_argument("--positive", required=True, metavar="VALUE",
                        help="the positive class (compared as text with the labels), e.g. deployment")
        sp.add_argument("--layer", required=need_layer, metavar="COL",
                        help="layer column: one row per item and layer" + ("" if need_layer else
                                                                          " (omit: one row per item)"))
        sp.add_argument("--item", metavar="COL",
                        help="item id column (default: the rows of each layer, in file order, are the items)")

    a = sub.add_parser("auroc", formatter_class=fmt, epilog=_EPILOG,
                       help="AUROC per layer for an explicit positive class",
                       description="AUROC = Mann-Whitney U/(n1 n0) by mid-ranks (ties count 1/2), per layer, for\n"
                       "the class named by --positive (AUROC of the other class is 1 - this). Reports the best\n"
                       "layer for max(AUROC - 0.5) and for max |AUROC - 0.5|. No null: see `stats null`.\n\n"
                       "example: mirrorscan stats auroc --input p.csv --score mean_score --label type \\\n"
                       "           --positive deployment --layer layer")
    common(a)
    probe(a, need_layer=False)
    a.add_argument("--model", metavar="COL", help="one AUROC curve per value of this column")
    a.add_argument("--ray", action="store_true", help="with --model: one Ray task per model")

    n = sub.add_parser("null", formatter_class=fmt, epilog=_EPILOG,
                       help="label-permutation null of the max-over-layers AUROC",
                       description="Label-permutation null of max over layers of (AUROC - 0.5) and of |AUROC - 0.5|:\n"
                       "labels are shuffled, AUROC recomputed at every layer and the max retaken per\n"
                       "permutation. p = (b+1)/(m+1), z, the layer-selection floor (null mean of the max) and\n"
                       "observed - floor. Shards of 1000 draws seeded from SeedSequence(seed): the same bytes\n"
                       "locally or with --ray, for any number of workers.\n\n"
                       "example: mirrorscan stats null --input p.csv --score mean_score --label type \\\n"
                       "           --positive deployment --layer layer --permutations 10000 --seed 0")
    common(n)
    probe(n, need_layer=True)
    n.add_argument("--permutations", type=int, default=10_000, metavar="N", help="permutations (default 10000)")
    n.add_argument("--seed", type=int, default=0, metavar="S", help="root seed (default 0)")
    n.add_argument("--shard-size", type=int, default=1000, metavar="N", help="draws per shard (default 1000)")
    n.add_argument("--ray", action="store_true", help="run the shards as Ray tasks ($RAY_ADDRESS or a local Ray)")
    from mirrorscan.jobs.stats_intervals import add_parsers

    add_parsers(sub, common, fmt, _EPILOG)
    return p


RUN = {"gstudy": gstudy, "kendall": kendall, "auroc": auroc, "null": null, "intervals": intervals, "plan": plan}


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan stats") -> int:
    """Entry point: ``argv[0]`` is the subcommand; returns the exit code (2 on bad input)."""
    args = build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    args.invocation = invocation_source(args.input)
    result = RUN[args.command](args)
    if args.invocation is not None and not args.out:
        result = {"invocation_id": str(args.invocation["invocation_id"]), **result}
        write_beside(args.invocation, args.command, result)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.stats"))
