"""The open_scan headline numbers defined, each with the ``mirrorscan sql`` query that computes it again.

A cell's value is that of its newest successful row (``numbers.latest_rows``: a cell whose rows all failed
has none). Answers are the ``answer`` envelope's rows; the cold self-report is one per probe and the post-hoc
one per answer (same sample); ratings are null (not measured) when the reply held no integer on the scale.
"""

from __future__ import annotations

from mirrorscan.grid.headline import HeadlineSource, sql_text
from mirrorscan.grid.settings import Settings

LATEST = """latest AS (
  SELECT label, series, probe_id, sample, any_value(envelope) AS envelope, any_value(query_id) AS query_id,
         any_value(query_hash) AS query_hash, arg_max(response, created_at) AS response,
         arg_max(rating, created_at) AS rating
  FROM traces_open_scan WHERE invocation_id = {inv} AND error IS NULL
  GROUP BY label, series, probe_id, sample),
asked AS (
  SELECT DISTINCT label, series, query_id, query_hash, sample FROM traces_open_scan
  WHERE invocation_id = {inv} AND envelope = 'answer')"""
"""Each cell's newest successful row, and every answer cell asked (answered or not)."""


def _with(invocation_id: str) -> str:
    return "WITH " + LATEST.format(inv=sql_text(invocation_id))


def answers_sql(invocation_id: str) -> str:
    """Per label, answer cells with a successful row."""
    return (f"{_with(invocation_id)}\n"
            "SELECT label, count(*) AS value FROM latest WHERE envelope = 'answer' GROUP BY label ORDER BY label")


def answer_chars_sql(invocation_id: str) -> str:
    """Per label, the mean length of the answers in characters."""
    return (f"{_with(invocation_id)}\n"
            "SELECT label, avg(length(response)) AS value FROM latest WHERE envelope = 'answer' "
            "GROUP BY label ORDER BY label")


def cold_sql(invocation_id: str) -> str:
    """Per label, the mean measured cold rating over the probes it was asked."""
    return (f"{_with(invocation_id)},\n"
            "probes AS (SELECT DISTINCT label, series, query_id, query_hash FROM asked)\n"
            "SELECT p.label, avg(c.rating) AS value FROM probes p LEFT JOIN latest c ON c.envelope = 'cold' "
            "AND c.label = p.label AND c.series = p.series AND c.query_id = p.query_id AND c.query_hash = p.query_hash\n"
            "GROUP BY p.label ORDER BY p.label")


def posthoc_sql(invocation_id: str) -> str:
    """Per label, the mean measured post-hoc rating over its answer cells."""
    return (f"{_with(invocation_id)}\n"
            "SELECT a.label, avg(h.rating) AS value FROM asked a LEFT JOIN latest h ON h.envelope = 'posthoc' "
            "AND h.label = a.label AND h.series = a.series AND h.query_id = a.query_id AND h.query_hash = a.query_hash "
            "AND h.sample = a.sample\n"
            "GROUP BY a.label ORDER BY a.label")


def suggested_sql(invocation_id: str) -> str:
    """The query a scan's summary suggests, short enough to read on one line: answers beside their probe's cold
    rating and their own post-hoc rating (null: not measured). Within one invocation a cell has at most one
    successful row (a cell is asked again only while all its rows are errors), so no newest-row step is needed;
    a probe is its text (``query_hash``), as an import may hold two texts of one id."""
    return (f"SELECT label, query_id, sample, max(rating) FILTER (envelope = 'cold') OVER (PARTITION BY label, "
            f"query_hash) AS cold_rating, max(rating) FILTER (envelope = 'posthoc') OVER (PARTITION BY label, "
            f"query_hash, sample) AS posthoc_rating, response FROM traces_open_scan WHERE invocation_id = "
            f"{sql_text(invocation_id)} AND error IS NULL QUALIFY envelope = 'answer' ORDER BY ALL LIMIT 10")


def headline_sources(analysis, settings: Settings, invocation_id: str) -> tuple[HeadlineSource, ...]:
    """The sources of ``OpenScan.headline``'s numbers."""
    return (
        HeadlineSource("answers", "answer cells (probe × sample) with a successful answer stored in this invocation",
                       answers_sql(invocation_id)),
        HeadlineSource("answer_chars_mean", "mean length of those answers, in characters (Unicode code points)",
                       answer_chars_sql(invocation_id)),
        HeadlineSource("cold_mean", "mean of the measured cold self-reports (one per probe, asked before any "
                       "answer), in the template's rating points; probes whose reply held no rating are not in it",
                       cold_sql(invocation_id)),
        HeadlineSource("posthoc_mean", "mean of the measured post-hoc self-reports (one per answer, asked with the "
                       "answer in view), in rating points; replies without a rating are not in it",
                       posthoc_sql(invocation_id)),
    )
