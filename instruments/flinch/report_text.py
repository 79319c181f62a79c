"""The flinch analysis as printed: one line per model (total and each axis), the carrier G-studies, and the
sampling proxy's models on their own scale; after the G-studies, each axis score's and the total's interval over
terms and carriers with every pair of models' paired difference (``intervals``). A total is printed as a number only when it is whole (every
axis and term scored); a partial one is in parentheses and marked ``partial``, and the line under the table
says what the totals sum and which models lack what (``numbers.totals``).
"""

from __future__ import annotations

from mirrorscan.analysis.headline_intervals import format_intervals
from mirrorscan.instruments.flinch.intervals import TOTAL_NOTE
from mirrorscan.instruments.flinch.numbers import total_text
from mirrorscan.instruments.flinch.proxy import RESOLUTION, difference_lines, interval_text


def analysis_text(models: list[dict], proxied: list[dict], gstudy: dict, keys: list[str], spec, found,
                  intervals: dict | None = None) -> str:
    """The readable summary of one invocation: ``models`` (``numbers.model_scores``), ``proxied``
    (``numbers.proxy_scores``), the per-axis ``gstudy``, the axis set ``keys``, the spec (aggregation, corpus
    hash), where the axes were read from (``stored.AnalysisAxes``) and the axis scores' and total's intervals
    (``intervals.flinch_intervals``), printed after the G-studies."""
    width = max([28] + [len(m["model"]) for m in models + proxied])
    col = {k: max(12, len(k)) for k in keys}   # an axis column is as wide as its key: no header is cut
    lines = [f"flinch ({spec.aggregation}; corpus {spec.corpus_sha256[:12]}…, read from the {found.source}; "
             f"axes: {', '.join(keys)})",
             f"{'model':<{width}} {'total':>16}  " + "  ".join(f"{k:>{col[k]}}" for k in keys)]
    for m in models:
        lines.append(f"{m['model']:<{width}} {total_text(m):>16}  " + "  ".join(
            f"{m['axes'][k]['flinch']:>{col[k]}.1f}" if k in m["axes"] else f"{'-':>{col[k]}}" for k in keys))
    lines.append(f"total = the sum over all {len(keys)} axes, only where every axis and term was scored"
                 + "".join(f"; {m['model']}: {m['total_of']}" for m in models if m["total_flinch"] is None))
    lines += [f"corpus: {w}" for w in found.warnings]
    for key, g in gstudy.items():
        if "missing" in g:
            lines.append(f"carrier G-study, {key}: none ({g['missing']})")
        else:
            need = g["carriers_for_target"]
            reml = (f" (REML: {g['missing_cells']} carrier cell(s) missing)" if g.get("estimation") == "reml"
                    else "")
            lines.append(f"carrier G-study, {key}: {100 * (g['carrier_share'] or 0):.0f}% of a carrier score's "
                         f"variance is the carrier; Eρ² {g['g_coefficient']:.2f} with {g['n_carriers']:g} carriers "
                         f"per term; {need if need is not None else 'no number of'} carriers per term for "
                         f"Eρ² {g['target']}{reml}")
    if intervals and intervals.get("headlines"):
        lines.append(format_intervals(intervals, width))
        if "total_flinch" in intervals["headlines"]:
            lines.append(TOTAL_NOTE)
    if proxied:
        lines += [f"sampling proxy (its own scale: whole-word probability as the first words said, not a "
                  f"per-token mean; N = {spec.proxy_samples} per carrier, pooled per "
                  f"term; each value with its 95 % interval [low–high], an axis's holding for its terms at once; "
                  f"differences under {RESOLUTION:g} are below its resolution; never mixed with the rows above)",
                  f"{'model':<{width}} " + "  ".join(f"{k:>{max(18, len(k))}}" for k in keys)]
        for m in proxied:
            lines.append(f"{m['model']:<{width}} " + "  ".join(f"{proxy_text(m['axes'].get(k)):>{max(18, len(k))}}"
                                                                 for k in keys))
        lines += difference_lines(proxied, keys)
    return "\n".join(lines)


def proxy_text(axis: dict | None) -> str:
    """One axis's proxy value as printed with its 95 % interval (``proxy.interval_text``); ``n/a`` and the
    interval when a term had no hit."""
    if axis is None:
        return "-"
    return interval_text(axis["proxy_flinch"], axis["flinch_low"], axis["flinch_high"])
