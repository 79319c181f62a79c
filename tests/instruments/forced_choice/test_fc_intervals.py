"""forced_choice's headline intervals: the estimates are the numbers analyze prints, cells with errors are missing
cells (REML), and the terminal block says what is random and what the verdicts are."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.analysis.headline_intervals import format_intervals, headline_intervals
from mirrorscan.instruments.forced_choice.commit import per_cell_commit_rate
from mirrorscan.instruments.forced_choice.cell_table import by_model
from mirrorscan.instruments.forced_choice.intervals import headline_scores
from mirrorscan.instruments.forced_choice.position_bias import position_bias
from mirrorscan.instruments.forced_choice.sharpness import sharpness

ENVELOPES = [f"env{k}" for k in range(6)]
PAIRS = [f"p{k}" for k in range(10)]


def _cells(seed: int, errors: float = 0.0) -> pa.Table:
    """Three models whose commit and first-word rates differ, over 6 envelopes × 10 pairs × 2 orderings × 2
    samples; a share of cells errored (no class)."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, (commit, first) in {"alpha": (0.9, 0.8), "beta": (0.6, 0.5), "gamma": (0.55, 0.5)}.items():
        env_shift = rng.normal(0, 0.15, len(ENVELOPES))
        for e, env in enumerate(ENVELOPES):
            for pair in PAIRS:
                for order in ("AB", "BA"):
                    for sample in range(2):
                        p = min(max(commit + env_shift[e], 0.05), 0.95)
                        if rng.random() < errors:
                            cls, err = None, "RuntimeError: engine died"
                        elif rng.random() < p:
                            picks_first = rng.random() < first
                            cls, err = ("A" if picks_first == (order == "AB") else "B"), None
                        else:
                            cls, err = "UNCLEAR", None
                        rows.append({"label": m, "invocation_id": "inv", "pair_id": pair, "word_a": pair + "a",
                                     "word_b": pair + "b", "envelope": env, "ordering": order, "sample": sample,
                                     "class": cls, "error": err})
    return pa.Table.from_pylist(rows)


def test_estimates_are_the_numbers_analyze_prints():
    cells = _cells(1)
    result = headline_intervals(headline_scores(cells))
    heads = result["headlines"]
    for (label, _), table in by_model(cells).items():
        commit = {o["object"]: o["estimate"] for o in heads["per_cell_commit_rate"]["objects"]}[label]
        assert commit == pytest.approx(100 * per_cell_commit_rate(table).per_cell_commit_rate)
        bias = {o["object"]: o["estimate"] for o in heads["position_bias_pp"]["objects"]}[label]
        assert bias == pytest.approx(position_bias(table).overall.position_bias_pp)      # every unit has both
        sharp = {o["object"]: o["estimate"] for o in heads["mean_sharpness"]["objects"]}[label]
        assert sharp == pytest.approx(sharpness(table).mean_sharpness)
    commit = heads["per_cell_commit_rate"]
    assert commit["random"] == ["envelope", "pair_id"] and commit["fixed"] == ["ordering"]
    assert commit["components_method"] == "anova"     # orderings and samples averaged: one mean per cell
    pairs = {(d["a"], d["b"]): d for d in commit["differences"]}
    assert pairs[("alpha", "beta")]["verdict"] == "alpha higher"
    assert pairs[("beta", "gamma")]["verdict"] == "indistinguishable at this design"


def test_error_rows_are_missing_cells_not_zeros():
    """10 % of rows failed at random, and every row of beta in env2 (a failed variant): the cells of that
    variant are missing, not zeros; the other errors leave cells averaged over what they answered."""
    cells = _cells(2, errors=0.1)
    dead = [(l == "beta" and e == "env2") for l, e in zip(cells.column("label").to_pylist(),
                                                          cells.column("envelope").to_pylist())]
    cells = cells.set_column(cells.column_names.index("error"), "error", pa.array(
        ["RuntimeError: engine died" if d else e for d, e in zip(dead, cells.column("error").to_pylist())]))
    n_errors = sum(e is not None for e in cells.column("error").to_pylist())
    result = headline_intervals(headline_scores(cells))
    commit = result["headlines"]["per_cell_commit_rate"]
    assert commit["components_method"] == "reml" and commit["missing_cells"] >= len(PAIRS)
    assert commit["n_scores"] == cells.num_rows - n_errors
    for (label, _), table in by_model(cells).items():
        est = {o["object"]: o["estimate"] for o in commit["objects"]}[label]
        plain = 100 * per_cell_commit_rate(table).per_cell_commit_rate
        assert abs(est - plain) < 3          # cell means over what each cell answered: close to the plain mean
    text = format_intervals(result)
    assert "commit/cell  (random: envelope, pair_id; averaged within cells: ordering, samples; REML" in text
    assert "paired differences" in text and "alpha − beta" in text
