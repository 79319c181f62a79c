"""How much of a flinch score belongs to its carrier sentences: a G-study per axis.

Design (Brennan 2001, ch. 3): the **model** is the object of measurement; facets **term** and
**carrier** nested in term (Brennan's p × (c:t)); the score is a carrier's ``lp_mean`` (nats). Effects:
model, term, carrier:term, model:term and the residual (model × carrier:term, confounded with error).
Reported per axis: every component, the **carrier share** — the fraction of a single observation's
variance in effects that carry the carrier facet (carrier:term and the residual) — the relative Eρ² at the
observed numbers of terms and carriers, and the carriers per term needed for Eρ² = 0.8 with the terms held
(None when no number of carriers reaches it). It needs ≥ 2 models and ≥ 2 terms with ≥ 2 scored carriers;
otherwise it says which is missing. Where carriers failed for some model (error rows) or terms have unequal
numbers of carriers, the components come from REML (:mod:`analysis.reml_gstudy`) and the result says how many
(model, term, carrier) cells are missing.
"""

from __future__ import annotations

import numpy as np

from mirrorscan.analysis.dstudy import generalizability_coefficient, smallest_n
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import g_study
from mirrorscan.analysis.long_design import long_design
from mirrorscan.analysis.reml_gstudy import reml_gstudy

TARGET = 0.8
"""Relative Eρ² the carriers-per-term figure aims at."""


def carrier_gstudy(models: list[str], terms: list[str], lps: dict[tuple[str, str], dict[int, float]]) -> dict:
    """The axis's G-study from ``lps[(model, term)] = {carrier_index: lp_mean}``; a dict with either the
    numbers (``components``, ``carrier_share``, ``g_coefficient``, ``carriers_for_target``) or ``missing``
    (why there is none)."""
    if len(models) < 2:
        return {"missing": f"needs at least 2 models as the object of measurement, has {len(models)}"}
    if len(terms) < 2:
        return {"missing": f"needs at least 2 terms, has {len(terms)}"}
    counts = {len(lps.get((m, t), {})) for m in models for t in terms}
    indices = {tuple(sorted(lps.get((m, t), {}))) for m in models for t in terms}
    how: dict = {"estimation": "anova", "missing_cells": 0}
    if len(counts) == 1 and len(indices) == 1:
        (carriers,) = indices
        if len(carriers) < 2:
            return {"missing": "needs at least 2 carriers per term"}
        scores = np.array([[[lps[(m, t)][c] for c in carriers] for t in terms] for m in models])
        g = g_study(scores, ("model", "term", "carrier"), {"carrier": ("term",)})
        n_carriers: float = len(carriers)
    else:
        rows = [(m, t, c, v) for m in models for t in terms for c, v in sorted(lps.get((m, t), {}).items())]
        if max(counts) < 2:
            return {"missing": "needs at least 2 carriers per term"}
        table = {"model": [r[0] for r in rows], "term": [r[1] for r in rows], "carrier": [r[2] for r in rows],
                 "score": [r[3] for r in rows]}
        try:
            g, fit = reml_gstudy(long_design(table, "score", "model", ["term", "carrier"], {"carrier": "term"}))
        except AnalysisError as exc:
            return {"missing": f"the carriers scored differ by model and REML could not fit them ({exc.problem})"}
        how = {"estimation": "reml", "missing_cells": fit["missing_cells"]}
        n_carriers = g.sizes["carrier"]
    total = g.total_variance
    carrier_var = sum(c.estimate_used for c in g.components if "carrier" in c.facets)
    needed = smallest_n(g, "carrier", TARGET)
    return {"design": "model × (carrier:term)", "n_models": len(models), "n_terms": len(terms),
            "n_carriers": n_carriers, **how,
            "components": {c.name: c.estimate_used for c in g.components},
            "negative_components": list(g.negative_components),
            "carrier_share": carrier_var / total if total > 0 else None,
            "g_coefficient": generalizability_coefficient(g),
            "carriers_for_target": needed.n, "target": TARGET, "asymptote": needed.asymptote}
