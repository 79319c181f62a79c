"""A G-study of a design with missing cells: REML components in the :class:`analysis.gtheory.GStudy` shape, so the
D-study, coefficients, sizes needed and reports (:mod:`analysis.dstudy`, :mod:`analysis.gtheory_report`) take it
as they take an ANOVA G-study.

The components are :func:`analysis.reml.reml`'s (boundary estimates 0, never negative). Mean squares and sums of
squares do not exist under REML and are NaN; ``df`` holds the effect's observed levels − 1, for reading only. The
sizes a D-study starts from are the observed numbers of levels (a nested facet's averaged over its ancestor cells).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mirrorscan.analysis.gtheory import RESIDUAL, Component, GStudy
from mirrorscan.analysis.long_design import LongDesign, _combine


def observed_sizes(design: LongDesign) -> dict[str, float]:
    """Levels per facet: the number of labels, or for a nested facet its mean number of levels per ancestor cell."""
    out: dict[str, float] = {}
    for f in design.facets:
        if f not in design.nested:
            out[f] = len(design.labels[f])
            continue
        parent = _combine([design.codes[a] for a in design.nested[f]])[0]
        pairs = np.unique(np.stack([parent, design.codes[f]], axis=1), axis=0)
        out[f] = float(np.mean(np.bincount(pairs[:, 0])))
    return out


def reml_gstudy(design: LongDesign, fixed: Sequence[str] = ()) -> tuple[GStudy, dict]:
    """The REML G-study of ``design`` (every facet random in estimation; ``fixed`` carried to D-studies) and what
    it rests on: {"estimation": "reml", "missing_cells", "replicate_rows", "reml_iterations", "reml_criterion"}."""
    from mirrorscan.analysis.reml import reml

    fit = reml(design)
    comps = [Component(ef.name, ef.name, ef.facets, ef.primary, ef.nesting, ef.levels - 1, float("nan"),
                       float("nan"), fit.estimate(ef.name)) for ef in fit.effects]
    comps.append(Component(RESIDUAL, ":".join(design.facets), frozenset(design.facets), design.facets, (),
                           design.n_rows - 1, float("nan"), float("nan"), fit.estimate(RESIDUAL)))
    g = GStudy(design.object, design.facets, observed_sizes(design), dict(design.nested), tuple(fixed), tuple(comps),
               float(np.mean(design.scores)), design.n_rows)
    return g, {"estimation": "reml", "missing_cells": design.missing_cells,
               "replicate_rows": design.n_rows - design.n_cells_observed, "reml_iterations": fit.iterations,
               "reml_criterion": fit.deviance}
