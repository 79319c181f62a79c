"""Per-wrapper scaling correlations with log10 parameters: worked examples with known signs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.scaling import scaling_by_wrapper

PARAMS = np.array([0.5e9, 1.5e9, 3e9, 7e9, 14e9, 32e9])


def test_counts_by_sign_and_values_match_scipy():
    x = np.log10(PARAMS)
    rng = np.random.default_rng(0)
    s = np.stack([x, -x, x ** 2, rng.normal(size=6), np.full(6, 2.0)], axis=1)   # up, down, up, noise, flat
    res = scaling_by_wrapper(s, PARAMS, wrappers=["up", "down", "up2", "noise", "flat"])
    assert res.pearson.per_wrapper[0] == pytest.approx(1.0) and res.pearson.per_wrapper[1] == pytest.approx(-1.0)
    for w in range(4):
        assert res.pearson.per_wrapper[w] == pytest.approx(pearsonr(x, s[:, w])[0], abs=1e-12)
        assert res.spearman.per_wrapper[w] == pytest.approx(spearmanr(x, s[:, w])[0], abs=1e-12)
    assert res.spearman.per_wrapper[2] == 1.0                       # monotone, not linear
    assert res.pearson.per_wrapper[2] < 1.0
    assert np.isnan(res.pearson.per_wrapper[4]) and res.pearson.n_undefined == 1
    noise_sign = np.sign(res.pearson.per_wrapper[3])
    assert res.pearson.n_positive == 2 + (noise_sign > 0)
    assert res.pearson.n_negative == 1 + (noise_sign < 0)
    js = res.to_json()
    assert js["pearson"]["per_wrapper"]["flat"] is None and js["pearson"]["n_wrappers"] == 5
    assert js["spearman"]["quantiles"]["max"] == 1.0 and js["spearman"]["quantiles"]["min"] == -1.0


def test_bad_input_is_refused():
    with pytest.raises(AnalysisError, match="parameter counts"):
        scaling_by_wrapper(np.zeros((3, 2)), [1e9, 2e9])
    with pytest.raises(AnalysisError, match="positive"):
        scaling_by_wrapper(np.zeros((3, 2)), [1e9, 0, 2e9])
    with pytest.raises(AnalysisError, match="missing"):
        scaling_by_wrapper(np.array([[1.0, np.nan], [2, 3], [3, 4]]), [1e9, 2e9, 3e9])
