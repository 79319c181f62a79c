"""Two invocations (or two model labels of one) compared as their instrument compares them
(``Instrument.compare``), for ``mirrorscan compare``: both sides must be of one instrument that offers a
comparison. When they are one invocation and two of its labels, the comparison is followed by the two models'
paired differences from the invocation's analysis (its headline intervals): the stored analysis of the same
code and inputs where there is one, else one computed here and not written."""

from __future__ import annotations

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Analysis, resolve


def compare(a: str, b: str, *, label_a: str | None = None, label_b: str | None = None, rule: str | None = None,
            store: str | None = None, catalog_dsn: str | None = None) -> Analysis:
    """The instrument's comparison of two (invocation, label) sides; for two labels of one invocation followed
    by their paired differences (see the module docstring). ``a``, ``b``: each an invocation id or an experiment
    (its newest invocation)."""
    from mirrorscan.results.invocations import load

    invs = [load(target, store=store, dsn=catalog_dsn) for target in (a, b)]
    sides = [(inv.traces, inv.settings) for inv in invs]
    names = {resolve(s.instrument).name for _, s in sides}
    if len(names) != 1:
        raise ConfigError("", "A, B", f"are of different instruments ({', '.join(sorted(names))})",
                          "compare two invocations of one instrument")
    instrument = resolve(sides[0][1].instrument)
    if not instrument.compares:
        raise ConfigError("", "A, B", f"instrument {instrument.name!r} offers no comparison", "use mirrorscan analyze")
    result = instrument.compare(sides[0], sides[1], label_a=label_a, label_b=label_b, rule=rule)
    if invs[0].invocation_id != invs[1].invocation_id or not label_a or not label_b or label_a == label_b:
        return result
    return with_pair_differences(result, invs[0], label_a, label_b)


def with_pair_differences(result: Analysis, inv, label_a: str, label_b: str) -> Analysis:
    """``result`` followed by the paired differences ``label_a`` − ``label_b`` from the analysis of ``inv`` (its
    stored analysis of the same code and inputs, else one computed now); unchanged when that analysis carries no
    intervals. The JSON gains ``paired_differences`` (``results.interval_text.pair_differences``)."""
    from dataclasses import replace

    from mirrorscan.results.analyses import analyze, read_analysis, reusable
    from mirrorscan.results.interval_text import format_pair, pair_differences
    from mirrorscan.results.report import intervals_of

    found = reusable(inv)
    intervals = intervals_of(read_analysis(inv, found) if found is not None else analyze(inv))
    if intervals is None:
        return result
    pairs = pair_differences(intervals, label_a, label_b)
    view = result.json_view if result.json_view is not None else result.numbers
    return replace(result, text=f"{result.text}\n{format_pair(intervals, label_a, label_b)}",
                   json_view={**view, "paired_differences": pairs} if isinstance(view, dict) else view)
