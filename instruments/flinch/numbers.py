"""Flinch numbers of one invocation: per model, per axis, per term, from the stored carrier rows.

Each successful carrier row contributes its ``lp_mean``; a term is the mean of its scored carriers, an
axis is aggregated by the spec's named aggregation (``scale``), and a model's total is the sum over the
axes scored. The per-model result has the method's shape — ``{model, total_flinch, axes: {key: {label,
flinch, terms: [{word, lp_mean, flinch}]}}}`` — plus keys of our own (aggregation, carriers counted).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from instruments.flinch.scale import axis_score, term_score, total_flinch


def scored_carriers(traces: pa.Table) -> list[dict]:
    """The successful rows, one per cell (label, probe_id, sample, axis, term, carrier_index, lp_mean)."""
    ok = traces.filter(pc.is_null(traces.column("error")))
    keys, rows = set(), []
    for r in ok.select(["label", "probe_id", "sample", "axis", "term", "carrier_index", "lp_mean"]).to_pylist():
        if (r["probe_id"], r["sample"]) not in keys:   # one row per cell (a retried cell has one success)
            keys.add((r["probe_id"], r["sample"]))
            rows.append(r)
    return rows


def carrier_lps(scored: list[dict], axis: str) -> dict[tuple[str, str], dict[int, float]]:
    """``{(label, term): {carrier_index: lp_mean}}`` of one axis, from ``scored_carriers`` rows (for the G-study)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in scored:
        if r["axis"] == axis:
            out.setdefault((r["label"], r["term"]), {})[r["carrier_index"]] = r["lp_mean"]
    return out


def model_scores(traces: pa.Table, axes: list[tuple[str, str, list[str]]], aggregation: str,
                 scored: list[dict] | None = None) -> list[dict]:
    """Per model label (in order of first appearance), its flinch result in the method's shape (``scored``:
    the ``scored_carriers`` rows when the caller has them already).

    ``axes``: (key, label, term words in corpus order) of the axes scored. Rows with an error are left out;
    a term with no scored carrier is left out of its axis and named under ``missing_terms``."""
    rows = scored_carriers(traces) if scored is None else scored
    labels = list(dict.fromkeys(traces.column("label").to_pylist()))
    out = []
    for label in labels:
        lps: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            if r["label"] == label:
                lps.setdefault((r["axis"], r["term"]), []).append(r["lp_mean"])
        scored, result_axes, missing = [], {}, []
        for key, axis_label, words in axes:
            terms = [term_score(w, lps[(key, w)]) for w in words if (key, w) in lps]
            missing += [f"{key}/{w}" for w in words if (key, w) not in lps]
            if not terms:
                continue
            axis = axis_score(key, axis_label, terms, aggregation)
            scored.append(axis)
            result_axes[key] = {"label": axis_label, "flinch": axis.flinch, "lp_mean": axis.lp_mean,
                                "terms": [{"word": t.word, "lp_mean": t.lp_mean, "flinch": t.flinch,
                                           "carriers": t.n_carriers} for t in terms]}
        out.append({"model": label, "total_flinch": total_flinch(scored), "axes": result_axes,
                    "aggregation": aggregation, "axes_scored": [a.key for a in scored], "missing_terms": missing})
    return out
