"""A long table (one row per observation, as ``mirrorscan stats`` reads it) as numpy arrays: a column, text
scores parsed, labels as text, the scores of items × layers (``items_by_layer``), and a design's nesting
written ``CHILD:PARENT``. Input a user can fix raises ``AnalysisError`` naming the column (``naming`` adds the
file). Tables are pyarrow Tables already read (``results.long_table`` reads them); nothing here does I/O."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.grid.errors import excerpt


def column(table, name: str) -> np.ndarray:
    """One column as numpy (nulls → None/NaN); unknown name → AnalysisError listing the columns."""
    if name not in table.column_names:
        raise AnalysisError(name, f"no such column; the table's columns are {excerpt(table.column_names)}",
                            "pass an existing column name")
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False))


def numeric_scores(table, name: str):
    """The table with a text score column parsed as float64; the error names the first non-number and its row.

    (A CSV column holding one word among numbers is read as text as a whole; this finds the word.)
    """
    import pyarrow as pa

    if name not in table.column_names or not pa.types.is_string(table.column(name).type) \
            and not pa.types.is_large_string(table.column(name).type):
        return table
    values = []
    for row, v in enumerate(table.column(name).to_pylist()):
        try:
            values.append(None if v is None or v.strip() == "" else float(v))
        except ValueError:
            raise AnalysisError(name, f"non-numeric score {v!r} in data row {row + 1}",
                                "give numbers in the score column") from None
    return table.set_column(table.column_names.index(name), name, pa.array(values, type=pa.float64()))


def labels_as_text(values: np.ndarray, name: str) -> np.ndarray:
    """Labels as strings, so ``--positive`` (always text on the command line) compares with them."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values.tolist()):
        raise AnalysisError(name, "has missing (null) labels", "label every row")
    return np.array([str(v) for v in values.tolist()], dtype=object)


def first_appearance(values: np.ndarray) -> list:
    """The distinct values in order of first appearance."""
    seen: dict = {}
    for v in values.tolist():
        seen.setdefault(v, None)
    return list(seen)


def items_by_layer(table, score: str, label: str, layer: str | None, item: str | None
                   ) -> tuple[np.ndarray, np.ndarray, list]:
    """Long rows → (items, layers) scores, (items,) labels as text, layer labels in order of appearance.

    Without ``layer`` every row is one item (one layer, named ``"all"``). Without ``item`` the items
    of each layer are its rows in file order (every layer must list the items in the same order). An
    item whose label differs between layers, or a missing/duplicated (item, layer) cell, is refused.
    """
    from mirrorscan.analysis.design import pivot_long

    labels = labels_as_text(column(table, label), label)
    if layer is None:
        if item is not None:
            column(table, item)
        raw = column(table, score)
        try:
            scores = np.array([np.nan if v is None else v for v in raw.tolist()], dtype=np.float64)
        except (TypeError, ValueError):
            raise AnalysisError(score, "non-numeric scores", "give numbers in the score column") from None
        if scores.size == 0:
            raise AnalysisError("--input", "has no rows", "give a non-empty table")
        if not np.isfinite(scores).all():
            raise AnalysisError(score, f"{int((~np.isfinite(scores)).sum())} missing or non-finite score(s), "
                                f"first in data row {int(np.flatnonzero(~np.isfinite(scores))[0]) + 1}",
                                "drop unscored items first; absence is not zero")
        return scores[:, None], labels, ["all"]
    lay = column(table, layer)
    lay_key = lay.astype(str) if lay.dtype == object else lay
    if item is None:
        counter: dict = {}
        items = np.empty(len(lay_key), dtype=np.int64)
        for r, v in enumerate(lay_key.tolist()):
            items[r] = counter.get(v, 0)
            counter[v] = items[r] + 1
        item_name = "item (row order within layer)"
    else:
        raw = column(table, item)
        items = raw.astype(str) if raw.dtype == object else raw
        item_name = item
    data = {score: column(table, score), item_name: items, layer: lay_key}
    design = pivot_long(data, score, item_name, [layer])
    item_levels, layer_levels = design.levels[item_name], design.levels[layer]
    codes = np.searchsorted(item_levels, items)
    per_item: dict[int, str] = {}
    for r, (c, lab) in enumerate(zip(codes.tolist(), labels.tolist())):
        if per_item.setdefault(c, lab) != lab:
            raise AnalysisError(label, f"item {item_levels[c]!s} has labels {per_item[c]!r} and {lab!r} "
                                f"(row {r})", "give every item one label across layers")
    order = [int(np.searchsorted(layer_levels, v)) for v in first_appearance(lay_key)]
    names = [plain(layer_levels[k]) for k in order]
    return design.scores[:, order], np.array([per_item[c] for c in range(len(item_levels))], dtype=object), names


def plain(v: Any) -> Any:
    """A numpy scalar as the plain Python value (JSON takes that)."""
    return v.item() if isinstance(v, np.generic) else v


@contextmanager
def naming(path: str) -> Iterator[None]:
    """Errors about the table's contents name the input file."""
    try:
        yield
    except AnalysisError as exc:
        raise (exc.with_file(path) if not exc.file else exc) from None


def parse_nested(specs: list[str]) -> dict[str, list[str]]:
    """``["item:model", "r:t"]`` → ``{"item": ["model"], "r": ["t"]}`` (CHILD:PARENT, repeatable)."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(","))):
            child, colon, parent = part.partition(":")
            if not colon or not child.strip() or not parent.strip():
                raise AnalysisError("--nested", f"{part!r} is not CHILD:PARENT", "write e.g. --nested item:model")
            out.setdefault(child.strip(), []).append(parent.strip())
    return out


def split_names(specs) -> list[str]:
    """Names given comma-separated in a repeatable option (``["a,b", "c"]`` → ``["a", "b", "c"]``; None → [])."""
    return [s.strip() for spec in (specs or []) for s in spec.split(",") if s.strip()]


def split_facets(specs) -> list[str]:
    """The facet columns of ``--facets`` (``split_names``); AnalysisError when none is given."""
    facets = split_names(specs)
    if not facets:
        raise AnalysisError("--facets", "no facet given", "name the facet columns, e.g. --facets wrapper,item")
    return facets
