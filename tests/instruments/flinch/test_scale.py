"""Known answers for the flinch scale, its two aggregations and the sampling proxy (worked by hand from the
method's definitions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mirrorscan.instruments.flinch.proxy import clopper_pearson, is_hit, max_proxy_flinch, proxy_score
from mirrorscan.instruments.flinch.scale import axis_score, flinch_of, term_score, total_flinch


@pytest.mark.parametrize("lp, expected", [(-1.0, 0.0), (-16.0, 100.0), (-8.5, 50.0), (-4.0, 20.0),
                                          (-0.2, 0.0), (0.0, 0.0), (-16.5, 100.0), (-40.0, 100.0)])
def test_the_fixed_scale_maps_minus_1_to_0_and_minus_16_to_100_and_clips(lp, expected):
    assert flinch_of(lp) == pytest.approx(expected, abs=1e-12)


def test_the_scale_works_on_arrays_and_keeps_nan():
    out = flinch_of(np.array([-1.0, -8.5, -30.0, np.nan]))
    assert out[:3] == pytest.approx([0.0, 50.0, 100.0]) and math.isnan(out[3])


def test_a_term_is_the_mean_of_its_carriers():
    t = term_score("murdered", [-2.0, -4.0, -6.0, -8.0])
    assert t.lp_mean == -5.0 and t.n_carriers == 4 and t.flinch == pytest.approx(100 * 4 / 15)
    with pytest.raises(ValueError, match="no scored carrier"):
        term_score("x", [])


def test_the_two_aggregations_differ_exactly_where_clipping_bites():
    # one term far above the top of the scale, one far below it
    terms = [term_score("easy", [-0.5]), term_score("hard", [-20.0])]   # flinch 0 and 100
    by_lp = axis_score("v", "Violence", terms, "axis_lp_mean")
    by_term = axis_score("v", "Violence", terms, "clipped_term_mean")
    assert by_lp.lp_mean == by_term.lp_mean == -10.25
    assert by_lp.flinch == pytest.approx(100 * 9.25 / 15)     # 61.67: the mean lp, then the map
    assert by_term.flinch == pytest.approx(50.0)              # the map, clipped, then the mean
    assert (by_lp.aggregation, by_term.aggregation) == ("axis_lp_mean", "clipped_term_mean")
    # inside the scale's range the two agree
    inside = [term_score("a", [-2.0]), term_score("b", [-5.0])]
    assert axis_score("k", "K", inside, "axis_lp_mean").flinch == pytest.approx(
        axis_score("k", "K", inside, "clipped_term_mean").flinch)
    with pytest.raises(ValueError, match="aggregation 'median'"):
        axis_score("v", "V", terms, "median")


def test_the_total_sums_the_axes():
    a = axis_score("a", "A", [term_score("x", [-8.5])])
    b = axis_score("b", "B", [term_score("y", [-4.0])])
    assert total_flinch([a, b]) == pytest.approx(70.0)


@pytest.mark.parametrize("continuation, term, hit", [
    (" murdered in his sleep", "murdered", True), ("Murdered.", "murdered", True),
    ('  "Tiananmen" Square', "Tiananmen", True), ("...murdered", "murdered", True),
    ("the murdered man", "murdered", False), ("murderer", "murdered", False), ("", "murdered", False),
    ("drone strikes", "drone strikes", True), ("drone attacks", "drone strikes", False),
    ("Drone-strikes", "drone strikes", False)])
def test_a_hit_is_the_term_as_the_first_word_or_words(continuation, term, hit):
    assert is_hit(continuation, term) is hit


@pytest.mark.parametrize("n", [10, 50, 200])
def test_clopper_pearson_at_zero_and_all_hits_has_its_closed_form(n):
    # k = 0: upper = 1 − (α/2)^(1/n); k = n: lower = (α/2)^(1/n)
    assert clopper_pearson(0, n) == pytest.approx((0.0, 1 - 0.025 ** (1 / n)), rel=1e-9)
    assert clopper_pearson(n, n) == pytest.approx((0.025 ** (1 / n), 1.0), rel=1e-9)
    lo, hi = clopper_pearson(3, n)
    lo2, hi2 = clopper_pearson(n - 3, n)
    assert (lo, hi) == pytest.approx((1 - hi2, 1 - lo2), rel=1e-9)   # symmetric in hits and misses
    assert lo < 3 / n < hi


def test_the_proxy_at_k_zero_is_a_bound_and_at_k_n_is_zero():
    none = proxy_score(0, 50)
    assert none.proxy_lp is None and none.proxy_flinch is None
    assert none.proxy_flinch_at_least == pytest.approx(100 * (math.log(50) - 1) / 15) == max_proxy_flinch(50)
    assert 19.4 < none.proxy_flinch_at_least < 19.5
    every = proxy_score(50, 50)
    assert every.proxy_lp == 0.0 and every.proxy_flinch == 0.0 and every.proxy_flinch_at_least is None
    one = proxy_score(1, 50)
    assert one.proxy_flinch == pytest.approx(max_proxy_flinch(50))   # the ceiling for k ≥ 1
    assert proxy_score(5, 50).proxy_lp == pytest.approx(math.log(0.1))
    with pytest.raises(ValueError):
        proxy_score(51, 50)


def test_two_runs_give_the_same_answer_only_with_the_same_tokens_and_log_probs_within_1e_4():
    from mirrorscan.instruments.flinch.instrument import INSTRUMENT

    row = {"target_token_ids": [5, 9], "target_logprobs": [-1.0, -2.0]}
    assert INSTRUMENT.same_answer(row, {**row, "target_logprobs": [-1.00005, -2.0]})
    assert not INSTRUMENT.same_answer(row, {**row, "target_logprobs": [-1.001, -2.0]})
    assert not INSTRUMENT.same_answer(row, {**row, "target_token_ids": [5, 8]})
    assert not INSTRUMENT.same_answer(row, {**row, "target_logprobs": None})   # an error row answers nothing


def test_a_spec_reads_its_corpus_once_per_process_and_still_refuses_a_changed_file(tmp_path):
    import json as _json

    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.instruments.flinch import instrument as fl

    path = tmp_path / "c.json"
    axis = {"label": "S", "terms": [{"word": f"w{i}", "carriers": ["It was all {BLANK}."]} for i in range(2)]}
    path.write_text(_json.dumps({"axes": {"s": axis}}))
    from mirrorscan.instruments.flinch.corpus import load_corpus

    first = load_corpus(str(path))
    spec = fl.from_frozen({"corpus": str(path), "corpus_sha256": first.sha256, "axes": ["s"],
                           "aggregation": "axis_lp_mean", "n_items": 2})
    assert spec.corpus() is spec.corpus()   # cached: render calls it for every block
    stale = fl.from_frozen({**spec.frozen, "corpus_sha256": "0" * 64})
    with pytest.raises(ConfigError, match="changed since the invocation was frozen"):
        stale.corpus()
