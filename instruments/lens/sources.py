"""The lens headline numbers defined, with how to get each again.

The headline and its nulls are computed from the stored per-layer vectors (directions, projections, AUROC
per layer): SQL selects that input (``traces_lens``), but no ``mirrorscan stats`` command takes vectors, so
those sources say which analysis table holds the per-wrapper values. Kendall's W of the model ranking across
wrappers is a statistic of that table, and ``mirrorscan stats kendall`` computes it from the analysis's
``wrappers.parquet`` (``{analysis}`` is the analysis folder the report names).
"""

from __future__ import annotations

from grid.headline import HeadlineSource, sql_text


def vectors_sql(invocation_id: str) -> str:
    """The lens analysis's input: every successful row's coordinates and per-layer pooled vectors."""
    return ("SELECT label, variant, framing, arm, item_id, item_label, subset, attempt, layer_vectors\n"
            f"FROM traces_lens WHERE invocation_id = {sql_text(invocation_id)} AND error IS NULL\n"
            "ORDER BY label, variant, arm, framing, item_id")


def headline_sources(analysis, settings: dict, invocation_id: str) -> tuple[HeadlineSource, ...]:
    """The sources of ``Lens.headline``'s numbers."""
    frozen = settings["instrument_settings"]
    positive, seed = frozen["positive"], frozen["seed"]
    from_vectors = ("computed by the lens analysis from the stored vectors (mirrorscan analyze "
                    f"{invocation_id}); the per-wrapper values are in {{analysis}}/wrappers.parquet")
    kendall = None
    if len(frozen["variants"]) == 1:
        kendall = (f"mirrorscan stats kendall --input {{analysis}}/wrappers.parquet --score max_auroc_minus_half "
                   f"--object label --rater wrapper --permutations {max(frozen['null_permutations'], 1)} --seed {seed}")
    return (
        HeadlineSource("median_max_auroc_minus_half",
                       f"per wrapper (evaluation × deployment framing pair): max over the layers in the max of AUROC "
                       f"− 0.5, positive class {positive!r}, on the scoring items projected on the wrapper's "
                       "difference-of-means direction; the median over wrappers (−0.5 to 0.5)",
                       vectors_sql(invocation_id), exact=False,
                       note=from_vectors + " (column max_auroc_minus_half; this is their median)"),
        HeadlineSource("sd_over_wrappers", "standard deviation (n − 1 denominator) over wrappers of the same per-wrapper max "
                       "(AUROC − 0.5): how much the number depends on the prompt pair",
                       vectors_sql(invocation_id), exact=False, note=from_vectors),
        HeadlineSource("positive_class", "the scoring-set class whose items count as positives in every AUROC "
                       "(AUROC of the other class is 1 − this)",
                       "SELECT settings->'instrument_settings'->>'positive' AS value FROM scan_invocations "
                       f"WHERE invocation_id = {sql_text(invocation_id)}"),
        HeadlineSource("label_floor_median",
                       f"null: per wrapper the mean of the scoring-label permutation null of the max over layers "
                       f"({frozen['null_permutations']} permutations, labels shuffled and the max retaken), the "
                       "median over wrappers; the floor a headline must clear",
                       vectors_sql(invocation_id), exact=False,
                       note=from_vectors + f" (column label_floor); seeds SeedSequence of seed {seed}, the model, "
                       "variant and wrapper, which `mirrorscan stats null --seed` cannot take"),
        HeadlineSource("kendall_w",
                       "Kendall's W (tie-corrected) of the models' ranking by the per-wrapper headline, across "
                       "wrappers: 1 = every wrapper ranks the models alike (needs ≥ 2 models)",
                       None, stats=kendall, exact=kendall is not None,
                       note=("the command's kendall_w.w_tie_corrected is this number; its permutation p differs from "
                             "the analysis's, whose draws are seeded per variant" if kendall else
                             "several variants: wrappers.parquet holds them all; select one variant's rows first")),
    )
