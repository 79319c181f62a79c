"""The forced-choice numbers, as pure functions over a table of classified traces, all together per model.

Input: a pyarrow table with columns label, invocation_id, pair_id, word_a, word_b, envelope, ordering,
sample, class and error, one row per cell (``cell_table.latest_rows`` picks that row from a table of
attempts). Every statistic is per model label and invocation: the single-model functions refuse a table that
mixes several (split it with ``cell_table.by_model``), and ``summarize`` runs them all per group. Rows with
an error are never in a denominator; each result counts them in ``n_errors``.

The numbers are easy to confuse, so each says what it is and is not, in the module that holds it:

- ``commit.per_cell_commit_rate``: share of answered *cells* with a definite pick (A or B).
- ``commit.pair_commit``: share of *pairs* committed to one word, under a named rule (``unanimity`` or
  ``per_envelope_majority``); the split reads "word_a / word_b / unclear", incomplete pairs apart.
- ``sharpness.sharpness``: per pair, how one-sided its definite picks are, whether or not the pair is
  committed.
- ``position_bias.position_bias``: how much more often word_a is picked when named first than when named
  second.
- ``fingerprint.fingerprint`` / ``fingerprint.compare_fingerprints`` / ``fingerprint.intransitive_cycles``:
  the committed words per pair, their agreement across models or reruns, and the 3-cycles among them.

Input a user can fix (an unclassified table, mixed models, duplicate cells, an unknown rule) raises
AnalysisError, which is also a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells, JSONRecord, by_model
from mirrorscan.instruments.forced_choice.commit import CommitRate, PairCommit, pair_commit, per_cell_commit_rate
from mirrorscan.instruments.forced_choice.fingerprint import Fingerprint, fingerprint, intransitive_cycles
from mirrorscan.instruments.forced_choice.position_bias import PositionBias, position_bias
from mirrorscan.instruments.forced_choice.sharpness import Sharpness, sharpness


@dataclass(frozen=True)
class ModelSummary(JSONRecord):
    """All forced-choice numbers of one model label in one invocation."""

    label: str
    invocation_id: str
    commit_rate: CommitRate
    pair_commit_unanimity: PairCommit
    pair_commit_per_envelope_majority: PairCommit
    sharpness: Sharpness
    position_bias: PositionBias
    fingerprint: Fingerprint
    """Under rule unanimity."""
    cycles: tuple
    """Intransitive 3-cycles of the unanimity fingerprint."""


def summarize(traces: pa.Table, expected: ExpectedCells) -> tuple[ModelSummary, ...]:
    """Every number, per (label, invocation_id), from a table of one row per cell (see latest_rows)."""
    out = []
    for (label, inv), table in by_model(traces).items():
        fp = fingerprint(table, expected, "unanimity")
        out.append(ModelSummary(label, inv, per_cell_commit_rate(table), pair_commit(table, expected, "unanimity"),
                                pair_commit(table, expected, "per_envelope_majority"), sharpness(table),
                                position_bias(table), fp, intransitive_cycles(fp)))
    return tuple(out)
