"""The forced-choice numbers on hand-built tables of classified cells."""

import json

import pyarrow as pa
import pytest

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells, by_model, latest_rows
from mirrorscan.instruments.forced_choice.commit import pair_commit, per_cell_commit_rate
from mirrorscan.instruments.forced_choice.fingerprint import compare_fingerprints, fingerprint, intransitive_cycles
from mirrorscan.instruments.forced_choice.numbers import summarize
from mirrorscan.instruments.forced_choice.position_bias import position_bias
from mirrorscan.instruments.forced_choice.sharpness import sharpness

SIX = ("english_strict", "english_casual", "python_typed", "json_schema", "french_casual", "chinese_casual")


def row(pair, ordering, cls, envelope="english_strict", sample=0, label="m", inv="inv1", error=None, attempt=1):
    """One cell; ``pair`` is (pair_id, word_a, word_b)."""
    pair_id, word_a, word_b = pair
    return dict(label=label, invocation_id=inv, pair_id=pair_id, word_a=word_a, word_b=word_b,
                envelope=envelope, ordering=ordering, sample=sample, attempt=attempt,
                probe_id=f"{label}|{word_a}|{word_b}|{envelope}|{ordering}",
                **{"class": None if error else cls}, error=error)


def table(rows):
    return pa.Table.from_pylist(rows)


VW = ("p1", "vodka", "whiskey")


def full_pair(pair, classes, envelopes=SIX, **kw):
    """Cells of one pair over envelopes × (AB, BA), classes given in that order."""
    cells = [(e, o) for e in envelopes for o in ("AB", "BA")]
    assert len(classes) == len(cells)
    return [row(pair, o, c, envelope=e, **kw) for (e, o), c in zip(cells, classes)]


# ---- the worked examples ------------------------------------------------------------------------------

def test_issue_four_answers_commit_whiskey():
    envs = ("english_strict", "chinese_casual")
    t = table(full_pair(VW, ["B"] * 4, envelopes=envs))
    expected = ExpectedCells(envelopes=envs)
    pc = pair_commit(t, expected)
    assert (pc.rule, pc.n_word_b, pc.split) == ("unanimity", 1, "0 / 1 / 0")
    assert pc.pairs[0].committed_word == "whiskey"
    s = sharpness(t)
    assert s.pairs[0].sharpness == 1.0 and s.mean_sharpness == 1.0 and s.pairs[0].winner == "whiskey"


def test_sharpness_worked_example_not_committed():
    # 12 cells: 9 whiskey, 1 vodka, 2 UNCLEAR
    classes = ["B"] * 9 + ["A"] + ["UNCLEAR"] * 2
    t = table(full_pair(VW, classes))
    s = sharpness(t)
    assert s.pairs[0].sharpness == pytest.approx(0.9)
    assert (s.pairs[0].n_a, s.pairs[0].n_b, s.pairs[0].winner) == (1, 9, "whiskey")
    assert s.mean_sharpness == pytest.approx(0.9) and s.n_pairs_with_picks == 1
    pc = pair_commit(t, ExpectedCells(SIX))
    assert pc.pairs[0].verdict == "unclear" and pc.split == "0 / 0 / 1"
    cr = per_cell_commit_rate(t)
    assert (cr.n_answered, cr.n_a, cr.n_b, cr.n_unclear) == (12, 1, 9, 2)
    assert cr.per_cell_commit_rate == pytest.approx(10 / 12)


def test_sharpness_tie_none_and_mean_over_pairs_with_picks():
    tie = ("p2", "tea", "coffee")
    none = ("p3", "cat", "dog")
    rows = (full_pair(VW, ["B", "B"], envelopes=("e1",)) + full_pair(tie, ["A", "B"], envelopes=("e1",))
            + full_pair(none, ["UNCLEAR", "REF"], envelopes=("e1",)))
    s = sharpness(table(rows))
    by_pair = {p.pair_id: p for p in s.pairs}
    assert by_pair["p2"].sharpness == 0.5 and by_pair["p2"].winner is None
    assert by_pair["p3"].sharpness is None and by_pair["p3"].winner is None
    assert s.mean_sharpness == pytest.approx(0.75)              # (1.0 + 0.5) / 2, p3 not in the mean
    assert (s.n_pairs_with_picks, s.n_pairs) == (2, 3)


# ---- position bias ------------------------------------------------------------------------------------

PAIRS = [("p1", "vodka", "whiskey"), ("p2", "tea", "coffee"), ("p3", "cat", "dog")]


def test_always_first_named():
    rows = [row(p, o, "A" if o == "AB" else "B", envelope=e) for p in PAIRS for e in SIX for o in ("AB", "BA")]
    pb = position_bias(table(rows))
    assert (pb.overall.pct_a_when_AB, pb.overall.pct_a_when_BA, pb.overall.position_bias_pp) == (1.0, 0.0, 100.0)
    assert (pb.n_first_named, pb.n_second_named, pb.position_ratio) == (36, 0, None)
    assert all(e.position_bias_pp == 100.0 for e in pb.per_envelope)
    assert all(p.symmetric_pick_rate_a == 0.5 for p in pb.per_pair)
    # no pair is committed under unanimity: each flips with the order
    assert pair_commit(table(rows), ExpectedCells(SIX)).split == "0 / 0 / 3"


def test_always_word_a():
    rows = [row(p, o, "A", envelope=e) for p in PAIRS for e in SIX for o in ("AB", "BA")]
    pb = position_bias(table(rows))
    assert (pb.overall.pct_a_when_AB, pb.overall.pct_a_when_BA, pb.overall.position_bias_pp) == (1.0, 1.0, 0.0)
    assert (pb.n_first_named, pb.n_second_named, pb.position_ratio) == (18, 18, 1.0)
    assert all(p.symmetric_pick_rate_a == 1.0 for p in pb.per_pair)
    assert pair_commit(table(rows), ExpectedCells(SIX)).split == "3 / 0 / 0"


def test_position_bias_denominators_include_unclear_and_ref_not_errors():
    rows = [row(VW, "AB", "A"), row(VW, "AB", "UNCLEAR", sample=1), row(VW, "AB", "REF", sample=2),
            row(VW, "AB", None, sample=3, error="boom"),
            row(VW, "BA", "A"), row(VW, "BA", "B", sample=1)]
    pb = position_bias(table(rows))
    assert (pb.overall.n_ab, pb.overall.n_ba) == (3, 2)
    assert pb.overall.pct_a_when_AB == pytest.approx(1 / 3)
    assert pb.overall.pct_a_when_BA == pytest.approx(0.5)
    assert pb.overall.position_bias_pp == pytest.approx(100 * (1 / 3 - 0.5))
    assert pb.n_errors == 1
    assert (pb.n_first_named, pb.n_second_named, pb.position_ratio) == (2, 1, 2.0)


def test_position_bias_one_ordering_only():
    pb = position_bias(table([row(VW, "AB", "A")]))
    assert pb.overall.pct_a_when_BA is None and pb.overall.position_bias_pp is None
    assert pb.overall.symmetric_pick_rate_a is None


# ---- errors, incomplete pairs and the two rules -------------------------------------------------------

def test_errors_excluded_from_denominators_and_counted():
    rows = full_pair(VW, ["B"] * 12)
    rows[3] = row(VW, "BA", None, envelope=SIX[1], error="TimeoutError")
    t = table(rows)
    cr = per_cell_commit_rate(t)
    assert (cr.n_answered, cr.n_errors, cr.per_cell_commit_rate) == (11, 1, 1.0)
    pc = pair_commit(t, ExpectedCells(SIX))
    assert (pc.n_incomplete, pc.n_errors, pc.pair_commit_rate, pc.split) == (1, 1, None, "0 / 0 / 0")
    assert pc.pairs[0].verdict == "incomplete" and pc.pairs[0].n_missing == 1
    s = sharpness(t)
    assert s.pairs[0].n_b == 11 and s.n_errors == 1


def test_missing_cell_and_missing_pair_are_incomplete():
    rows = full_pair(VW, ["B"] * 12)[:-1]                              # chinese_casual BA never ran
    expected = ExpectedCells(SIX, pair_ids=("p1", "p9"))
    pc = pair_commit(table(rows), expected)
    verdicts = {v.pair_id: (v.verdict, v.n_missing) for v in pc.pairs}
    assert verdicts == {"p1": ("incomplete", 1), "p9": ("incomplete", 12)}
    assert pc.n_incomplete == 2 and pc.n_pairs == 2


def test_samples_are_part_of_the_expected_cells():
    rows = full_pair(VW, ["B", "B"], envelopes=("e1",)) + [row(VW, "AB", "B", envelope="e1", sample=1)]
    assert pair_commit(table(rows), ExpectedCells(("e1",), samples=(0, 1))).pairs[0].verdict == "incomplete"
    rows.append(row(VW, "BA", "A", envelope="e1", sample=1))
    assert pair_commit(table(rows), ExpectedCells(("e1",), samples=(0, 1))).pairs[0].verdict == "unclear"
    assert pair_commit(table(rows), ExpectedCells(("e1",), samples=(0,))).pairs[0].verdict == "word_b"


def test_cells_outside_expected_are_not_considered():
    rows = full_pair(VW, ["A"] * 12) + [row(VW, "AB", "B", envelope="bare_pipe")]
    pc = pair_commit(table(rows), ExpectedCells(SIX))
    assert pc.pairs[0].verdict == "word_a"


def test_rules_disagree():
    envs = ("e1", "e2", "e3")
    # e1 and e2 agree on word_a, e3 flips with the order
    t = table(full_pair(VW, ["A", "A", "A", "A", "A", "B"], envelopes=envs))
    expected = ExpectedCells(envs)
    una = pair_commit(t, expected, "unanimity")
    maj = pair_commit(t, expected, "per_envelope_majority")
    assert (una.rule, una.pairs[0].verdict) == ("unanimity", "unclear")
    assert (maj.rule, maj.pairs[0].verdict, maj.pairs[0].committed_word) == ("per_envelope_majority", "word_a", "vodka")
    assert '"rule": "per_envelope_majority"' in maj.to_json()


def test_per_envelope_majority_tie_and_none():
    envs = ("e1", "e2", "e3")
    tie = table(full_pair(VW, ["A", "A", "B", "B", "A", "B"], envelopes=envs))
    assert pair_commit(tie, ExpectedCells(envs), "per_envelope_majority").pairs[0].verdict == "unclear"
    none = table(full_pair(VW, ["A", "B", "B", "A", "UNCLEAR", "UNCLEAR"], envelopes=envs))
    assert pair_commit(none, ExpectedCells(envs), "per_envelope_majority").pairs[0].verdict == "unclear"
    # an envelope of agreeing REFs does not agree on a word
    refs = table(full_pair(VW, ["REF", "REF", "B", "B", "REF", "REF"], envelopes=envs))
    assert pair_commit(refs, ExpectedCells(envs), "per_envelope_majority").pairs[0].verdict == "word_b"


def test_unknown_rule_and_duplicate_cells():
    t = table(full_pair(VW, ["A", "A"], envelopes=("e1",)))
    with pytest.raises(AnalysisError, match="rule"):
        pair_commit(t, ExpectedCells(("e1",)), "plurality")
    dup = table(full_pair(VW, ["A", "A"], envelopes=("e1",)) * 2)
    with pytest.raises(ValueError, match="latest_rows"):
        pair_commit(dup, ExpectedCells(("e1",)))


def test_split_counts_pairs():
    rows = []
    for i in range(3):
        rows += full_pair((f"a{i}", f"x{i}", f"y{i}"), ["A", "A"], envelopes=("e1",))
    rows += full_pair(("b0", "u", "v"), ["B", "B"], envelopes=("e1",))
    rows += full_pair(("c0", "s", "t"), ["A", "REF"], envelopes=("e1",))
    pc = pair_commit(table(rows), ExpectedCells(("e1",)))
    assert (pc.split, pc.n_pairs, pc.pair_commit_rate) == ("3 / 1 / 1", 5, pytest.approx(0.8))


# ---- fingerprints, comparison, cycles -----------------------------------------------------------------

def committed_model(results, label="m", envelopes=("e1",)):
    """A table where each pair's cells all pick ``results[pair]`` ('A', 'B' or 'UNCLEAR')."""
    rows = []
    for pair, cls in results:
        rows += full_pair(pair, [cls, cls], envelopes=envelopes, label=label)
    return table(rows)


XY, YZ, ZX, XZ = ("xy", "x", "y"), ("yz", "y", "z"), ("zx", "z", "x"), ("xz", "x", "z")


def test_fingerprint_values():
    t = committed_model([(XY, "A"), (YZ, "B"), (ZX, "UNCLEAR")])
    fp = fingerprint(t, ExpectedCells(("e1",), pair_ids=("xy", "yz", "zx", "zz")))
    assert {e.pair_id: (e.verdict, e.committed_word) for e in fp.entries} == {
        "xy": ("word_a", "x"), "yz": ("word_b", "z"), "zx": ("unclear", None), "zz": ("incomplete", None)}
    assert fp.rule == "unanimity" and fp.committed() == {"xy": "x", "yz": "z"}
    entry = json.loads(fp.to_json())["entries"][0]
    assert (entry["verdict"], entry["committed_word"]) == ("word_a", "x") and "value" not in entry


def test_planted_three_cycle_found():
    # x > y, y > z, z > x; plus an unrelated committed pair
    fp = fingerprint(committed_model([(XY, "A"), (YZ, "A"), (ZX, "A"), (VW, "B")]), ExpectedCells(("e1",)))
    cycles = intransitive_cycles(fp)
    assert len(cycles) == 1
    assert cycles[0].words == ("x", "y", "z") and cycles[0].pair_ids == ("xy", "yz", "zx")


def test_transitive_triangle_has_no_cycle():
    # x > y, y > z, x > z
    fp = fingerprint(committed_model([(XY, "A"), (YZ, "A"), (XZ, "A")]), ExpectedCells(("e1",)))
    assert intransitive_cycles(fp) == ()


def test_uncommitted_pair_breaks_a_cycle():
    fp = fingerprint(committed_model([(XY, "A"), (YZ, "A"), (ZX, "UNCLEAR")]), ExpectedCells(("e1",)))
    assert intransitive_cycles(fp) == ()


def test_compare_fingerprints():
    e = ExpectedCells(("e1",))
    left = fingerprint(committed_model([(XY, "A"), (YZ, "A"), (ZX, "UNCLEAR"), (VW, "B")], label="l"), e)
    right = fingerprint(committed_model([(XY, "A"), (YZ, "B"), (ZX, "A"), (VW, "B")], label="r"), e)
    c = compare_fingerprints(left, right)
    assert (c.n_pairs, c.hamming, c.agreement) == (4, 2, 0.5)
    assert (c.n_co_committed, c.n_violent, c.violent_disagreement) == (3, 1, pytest.approx(1 / 3))
    assert (c.left, c.right, c.rule) == ("l@inv1", "r@inv1", "unanimity")


def test_compare_without_co_committed_pair_is_undefined():
    e = ExpectedCells(("e1",))
    left = fingerprint(committed_model([(XY, "A"), (YZ, "UNCLEAR")], label="l"), e)
    right = fingerprint(committed_model([(XY, "UNCLEAR"), (YZ, "B")], label="r"), e)
    c = compare_fingerprints(left, right)
    assert (c.n_co_committed, c.n_violent, c.violent_disagreement) == (0, 0, None)
    assert (c.hamming, c.agreement) == (2, 0.0)


def test_compare_refuses_mixed_rules():
    t = committed_model([(XY, "A")])
    with pytest.raises(ValueError, match="rules"):
        compare_fingerprints(fingerprint(t, ExpectedCells(("e1",))),
                             fingerprint(t, ExpectedCells(("e1",)), "per_envelope_majority"))


# ---- rows, grouping, summary --------------------------------------------------------------------------

def test_latest_rows_keeps_success_else_last_error():
    rows = [
        row(VW, "AB", None, error="first failure", attempt=1),
        row(VW, "AB", "B", attempt=2),
        row(VW, "AB", None, error="late failure", attempt=3),
        row(VW, "BA", None, error="early", attempt=1),
        row(VW, "BA", None, error="last", attempt=2),
        row(VW, "AB", "A", sample=1, attempt=1),
        row(VW, "AB", "A", inv="inv2", attempt=1),
    ]
    out = latest_rows(table(rows))
    got = [(r["invocation_id"], r["ordering"], r["sample"], r["class"], r["error"]) for r in out.to_pylist()]
    assert got == [("inv1", "AB", 0, "B", None), ("inv1", "BA", 0, None, "last"),
                   ("inv1", "AB", 1, "A", None), ("inv2", "AB", 0, "A", None)]


def test_single_model_functions_refuse_mixed_tables():
    t = table([row(VW, "AB", "A"), row(VW, "AB", "A", label="other")])
    with pytest.raises(ValueError, match="by_model"):
        per_cell_commit_rate(t)
    assert list(by_model(t)) == [("m", "inv1"), ("other", "inv1")]


def test_unclassified_rows_are_refused():
    with pytest.raises(ValueError, match="classify"):
        per_cell_commit_rate(table([row(VW, "AB", None)]))


def test_summarize_per_model_and_invocation():
    expected = ExpectedCells(("e1",))
    rows = (committed_model([(XY, "A"), (YZ, "A"), (ZX, "A")]).to_pylist()
            + committed_model([(XY, "B"), (YZ, "B"), (ZX, "B")], label="n").to_pylist())
    out = summarize(table(rows), expected)
    assert [(s.label, s.invocation_id) for s in out] == [("m", "inv1"), ("n", "inv1")]
    assert [len(s.cycles) for s in out] == [1, 1]
    first = json.loads(out[0].to_json())
    assert first["pair_commit_unanimity"]["rule"] == "unanimity"
    assert first["pair_commit_per_envelope_majority"]["rule"] == "per_envelope_majority"
    assert first["commit_rate"]["per_cell_commit_rate"] == 1.0
    assert first["cycles"][0]["words"] == ["x", "y", "z"]
