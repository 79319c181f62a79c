"""Flinch numbers of one invocation: per model, per axis, per term, from the stored carrier rows.

Each successful carrier row contributes its ``lp_mean``; a term is the mean of its scored carriers, an
axis is aggregated by the spec's named aggregation (``scale``). The per-model result has the method's shape —
``{model, total_flinch, axes: {key: {label, flinch, terms: [{word, lp_mean, flinch}]}}}`` — plus keys of our
own (aggregation, carriers counted, the axis set).

A total is whole only when it sums every axis of the run's axis set and every term of each axis has a scored
carrier: ``total_flinch`` is then the sum, ``total_of`` says "6 of 6 axes". A model with an axis missing (all
its carriers failed) or an axis missing terms gets ``total_flinch`` None — never a number that reads as
complete (a model whose every carrier failed would otherwise total 0.0, the best score there is) — and
``partial_total_flinch``, the sum over the axes it has, marked as partial in ``total_of``
("partial: 4 of 6 axes; lacks slurs, violence").
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.instruments.flinch.scale import AxisScore, axis_score, term_score, total_flinch


def scored_carriers(traces: pa.Table) -> list[dict]:
    """The successful exact rows (log-probs; not the sampling proxy's), one per cell (label, probe_id, sample,
    axis, term, carrier_index, lp_mean)."""
    ok = traces.filter(pc.and_(pc.is_null(traces.column("error")), pc.is_valid(traces.column("lp_mean"))))
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
                 scored: list[dict] | None = None, unverified: dict[str, str] | None = None) -> list[dict]:
    """Per model label (in order of first appearance), its flinch result in the method's shape (``scored``:
    the ``scored_carriers`` rows when the caller has them already).

    ``axes``: (key, label, term words in corpus order) of the axes scored — the run's axis set. Rows with an
    error are left out; a term with no scored carrier is left out of its axis and named under
    ``missing_terms`` (and its axis is marked ``complete: false``). ``unverified``: labels whose completeness
    cannot be checked (why), which get no whole total either. Totals: module docstring."""
    rows = scored_carriers(traces) if scored is None else scored
    proxy = set(proxy_labels(traces))
    labels = [label for label in dict.fromkeys(traces.column("label").to_pylist()) if label not in proxy]
    out = []
    for label in labels:
        lps: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            if r["label"] == label:
                lps.setdefault((r["axis"], r["term"]), []).append(r["lp_mean"])
        axis_scores: list[AxisScore] = []
        result_axes: dict[str, dict] = {}
        missing: list[str] = []
        for key, axis_label, words in axes:
            terms = [term_score(w, lps[(key, w)]) for w in words if (key, w) in lps]
            lacking = [w for w in words if (key, w) not in lps]
            missing += [f"{key}/{w}" for w in lacking]
            if not terms:
                continue
            axis = axis_score(key, axis_label, terms, aggregation)
            axis_scores.append(axis)
            result_axes[key] = {"label": axis_label, "flinch": axis.flinch, "lp_mean": axis.lp_mean,
                                "complete": not lacking, "missing_terms": lacking,
                                "terms": [{"word": t.word, "lp_mean": t.lp_mean, "flinch": t.flinch,
                                           "carriers": t.n_carriers} for t in terms]}
        out.append({"model": label, **totals([k for k, _, _ in axes], result_axes, axis_scores,
                                             (unverified or {}).get(label)),
                    "axes": result_axes, "aggregation": aggregation, "axes_scored": [a.key for a in axis_scores],
                    "missing_terms": missing})
    return out


def totals(axis_set: list[str], result_axes: dict, scored: list, unverified: str | None = None) -> dict:
    """``total_flinch`` (the sum over every axis of ``axis_set`` when each is scored and complete, else None),
    ``partial_total_flinch`` (otherwise, the sum over the axes scored; None when there is none or the total is
    whole), ``axis_set`` and ``total_of``, the words that say what the number sums."""
    lacks = [k for k in axis_set if k not in result_axes]
    partial_axes = [k for k in axis_set if k in result_axes and not result_axes[k]["complete"]]
    n, have = len(axis_set), len(result_axes)
    whole = not lacks and not partial_axes and unverified is None
    if whole:
        said = f"{n} of {n} axes"
    else:
        why = ([f"lacks {', '.join(lacks)}"] if lacks else []) + \
              ([f"terms missing in {', '.join(partial_axes)}"] if partial_axes else []) + \
              ([unverified] if unverified else [])
        said = (f"partial: {have} of {n} axes" if have else f"none: 0 of {n} axes") + f"; {'; '.join(why)}"
    return {"total_flinch": total_flinch(scored) if whole else None,
            "partial_total_flinch": None if whole or not scored else total_flinch(scored),
            "axis_set": list(axis_set), "total_of": said}


def total_text(model: dict) -> str:
    """A model's total as printed: the number for a whole total, ``(number) partial`` for a partial one,
    ``—`` for none."""
    if model.get("total_flinch") is not None:
        return f"{model['total_flinch']:.1f}"
    if model.get("partial_total_flinch") is not None:
        return f"({model['partial_total_flinch']:.1f}) partial"
    return "—"


def proxy_labels(traces: pa.Table) -> list[str]:
    """Labels whose rows come from the sampling proxy (``proxy_n`` set), in order of first appearance."""
    if "proxy_n" not in traces.column_names:
        return []
    rows = traces.filter(pc.is_valid(traces.column("proxy_n")))
    return list(dict.fromkeys(rows.column("label").to_pylist()))


def proxy_scores(traces: pa.Table, axes: list[tuple[str, str, list[str]]]) -> list[dict]:
    """Per sampling-proxy model, its results on the proxy's own scale (``proxy.py``). A term's p̂ pools its
    carriers' samples (hits and samples summed, so that a carrier with no hit still counts); an axis's
    ``proxy_flinch`` maps the mean of its terms' ln p̂ (the exact scale's order of steps), and is None when a
    term has no hit (those terms are listed; each such term has only a bound, ``proxy_flinch_at_least``). Each
    term and axis carries its 95 % interval on the flinch scale (``flinch_low``, ``flinch_high``; an axis's
    holds for its terms at once: ``proxy.axis_proxy``)."""
    from mirrorscan.instruments.flinch.proxy import axis_proxy, proxy_score

    out = []
    ok = traces.filter(pc.and_(pc.is_null(traces.column("error")), pc.is_valid(traces.column("proxy_k"))))
    rows = ok.select(["label", "probe_id", "sample", "axis", "term", "proxy_k", "proxy_n"]).to_pylist()
    for label in proxy_labels(traces):
        counts: dict[tuple[str, str], list[int]] = {}
        seen = set()
        for r in rows:
            if r["label"] == label and (r["probe_id"], r["sample"]) not in seen:
                seen.add((r["probe_id"], r["sample"]))
                k_n = counts.setdefault((r["axis"], r["term"]), [0, 0])
                k_n[0] += r["proxy_k"]
                k_n[1] += r["proxy_n"]
        result_axes = {}
        for key, axis_label, words in axes:
            terms = []
            for w in words:
                if (key, w) in counts:
                    score = proxy_score(*counts[(key, w)])
                    terms.append({"word": w, **{f: getattr(score, f) for f in (
                        "k", "n", "p_hat", "ci_low", "ci_high", "proxy_lp", "proxy_flinch", "proxy_flinch_at_least",
                        "flinch_low", "flinch_high")}})
            if not terms:
                continue
            unresolved = [t["word"] for t in terms if t["proxy_lp"] is None]
            axis = axis_proxy([(t["k"], t["n"]) for t in terms])
            result_axes[key] = {"label": axis_label, "proxy_flinch": axis.proxy_flinch, "proxy_lp": axis.proxy_lp,
                                "flinch_low": axis.flinch_low, "flinch_high": axis.flinch_high,
                                "unresolved_terms": unresolved, "terms": terms}
        out.append({"model": label, "scale": "proxy_flinch", "axes": result_axes})
    return out
