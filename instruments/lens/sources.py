"""The lens headline numbers defined, with how to get each again.

The headline, its spread and the null's floor are computed from the stored per-layer vectors (directions,
projections, AUROC per layer): SQL selects that input (``traces_lens``) and ``mirrorscan lens headline``
(``instruments.lens.recompute``), given the invocation's settings and seed on its command line, computes
them from it exactly. Kendall's W of the model ranking across wrappers is a statistic of the per-wrapper
table, and ``mirrorscan stats kendall`` computes it from the analysis's ``wrappers.parquet`` (``{analysis}``
is the analysis folder the report names).
"""

from __future__ import annotations

import shlex

from mirrorscan.grid.headline import HeadlineSource, sql_text
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.lens.spec import LensConfig

SUGGESTED = ("SELECT label, variant, rendering, pooling, arm, count(*) AS cells, min(n_layers) AS layers, "
             "min(pooled_tokens) AS min_tokens, max(pooled_tokens) AS max_tokens FROM traces_lens "
             "WHERE invocation_id = {inv} AND error IS NULL GROUP BY label, variant, rendering, pooling, arm "
             "ORDER BY label, variant, arm LIMIT 20")
"""The query a scan's summary suggests: per model, variant, rendering and arm, the cells extracted, the layers
each holds and the range of pooled tokens (the vectors themselves: ``layer_vectors``)."""


def suggested_sql(invocation_id: str) -> str:
    """``SUGGESTED`` for one invocation."""
    return SUGGESTED.format(inv=sql_text(invocation_id))


VECTORS_CSV = "vectors.csv"
"""The file the report's vectors query is written to for ``mirrorscan lens headline``."""


def vectors_sql(invocation_id: str) -> str:
    """The lens analysis's input: every successful row's coordinates and per-layer pooled vectors."""
    return ("SELECT probe_id, label, variant, framing, arm, item_id, item_label, subset, attempt, layer_vectors\n"
            f"FROM traces_lens WHERE invocation_id = {sql_text(invocation_id)} AND error IS NULL\n"
            "ORDER BY label, variant, arm, framing, item_id")


def headline_command(lens: LensConfig, input_file: str = VECTORS_CSV) -> str:
    """The ``mirrorscan lens headline`` command line that computes the headline, its spread and the floor of
    an invocation whose lens settings are ``lens`` from ``input_file`` (``vectors_sql``'s rows)."""
    layer_sets = {v: options.layers for v, options in sorted(lens.variants.items())}
    layers = (next(iter(layer_sets.values())) if len(set(layer_sets.values())) == 1
              else ",".join(f"{v}={s}" for v, s in layer_sets.items()))
    return (f"mirrorscan lens headline --input {input_file} --positive {shlex.quote(lens.positive)} "
            f"--evaluation {shlex.quote(','.join(lens.framings.evaluation))} "
            f"--deployment {shlex.quote(','.join(lens.framings.deployment))} --layers {layers} "
            f"--permutations {lens.null_permutations} --seed {lens.seed}")


def headline_sources(analysis, settings: Settings, invocation_id: str) -> tuple[HeadlineSource, ...]:
    """The sources of ``Lens.headline``'s numbers."""
    lens = LensConfig.from_frozen(settings.instrument_settings)
    positive, seed = lens.positive, lens.seed
    command = headline_command(lens)
    from_vectors = ("the command's <label>/<variant>.{name} is this number; the per-wrapper values are also in "
                    "{{analysis}}/wrappers.parquet")
    kendall = None
    if len(lens.variants) == 1:
        kendall = (f"mirrorscan stats kendall --input {{analysis}}/wrappers.parquet --score max_auroc_minus_half "
                   f"--object label --rater wrapper --permutations {max(lens.null_permutations, 1)} --seed {seed}")
    return (
        HeadlineSource("median_max_auroc_minus_half",
                       f"per wrapper (evaluation × deployment framing pair): max over the layers in the max of AUROC "
                       f"− 0.5, positive class {positive!r}, on the scoring items projected on the wrapper's "
                       "difference-of-means direction; the median over wrappers (−0.5 to 0.5)",
                       vectors_sql(invocation_id), stats=command, input=VECTORS_CSV,
                       note=from_vectors.format(name="median_max_auroc_minus_half")
                       + " (column max_auroc_minus_half; this is their median)"),
        HeadlineSource("sd_over_wrappers", "standard deviation (n − 1 denominator) over wrappers of the same per-wrapper max "
                       "(AUROC − 0.5): how much the number depends on the prompt pair",
                       vectors_sql(invocation_id), stats=command, input=VECTORS_CSV,
                       note=from_vectors.format(name="sd_over_wrappers")),
        HeadlineSource("positive_class", "the scoring-set class whose items count as positives in every AUROC "
                       "(AUROC of the other class is 1 − this)",
                       "SELECT settings->'instrument_settings'->>'positive' AS value FROM scan_invocations "
                       f"WHERE invocation_id = {sql_text(invocation_id)}"),
        HeadlineSource("label_floor_median",
                       f"null: per wrapper the mean of the scoring-label permutation null of the max over layers "
                       f"({lens.null_permutations} permutations, labels shuffled and the max retaken), the "
                       "median over wrappers; the floor a headline must clear",
                       vectors_sql(invocation_id), stats=command, input=VECTORS_CSV,
                       note=from_vectors.format(name="label_floor_median") + f" (column label_floor); each "
                       f"wrapper's draws are seeded from root seed {seed}, the model, variant and wrapper"),
        HeadlineSource("kendall_w",
                       "Kendall's W (tie-corrected) of the models' ranking by the per-wrapper headline, across "
                       "wrappers: 1 = every wrapper ranks the models alike (needs ≥ 2 models)",
                       None, stats=kendall, exact=kendall is not None,
                       note=("the command's kendall_w.w_tie_corrected is this number; its permutation p differs from "
                             "the analysis's, whose draws are seeded per variant" if kendall else
                             "several variants: wrappers.parquet holds them all; select one variant's rows first")),
    )
