"""Lens's printed tables write small numbers fixed-point, as every other table does (``grid.formatting``):
a permutation p of 4e-05 or a variance component of 1.2e-05 reads 0.0000400 / 0.0000120, never in scientific
notation; a share reads 10%, as the percentages beside it do."""

from __future__ import annotations

import re

from mirrorscan.instruments.lens.design import design_lines
from mirrorscan.instruments.lens.report import claim_lines, model_lines

SCIENTIFIC = re.compile(r"\d[eE][-+]?\d")


def test_small_p_values_are_fixed_point():
    concord = {"base": {"w": 0.91, "p_value": 4e-05}}
    claims = {"base": {"comparisons": [{"a": "m1", "b": "m2", "mean_difference": 0.05, "p_value": 2.5e-06,
                                        "interval": [0.01, 0.09]}], "scaling": {"missing": "one model"}}}
    text = "\n".join(claim_lines(concord, claims, 36))
    assert not SCIENTIFIC.search(text), text
    assert "permutation p = 0.0000400" in text and "p = 0.00000250" in text


def test_small_variance_components_are_fixed_point():
    design = {"observed_sizes": {"wrapper": 36, "item_sample": 2}, "facets": {"model": "model", "wrapper": "wrapper",
                                                                             "item_sample": "item sample"},
              "components": [{"words": "model", "share": 0.5, "raw_estimate": 1.2e-05, "variance": 1.2e-05},
                             {"words": "model × wrapper", "share": 0.5, "raw_estimate": 0.004, "variance": 0.004}],
              "single_wrapper": {"g_coefficient": 0.4, "phi": 0.3}, "observed": {"g_coefficient": 0.9, "phi": 0.8},
              "wrappers_needed": {}, "ratio_model_wrapper_to_model_item": 3.3e-05, "hypothetical": None}
    text = "\n".join(design_lines("base", {"design_numbers": design}, "the headline"))
    assert not SCIENTIFIC.search(text), text
    assert "0.0000120" in text and "0.0000330" in text


def test_the_best_layer_threshold_reads_as_the_shares_beside_it():
    models = {"m/base": {"headline": {"median": 0.1, "sd": 0.02, "min": 0.0, "max": 0.2, "n": 36},
                         "abs_headline": {"median": 0.2}, "best_relative_depth": {"median": 0.5},
                         "content_free": {"random_direction": {"median": 0.3, "p95": 0.34}},
                         "contrastive_null": {"floor": 0.19, "z": -1.2, "p_two_sided": 5e-05},
                         "cosines": {"within_wrapper_halves": 0.99, "across_wrappers": 0.23, "across_wrappers_layer": 3,
                                     "one_item_recovery": 0.97},
                         "argmax_bootstrap": {"median_share": 0.74, "max_share": 1.0, "robust": False,
                                              "wrappers_below_threshold": 0, "distinct_range": [4, 17], "draws": 200}}}
    text = "\n".join(model_lines(models))
    assert "74%" in text and "10%" in text and "10 %" not in text
    assert not SCIENTIFIC.search(text) and "0.0000500" in text, text
