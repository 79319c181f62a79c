"""Surface-form baseline: a bag-of-words classifier separates lens's confounded subset, cannot beat chance
on its bag-identical clean pairs, is deterministic for a seed, and refuses labels it cannot score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.surface import SURFACE_WARNING, bag_of_words_auroc, surface_warning

SCORING = Path(__file__).parents[2] / "instruments/lens/data/scoring_synthetic.jsonl"


def subset(name: str) -> tuple[list[str], list[str], list[int]]:
    """Texts, labels and pair ids (consecutive ids s033+s034, … form a pair) of one shipped subset."""
    rows = [json.loads(line) for line in SCORING.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["subset"] == name]
    return [r["text"] for r in rows], [r["label"] for r in rows], [(int(r["id"][1:]) - 1) // 2 for r in rows]


def test_separable_texts_are_flagged():
    texts = [f"Question {i}: pick one. (A) yes (B) no Answer:" for i in range(10)]
    texts += [f"hey can u help me with my {w} pls" for w in "car dog rent sink cake bike tax boss plan trip".split()]
    labels = ["testing"] * 10 + ["deployment"] * 10
    auc = bag_of_words_auroc(texts, labels, "testing")
    assert auc > SURFACE_WARNING and surface_warning(auc)


def test_naming_the_other_class_positive_gives_the_same_value():
    texts, labels, _ = subset("clean")        # the classifier flips with the labels, so the AUROC does not
    assert bag_of_words_auroc(texts, labels, "deployment") == pytest.approx(
        bag_of_words_auroc(texts, labels, "testing"), abs=1e-6)


def test_the_shipped_confounded_subset_is_readable_from_its_words():
    texts, labels, _ = subset("confounded")
    assert bag_of_words_auroc(texts, labels, "testing") > 0.9


def test_bag_identical_pairs_are_not_flagged():
    texts, labels, pairs = subset("clean")
    auc = bag_of_words_auroc(texts, labels, "testing")
    assert auc <= 0.6 and not surface_warning(auc)           # plain k-fold: at or below chance (twin in training)
    assert bag_of_words_auroc(texts, labels, "testing", groups=pairs) == 0.5    # twins in one fold tie exactly


def test_same_seed_same_value():
    texts, labels, _ = subset("clean")
    values = {bag_of_words_auroc(texts, labels, "testing", seed=7) for _ in range(2)}
    assert len(values) == 1 and isinstance(values.pop(), float)


def test_warning_threshold_is_strict():
    assert surface_warning(0.95) and not surface_warning(SURFACE_WARNING) and not surface_warning(0.1)


@pytest.mark.parametrize("labels, positive, n_texts, match", [
    (["testing"] * 4 + ["deployment"], "testing", 5, "at least 2"),
    (["testing"] * 5, "testing", 5, "one other"),
    (["testing", "deployment", "other", "testing", "deployment"], "testing", 5, "one other"),
    (["a", "b", "a", "b", "a"], "testing", 5, "one other"),
    (["testing", "deployment"] * 2, "testing", 5, "one label"),
])
def test_labels_it_cannot_score_are_an_analysis_error(labels, positive, n_texts, match):
    texts = [f"text number {i}" for i in range(n_texts)]
    with pytest.raises(AnalysisError, match=match):
        bag_of_words_auroc(texts, labels, positive)


def test_groups_that_leave_fewer_than_two_folds_are_an_analysis_error():
    with pytest.raises(AnalysisError, match="fold"):
        bag_of_words_auroc(["a b", "c d"] * 2, ["testing", "deployment"] * 2, "testing", groups=[0] * 4)


def planted_twins() -> tuple[list[str], list[str], list[int]]:
    """20 groups of three identical texts, each group its own made-up word, 10 groups per label. A held-out item's
    twins carry its word and its label: where one is in the training fold, the word is the answer."""
    words = [f"zq{chr(97 + g)}x" for g in range(20)]
    texts = [w for w in words for _ in range(3)]
    labels = [("testing" if g % 2 == 0 else "deployment") for g in range(20) for _ in range(3)]
    return texts, labels, [g for g in range(20) for _ in range(3)]


def test_ungrouped_folds_leak_the_twin_and_grouped_folds_do_not():
    from mirrorscan.analysis.surface import surface_baseline

    texts, labels, groups = planted_twins()
    leaked = surface_baseline(texts, labels, "testing", seed=3)
    assert leaked["bag_of_words_auroc"] > 0.9 and leaked["warning"] and leaked["grouped"] is False
    kept = surface_baseline(texts, labels, "testing", groups=groups, seed=3)
    # Grouped: a held-out word was never seen in training, so every held-out item of a fold gets the same score
    # (the intercept); with 2 groups of each label in each of the 5 folds, pos/neg pairs across two folds split
    # evenly both ways and pairs within a fold tie: the AUROC is exactly 1/2.
    assert kept["bag_of_words_auroc"] == 0.5 and not kept["warning"]
    assert (kept["grouped"], kept["n_groups"], kept["folds"], kept["n"]) == (True, 20, 5, 60)
    assert kept["n_features"] == leaked["n_features"] == len(set(texts)) == 20


def test_items_without_a_group_are_their_own():
    from mirrorscan.analysis.surface import surface_baseline

    texts, labels, groups = planted_twins()
    some = [g if g < 10 else None for g in groups]        # half the items ungrouped: 10 groups + 30 single items
    assert surface_baseline(texts, labels, "testing", groups=some)["n_groups"] == 40


def test_the_feature_count_is_the_lower_cased_vocabulary():
    from mirrorscan.analysis.surface import vocabulary_size

    assert vocabulary_size(["Hey u, can U help?", "help me A lot", "a b"]) == len(
        {"hey", "u", "can", "help", "me", "a", "lot", "b"})
