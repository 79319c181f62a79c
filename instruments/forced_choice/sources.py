"""The forced-choice headline numbers defined, each with the ``mirrorscan sql`` query that computes it again.

Every query reads the classes stored at scan time in ``traces_forced_choice``, one row per cell (a cell's
successful row; of several, the lowest attempt, as ``numbers.latest_rows`` picks it), and returns one row
per model label (``label``, ``value``). Error rows are in no denominator, as in ``numbers``.
"""

from __future__ import annotations

from typing import Any

from mirrorscan.grid.headline import HeadlineSource, sql_list, sql_text
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.forced_choice.spec import from_frozen

CELLS = """cells AS (
  SELECT label, pair_id, envelope, ordering, sample, arg_min(class, attempt) AS class
  FROM traces_forced_choice
  WHERE invocation_id = {inv} AND error IS NULL{where}
  GROUP BY label, pair_id, envelope, ordering, sample)"""
"""One row per answered cell, with its stored class."""


def _cells(invocation_id: str, where: str = "") -> str:
    return CELLS.format(inv=sql_text(invocation_id), where=where)


def per_cell_commit_rate_sql(invocation_id: str) -> str:
    """Answered cells classed A or B ÷ answered cells, per label."""
    return (f"WITH {_cells(invocation_id)}\n"
            "SELECT label, avg(CASE WHEN class IN ('A', 'B') THEN 1.0 ELSE 0.0 END) AS value\n"
            "FROM cells GROUP BY label ORDER BY label")


def pair_commit_unanimity_sql(invocation_id: str, envelopes, orderings, samples: int) -> str:
    """The "word_a / word_b / unclear" split of complete pairs under unanimity, per label: a pair is complete
    when every expected cell (envelope × ordering × sample of the grid) was answered, and committed when all
    of them carry the same class A or B."""
    expected = len(envelopes) * len(orderings) * samples
    where = (f"\n    AND envelope IN {sql_list(envelopes)} AND ordering IN {sql_list(orderings)} "
             f"AND sample < {int(samples)}")
    return (f"WITH {_cells(invocation_id, where)},\n"
            "pairs AS (\n"
            "  SELECT label, pair_id, count(*) AS n_cells, count(DISTINCT class) AS n_classes, min(class) AS class\n"
            f"  FROM cells GROUP BY label, pair_id HAVING count(*) = {expected}),\n"
            "labels AS (SELECT DISTINCT label FROM traces_forced_choice "
            f"WHERE invocation_id = {sql_text(invocation_id)})\n"
            "SELECT l.label, format('{} / {} / {}',\n"
            "  count(p.pair_id) FILTER (WHERE p.n_classes = 1 AND p.class = 'A'),\n"
            "  count(p.pair_id) FILTER (WHERE p.n_classes = 1 AND p.class = 'B'),\n"
            "  count(p.pair_id) FILTER (WHERE NOT (p.n_classes = 1 AND p.class IN ('A', 'B')))) AS value\n"
            "FROM labels l LEFT JOIN pairs p ON p.label = l.label GROUP BY l.label ORDER BY l.label")


def mean_sharpness_sql(invocation_id: str) -> str:
    """Per label, the mean over pairs with a definite pick of max(nA, nB) / (nA + nB)."""
    return (f"WITH {_cells(invocation_id)},\n"
            "pairs AS (\n"
            "  SELECT label, pair_id, count(*) FILTER (WHERE class = 'A') AS n_a, count(*) FILTER (WHERE class = 'B') AS n_b\n"
            "  FROM cells GROUP BY label, pair_id)\n"
            "SELECT label, avg(greatest(n_a, n_b)::DOUBLE / (n_a + n_b)) FILTER (WHERE n_a + n_b > 0) AS value\n"
            "FROM pairs GROUP BY label ORDER BY label")


def position_bias_sql(invocation_id: str) -> str:
    """Per label, 100 × (share of answered AB cells classed A − share of answered BA cells classed A)."""
    share = "avg(CASE WHEN class = 'A' THEN 1.0 ELSE 0.0 END) FILTER (WHERE ordering = '{}')"
    return (f"WITH {_cells(invocation_id)}\n"
            f"SELECT label, 100 * ({share.format('AB')} - {share.format('BA')}) AS value\n"
            "FROM cells GROUP BY label ORDER BY label")


def suggested_sql(invocation_id: str) -> str:
    """The query a scan's summary suggests: the first answered cells with the class stored for each (A, B,
    UNCLEAR or REF) and the answer it was read from."""
    return ("SELECT label, pair_id, envelope, ordering, sample, class, response FROM traces_forced_choice "
            f"WHERE invocation_id = {sql_text(invocation_id)} AND error IS NULL "
            "ORDER BY label, pair_id, envelope, ordering, sample LIMIT 10")


def headline_sources(analysis, settings: Settings, invocation_id: str) -> tuple[HeadlineSource, ...]:
    """The four headline numbers of ``ForcedChoice.headline``, defined, with their queries."""
    spec = from_frozen(settings.instrument_settings)
    reclassified = bool(analysis.numbers.get("reclassified"))
    note = ("the analysis re-derived the classes from the stored text (--reannotate, or rows stored without "
            "one); the query counts the classes stored at scan time" if reclassified else "")
    common: dict[str, Any] = {"exact": not reclassified, "note": note}
    return (
        HeadlineSource("per_cell_commit_rate",
                       "share of answered cells (not pairs) classed A or B: (nA + nB) / answered cells (the query "
                       "gives 0–1, shown as a percentage); UNCLEAR and REF count in the denominator, error cells in "
                       "none",
                       per_cell_commit_rate_sql(invocation_id), **common),
        HeadlineSource("pair_commit_unanimity",
                       "pairs (not cells) committed under the unanimity rule, as the split 'word_a / word_b / "
                       "unclear': a pair commits when every expected cell (envelope × ordering × sample) picks "
                       "the same word; pairs with an expected cell missing or errored are incomplete and in no "
                       "count",
                       pair_commit_unanimity_sql(invocation_id, list(spec.envelope_ids), list(spec.orderings),
                                                 settings.samples), **common),
        HeadlineSource("mean_sharpness",
                       "per pair max(nA, nB) / (nA + nB) over its definite picks (0.5–1), averaged over the pairs "
                       "with at least one; committed or not, so not pair-commit; null when no pair has a pick",
                       mean_sharpness_sql(invocation_id), **common),
        HeadlineSource("position_bias_pp",
                       "100 × (share of AB cells classed A − share of BA cells classed A), percentage points over "
                       "answered cells; positive favours the word named first; not a preference",
                       position_bias_sql(invocation_id), **common),
    )
