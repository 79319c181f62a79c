"""Commitment of one model: per-cell commit rate (a share of cells) and pair-commit (a share of pairs).

- ``per_cell_commit_rate``: share of answered *cells* with a definite pick (A or B).
- ``pair_commit``: share of *pairs* committed to one word, under a named rule (``unanimity`` or
  ``per_envelope_majority``); the split reads "word_a / word_b / unclear", incomplete pairs apart.

Verdicts and words never share a field. A pair's verdict is one of VERDICTS (``word_a``, ``word_b``,
``unclear``, ``incomplete``) and the word it committed to, if any, sits apart in ``committed_word``: a pair
whose word is literally "unclear" or "incomplete" is read by its verdict, never by that spelling (``check_verdict``
holds every record to this).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.instruments.forced_choice.cell_table import Cell, ExpectedCells, JSONRecord, by_pair, model_cells

RULES = ("unanimity", "per_envelope_majority")
"""Pair-commit rules; every pair-commit output names the one it used."""
VERDICTS = ("word_a", "word_b", "unclear", "incomplete")
"""Pair verdicts: committed to word_a, committed to word_b, answered but not committed, cells missing.

A verdict names a side of the pair, never a word: the word a committed pair chose is ``committed_word``."""
COMMITTED = ("word_a", "word_b")
"""The verdicts of a committed pair."""


@dataclass(frozen=True)
class CommitRate(JSONRecord):
    """Per-cell commit rate: answered cells with an A or B pick ÷ all answered cells.

    A share of cells, not of pairs: a model at 0.9 here can commit no pair at all under unanimity.
    """

    label: str
    invocation_id: str
    n_answered: int
    """Cells without an error (the denominator): A + B + UNCLEAR + REF."""
    n_a: int
    n_b: int
    n_unclear: int
    n_ref: int
    n_errors: int
    """Cells whose (latest) attempt failed; in no denominator."""
    per_cell_commit_rate: float | None
    """(n_a + n_b) / n_answered; None with no answered cell."""


def per_cell_commit_rate(traces: pa.Table) -> CommitRate:
    """The per-cell commit rate of one model and invocation (see CommitRate)."""
    label, inv, cells = model_cells(traces)
    counts = Counter(c.cls for c in cells if c.error is None)
    answered = sum(counts.values())
    return CommitRate(label, inv, answered, counts["A"], counts["B"], counts["UNCLEAR"], counts["REF"],
                      sum(c.error is not None for c in cells),
                      (counts["A"] + counts["B"]) / answered if answered else None)


def check_verdict(pair_id, word_a, word_b, verdict, committed_word) -> None:
    """ValueError unless ``verdict`` is one of VERDICTS and ``committed_word`` is the word it names (None
    for unclear and incomplete): a word never stands in for a verdict, nor a verdict for a word."""
    if verdict not in VERDICTS:
        raise ValueError(f"pair {pair_id!r}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    named = word_a if verdict == "word_a" else word_b if verdict == "word_b" else None
    if committed_word != named or (verdict in COMMITTED and committed_word is None):
        raise ValueError(f"pair {pair_id!r}: verdict {verdict!r} does not go with committed word {committed_word!r}")


@dataclass(frozen=True)
class PairVerdict(JSONRecord):
    """One pair's verdict under a pair-commit rule, and the word it committed to (apart from the verdict)."""

    pair_id: str
    word_a: str | None
    """None only for an expected pair with no row at all (then incomplete)."""
    word_b: str | None
    verdict: str
    """One of VERDICTS: word_a, word_b (committed to that side), unclear or incomplete. Never a word."""
    committed_word: str | None
    """The word committed to (word_a's or word_b's text); None unless the verdict is word_a or word_b."""
    n_missing: int
    """Expected cells absent or errored (> 0 exactly when incomplete)."""

    def __post_init__(self):
        check_verdict(self.pair_id, self.word_a, self.word_b, self.verdict, self.committed_word)


@dataclass(frozen=True)
class PairCommit(JSONRecord):
    """Pair-commit under a named rule: the split of pairs into committed to word_a / word_b / unclear.

    A share of pairs, never of cells; incomplete pairs (an expected cell missing or errored) are counted
    apart and are in no share. Not sharpness: an unclear pair can be 0.9 sharp.
    """

    rule: str
    """unanimity or per_envelope_majority."""
    label: str
    invocation_id: str
    n_pairs: int
    """All pairs, incomplete included."""
    n_word_a: int
    n_word_b: int
    n_unclear: int
    n_incomplete: int
    n_errors: int
    """Error cells of the model (all envelopes), in no denominator."""
    pair_commit_rate: float | None
    """(n_word_a + n_word_b) / (n_pairs - n_incomplete); None when no pair is complete."""
    split: str
    """The method's "word_a / word_b / unclear" counts, e.g. "55 / 44 / 1"."""
    pairs: tuple


def _pair_verdict(pair_id: str, cells: list[Cell], expected: ExpectedCells, rule: str) -> PairVerdict:
    wanted = expected.keys()
    got = {(c.envelope, c.ordering, c.sample): c for c in cells if (c.envelope, c.ordering, c.sample) in wanted}
    if len(got) != sum((c.envelope, c.ordering, c.sample) in wanted for c in cells):
        raise AnalysisError("probe_id", f"pair {pair_id!r} has several rows for one cell",
                            "pass latest_rows(traces), one row per cell")
    word_a = cells[0].word_a if cells else None
    word_b = cells[0].word_b if cells else None
    ok = {k: c.cls for k, c in got.items() if c.error is None}
    n_missing = len(wanted) - len(ok)
    if n_missing:
        return PairVerdict(pair_id, word_a, word_b, "incomplete", None, n_missing)
    if rule == "unanimity":
        picks = set(ok.values())
        winner = picks.pop() if len(picks) == 1 and picks <= {"A", "B"} else None
    else:
        agree: Counter[str | None] = Counter()
        for env in expected.envelopes:
            picks = {cls for (e, _, _), cls in ok.items() if e == env}
            if len(picks) == 1 and picks <= {"A", "B"}:
                agree[picks.pop()] += 1
        winner = "A" if agree["A"] > agree["B"] else "B" if agree["B"] > agree["A"] else None
    if winner is None:
        return PairVerdict(pair_id, word_a, word_b, "unclear", None, 0)
    return PairVerdict(pair_id, word_a, word_b, "word_a" if winner == "A" else "word_b",
                       word_a if winner == "A" else word_b, 0)


def pair_commit(traces: pa.Table, expected: ExpectedCells, rule: str = "unanimity") -> PairCommit:
    """Pair-commit of one model and invocation under ``rule`` (see PairCommit).

    ``unanimity``: committed only if every expected cell of the pair (each envelope × ordering × sample)
    picks the same word. ``per_envelope_majority``: an envelope agrees on a word when all its expected
    cells (both orderings × samples) pick it; the pair commits to the word a strict majority of the
    agreeing envelopes pick; a tie, or no agreeing envelope, is unclear. Under both rules a pair with an
    expected cell missing or errored is incomplete.
    """
    if rule not in RULES:
        raise AnalysisError("rule", f"unknown pair-commit rule {rule!r}", f"use one of {', '.join(RULES)}")
    label, inv, cells = model_cells(traces)
    pairs = by_pair(cells)
    for pair_id in expected.pair_ids or ():
        pairs.setdefault(pair_id, [])
    verdicts = tuple(_pair_verdict(pid, pcells, expected, rule) for pid, pcells in sorted(pairs.items()))
    n = Counter(v.verdict for v in verdicts)
    complete = len(verdicts) - n["incomplete"]
    return PairCommit(rule, label, inv, len(verdicts), n["word_a"], n["word_b"], n["unclear"], n["incomplete"],
                      sum(c.error is not None for c in cells),
                      (n["word_a"] + n["word_b"]) / complete if complete else None,
                      f"{n['word_a']} / {n['word_b']} / {n['unclear']}", verdicts)
