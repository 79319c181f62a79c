"""Fingerprints: the committed words per pair of one model (pair-commit's verdicts), their agreement across
models or reruns (``compare_fingerprints``), and the intransitive 3-cycles among them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells, JSONRecord
from mirrorscan.instruments.forced_choice.commit import COMMITTED, check_verdict, pair_commit


@dataclass(frozen=True)
class FingerprintEntry(JSONRecord):
    """One pair of a fingerprint: its pair-commit verdict and, apart, the word it committed to.

    Replaces the former single ``value`` (the committed word, else 'unclear' / 'incomplete'), which read a
    pair committed to a word spelled "unclear" as the unclear verdict; in JSON an entry is now
    ``{pair_id, word_a, word_b, verdict, committed_word}``.
    """

    pair_id: str
    word_a: str | None
    """None only for an expected pair with no row at all (then incomplete)."""
    word_b: str | None
    verdict: str
    """One of VERDICTS: word_a, word_b, unclear or incomplete. Never a word."""
    committed_word: str | None
    """The word committed to; None unless the verdict is word_a or word_b."""

    def __post_init__(self):
        check_verdict(self.pair_id, self.word_a, self.word_b, self.verdict, self.committed_word)


@dataclass(frozen=True)
class Fingerprint(JSONRecord):
    """Per pair, the pair-commit verdict (and committed word) under a named pair-commit rule."""

    label: str
    invocation_id: str
    rule: str
    """The pair-commit rule the verdicts follow (unanimity or per_envelope_majority)."""
    entries: tuple
    """FingerprintEntry per pair, by pair_id."""

    def committed(self) -> dict[str, str]:
        """pair_id → committed word, for the pairs whose verdict is word_a or word_b."""
        return {e.pair_id: e.committed_word for e in self.entries if e.verdict in COMMITTED}


def fingerprint(traces: pa.Table, expected: ExpectedCells, rule: str = "unanimity") -> Fingerprint:
    """The fingerprint of one model and invocation under ``rule`` (pair-commit's verdict per pair)."""
    pc = pair_commit(traces, expected, rule)
    return Fingerprint(pc.label, pc.invocation_id, rule, tuple(
        FingerprintEntry(v.pair_id, v.word_a, v.word_b, v.verdict, v.committed_word) for v in pc.pairs))


@dataclass(frozen=True)
class FingerprintComparison(JSONRecord):
    """Two fingerprints side by side (models, effort tiers, reruns).

    The compared pairs are the union of both fingerprints' pairs; a pair one side lacks reads incomplete
    there. hamming counts the compared pairs whose verdicts differ (word_a, word_b, unclear, incomplete;
    under one probe set the same verdict is the same committed word). agreement is 1 − hamming / n_pairs:
    its denominator is *all* compared pairs, committed or not, so an unclear–unclear or
    incomplete–incomplete pair counts as agreeing. It is not a share of committed pairs, and it is undefined
    (None) when no pair is committed by either side (n_committed_either == 0), where it would only count
    shared non-commitment (two models that never commit would agree 1.0), and with no pair at all.
    violent_disagreement is a share of the pairs *both* committed, not of all pairs.
    """

    left: str
    """label@invocation_id of the first fingerprint."""
    right: str
    """label@invocation_id of the second fingerprint."""
    rule: str
    """The pair-commit rule of both fingerprints."""
    n_pairs: int
    """Compared pairs: the union of both sides' pairs (agreement's denominator)."""
    hamming: int
    """Compared pairs whose verdicts differ."""
    n_committed_either: int
    """Compared pairs committed (verdict word_a or word_b) by at least one side; agreement is None when 0."""
    agreement: float | None
    """(n_pairs − hamming) / n_pairs, over all compared pairs; None (undefined) when n_committed_either is
    0 (no pair committed by either side) or n_pairs is 0."""
    n_co_committed: int
    """Pairs committed by both."""
    n_violent: int
    """Pairs committed by both, to opposite words."""
    violent_disagreement: float | None
    """n_violent / n_co_committed; None (undefined) when no pair is committed by both."""


def compare_fingerprints(left: Fingerprint, right: Fingerprint) -> FingerprintComparison:
    """Hamming distance, agreement and violent disagreement of two fingerprints under the same rule (see
    FingerprintComparison for each denominator)."""
    if left.rule != right.rule:
        raise AnalysisError("rule", f"fingerprints use different rules ({left.rule} vs {right.rule})",
                            "compare fingerprints made under the same rule")
    lv = {e.pair_id: e for e in left.entries}
    rv = {e.pair_id: e for e in right.entries}
    for pid in lv.keys() & rv.keys():
        if (lv[pid].word_a, lv[pid].word_b) != (rv[pid].word_a, rv[pid].word_b) and None not in (
                lv[pid].word_a, rv[pid].word_a):
            raise AnalysisError("pair_id", f"pair {pid!r} has different words in the two fingerprints",
                                "compare runs of the same probe set")
    ids = sorted(lv.keys() | rv.keys())

    def verdict(side: dict, pid: str) -> tuple:
        return (side[pid].verdict, side[pid].committed_word) if pid in side else ("incomplete", None)

    hamming = sum(verdict(lv, p) != verdict(rv, p) for p in ids)
    lc, rc = left.committed(), right.committed()
    co = lc.keys() & rc.keys()
    either = len(lc.keys() | rc.keys())
    violent = sum(lc[p] != rc[p] for p in co)
    return FingerprintComparison(f"{left.label}@{left.invocation_id}", f"{right.label}@{right.invocation_id}",
                                 left.rule, len(ids), hamming, either,
                                 (len(ids) - hamming) / len(ids) if ids and either else None,
                                 len(co), violent, violent / len(co) if co else None)


@dataclass(frozen=True)
class Cycle(JSONRecord):
    """An intransitive 3-cycle among committed pairs: words[0] > words[1] > words[2] > words[0]."""

    words: tuple
    """Starting at the alphabetically first word."""
    pair_ids: tuple
    """The pairs of the three edges, in the same order (w0>w1, w1>w2, w2>w0)."""


def intransitive_cycles(fp: Fingerprint) -> tuple[Cycle, ...]:
    """Every 3-cycle (A>B, B>C, C>A) among the fingerprint's committed pairs (verdict word_a or word_b),
    sorted by words."""
    beats: dict = defaultdict(dict)
    for e in fp.entries:
        if e.verdict not in COMMITTED:
            continue
        winner, loser = (e.word_a, e.word_b) if e.verdict == "word_a" else (e.word_b, e.word_a)
        current = beats[winner].get(loser)
        beats[winner][loser] = e.pair_id if current is None else min(current, e.pair_id)
    found = set()
    for x in beats:
        for y in beats[x]:
            for z in beats.get(y, {}):
                if x in beats.get(z, {}) and len({x, y, z}) == 3:
                    ring = [(x, beats[x][y]), (y, beats[y][z]), (z, beats[z][x])]
                    k = min(range(3), key=lambda i: ring[i][0])
                    ring = ring[k:] + ring[:k]
                    found.add((tuple(w for w, _ in ring), tuple(p for _, p in ring)))
    return tuple(Cycle(words, pids) for words, pids in sorted(found))
