"""Coverage of the intervals over random facets, shown by simulation with known components.

Each shape is a crossed model × wrapper × item design whose scores are drawn from the G-study model with
components set here (so every model's universe score, and every paired difference, is known). For every
replication the three intervals are computed as a user gets them (``analysis.long_design`` →
``analysis.intervals.gstudy_intervals`` / ``analysis.pigeonhole.pigeonhole_intervals``) and the script counts
how often each covers the truth:

    gstudy      variance components (ANOVA, or REML with missing cells), Satterthwaite t — the default
    bootstrap   pigeonhole bootstrap, percentile
    naive       cells as independent, mean ± t sd/√n

for model 0's own score (absolute) and for the difference model 0 − model 1 (relative). Beside coverage, the
mean width over the width the true components give at the same design (1.96 √σ²_true): above 1 the method is
wider than the truth needs, below 1 narrower. Shapes: few (3) and more (6, 12) wrappers, binary scores
(Bernoulli with a logistic link; the universe score is then the population mean of the probability, computed
by Monte Carlo), and 10 % of cells missing.

Target: coverage 0.93–0.97 wherever every random facet has ≥ 6 levels; ``analysis.intervals`` warns below that
(``MIN_TRUSTED_LEVELS``). Monte Carlo error of a coverage near 0.95 over R replications: √(0.95·0.05/R)
(0.010 at R = 500).

Run from the repository root:  ``python bench/coverage.py`` (``--reps``, ``--draws``, ``--only SHAPE``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from mirrorscan.analysis.intervals import gstudy_intervals
from mirrorscan.analysis.long_design import long_design
from mirrorscan.analysis.pigeonhole import pigeonhole_intervals


@dataclass(frozen=True)
class Shape:
    name: str
    models: int
    wrappers: int
    items: int
    sds: tuple[float, ...]          # model, wrapper, item, model:wrapper, model:item, wrapper:item, residual
    binary: bool = False
    missing: float = 0.0


SDS = (1.0, 0.5, 0.5, 0.4, 0.4, 0.3, 0.6)
SHAPES = [
    Shape("3 wrappers", 4, 3, 40, SDS),
    Shape("4 wrappers", 4, 4, 40, SDS),
    Shape("6 wrappers", 4, 6, 30, SDS),
    Shape("6 wrappers, 6 items", 4, 6, 6, SDS),
    Shape("12 wrappers", 4, 12, 30, SDS),
    Shape("binary, 8 wrappers", 4, 8, 30, (1.0, 0.6, 0.8, 0.5, 0.5, 0.3, 0.0), binary=True),
    Shape("10 % missing, 8 wrappers", 4, 8, 30, SDS, missing=0.10),
]


def _draw(shape: Shape, rng):
    s = shape.sds
    nm, nw, ni = shape.models, shape.wrappers, shape.items
    um = rng.normal(0, s[0], nm)
    eta = (um[:, None, None] + rng.normal(0, s[1], (1, nw, 1)) + rng.normal(0, s[2], (1, 1, ni))
           + rng.normal(0, s[3], (nm, nw, 1)) + rng.normal(0, s[4], (nm, 1, ni)) + rng.normal(0, s[5], (1, nw, ni)))
    if shape.binary:
        y = (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(np.float64)
        truth = _binary_universe(um, s, rng)
    else:
        y = eta + rng.normal(0, s[6], eta.shape)
        truth = um
    m, w, i = (a.ravel() for a in np.meshgrid(range(nm), range(nw), range(ni), indexing="ij"))
    keep = rng.random(y.size) >= shape.missing
    return {"y": y.ravel()[keep], "model": m[keep], "wrapper": w[keep], "item": i[keep]}, truth


def _binary_universe(um, s, rng, n=200_000):
    """E over wrappers, items and their interactions of the logistic probability, per model (Monte Carlo)."""
    other = math.sqrt(s[1] ** 2 + s[2] ** 2 + s[3] ** 2 + s[4] ** 2 + s[5] ** 2)
    z = rng.normal(0, other, n)
    return np.array([np.mean(1 / (1 + np.exp(-(u + z)))) for u in um])


def _true_width(shape: Shape) -> tuple[float, float]:
    """1.96 √σ²(Δ) and 1.96 √(2σ²(δ)) under the true components (latent scale; None for binary)."""
    v = np.array(shape.sds) ** 2
    nw, ni = shape.wrappers, shape.items
    absolute = (v[1] + v[3]) / nw + (v[2] + v[4]) / ni + (v[5] + v[6]) / (nw * ni)
    relative = v[3] / nw + v[4] / ni + v[6] / (nw * ni)
    return 2 * 1.96 * math.sqrt(absolute), 2 * 1.96 * math.sqrt(2 * relative)


def run_shape(shape: Shape, reps: int, draws: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hits = {k: [0, 0] for k in ("gstudy", "bootstrap", "naive")}
    widths = {k: [0.0, 0.0] for k in hits}
    t0 = time.perf_counter()
    for r in range(reps):
        table, truth = _draw(shape, rng)
        design = long_design(table, "y", "model", ["wrapper", "item"])
        g = gstudy_intervals(design)
        b = pigeonhole_intervals(design, draws=draws, seed=r)
        diff_truth = truth[0] - truth[1]
        for name, rep in (("gstudy", g), ("bootstrap", b)):
            lo, hi = rep.objects[0].interval
            hits[name][0] += lo <= truth[0] <= hi
            widths[name][0] += hi - lo
            d = rep.differences[0]
            hits[name][1] += d.interval[0] <= diff_truth <= d.interval[1]
            widths[name][1] += d.interval[1] - d.interval[0]
        lo, hi = g.objects[0].naive_interval
        hits["naive"][0] += lo <= truth[0] <= hi
        widths["naive"][0] += hi - lo
        # naive difference: the two models' naive standard errors combined as if independent
        se = [(o.naive_interval[1] - o.naive_interval[0]) / 2 for o in g.objects[:2]]
        half = math.sqrt(se[0] ** 2 + se[1] ** 2)
        est = g.objects[0].estimate - g.objects[1].estimate
        hits["naive"][1] += est - half <= diff_truth <= est + half
        widths["naive"][1] += 2 * half
    true_abs, true_rel = _true_width(shape)
    out = {"shape": shape.name, "reps": reps, "seconds": time.perf_counter() - t0}
    for name in hits:
        out[name] = {"coverage_score": hits[name][0] / reps, "coverage_difference": hits[name][1] / reps,
                     "width_ratio_score": None if shape.binary else widths[name][0] / reps / true_abs,
                     "width_ratio_difference": None if shape.binary else widths[name][1] / reps / true_rel}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=500, help="replications per shape (default 500)")
    p.add_argument("--draws", type=int, default=500, help="bootstrap draws per replication (default 500)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--only", help="run the shapes whose name contains this text")
    args = p.parse_args(argv)
    shapes = [s for s in SHAPES if not args.only or args.only in s.name]
    print(f"coverage at 95 %, {args.reps} replications per shape (Monte Carlo error ±"
          f"{1.96 * math.sqrt(0.95 * 0.05 / args.reps):.3f}); width: mean width / width of the true components")
    head = f"{'shape':<26} {'method':<10} {'cover score':>11} {'cover diff':>10} {'width score':>11} {'width diff':>10}"
    print(head)
    print("-" * len(head))
    for k, shape in enumerate(shapes):
        res = run_shape(shape, args.reps, args.draws, args.seed + k)
        for name in ("gstudy", "bootstrap", "naive"):
            r = res[name]
            fmt = lambda x: "—" if x is None else f"{x:.2f}"                               # noqa: E731
            print(f"{shape.name if name == 'gstudy' else '':<26} {name:<10} {r['coverage_score']:>11.3f} "
                  f"{r['coverage_difference']:>10.3f} {fmt(r['width_ratio_score']):>11} "
                  f"{fmt(r['width_ratio_difference']):>10}")
        print(f"{'':<26} ({res['seconds']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
