"""The forced-choice numbers, as pure functions over a table of classified traces.

Input: a pyarrow table with columns label, invocation_id, pair_id, word_a, word_b, envelope, ordering,
sample, class and error, one row per cell (``latest_rows`` picks that row from a table of attempts).
Every statistic is per model label and invocation: the single-model functions refuse a table that mixes
several (split it with ``by_model``), and ``summarize`` runs them all per group. Rows with an error are
never in a denominator; each result counts them in ``n_errors``.

The numbers are easy to confuse, so each says what it is and is not:

- ``per_cell_commit_rate``: share of answered *cells* with a definite pick (A or B).
- ``pair_commit``: share of *pairs* committed to one word, under a named rule (``unanimity`` or
  ``per_envelope_majority``); the split reads "word_a / word_b / unclear", incomplete pairs apart.
- ``sharpness``: per pair, how one-sided its definite picks are, whether or not the pair is committed.
- ``position_bias``: how much more often word_a is picked when named first than when named second.
- ``fingerprint`` / ``compare_fingerprints`` / ``intransitive_cycles``: the committed words per pair,
  their agreement across models or reruns, and the 3-cycles among them.

Verdicts and words never share a field. A pair's verdict is one of VERDICTS (``word_a``, ``word_b``,
``unclear``, ``incomplete``) and the word it committed to, if any, sits apart in ``committed_word``: a pair
whose word is literally "unclear" or "incomplete" is read by its verdict, never by that spelling. (Until
fingerprint entries carried both, an entry held one ``value``, the committed word or else the verdict, and
such a pair read as that verdict.)

Cells are plain Python tuples: a grid holds at most a few hundred thousand rows per model, and plain
loops keep each rule readable against its definition. The module is longer than the usual ~400 lines
because it holds the whole of one instrument's numbers, each result type documented field by field, so
that the numbers that must not be confused sit side by side. Input a user can fix (an unclassified table,
mixed models, duplicate cells, an unknown rule) raises AnalysisError, which is also a ValueError.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.instruments.forced_choice.cells import ORDERINGS

RULES = ("unanimity", "per_envelope_majority")
"""Pair-commit rules; every pair-commit output names the one it used."""
VERDICTS = ("word_a", "word_b", "unclear", "incomplete")
"""Pair verdicts: committed to word_a, committed to word_b, answered but not committed, cells missing.

A verdict names a side of the pair, never a word: the word a committed pair chose is ``committed_word``."""
COMMITTED = ("word_a", "word_b")
"""The verdicts of a committed pair."""
COLUMNS = ("label", "invocation_id", "pair_id", "word_a", "word_b", "envelope", "ordering", "sample",
           "class", "error")
_CLASSES = {"A", "B", "UNCLEAR", "REF"}


class _JSON:
    """Mixin: ``to_dict`` (JSON-ready, nested) and ``to_json`` (a string)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)


class Cell(NamedTuple):
    pair_id: str
    word_a: str
    word_b: str
    envelope: str
    ordering: str
    sample: int
    cls: str | None
    error: str | None


@dataclass(frozen=True)
class ExpectedCells:
    """The cells every pair should have, from the grid: pair-commit spans exactly these.

    Cells of the traces outside this set (another envelope, a sample beyond the count) are not considered
    by pair-commit, so passing the six load-bearing envelopes gives the method's headline rule.
    """

    envelopes: tuple
    """Envelope ids the rule spans."""
    orderings: tuple = ORDERINGS
    """Orderings every envelope is asked in."""
    samples: tuple = (0,)
    """Sample indices of every (envelope, ordering)."""
    pair_ids: tuple | None = None
    """Pairs of the probe set; a pair with no row at all is then incomplete. None: the pairs seen."""

    def keys(self) -> set:
        return set(itertools.product(self.envelopes, self.orderings, self.samples))


# ---- rows ---------------------------------------------------------------------------------------------

def latest_rows(traces: pa.Table) -> pa.Table:
    """One row per cell (invocation_id, probe_id, sample): its successful row if any, else its last error.

    Among several successful rows the lowest ``attempt`` wins (a cell is not redone after a success, so
    this only settles duplicates); among error rows the highest ``attempt``, then the later row. Row order
    of the input is kept.
    """
    n = traces.num_rows
    keys = zip(*(traces.column(c).to_pylist() for c in ("invocation_id", "probe_id", "sample")))
    errors = traces.column("error").to_pylist()
    attempts = traces.column("attempt").to_pylist() if "attempt" in traces.column_names else [0] * n
    best: dict = {}
    for i, key in enumerate(keys):
        ok, attempt = errors[i] is None, attempts[i] or 0
        rank = (1, -attempt, -i) if ok else (0, attempt, i)
        if key not in best or rank > best[key][0]:
            best[key] = (rank, i)
    return traces.take(pa.array(sorted(i for _, i in best.values()), pa.int64()))


def by_model(traces: pa.Table) -> dict[tuple[str, str], pa.Table]:
    """The table split per (label, invocation_id), in order of first appearance."""
    labels, invocations = traces.column("label").to_pylist(), traces.column("invocation_id").to_pylist()
    rows: dict = defaultdict(list)
    for i, key in enumerate(zip(labels, invocations)):
        rows[key].append(i)
    return {key: traces.take(pa.array(idx, pa.int64())) for key, idx in rows.items()}


def _cells(traces: pa.Table) -> tuple[str, str, list[Cell]]:
    """(label, invocation_id, cells) of a one-model table; AnalysisError naming what is wrong."""
    missing = [c for c in COLUMNS if c not in traces.column_names]
    if missing:
        raise AnalysisError("columns", f"traces lack columns {missing}",
                            "pass a traces table (grid.trace_schema) with its class column filled")
    groups = set(zip(traces.column("label").to_pylist(), traces.column("invocation_id").to_pylist()))
    if len(groups) != 1:
        raise AnalysisError("label", f"traces hold {len(groups)} (label, invocation_id) groups",
                            "split them with by_model() or call summarize()")
    (label, invocation_id), = groups
    cols = [traces.column(c).to_pylist() for c in COLUMNS[2:]]
    cells = [Cell(*row) for row in zip(*cols)]
    for c in cells:
        if c.error is None and c.cls not in _CLASSES:
            raise AnalysisError("class", f"cell {c.pair_id}/{c.envelope}/{c.ordering}/{c.sample} has class "
                                f"{c.cls!r}", "classify the traces first (instruments.forced_choice.classify.with_classes)")
    return label, invocation_id, cells


def _pairs(cells: list[Cell]) -> dict[str, list[Cell]]:
    out: dict = defaultdict(list)
    for c in cells:
        out[c.pair_id].append(c)
    return dict(sorted(out.items()))


# ---- per-cell commit rate -----------------------------------------------------------------------------

@dataclass(frozen=True)
class CommitRate(_JSON):
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
    label, inv, cells = _cells(traces)
    counts = Counter(c.cls for c in cells if c.error is None)
    answered = sum(counts.values())
    return CommitRate(label, inv, answered, counts["A"], counts["B"], counts["UNCLEAR"], counts["REF"],
                      sum(c.error is not None for c in cells),
                      (counts["A"] + counts["B"]) / answered if answered else None)


# ---- pair-commit --------------------------------------------------------------------------------------

def _check_verdict(pair_id, word_a, word_b, verdict, committed_word) -> None:
    """ValueError unless ``verdict`` is one of VERDICTS and ``committed_word`` is the word it names (None
    for unclear and incomplete): a word never stands in for a verdict, nor a verdict for a word."""
    if verdict not in VERDICTS:
        raise ValueError(f"pair {pair_id!r}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    named = word_a if verdict == "word_a" else word_b if verdict == "word_b" else None
    if committed_word != named or (verdict in COMMITTED and committed_word is None):
        raise ValueError(f"pair {pair_id!r}: verdict {verdict!r} does not go with committed word {committed_word!r}")


@dataclass(frozen=True)
class PairVerdict(_JSON):
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
        _check_verdict(self.pair_id, self.word_a, self.word_b, self.verdict, self.committed_word)


@dataclass(frozen=True)
class PairCommit(_JSON):
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
        agree = Counter()
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
    label, inv, cells = _cells(traces)
    pairs = _pairs(cells)
    for pair_id in expected.pair_ids or ():
        pairs.setdefault(pair_id, [])
    verdicts = tuple(_pair_verdict(pid, pcells, expected, rule) for pid, pcells in sorted(pairs.items()))
    n = Counter(v.verdict for v in verdicts)
    complete = len(verdicts) - n["incomplete"]
    return PairCommit(rule, label, inv, len(verdicts), n["word_a"], n["word_b"], n["unclear"], n["incomplete"],
                      sum(c.error is not None for c in cells),
                      (n["word_a"] + n["word_b"]) / complete if complete else None,
                      f"{n['word_a']} / {n['word_b']} / {n['unclear']}", verdicts)


# ---- sharpness ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairSharpness(_JSON):
    pair_id: str
    word_a: str
    word_b: str
    n_a: int
    n_b: int
    sharpness: float | None
    """max(n_a, n_b) / (n_a + n_b); None with no definite pick; 0.5 on a tie."""
    winner: str | None
    """The more-picked word; None on a tie or with no definite pick."""


@dataclass(frozen=True)
class Sharpness(_JSON):
    """Sharpness: per pair, max(nA, nB) / (nA + nB) over its definite picks; per model, the mean.

    The mean runs over every pair with at least one definite pick (``n_pairs_with_picks``), committed or
    not; it is not restricted to committed pairs, and UNCLEAR/REF cells are not in it (per-cell commit rate
    counts those).
    """

    label: str
    invocation_id: str
    mean_sharpness: float | None
    """Mean pair sharpness; None when no pair has a definite pick."""
    n_pairs_with_picks: int
    n_pairs: int
    n_errors: int
    pairs: tuple


def sharpness(traces: pa.Table) -> Sharpness:
    """Sharpness of one model and invocation over all its answered cells (see Sharpness)."""
    label, inv, cells = _cells(traces)
    out = []
    for pair_id, pcells in _pairs(cells).items():
        n_a = sum(c.error is None and c.cls == "A" for c in pcells)
        n_b = sum(c.error is None and c.cls == "B" for c in pcells)
        wa, wb = pcells[0].word_a, pcells[0].word_b
        sharp = max(n_a, n_b) / (n_a + n_b) if n_a + n_b else None
        winner = wa if n_a > n_b else wb if n_b > n_a else None
        out.append(PairSharpness(pair_id, wa, wb, n_a, n_b, sharp, winner))
    defined = [p.sharpness for p in out if p.sharpness is not None]
    return Sharpness(label, inv, sum(defined) / len(defined) if defined else None, len(defined), len(out),
                     sum(c.error is not None for c in cells), tuple(out))


# ---- position bias ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OrderingShares(_JSON):
    """pct_a_when_AB / pct_a_when_BA and their difference, for one scope (a model, an envelope, a pair)."""

    scope: str
    """'all', an envelope id or a pair id."""
    n_ab: int
    """Answered AB cells (UNCLEAR and REF included): the denominator of pct_a_when_AB."""
    n_ba: int
    pct_a_when_AB: float | None
    """Share of AB cells classed A (word_a, named first there)."""
    pct_a_when_BA: float | None
    """Share of BA cells classed A (word_a, named second there)."""
    position_bias_pp: float | None
    """100 × (pct_a_when_AB − pct_a_when_BA), percentage points; positive favours the first-named word."""
    symmetric_pick_rate_a: float | None
    """(pct_a_when_AB + pct_a_when_BA) / 2: word_a's pick rate with position averaged out."""


def _shares(scope: str, cells: list[Cell]) -> OrderingShares:
    ab = [c.cls for c in cells if c.error is None and c.ordering == "AB"]
    ba = [c.cls for c in cells if c.error is None and c.ordering == "BA"]
    p_ab = ab.count("A") / len(ab) if ab else None
    p_ba = ba.count("A") / len(ba) if ba else None
    both = p_ab is not None and p_ba is not None
    return OrderingShares(scope, len(ab), len(ba), p_ab, p_ba, 100 * (p_ab - p_ba) if both else None,
                          (p_ab + p_ba) / 2 if both else None)


@dataclass(frozen=True)
class PositionBias(_JSON):
    """Position bias: does the model favour the word named first, whatever the word?

    Not a preference: a model that always picks word_a has zero bias (1.0, 1.0, 0 pp); one that always
    names the first word has +100 pp (1.0, 0.0). Denominators are all answered cells of each ordering.
    """

    label: str
    invocation_id: str
    overall: OrderingShares
    n_first_named: int
    """Definite picks of the word named first (AB classed A, BA classed B)."""
    n_second_named: int
    """Definite picks of the word named second (AB classed B, BA classed A)."""
    position_ratio: float | None
    """n_first_named / n_second_named; None when no second-named pick (see the counts)."""
    n_errors: int
    per_envelope: tuple
    """OrderingShares per envelope, by envelope id."""
    per_pair: tuple
    """OrderingShares per pair (symmetric_pick_rate_a is the pair's order-balanced word_a rate)."""


def position_bias(traces: pa.Table) -> PositionBias:
    """Position bias of one model and invocation (see PositionBias)."""
    label, inv, cells = _cells(traces)
    answered = [c for c in cells if c.error is None]
    first = sum((c.ordering, c.cls) in {("AB", "A"), ("BA", "B")} for c in answered)
    second = sum((c.ordering, c.cls) in {("AB", "B"), ("BA", "A")} for c in answered)
    envs: dict = defaultdict(list)
    for c in cells:
        envs[c.envelope].append(c)
    return PositionBias(label, inv, _shares("all", cells), first, second, first / second if second else None,
                        len(cells) - len(answered),
                        tuple(_shares(e, cs) for e, cs in sorted(envs.items())),
                        tuple(_shares(p, cs) for p, cs in _pairs(cells).items()))


# ---- fingerprints -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FingerprintEntry(_JSON):
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
        _check_verdict(self.pair_id, self.word_a, self.word_b, self.verdict, self.committed_word)


@dataclass(frozen=True)
class Fingerprint(_JSON):
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
class FingerprintComparison(_JSON):
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


# ---- intransitive cycles ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cycle(_JSON):
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


# ---- everything, per model ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSummary(_JSON):
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
