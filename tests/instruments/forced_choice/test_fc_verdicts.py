"""Verdicts never share a namespace with words: a pair whose word is literally 'unclear' or 'incomplete' is
read by its verdict, in fingerprints, their comparison, 3-cycles and the pairs table."""

import json

import pyarrow as pa
import pytest

from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells
from mirrorscan.instruments.forced_choice.commit import VERDICTS, PairVerdict
from mirrorscan.instruments.forced_choice.fingerprint import (FingerprintEntry, compare_fingerprints, fingerprint,
                                                              intransitive_cycles)
from mirrorscan.instruments.forced_choice.numbers import summarize
from mirrorscan.instruments.forced_choice.report import pair_rows

E1 = ("e1",)


def model(results, label="m"):
    """One envelope, both orderings; each pair's two cells are classed ``results[pair]``."""
    rows = []
    for (pair_id, word_a, word_b), cls in results:
        for ordering in ("AB", "BA"):
            rows.append(dict(label=label, invocation_id="inv1", pair_id=pair_id, word_a=word_a, word_b=word_b,
                             envelope="e1", ordering=ordering, sample=0, attempt=1,
                             probe_id=f"{label}|{pair_id}|{ordering}", **{"class": cls}, error=None))
    return pa.Table.from_pylist(rows)


UC = ("p_uc", "unclear", "clear")          # word_a is literally "unclear"
IN = ("p_in", "complete", "incomplete")    # word_b is literally "incomplete"


def test_a_committed_word_spelled_like_a_verdict_is_committed():
    fp = fingerprint(model([(UC, "A"), (IN, "B")]), ExpectedCells(E1))
    entries = {e.pair_id: (e.verdict, e.committed_word) for e in fp.entries}
    assert entries == {"p_uc": ("word_a", "unclear"), "p_in": ("word_b", "incomplete")}
    assert fp.committed() == {"p_uc": "unclear", "p_in": "incomplete"}
    # the JSON keeps the verdict and the word in separate keys
    first = json.loads(fp.to_json())["entries"][1]
    assert first == {"pair_id": "p_uc", "word_a": "unclear", "word_b": "clear", "verdict": "word_a",
                     "committed_word": "unclear"}


def test_an_unclear_verdict_has_no_committed_word():
    fp = fingerprint(model([(UC, "UNCLEAR")]), ExpectedCells(E1, pair_ids=("p_uc", "p_none")))
    entries = {e.pair_id: (e.verdict, e.committed_word) for e in fp.entries}
    assert entries == {"p_uc": ("unclear", None), "p_none": ("incomplete", None)}
    assert fp.committed() == {}


def test_compare_tells_the_word_unclear_from_the_unclear_verdict():
    e = ExpectedCells(E1)
    left = fingerprint(model([(UC, "A"), (IN, "B")], label="l"), e)       # committed to "unclear", "incomplete"
    right = fingerprint(model([(UC, "UNCLEAR")], label="r"), e)           # unclear; p_in has no cell: incomplete
    c = compare_fingerprints(left, right)
    assert (c.n_pairs, c.hamming, c.agreement) == (2, 2, 0.0)
    assert (c.n_co_committed, c.n_violent) == (0, 0)
    same = compare_fingerprints(left, fingerprint(model([(UC, "A"), (IN, "B")], label="s"), e))
    assert (same.hamming, same.agreement, same.n_co_committed, same.n_violent) == (0, 1.0, 2, 0)


def test_a_cycle_through_a_word_spelled_like_a_verdict_is_found():
    # unclear > x, x > incomplete, incomplete > unclear
    pairs = [(("a", "unclear", "x"), "A"), (("b", "x", "incomplete"), "A"), (("c", "incomplete", "unclear"), "A")]
    cycles = intransitive_cycles(fingerprint(model(pairs), ExpectedCells(E1)))
    assert [(c.words, c.pair_ids) for c in cycles] == [(("incomplete", "unclear", "x"), ("c", "a", "b"))]


def test_pairs_table_keeps_verdicts_and_words_in_separate_columns():
    (s,) = summarize(model([(UC, "A"), (IN, "UNCLEAR")]), ExpectedCells(E1))
    rows = {r["pair_id"]: r for r in pair_rows((s,)).to_pylist()}
    assert (rows["p_uc"]["unanimity"], rows["p_uc"]["unanimity_word"]) == ("word_a", "unclear")
    assert (rows["p_in"]["unanimity"], rows["p_in"]["unanimity_word"]) == ("unclear", None)
    assert (rows["p_uc"]["per_envelope_majority"], rows["p_uc"]["per_envelope_majority_word"]) == ("word_a", "unclear")
    assert all(r[k] in VERDICTS for r in rows.values() for k in ("unanimity", "per_envelope_majority"))


@pytest.mark.parametrize("cls, args", [
    (PairVerdict, ("p", "x", "y", "x", "x", 0)),                  # a word where a verdict belongs
    (PairVerdict, ("p", "x", "y", "unclear", "x", 0)),            # a committed word on an unclear pair
    (PairVerdict, ("p", "x", "y", "word_a", "y", 0)),             # word_a verdict, word_b's word
    (FingerprintEntry, ("p", "unclear", "y", "unclear", "unclear")),
    (FingerprintEntry, ("p", "x", "y", "word_b", None)),
])
def test_verdict_and_word_are_checked_against_each_other(cls, args):
    with pytest.raises(ValueError, match="verdict"):
        cls(*args)
