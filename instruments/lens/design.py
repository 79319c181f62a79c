"""The D-study of a lens G-study as the prompt-facet paper reports it: the design a researcher actually uses.

A probe paper reports one wrapper scored on one item set, so the coefficient that says how far its model
ranking can be trusted is that of the **single-wrapper design**: every facet other than the model at one
level (k = 1 wrapper, n = 1 item sample; one implementation variant, one evaluation and one deployment
framing where those are facets). For the pair design (Brennan 2001, ch. 4; ``analysis.dstudy``)

    Eρ²(k, n) = σ²m / (σ²m + σ²mw/k + σ²mi/n + σ²res/(k n))

and Φ adds the effects without the model (wrapper, item and their interaction) to the error. Reported per
study, all from ``analysis.dstudy`` (nothing re-derived here):

* every component with its share of total variance (negative estimates counted as zero);
* Eρ² and Φ of the single-wrapper design, and of the observed design (the sizes the G-study was fitted on);
* the two asymptotes with the other facet at one: items → ∞ at k = 1 (the ceiling of any item set read
  through one wrapper) and wrappers → ∞ at n = 1 (the ceiling of any number of wrappers on one item sample);
* the wrappers needed for Eρ² = 0.80 at n = 1 and at the observed n, or ``None`` ("never") with the
  asymptote it cannot pass; with ``wrapper_facets: crossed`` the framings of each arm needed, the other arm
  at one framing (the paper's evaluation-arm count);
* the ratio σ²(model × wrapper) / σ²(model × item): how much more a model's score moves with the wrapper
  than with the items (with crossed arms the numerator sums every model × arm effect without the item);
* the same under a hypothesised object variance σ²m (``object_variance``: the sample variance, ddof 1, of
  published per-model scores), which is how the paper arrives at a wrappers-needed count under the spread
  the literature reports.
"""

from __future__ import annotations

import math

from mirrorscan.analysis.dstudy import d_study, smallest_n
from mirrorscan.analysis.gtheory import RESIDUAL, GStudy
from mirrorscan.grid.formatting import fixed

TARGET = 0.8
"""Relative Eρ² the wrappers-needed figures aim at."""
ITEM_FACETS = ("item_sample", "item")
WRAPPER_FACETS = ("wrapper", "evaluation", "deployment")
WORDS = {"model": "model", "wrapper": "wrapper", "item_sample": "item sample", "item": "item",
         "variant": "implementation", "evaluation": "evaluation framing", "deployment": "deployment framing"}
"""Each facet in words, as every printed table names it."""


def effect_words(g: GStudy, name: str) -> str:
    """An effect in words: ``model:wrapper`` → ``model × wrapper``; the residual names its facets too."""
    c = g.component(name)
    words = " × ".join(WORDS.get(f, f) for f in c.label.split(":"))
    return f"residual ({words}, with error)" if c.name == RESIDUAL else words


def _facets(g: GStudy) -> tuple[list[str], str | None, list[str]]:
    """(wrapper facets, the item facet, other random facets) of the study."""
    wrappers = [f for f in g.facets if f in WRAPPER_FACETS]
    items = [f for f in g.facets if f in ITEM_FACETS]
    others = [f for f in g.facets if f != g.object and f not in wrappers and f not in items]
    return wrappers, (items[0] if items else None), others


def _coefficients(g: GStudy, sizes: dict, object_variance: float | None = None) -> dict:
    d = d_study(g, sizes, object_variance)
    return {"sizes": d.to_json()["sizes"], "g_coefficient": _num(d.g_coefficient), "phi": _num(d.phi)}


def _needed(g: GStudy, facet: str, base: dict, object_variance: float | None) -> dict:
    n = smallest_n(g, facet, TARGET, "g_coefficient", base, object_variance)
    return {"n": n.n, "asymptote": _num(n.asymptote), "holding": dict(n.holding)}


def published_object_variance(scores) -> float | None:
    """Sample variance (ddof 1) of published per-model scores, in their squared units (None with < 2)."""
    values = [float(s) for s in scores or ()]
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def design_numbers(g: GStudy, object_variance: float | None = None) -> dict:
    """Every number of the module docstring for one G-study, as plain JSON (coefficients dimensionless,
    variances in squared score units, sizes as counts of levels)."""
    wrappers, item, others = _facets(g)
    total = g.total_variance
    ones = {f: 1 for f in g.facets if f != g.object}
    observed_items = {item: g.sizes[item]} if item else {}
    out = {
        "facets": {f: WORDS.get(f, f) for f in g.facets},
        "observed_sizes": {f: g.sizes[f] for f in g.facets},
        "components": [{"effect": c.name, "words": effect_words(g, c.name), "variance": c.estimate_used,
                        "raw_estimate": c.estimate, "share": (c.estimate_used / total) if total > 0 else None}
                       for c in g.components],
        "single_wrapper": _coefficients(g, ones),
        "observed": _coefficients(g, {}),
    }
    if item:
        out["asymptote_items_at_one_wrapper"] = _coefficients(g, {**ones, item: math.inf})
    if wrappers:
        out["asymptote_wrappers_at_one_item_sample"] = _coefficients(g, {**ones, **{w: math.inf for w in wrappers}})
    out["wrappers_needed"] = _wrappers_needed(g, wrappers, item, ones, observed_items, None)
    mw = sum(c.estimate_used for c in g.components
             if g.object in c.facets and c.facets & set(wrappers) and not (item and item in c.facets)
             and not (c.facets & set(others)) and c.name != RESIDUAL)
    mi = g.component(f"{g.object}:{item}").estimate_used if item and len(g.facets) > 2 else None
    out["ratio_model_wrapper_to_model_item"] = (mw / mi) if mi else None
    if object_variance is not None:
        out["hypothetical"] = {"object_variance": object_variance,
                               "single_wrapper": _coefficients(g, ones, object_variance),
                               "wrappers_needed": _wrappers_needed(g, wrappers, item, ones, observed_items,
                                                                   object_variance)}
    else:
        out["hypothetical"] = None
    return out


def _wrappers_needed(g, wrappers, item, ones, observed_items, object_variance) -> dict:
    """facet → {"at_one_item_sample": …, "at_observed_items": …}: for the pair design one entry, ``wrapper``;
    with crossed arms one per arm, the other arm at one framing."""
    out = {}
    for facet in wrappers:
        base = {f: v for f, v in ones.items() if f != facet}
        out[facet] = {"at_one_item_sample": _needed(g, facet, base, object_variance)}
        if item:
            out[facet]["at_observed_items"] = _needed(g, facet, {**base, **observed_items}, object_variance)
    return out


def implementation_shares(g: GStudy) -> dict | None:
    """With a ``variant`` facet: the shares of total variance of model, model × wrapper, item (the item
    sample's main effect), implementation (the variant's main effect) and every effect that carries the
    variant; None without one."""
    if "variant" not in g.facets:
        return None
    total = g.total_variance
    if total <= 0:
        return None
    wrappers, item, _ = _facets(g)
    share = lambda name: g.component(name).estimate_used / total
    return {"model": share(g.object),
            "model_wrapper": sum(share(c.name) for c in g.components if c.facets == {g.object, *wrappers}),
            "item": share(item) if item else None,
            "implementation": share("variant"),
            "implementation_related": sum(c.estimate_used for c in g.components if "variant" in c.facets) / total}


def _num(x: float) -> float | None:
    return None if x != x else float(x)


def design_lines(name: str, study: dict, score: str) -> list[str]:
    """The printed table of one study's design numbers (words, not keys)."""
    d = study["design_numbers"]
    sizes = d["observed_sizes"]
    size_words = ", ".join(f"{n} {d['facets'][f]}{'s' if n != 1 else ''}" for f, n in sizes.items())
    item = next((d["facets"][f] for f in d["facets"] if f in ITEM_FACETS), "item")
    ones = ", ".join(f"1 {w}" for f, w in d["facets"].items() if f != next(iter(d["facets"])))
    labels = [c["words"] for c in d["components"]] + [f"single-wrapper design ({ones})", f"observed design ({size_words})"]
    width = max(58, *(len(x) for x in labels))
    lines = [f"G-study {name!r} ({' × '.join(d['facets'].values())}; {size_words}); score = {score}",
             f"  {'effect':<{width}} {'variance':>10} {'share':>7}"]
    for c in d["components"]:
        share = "n/a" if c["share"] is None else f"{100 * c['share']:.1f}%"
        flag = "  (negative estimate, counted as 0)" if c["raw_estimate"] < 0 else ""
        lines.append(f"  {c['words']:<{width}} {fixed(c['variance']):>10} {share:>7}{flag}")
    imp = study.get("implementation_shares")
    if imp:
        lines.append(f"  shares: model {_pct(imp['model'])}, wrapper × model {_pct(imp['model_wrapper'])}, item "
                     f"{_pct(imp['item'])}, implementation {_pct(imp['implementation'])} (every effect with the "
                     f"implementation: {_pct(imp['implementation_related'])})")
    lines.append(f"  {'design':<{width}} {'Eρ²':>10} {'Φ':>7}")
    rows = [(f"single-wrapper design ({ones})", d["single_wrapper"]),
            (f"observed design ({size_words})", d["observed"])]
    if "asymptote_items_at_one_wrapper" in d:
        rows.append((f"asymptote: {item}s → ∞ at 1 wrapper", d["asymptote_items_at_one_wrapper"]))
    if "asymptote_wrappers_at_one_item_sample" in d:
        rows.append((f"asymptote: wrappers → ∞ at 1 {item}", d["asymptote_wrappers_at_one_item_sample"]))
    for label, c in rows:
        lines.append(f"  {label:<{width}} {_f(c['g_coefficient']):>10} {_f(c['phi']):>7}")
    for facet, needed in d["wrappers_needed"].items():
        lines.append(f"  {d['facets'][facet]}s needed for Eρ² {TARGET:.2f}: " + _needed_words(needed, item))
    ratio = d["ratio_model_wrapper_to_model_item"]
    lines.append(f"  σ²(model × wrapper) / σ²(model × {item}): " + ("n/a (no model × item variance)" if ratio is None
                                                                   else fixed(ratio)))
    h = d["hypothetical"]
    if h:
        lines.append(f"  under a hypothesised model variance {fixed(h['object_variance'])} (object_variance: a given value "
                     f"or the spread of published per-model scores): single-wrapper Eρ² "
                     f"{_f(h['single_wrapper']['g_coefficient'])}, Φ {_f(h['single_wrapper']['phi'])}")
        for facet, needed in h["wrappers_needed"].items():
            lines.append(f"    {d['facets'][facet]}s needed for Eρ² {TARGET:.2f}: " + _needed_words(needed, item))
    return lines


def _needed_words(needed: dict, item: str) -> str:
    parts = []
    for key, words in (("at_one_item_sample", f"at 1 {item}"), ("at_observed_items", f"at the observed {item}s")):
        if key in needed:
            n = needed[key]
            parts.append(f"{words}: " + (f"{n['n']}" if n["n"] is not None else
                                         f"never (asymptote {_f(n['asymptote'])})"))
    return "; ".join(parts)


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"
