"""Fingerprint agreement is undefined, and said so, when neither side committed to any pair."""

import pyarrow as pa
import pytest

from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.forced_choice import compare
from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells
from mirrorscan.instruments.forced_choice.fingerprint import Fingerprint, compare_fingerprints, fingerprint

E1 = ("e1",)
PAIRS = (("xy", "x", "y"), ("yz", "y", "z"), ("zx", "z", "x"))


def rows(classes, label="m", inv="inv1"):
    """One envelope, both orderings; pair i's two cells are classed ``classes[i]``."""
    out = []
    for (pair_id, word_a, word_b), cls in zip(PAIRS, classes):
        for ordering in ("AB", "BA"):
            out.append(dict(label=label, invocation_id=inv, pair_id=pair_id, word_a=word_a, word_b=word_b,
                            envelope="e1", ordering=ordering, sample=0, attempt=1,
                            probe_id=f"{label}|{pair_id}|{ordering}", **{"class": cls}, error=None,
                            classifier_version="fc-1.0.0"))
    return pa.Table.from_pylist(out)


def fp(classes, label="m"):
    return fingerprint(rows(classes, label), ExpectedCells(E1, pair_ids=tuple(p for p, _, _ in PAIRS)))


def test_no_pair_committed_by_either_side_is_undefined_not_full_agreement():
    c = compare_fingerprints(fp(["UNCLEAR", "REF", "UNCLEAR"], "l"), fp(["UNCLEAR", "UNCLEAR", "REF"], "r"))
    assert (c.n_pairs, c.hamming, c.n_committed_either, c.agreement) == (3, 0, 0, None)
    assert (c.n_co_committed, c.violent_disagreement) == (0, None)


def test_incomplete_on_both_sides_is_undefined_too():
    left = fingerprint(rows(["A", "A", "A"], "l"), ExpectedCells(E1, samples=(0, 1)))   # sample 1 never ran
    right = fingerprint(rows(["UNCLEAR", "B", "A"], "r"), ExpectedCells(E1, samples=(0, 1)))
    c = compare_fingerprints(left, right)
    assert (c.n_pairs, c.hamming, c.n_committed_either, c.agreement) == (3, 0, 0, None)


def test_one_committed_pair_on_one_side_defines_agreement_over_all_pairs():
    # denominator: all three compared pairs; the two unclear–unclear pairs count as agreeing
    c = compare_fingerprints(fp(["A", "UNCLEAR", "UNCLEAR"], "l"), fp(["UNCLEAR", "UNCLEAR", "UNCLEAR"], "r"))
    assert (c.n_pairs, c.hamming, c.n_committed_either, c.agreement) == (3, 1, 1, pytest.approx(2 / 3))
    same = compare_fingerprints(fp(["A", "UNCLEAR", "B"], "l"), fp(["A", "UNCLEAR", "B"], "r"))
    assert (same.n_committed_either, same.agreement) == (2, 1.0)


def test_no_pair_at_all_is_undefined():
    empty = Fingerprint("m", "inv1", "unanimity", ())
    c = compare_fingerprints(empty, empty)
    assert (c.n_pairs, c.n_committed_either, c.agreement) == (0, 0, None)
    assert "agreement undefined (no pair)" in compare.format_comparison(c)


def settings():
    return Settings(samples=1, models=(ModelVariant(label="m", model="m"),),
                    instrument_settings={"probe_set": "/nonexistent/pairs.csv", "probe_set_sha256": "",
                                         "envelopes": list(E1), "orderings": ["AB", "BA"],
                                         "envelope_set": {"texts": {}}})


def test_compare_text_says_agreement_is_undefined():
    out = compare.compare_invocations((rows(["UNCLEAR"] * 3, "l", "i1"), settings()),
                              (rows(["REF", "UNCLEAR", "UNCLEAR"], "r", "i2"), settings()))
    assert out.detail.agreement is None and out.numbers["agreement"] is None
    assert "agreement undefined (no pair committed by either side)" in out.text
    assert "agreement 1.000" not in out.text


def test_compare_text_gives_a_defined_agreement():
    out = compare.compare_invocations((rows(["A", "UNCLEAR", "UNCLEAR"], "l", "i1"), settings()),
                              (rows(["B", "UNCLEAR", "UNCLEAR"], "r", "i2"), settings()))
    assert "agreement 0.667 (2 of 3 pairs, 1 committed by either side)" in out.text
    assert "violent disagreement 1.000 (1 of 1 co-committed pairs)" in out.text
