"""``mirrorscan stats intervals`` and ``mirrorscan stats plan``: their options and help.

``intervals``: every object's estimate with a 95 % interval that treats the named facets as random (and the
naive interval beside it), and every pair's paired difference with Holm-adjusted p and a verdict. ``plan``: the
cheapest design (levels per random facet) that reaches a target, or the best one for a budget, with the
frontier. Both read the long table as ``stats gstudy`` does; rows without a score (a scan's error rows) are
left out and counted, so the design may have missing cells (REML then estimates the components).
The computations are in :mod:`analysis.intervals`, :mod:`analysis.pigeonhole`, :mod:`analysis.design_plan`, run
over the table by ``results.long_stats``; this module holds the two commands' options and help.
"""

from __future__ import annotations


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
