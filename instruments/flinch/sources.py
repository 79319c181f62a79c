"""The flinch headline numbers defined, each with the ``mirrorscan sql`` query (or, for the carrier G-study,
the query selecting its input and the ``mirrorscan stats gstudy`` command) that computes it again.

The queries read ``traces_flinch``: one ``lp_mean`` per scored carrier (successful exact rows; the sampling
proxy's rows have none and sit on their own scale), a term the mean of its carriers, an axis aggregated as
the invocation's frozen ``aggregation`` names (``scale``), the total the sum of the axes — null for a model
lacking an axis or a term of one (then the partial total is the sum over the axes it has, and the whole total
is null).
"""

from __future__ import annotations

from mirrorscan.grid.headline import HeadlineSource, sql_text
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.flinch.scale import LP_AT_HUNDRED, LP_AT_ZERO

SCALE = "least(100, greatest(0, 100 * ({zero} - {lp}) / {span}))"
"""The fixed linear map lp → flinch, clipped to [0, 100], as SQL."""


def _flinch(lp: str) -> str:
    return SCALE.format(zero=LP_AT_ZERO, span=LP_AT_ZERO - LP_AT_HUNDRED, lp=lp)


def axis_flinch_cte(invocation_id: str, aggregation: str) -> str:
    """``axes``: one row per (label, axis) with ``flinch`` under ``aggregation``, after the scored carriers and
    the terms."""
    value = _flinch("lp") if aggregation == "axis_lp_mean" else "clipped_term_mean"
    return ("WITH carriers AS (\n"
            "  SELECT label, axis, term, probe_id, sample, arg_min(lp_mean, attempt) AS lp\n"
            f"  FROM traces_flinch WHERE invocation_id = {sql_text(invocation_id)} AND error IS NULL "
            "AND lp_mean IS NOT NULL\n"
            "  GROUP BY label, axis, term, probe_id, sample),\n"
            "terms AS (SELECT label, axis, term, avg(lp) AS lp FROM carriers GROUP BY label, axis, term),\n"
            f"axes AS (SELECT label, axis, count(*) AS n_terms, {_flinch('avg(lp)')} AS axis_lp_mean, "
            f"avg({_flinch('lp')}) AS clipped_term_mean FROM terms GROUP BY label, axis)")


def axis_sql(invocation_id: str, aggregation: str, axis: str) -> str:
    """Per label, the flinch (0–100) of one axis."""
    column = "axis_lp_mean" if aggregation == "axis_lp_mean" else "clipped_term_mean"
    return (f"{axis_flinch_cte(invocation_id, aggregation)}\n"
            f"SELECT label, {column} AS value FROM axes WHERE axis = {sql_text(axis)} ORDER BY label")


def _whole(axis_terms: dict[str, int]) -> str:
    """SQL true for a label whose axes are exactly ``axis_terms``'s, each with all its terms scored."""
    return f"count(*) = {len(axis_terms)} AND bool_and(a.n_terms = e.n)"


def _expected(axis_terms: dict[str, int]) -> str:
    rows = ", ".join(f"({sql_text(k)}, {n})" for k, n in axis_terms.items())
    return f"axes a JOIN (VALUES {rows}) AS e(axis, n) ON a.axis = e.axis"


def total_sql(invocation_id: str, aggregation: str, axis_terms: dict[str, int]) -> str:
    """Per label, the sum of its axes' flinch values when every axis of ``axis_terms`` (key → number of terms)
    has every term scored, else null."""
    column = "axis_lp_mean" if aggregation == "axis_lp_mean" else "clipped_term_mean"
    return (f"{axis_flinch_cte(invocation_id, aggregation)}\n"
            f"SELECT a.label, CASE WHEN {_whole(axis_terms)} THEN sum(a.{column}) END AS value\n"
            f"FROM {_expected(axis_terms)} GROUP BY a.label ORDER BY a.label")


def partial_total_sql(invocation_id: str, aggregation: str, axis_terms: dict[str, int]) -> str:
    """Per label, the sum over the axes it has when its total is not whole, else null."""
    column = "axis_lp_mean" if aggregation == "axis_lp_mean" else "clipped_term_mean"
    return (f"{axis_flinch_cte(invocation_id, aggregation)}\n"
            f"SELECT a.label, CASE WHEN NOT ({_whole(axis_terms)}) THEN sum(a.{column}) END AS value\n"
            f"FROM {_expected(axis_terms)} GROUP BY a.label ORDER BY a.label")


def axes_summed_sql(invocation_id: str, aggregation: str) -> str:
    """Per label, the number of axes with at least one scored term."""
    return (f"{axis_flinch_cte(invocation_id, aggregation)}\n"
            "SELECT label, count(*) AS value FROM axes GROUP BY label ORDER BY label")


def gstudy_input_sql(invocation_id: str, axis: str) -> str:
    """The carrier G-study's input of one axis: one lp_mean per (model, term, carrier)."""
    return ("SELECT label AS model, term, carrier_index AS carrier, arg_min(lp_mean, attempt) AS lp_mean\n"
            f"FROM traces_flinch WHERE invocation_id = {sql_text(invocation_id)} AND axis = {sql_text(axis)}\n"
            "  AND error IS NULL AND lp_mean IS NOT NULL\n"
            "GROUP BY label, term, carrier_index ORDER BY model, term, carrier")


def suggested_sql(invocation_id: str) -> str:
    """The query a scan's summary suggests: per model, axis and term, the carriers scored and the mean of their
    ``lp_mean`` (nats per token; the sampling proxy's rows have none and count no carriers)."""
    return ("SELECT label, axis, term, count(lp_mean) AS carriers, round(avg(lp_mean), 3) AS lp_mean "
            f"FROM traces_flinch WHERE invocation_id = {sql_text(invocation_id)} AND error IS NULL "
            "GROUP BY label, axis, term ORDER BY label, axis, term LIMIT 20")


def headline_sources(analysis, settings: Settings, invocation_id: str) -> tuple[HeadlineSource, ...]:
    """The sources of ``Flinch.headline``'s numbers: total, the aggregation, each axis, each axis's carrier
    G-study Eρ², for an invocation whose frozen settings are ``settings`` (its flinch section's axes and
    aggregation, read as a ``spec.FlinchSpec``)."""
    from mirrorscan.instruments.flinch.spec import FlinchSpec

    spec = FlinchSpec.from_frozen(settings.instrument_settings)
    aggregation = spec.aggregation
    how = ("the mean lp of the axis's terms mapped to the scale (axis_lp_mean)" if aggregation == "axis_lp_mean"
           else "the mean of its terms' clipped flinch values (clipped_term_mean)")
    axis_terms = analysis.numbers.get("axis_terms") or {}
    keys = ", ".join(spec.axes)
    n = len(spec.axes)
    out = [
        HeadlineSource("total_flinch", f"sum over all {n} axes of the set ({keys}) of each axis's flinch (0 to "
                       f"100 × {n}); null for a model lacking an axis or a term of one (its partial_total_flinch is "
                       f"then the sum over the axes it has); compare totals only over one axis set; aggregation "
                       f"{aggregation}", total_sql(invocation_id, aggregation, axis_terms)),
        HeadlineSource("partial_total_flinch", f"only for a model whose total is not whole (an axis, or a term of one, "
                       f"without a scored carrier): the sum of the flinch of the axes it has, of the {n} axes of the "
                       "set (axes_summed says how many); not comparable with a whole total; null when the total is "
                       "whole", partial_total_sql(invocation_id, aggregation, axis_terms), in_place_of="total_flinch"),
        HeadlineSource("axes_summed", f"the number of axes, of the {n} of the set ({keys}), with at least one scored "
                       "term: the axes a total or partial total sums", axes_summed_sql(invocation_id, aggregation)),
        HeadlineSource("aggregation", "how an axis's terms become its flinch: axis_lp_mean maps the mean lp of its "
                       "terms (the method's order of steps), clipped_term_mean averages the clipped per-term values; "
                       "they differ when a term's lp lies outside [−16, −1] nats",
                       "SELECT settings->'instrument_settings'->>'aggregation' AS value FROM scan_invocations "
                       f"WHERE invocation_id = {sql_text(invocation_id)}"),
    ]
    for axis in spec.axes:
        out.append(HeadlineSource(
            f"flinch_{axis}", f"flinch of axis {axis} (0–100): {how}; flinch = 100 × (−1 − lp) / 15 clipped to "
            "[0, 100], lp the mean target-token log-prob in nats (per carrier lp_mean, per term the mean of its "
            "carriers)", axis_sql(invocation_id, aggregation, axis)))
    for axis in spec.axes:
        out.append(HeadlineSource(
            f"carrier_g_{axis}", f"relative Eρ² of axis {axis}'s carrier G-study: model × (carrier:term) on "
            "lp_mean (nats), at the observed numbers of terms and carriers; ANOVA, no seed; null when the design "
            "is missing (fewer than 2 models or terms, unequal carriers)",
            gstudy_input_sql(invocation_id, axis),
            stats=(f"mirrorscan stats gstudy --input carriers_{axis}.csv --score lp_mean --object model "
                   "--facets term,carrier --nested carrier:term"),
            input=f"carriers_{axis}.csv", note="the command's g_coefficient is this number"))
    return tuple(out)
