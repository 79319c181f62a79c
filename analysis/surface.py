"""Surface-form baseline: how well the words of a prompt alone predict its label.

A probe that separates "testing" from "deployment" prompts may be reading the model's representation of
being evaluated, or only the prompt's wording ("Question 12: … (A) … Answer:" against "hey can u …").
This module measures the second: the **out-of-fold AUROC of a bag-of-words logistic regression** trained on the
texts, with no model involved. Binary word presence (``CountVectorizer(binary=True)``, lower-cased,
one-character words kept) is its input, with L2 regularisation (C = 1); the vocabulary and the weights are
fitted inside each training fold of a stratified k-fold split, and every item is scored once, by the
model that did not see it. The AUROC is :func:`analysis.auroc.auroc` of those held-out decision values.

It is not a probe AUROC and not a test of the probe: a high value says the labels are recoverable from
surface form, so a probe's AUROC on the same items cannot by itself be credited to the model.

Paired designs: on pairs with identical word multisets (a scoring set built from reordered sentences) plain k-fold gives an AUROC
far *below* 0.5, not 0.5: a held-out item's twin, with the opposite label, is usually in the training
fold, so the held-out score is pulled the wrong way. Passing ``groups`` (the pair id) keeps each pair in
one fold (``StratifiedGroupKFold``); twins then get equal scores and the AUROC is exactly 0.5. Only the
high side is flagged (:data:`SURFACE_WARNING`). :func:`surface_baseline` is the baseline as lens reports it:
the whole scoring set out of fold, the scoring set's pair groups kept whole, with its feature count.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from mirrorscan.analysis.auroc import auroc as _auroc
from mirrorscan.analysis.errors import AnalysisError

SURFACE_WARNING = 0.9
"""Out-of-fold bag-of-words AUROC above which a probe on the same items may be reading the surface."""

TOKEN_PATTERN = r"(?u)\b\w+\b"
"""Words as the vectorizer splits them: runs of word characters, one-letter words ("A", "u") included."""


def vocabulary_size(texts: Sequence[str]) -> int:
    """Features of the bag of words over ``texts``: the distinct lower-cased words (:data:`TOKEN_PATTERN`), the
    vocabulary a fold's vectorizer draws from (each fold's own is a subset, from its training texts)."""
    import re

    return len({w.lower() for t in texts for w in re.findall(TOKEN_PATTERN, t)})


def surface_baseline(texts: Sequence[str], labels: Sequence, positive: Any, groups: Sequence | None = None,
                     folds: int = 5, seed: int = 0) -> dict:
    """The bag-of-words baseline as reported: out-of-fold AUROC (:func:`bag_of_words_auroc`) with ``groups`` kept
    whole (an item without a group, None, is its own), the number of features (:func:`vocabulary_size`), the
    folds, how many groups, and the warning above :data:`SURFACE_WARNING`. Without any group the split is
    plain stratified k-fold and ``grouped`` is False."""
    keys = None
    if groups is not None and any(g is not None for g in groups):
        keys = [f"group:{g}" if g is not None else f"item:{i}" for i, g in enumerate(groups)]
    value = bag_of_words_auroc(texts, labels, positive, folds=folds, seed=seed, groups=keys)
    smallest = min(Counter(labels).values())
    n_groups = len(set(keys)) if keys is not None else len(texts)
    return {"bag_of_words_auroc": value, "warning": surface_warning(value), "n": len(texts),
            "n_features": vocabulary_size(texts), "grouped": keys is not None, "n_groups": n_groups,
            "folds": min(folds, smallest, n_groups)}


def bag_of_words_auroc(texts: Sequence[str], labels: Sequence, positive: Any, folds: int = 5,
                       seed: int = 0, groups: Sequence | None = None) -> float:
    """Out-of-fold AUROC (``positive`` the positive class) of a bag-of-words logistic regression.

    ``folds`` is capped at the smaller class count (and the number of groups); ``seed`` fixes the fold
    shuffle, so the value is deterministic; ``groups`` (optional, one per text) keeps a group in one
    fold. Dimensionless in [0, 1], 0.5 is chance. Raises AnalysisError unless the labels hold exactly
    ``positive`` and one other class, each at least twice, with one label (and group) per text.
    """
    labels = list(labels)
    if len(labels) != len(texts) or (groups is not None and len(groups) != len(texts)):
        raise AnalysisError("labels", f"{len(labels)} labels, {len(texts)} texts, "
                            f"{'no' if groups is None else len(groups)} groups", "give one label (and group) per text")
    counts = Counter(labels)
    if positive not in counts or len(counts) != 2:
        raise AnalysisError("labels", f"classes {sorted(map(str, counts))}; expected {positive!r} and one other",
                            "give binary labels and name the positive class exactly")
    smallest = min(counts.values())
    if smallest < 2:
        raise AnalysisError("labels", f"class sizes {dict(counts)}; each class needs at least 2 items",
                            "add items to the smaller class")
    n_splits = min(folds, smallest, len(texts) if groups is None else len(set(groups)))
    if n_splits < 2:
        raise AnalysisError("folds", f"{n_splits} fold(s) possible (folds={folds})", "use at least 2 folds and groups")

    from sklearn.feature_extraction.text import CountVectorizer  # lazy: importing sklearn costs ~2.5 s
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    texts_arr, y = np.asarray(texts, dtype=object), np.asarray(labels, dtype=object) == positive
    scores = np.empty(len(texts_arr))
    kfold = StratifiedKFold if groups is None else StratifiedGroupKFold
    split = kfold(n_splits=n_splits, shuffle=True, random_state=seed)
    for train, held_out in split.split(texts_arr, y, groups):
        vectorizer = CountVectorizer(lowercase=True, token_pattern=TOKEN_PATTERN, binary=True)
        model = LogisticRegression(max_iter=1000).fit(vectorizer.fit_transform(texts_arr[train]), y[train])
        scores[held_out] = model.decision_function(vectorizer.transform(texts_arr[held_out]))
    return float(_auroc(scores, y, True))


def surface_warning(auroc: float) -> bool:
    """True when a bag-of-words AUROC exceeds :data:`SURFACE_WARNING` (labels readable from wording)."""
    return float(auroc) > SURFACE_WARNING
