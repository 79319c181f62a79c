"""The headline intervals of an analysis (``numbers["intervals"]``, the JSON of
``analysis.headline_intervals.headline_intervals``, any instrument) as words: for the report's section and for
``mirrorscan compare`` of two models of one invocation.

Values are written as ``analyze`` prints them in its intervals block (``analysis.headline_intervals
.format_intervals``): a ``%`` headline to one decimal with ``%``, a ``pp`` headline signed with ``pp``, others
fixed-point (``grid.formatting.fixed``); a difference of a ``%`` or ``pp`` headline in percentage points.
:func:`pair_differences` picks one pair of models out of the JSON, turned to read ``a − b`` as asked (the JSON
holds each pair once, in label order), with its p and its Holm p as adjusted over every pair of the invocation.
"""

from __future__ import annotations

from typing import Any, Mapping

from mirrorscan.analysis.headline_intervals import span, value
from mirrorscan.grid.formatting import fixed

METHODS = {
    "gstudy": ("the error variance of the mean for the observed design, from the G-study's variance components, "
               "with a t quantile on Satterthwaite degrees of freedom"),
    "bootstrap": "a pigeonhole bootstrap: every random facet's levels resampled independently (percentile interval)",
}
"""What each interval method is, in words."""
COMPONENTS = {"anova": "variance components by ANOVA (complete table)",
              "reml": "variance components by REML (cells missing)", "none": ""}
"""How the components were estimated, in words."""


def difference_unit(unit: str) -> str:
    """The unit a difference of two values in ``unit`` is written in: percentage points for a share or points."""
    return "pp" if unit in ("%", "pp") else ""


def method_text(result: Mapping[str, Any]) -> str:
    """The interval method of ``result`` in words (its name when unknown)."""
    method = result.get("method", "")
    return f"{method}: {METHODS[method]}" if method in METHODS else str(method)


def design_text(head: Mapping[str, Any]) -> str:
    """One headline's design: the facets generalised over, those fixed, replicates, how the components were
    estimated (and the cells missing)."""
    parts = [f"random (generalised over): {', '.join(head.get('random', ())) or 'none'}"]
    if head.get("fixed"):
        parts.append(f"fixed (not generalised over): {', '.join(head['fixed'])}")
    if head.get("replicates"):
        parts.append(f"{head['replicates']} as replicates")
    how = COMPONENTS.get(head.get("components_method", ""), head.get("components_method", ""))
    if head.get("components_method") == "reml":
        how += f", {head.get('missing_cells', 0)} cell(s) missing"
    if how:
        parts.append(how)
    return "; ".join(parts)


def pair_differences(result: Mapping[str, Any], a: str, b: str) -> list[dict]:
    """Per headline of ``result`` (in its order), the paired difference a − b: ``{"headline", "title", "unit",
    "a", "b", "estimate", "interval", "p_value", "p_holm", "df", "verdict"}`` — turned from the stored b − a
    where the JSON holds the pair that way (estimate and bounds negated; p, Holm p and verdict, which names the
    higher model, unchanged) — or ``{"headline", "title", "unit", "skipped": why}`` where the headline has no
    difference for the pair (no interval, or a model without scores in it)."""
    out = []
    for name, head in result.get("headlines", {}).items():
        base = {"headline": name, "title": head.get("title", name), "unit": head.get("unit", "")}
        if "skipped" in head:
            out.append({**base, "skipped": f"no interval ({head['skipped']})"})
            continue
        found = None
        for d in head.get("differences", ()):
            if (d["a"], d["b"]) == (a, b):
                found = dict(d)
            elif (d["a"], d["b"]) == (b, a):
                lo, hi = d["interval"]
                found = {**d, "a": a, "b": b, "estimate": _neg(d["estimate"]), "interval": [_neg(hi), _neg(lo)]}
        if found is None:
            have = {o["object"] for o in head.get("objects", ())}
            missing = [m for m in (a, b) if m not in have]
            out.append({**base, "skipped": f"no scores of {', '.join(missing)}" if missing else "no difference"})
        else:
            out.append({**base, **found})
    return out


def _neg(x):
    return None if x is None else -x


def format_pair(result: Mapping[str, Any], a: str, b: str) -> str:
    """The paired differences of two models of one invocation, headline by headline (``compare``'s block)."""
    level = f"{100 * float(result.get('level', 0.95)):.0f} %"
    lines = [f"paired differences {a} − {b} ({level} intervals over the random facets, method "
             f"{result.get('method', '')}; shared prompts and items cancel; Holm p as adjusted over every pair of "
             "models of the invocation):"]
    for d in pair_differences(result, a, b):
        if "skipped" in d:
            lines.append(f"  {d['title']}: {d['skipped']}")
            continue
        unit = difference_unit(d["unit"])
        lines.append(f"  {d['title']}: {value(d['estimate'], unit)} {span(d['interval'], unit)}  "
                     f"p {fixed(d['p_value'])}, Holm {fixed(d['p_holm'])}: {d['verdict']}")
    return "\n".join(lines)
