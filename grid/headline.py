"""How a headline number is defined and how to get it again: what ``Instrument.headline_sources`` returns.

A report puts each headline number (``Instrument.headline``) beside its definition and a way to compute it
again from the stored rows alone, without mirrorscan's analysis code:

- a **number** has ``sql``: one ``mirrorscan sql`` query (DuckDB, over the ``traces_<instrument>`` and
  ``scan_invocations`` views) that returns the number itself, one row per model key in a ``label`` column
  and the number in ``value`` (a query without ``label`` returns one row that holds for every model);
- a **statistic** (G-study, null, bootstrap, Kendall's W) has ``sql`` selecting its *input* table and
  ``stats``, the ``mirrorscan stats …`` command line that computes it from that table, with its seed.
  The command reads the query's output as a CSV file named ``input``: the two run as
  ``mirrorscan sql --format csv "<sql>" > <input>`` then ``<stats>``.

``stats`` and ``note`` may name ``{analysis}``: the folder of the analysis the report was made from (a statistic
of an analysis table, e.g. lens's ``wrappers.parquet``), filled in by the report.

``exact`` says whether the query reproduces the reported value exactly (floating-point summation order
aside); when it is False, ``note`` says what differs (e.g. classes re-derived at analysis time).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadlineSource:
    """The definition of one headline number and how to get it again."""

    name: str
    """The number's key in ``Instrument.headline(analysis)[model]``."""
    definition: str
    """What the number is (and which of the similar numbers it is not), with its unit."""
    sql: str | None = None
    """A ``mirrorscan sql`` query: the number itself (columns ``label``, ``value``), or with ``stats`` the
    statistic's input table; None when the stored rows cannot give it through SQL."""
    stats: str | None = None
    """For a statistic: the ``mirrorscan stats …`` command line (its input is the query's CSV, ``input``)."""
    input: str | None = None
    """For a statistic: the CSV file name the command reads (``mirrorscan sql --format csv … > input``)."""
    exact: bool = True
    """Whether ``sql`` (with ``stats``) returns the reported value; otherwise ``note`` says what differs."""
    note: str = ""
    """What a reader must know to get the same value (or why it differs)."""
    in_place_of: str = ""
    """The headline number of the same model this one stands in for when that one is null (flinch's
    ``partial_total_flinch`` for ``total_flinch``): where that one has a value, this one's null is "not
    applicable", not a measurement that is missing."""


def sql_text(value: str) -> str:
    """``value`` as a SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(values) -> str:
    """Values as a SQL list of string literals: ``('a', 'b')``."""
    return "(" + ", ".join(sql_text(v) for v in values) + ")"
