"""The lens headline again from stored rows alone: what ``mirrorscan lens headline`` computes.

Input: the rows the report's query selects (``sources.vectors_sql``: each successful cell's coordinates and
per-layer pooled vectors), as ``mirrorscan sql --format csv`` writes them (``layer_vectors`` as JSON text)
or as Parquet. With the invocation's settings given on the command line (positive class, framings, layer
set, permutations, seed), the same code as the analysis (``numbers.model_numbers``) computes, per model and
variant: the median over wrappers of max over layers of AUROC − 0.5, its sd over wrappers, and the median of
the per-wrapper scoring-label null's mean (the floor). Each wrapper's null draws from a seed sequence of the
root seed, the model key and the wrapper (``numbers.seed_for``), so the same root seed gives the same floor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError, file_error, read_problem

NEEDED = ("label", "variant", "framing", "arm", "item_id", "item_label", "layer_vectors")
"""Columns the input must hold; ``subset``, ``user_text``, ``probe_id`` and ``attempt`` are used when present."""


def read_rows(path: str) -> pa.Table:
    """The input table of ``path`` (.csv from ``mirrorscan sql --format csv``, or .parquet), vectors as lists."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(path, "--input", "does not exist",
                          "write it with mirrorscan sql --format csv \"<the report's query>\" > FILE")
    if file.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(file)
    else:
        import pyarrow.csv as pcsv

        try:
            table = pcsv.read_csv(file, convert_options=pcsv.ConvertOptions(
                column_types={"layer_vectors": pa.string(), "item_id": pa.string(), "framing": pa.string(),
                              "label": pa.string(), "variant": pa.string()}))
        except pa.ArrowException as exc:
            raise file_error(path, "(file)", f"is not a CSV this reads: {read_problem(exc)}",
                             "write it with mirrorscan sql --format csv \"<the report's query>\" > FILE") from None
    missing = [c for c in NEEDED if c not in table.column_names]
    if missing:
        raise file_error(path, missing[0], "column missing; the file's columns are", "select the report's query unchanged",
                         offending=table.column_names)
    if pa.types.is_string(table.schema.field("layer_vectors").type):
        try:
            vectors = [json.loads(v) for v in table.column("layer_vectors").to_pylist()]
        except (TypeError, json.JSONDecodeError) as exc:
            raise ConfigError(path, "layer_vectors", f"is not JSON lists of per-layer vectors ({exc})",
                              "write the file with mirrorscan sql --format csv") from None
        index = table.column_names.index("layer_vectors")
        table = table.set_column(index, "layer_vectors", pa.array(vectors, pa.list_(pa.list_(pa.float64()))))
    for column in ("subset", "user_text"):
        if column not in table.column_names:
            table = table.append_column(column, pa.nulls(table.num_rows, pa.string()))
    if "error" not in table.column_names:
        table = table.append_column("error", pa.nulls(table.num_rows, pa.string()))
    if "probe_id" not in table.column_names and "attempt" in table.column_names:
        table = table.drop_columns(["attempt"])   # without probe ids the rows are taken as one per cell
    return table


def layer_sets(spec: str) -> dict[str | None, str]:
    """``--layers``: one layer set for every variant (``blocks``), or per variant (``base=blocks,chat=all``);
    key None holds the default."""
    from mirrorscan.instruments.lens.extraction import LAYER_SETS

    out: dict[str | None, str] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        variant, _, value = part.rpartition("=")
        if value not in LAYER_SETS:
            raise ConfigError("", "--layers", f"{value!r} is not a layer set", f"use one of {', '.join(LAYER_SETS)}")
        out[variant or None] = value
    return out


def headline(table: pa.Table, *, positive: str, evaluation: list[str], deployment: list[str], layers: dict,
             permutations: int, seed: int) -> dict:
    """Per ``label/variant``: ``median_max_auroc_minus_half`` and ``sd_over_wrappers`` (AUROC − 0.5, −0.5 to 0.5),
    ``label_floor_median`` (same unit; None without permutations) and each wrapper's own values, computed as
    the analysis computes them."""
    from mirrorscan.instruments.lens.numbers import extracted, model_numbers

    wrappers = [(e, d) for e in evaluation for d in deployment]
    out = {}
    for (label, variant), ex in extracted(table).items():
        layer_set = layers.get(variant, layers.get(None, "blocks"))
        key = f"{label}/{variant}"
        if not any(e in ex.tasks and d in ex.tasks for e, d in wrappers):
            raise ConfigError("", "--evaluation", f"no wrapper of these framings has rows for {key} (the input "
                              f"has framings {', '.join(sorted(ex.tasks))})",
                              "name the invocation's framings (its settings' instrument_settings.framings)")
        numbers, rows, _ = model_numbers(ex, wrappers, key, positive=positive, layer_set=layer_set,
                                      permutations=permutations, seed=seed)
        out[key] = {"median_max_auroc_minus_half": numbers["headline"]["median"],
                    "sd_over_wrappers": numbers["headline"]["sd"],
                    "label_floor_median": numbers["label_floor"]["median"] if numbers["label_floor"] else None,
                    "layers": numbers["layers_in_max"], "positive_class": positive,
                    "wrappers": [{k: r.get(k) for k in ("wrapper", "max_auroc_minus_half", "layer", "label_floor")}
                                 for r in rows]}
    return out
