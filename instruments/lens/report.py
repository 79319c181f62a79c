"""The readable summary ``mirrorscan analyze`` prints for a lens invocation: every number of ``numbers`` in
words, with the direction of each one spelled out (which class is positive, what above or below chance means).
Plain text assembled from the analysis's own JSON; nothing is computed here."""

from __future__ import annotations

from mirrorscan.analysis.headline_intervals import format_intervals
from mirrorscan.grid.formatting import fixed, with_article
from mirrorscan.instruments.lens.design import design_lines


def direction_words(positive: str, other: str | None) -> list[str]:
    """What AUROC and the headline mean, in words, for this positive class."""
    other_item = f"{with_article(other)} item" if other else "an item of the other class"
    other = other or "the other class"
    return [f"AUROC, positive class = {positive}: the chance that {with_article(positive)} item projects further "
            f"along the direction (evaluation framing − deployment framing) than {other_item}. Above 0.5: {positive} "
            f"items lean toward the evaluation framings; below 0.5: {other} items do; 0.5: no separation.",
            "headline = max over the layers in the max of AUROC − 0.5 (−0.5 … 0.5; 0 = chance, negative = every "
            "layer below chance); |max| = the same in either direction. Floors, differences and slopes below are in "
            "these headline units."]


def _f(x, spec: str = ".3f") -> str:
    return "n/a" if x is None or x != x else format(x, spec)


def model_lines(models: dict) -> list[str]:
    """Per model and variant: the headline over wrappers, the nulls and floors, the best layer's stability and
    the cosines, as four small tables."""
    lines = [f"{'model/variant':<30} {'median':>7} {'sd':>6} {'min':>6} {'max':>6} {'|max|':>6} {'depth':>6}   "
             "(headline over wrappers; depth = best layer / blocks, median)"]
    for key, m in models.items():
        h = m["headline"]
        lines.append(f"{key:<30} {_f(h['median']):>7} {_f(h['sd']):>6} {_f(h['min']):>6} {_f(h['max']):>6} "
                     f"{_f(m['abs_headline']['median']):>6} {_f(m['best_relative_depth']['median'], '.2f'):>6}")
    lines += ["nulls: label floor = the scoring-label permutation null's mean of the max over layers (what picking "
              "the best layer reaches with labels that carry nothing); z = (headline − floor) / null sd; swap = the mean "
              "of the contrastive null (each task text's framings swapped at random) of the mean over wrappers, with "
              "its z and two-sided p (2 × the smaller tail); random = "
              "max over layers of random directions (median and 95th percentile); p≤.05 = wrappers whose headline "
              "clears the label null at p ≤ 0.05",
              f"{'model/variant':<30} {'floor':>6} {'h−floor':>7} {'z':>6} {'p≤.05':>6} {'swap':>6} {'swap z':>7} "
              f"{'p 2-sided':>9} {'random':>6} {'p95':>6}"]
    for key, m in models.items():
        fl, sw, rd = m.get("layer_selection_floor"), m.get("contrastive_null"), m["content_free"]["random_direction"]
        above = m.get("wrappers_above_floor_p05")
        above = "n/a" if above is None else f"{above}/{m['headline']['n']}"
        lines.append(f"{key:<30} {_f(fl and fl['floor_median']):>6} "
                     f"{_f(fl and fl['headline_minus_floor']['median']):>7} "
                     f"{_f(fl and fl['z_against_floor'] and fl['z_against_floor']['median'], '.2f'):>6} "
                     f"{above:>6} "
                     f"{_f(sw and sw['floor']):>6} {_f(sw and sw['z'], '.2f'):>7} {_p(sw and sw['p_two_sided']):>9} "
                     f"{_f(rd and rd['median']):>6} {_f(rd and rd['p95']):>6}")
    if any(m.get("argmax_bootstrap") for m in models.values()):
        lines.append("best-layer stability (items resampled within class): share of the layer stack the best layer "
                     "moves across, over wrappers; robust when the median is below 10% of the stack")
        lines.append(f"{'model/variant':<30} {'median':>7} {'max':>6} {'distinct layers':>16}  verdict")
        for key, m in models.items():
            a = m.get("argmax_bootstrap")
            if not a:
                continue
            verdict = ("n/a: one layer enters the max" if a["robust"] is None else
                       ("robust" if a["robust"] else "not robust")
                       + f" ({a['wrappers_below_threshold']}/{m['headline']['n']} wrappers below 10%; {a['draws']} draws)")
            lines.append(f"{key:<30} {_pct(a['median_share']):>7} {_pct(a['max_share']):>6} "
                         f"{a['distinct_range'][0]:>7} to {a['distinct_range'][1]:<5}  {verdict}")
    lines.append("cosines of directions (1 = the same direction, 0 = unrelated): within a wrapper from disjoint "
                 "halves of the task texts; across wrappers (mean over pairs, at the model's median best layer); "
                 "one task text against the full set (mean)")
    lines.append(f"{'model/variant':<30} {'halves':>7} {'across':>7} {'layer':>6} {'one item':>9}")
    for key, m in models.items():
        c = m["cosines"]
        lines.append(f"{key:<30} {_f(c['within_wrapper_halves'], '.4f'):>7} {_f(c['across_wrappers'], '.4f'):>7} "
                     f"{c['across_wrappers_layer']:>6} {_f(c['one_item_recovery'], '.4f'):>9}")
    return lines


def interval_lines(intervals: dict) -> list[str]:
    """The headline and headline − floor per model with intervals over framings and scoring items, and every
    pair of models' paired difference (``intervals``), after a line saying what the estimate is."""
    if not intervals.get("headlines"):
        return []
    return ["headline intervals: the estimate is the mean over wrappers of the headline (the table above gives the "
            "median); each scoring item enters as its influence value on the wrapper's AUROC at the wrapper's best "
            "layer, that layer taken as given; the floor (mean over wrappers of the label floor) is subtracted as a "
            "constant", format_intervals(intervals, 28)]


def _p(x) -> str:
    """A p value fixed-point (``grid.formatting.fixed``: 0.00498, never 5e-05); n/a when absent."""
    return "n/a" if x is None or x != x else fixed(x)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def gstudy_lines(gstudies: dict) -> list[str]:
    """Every study: components and shares, the single-wrapper and observed designs, asymptotes, wrappers
    needed, σ²mw/σ²mi, the hypothesised-variance figures, and where its scores are stored."""
    lines = ["G-studies: the model is the object of measurement. Eρ² says how well a design ranks the models "
             "(relative), Φ how well it fixes their scores (absolute); both 0 … 1, 0.80 the conventional target. "
             "The single-wrapper design is what one probe paper (one wrapper, one item set) measures."] if gstudies else []
    for name, g in gstudies.items():
        if "missing" in g:
            lines.append(f"G-study {name!r}: none ({g['missing']})")
            continue
        if g.get("design_numbers") is None:
            lines.append(f"G-study {name!r} ({g['design']}): every score is the same, no variance to divide")
            continue
        score = g["scores_table"]["score"]
        layer = g.get("layer")
        if isinstance(layer, dict):
            score += "; layer " + ", ".join(f"{k} {v}" for k, v in sorted(layer.items()))
        lines += design_lines(name, g, score)
        if g.get("items_left_out"):
            lines.append(f"  {g['items_left_out']} scoring item(s) left out: some model has no vector for them "
                         "(failed rows), and a crossed design needs every model on every item")
        lines.append(f"  scores: {g['scores_table']['table']}, rows where {g['scores_table']['rows']}")
    return lines


def claim_lines(concord: dict, claims: dict, n_wrappers: int) -> list[str]:
    """Kendall's W, the model comparisons and scaling (raw and floor-corrected)."""
    lines = []
    for variant, c in concord.items():
        if "missing" in c:
            lines.append(f"Kendall's W ({variant}): none ({c['missing']})")
            continue
        lines.append(f"Kendall's W of the model ranking across wrappers ({variant}): {c['w']:.3f} (0 = no agreement, "
                     f"1 = every wrapper ranks the models alike; permutation p = {fixed(c['p_value'])})")
    for variant, c in claims.items():
        for comp in c["comparisons"]:
            if comp["p_value"] is not None:
                lines.append(f"{comp['a']} − {comp['b']} ({variant}): {comp['mean_difference']:+.3f} mean over wrappers "
                             f"(positive: {comp['a']} higher), wrapper-permutation p = {fixed(comp['p_value'])}, interval "
                             f"[{comp['interval'][0]:+.3f}, {comp['interval'][1]:+.3f}]")
            if comp.get("paired"):
                d = comp["paired"]
                lines.append(f"{comp['a']} − {comp['b']} ({variant}) paired over framings and items: "
                             f"{d['estimate']:+.3f} [{d['interval'][0]:+.3f}, {d['interval'][1]:+.3f}], "
                             f"p = {fixed(d['p_value'])}, Holm p = {fixed(d['p_holm'])} over the pairs: {d['verdict']}")
        sc = c["scaling"]
        if "missing" not in sc:
            spread = sc["by_wrapper"]["pearson"]
            line = (f"scaling ({variant}): slope {sc['slope_per_decade']:+.3f} headline units per decade of parameters"
                    + (f" [{sc['slope_interval'][0]:+.3f}, {sc['slope_interval'][1]:+.3f}]" if "slope_interval" in sc else "")
                    + f"; Pearson r > 0 in {spread['n_positive']} of {n_wrappers} wrappers; r of the wrapper-mean "
                    f"headline with log10(parameters) {_f(sc.get('correlation_raw'), '+.3f')}")
            if "correlation_floor_corrected" in sc:
                fc = sc["by_wrapper_floor_corrected"]["pearson"]
                line += (f", floor-corrected {_f(sc['correlation_floor_corrected'], '+.3f')} (r > 0 in "
                         f"{fc['n_positive']} of {n_wrappers} wrappers)")
            lines.append(line)
    return lines
