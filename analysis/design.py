"""Balanced measurement designs: long-format tables in, one complete score array out.

A G-study needs every cell of its design observed exactly once. :func:`pivot_long` turns a long table
(one row per observation: a score column and one column per facet) into a :class:`BalancedDesign` and
refuses anything else with an :class:`~analysis.errors.AnalysisError` that says what is missing or
duplicated. The first facet is the object of measurement (in mirrorscan usually ``model``).

Nesting: ``nested={"item": "model"}`` reads "item is nested in model" (Brennan's ``i:p``): item labels
are read *within* each model, so item ``7`` of model A and item ``7`` of model B are different items.
On the array, a nested facet's axis indexes its levels within each combination of its ancestors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.grid.errors import excerpt

# How many missing or duplicated cells an error message spells out before saying "and N more".
_EXAMPLES_IN_MESSAGE = 3


@dataclass(frozen=True)
class BalancedDesign:
    """A complete, balanced array of scores with named facets (axis k of ``scores`` is ``facets[k]``)."""

    scores: np.ndarray
    """Scores, float64, one axis per facet, no NaN; units are those of the score column."""
    facets: tuple[str, ...]
    """Facet names in axis order; ``facets[0]`` is the object of measurement."""
    nested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Facet → every facet it is nested in (transitively), e.g. ``{"r": ("t",)}`` for r:t."""
    levels: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Facet → level labels; for a nested facet a 2-D array (ancestor cell in sorted order, level within)."""

    @property
    def object(self) -> str:
        """The object of measurement (the facet of differentiation): the first facet."""
        return self.facets[0]

    @property
    def sizes(self) -> dict[str, int]:
        """Observed number of levels per facet (per ancestor cell for a nested facet)."""
        return dict(zip(self.facets, self.scores.shape))


def _closure(facets: Sequence[str], nested: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """Direct nesting (child → parent or parents) → every ancestor, checked, in facet order."""
    direct: dict[str, set[str]] = {}
    for child, parents in (nested or {}).items():
        parents = (parents,) if isinstance(parents, str) else tuple(parents)
        for name in (child, *parents):
            if name not in facets:
                raise AnalysisError("nested", f"{name!r} is not one of the facets {list(facets)}",
                                    "name only facets in --nested, as CHILD:PARENT")
        if child in parents:
            raise AnalysisError("nested", f"{child!r} is nested in itself", "remove it")
        direct.setdefault(child, set()).update(parents)
    out: dict[str, tuple[str, ...]] = {}
    for child in direct:
        seen: set[str] = set()
        stack = list(direct[child])
        while stack:
            p = stack.pop()
            if p == child:
                raise AnalysisError("nested", f"nesting of {child!r} is circular", "remove the cycle")
            if p not in seen:
                seen.add(p)
                stack.extend(direct.get(p, ()))
        out[child] = tuple(f for f in facets if f in seen)
    return out


def design_from_array(scores: Any, facets: Sequence[str], nested: Mapping[str, Any] | None = None
                      ) -> BalancedDesign:
    """Wrap an already balanced array (axis k = facet k) as a design, after checking it.

    Measures nothing; it only validates shape, names and finiteness. Nested facets index their levels
    within each ancestor cell. Raises AnalysisError on NaN/inf, a size-1 facet or a name mismatch.
    """
    arr = np.asarray(scores, dtype=np.float64)
    facets = tuple(facets)
    if arr.ndim != len(facets):
        raise AnalysisError("facets", f"{len(facets)} facet names for an array with {arr.ndim} axes",
                            "give one name per axis")
    if len(set(facets)) != len(facets):
        raise AnalysisError("facets", f"repeated facet name in {list(facets)}", "name each facet once")
    for name, n in zip(facets, arr.shape):
        if n < 2:
            raise AnalysisError(name, f"has {n} level(s); a variance needs at least 2",
                                "observe at least two levels or drop the facet")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AnalysisError("score", f"{int(bad.sum())} non-finite score(s), first at "
                            + ", ".join(f"{f}[{i}]" for f, i in zip(facets, idx)),
                            "drop or impute them before the G-study (absence is not zero)")
    closure = _closure(facets, nested)
    levels = {f: np.arange(n) for f, n in zip(facets, arr.shape) if f not in closure}
    return BalancedDesign(arr, facets, closure, levels)


def complete_table(values: Any, field: str, rows: str, columns: str, fix: str) -> np.ndarray:
    """``values`` as a float (rows ≥ 2, columns ≥ 2) array with no missing cell, else AnalysisError.

    Shared by every statistic over a two-way table (Kendall's W over objects × raters, model-comparison
    claims over models × wrappers): absence is never read as zero.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise AnalysisError(field, f"shape {x.shape}; expected ({rows} ≥ 2, {columns} ≥ 2)", fix)
    if not np.isfinite(x).all():
        raise AnalysisError(field, f"{int((~np.isfinite(x)).sum())} missing cell(s) of the {rows} × {columns} table",
                            f"complete the {rows} × {columns} table (absence is not zero)")
    return x


def _column(table: Any, name: str) -> np.ndarray:
    """One column of a dict-of-columns or a pyarrow Table as a numpy array (nulls become None/NaN)."""
    names = list(table.column_names) if hasattr(table, "column_names") else list(table.keys())
    if name not in names:
        raise AnalysisError(name, f"no such column; the table's columns are {excerpt(names)}",
                            "pass an existing column name")
    col = table.column(name) if hasattr(table, "column_names") else table[name]
    if hasattr(col, "to_numpy") and hasattr(col, "type"):    # pyarrow (Chunked)Array; nulls → None/NaN
        return np.asarray(col.to_numpy(zero_copy_only=False))
    if isinstance(col, np.ndarray):
        return col
    arr = np.asarray(col)
    return arr if arr.dtype.kind in "fiub" else np.asarray(list(col), dtype=object)


def _scores(raw: np.ndarray, name: str) -> np.ndarray:
    if raw.dtype.kind in "fiub":
        vals = raw.astype(np.float64)
    else:
        vals = _object_scores(raw, name)
    nan = ~np.isfinite(vals)
    if nan.any():
        raise AnalysisError(name, f"{int(nan.sum())} missing or non-finite score(s), first in row "
                            f"{int(np.flatnonzero(nan)[0])}", "drop or impute them; absence is not zero")
    return vals


def _object_scores(raw: np.ndarray, name: str) -> np.ndarray:
    if any(isinstance(v, (str, bytes)) for v in raw.tolist()):
        bad = next(v for v in raw.tolist() if isinstance(v, (str, bytes)))
        raise AnalysisError(name, f"non-numeric score {excerpt(bad)}", "give numbers in the score column")
    try:
        vals = np.asarray([np.nan if v is None else v for v in raw.tolist()], dtype=np.float64)
    except (TypeError, ValueError):
        bad = next(v for v in raw.tolist() if not _is_number(v))
        raise AnalysisError(name, f"non-numeric score {excerpt(bad)}", "give numbers in the score column") from None
    return vals


def _level_label(levels: Mapping[str, np.ndarray], facet: str, code: int) -> str:
    lv = levels.get(facet)
    return str(lv[code]) if lv is not None and lv.ndim == 1 else f"#{code + 1}"


def _is_number(v: Any) -> bool:
    try:
        float(v)
        return v is not None and not isinstance(v, str)
    except (TypeError, ValueError):
        return False


def design_names(score: str, object: str, facets: Sequence[str], nested: Mapping[str, Any] | None
                 ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """(object and facets in axis order, nesting closure) of a long table's design, refusing a repeated facet or a
    score column named as a facet. Shared by the balanced reader here and ``analysis.long_design``."""
    names = (object, *facets)
    if len(set(names)) != len(names):
        raise AnalysisError("facets", f"repeated facet in {list(names)}", "name each facet once")
    if score in names:
        raise AnalysisError(score, "is both the score and a facet", "choose a different score column")
    return names, _closure(names, nested)


def pivot_long(table: Any, score: str, object: str, facets: Sequence[str],
               nested: Mapping[str, Any] | None = None) -> BalancedDesign:
    """Long table → balanced array with axes (object, *facets), refusing unbalanced or incomplete input.

    ``table`` is a dict of equal-length columns or a pyarrow Table. Every combination of levels must
    occur exactly once; the error names the count and the first missing (or repeated) cells. Nested
    facets must have the same number of levels inside every ancestor cell. Measures nothing itself.
    """
    names, closure = design_names(score, object, facets, nested)
    vals = _scores(_column(table, score), score)
    cols = [_column(table, f) for f in names]
    for f, c in zip(names, cols):
        if len(c) != len(vals):
            raise AnalysisError(f, f"has {len(c)} rows but {score!r} has {len(vals)}", "give equal columns")
        if any(v is None for v in c.tolist()):
            raise AnalysisError(f, "has missing (null) labels", "label every row")

    codes: dict[str, np.ndarray] = {}
    levels: dict[str, np.ndarray] = {}
    # crossed facets first, then nested ones from the outermost in (an ancestor is coded before its child)
    order = sorted(range(len(names)), key=lambda k: len(closure.get(names[k], ())))
    for k in order:
        f, col = names[k], cols[k]
        own = col.astype(str) if col.dtype == object else col
        if f not in closure:
            uniq, inv = np.unique(own, return_inverse=True)
            codes[f], levels[f] = inv.ravel(), uniq
            continue
        anc = closure[f]
        key = np.stack([codes[a] for a in anc], axis=1)
        groups, ginv = np.unique(key, axis=0, return_inverse=True)
        ginv = ginv.ravel()
        per_group = [np.unique(own[ginv == g]) for g in range(len(groups))]
        if len({len(u) for u in per_group}) != 1:
            lo = min(range(len(groups)), key=lambda g: len(per_group[g]))
            hi = max(range(len(groups)), key=lambda g: len(per_group[g]))
            def where(g: int) -> str:
                return ", ".join(f"{a}={_level_label(levels, a, groups[g][j])}" for j, a in enumerate(anc))
            raise AnalysisError(f, f"nested in {list(anc)} but has {len(per_group[hi])} levels at "
                                f"{where(hi)} and {len(per_group[lo])} at {where(lo)}",
                                "give every ancestor cell the same number of nested levels")
        code = np.empty(len(own), dtype=np.int64)
        for g, u in enumerate(per_group):
            m = ginv == g
            code[m] = np.searchsorted(u, own[m])
        codes[f] = code
        levels[f] = np.stack(per_group)    # rows: ancestor cells in sorted order; columns: levels within

    shape = [int(codes[f].max()) + 1 for f in names]
    # a nested facet whose ancestors' full combinations are not all present shows up as missing cells
    flat = np.ravel_multi_index(tuple(codes[f] for f in names), shape)
    count = np.bincount(flat, minlength=int(np.prod(shape)))

    def _label(cell_flat: int) -> str:
        idx = np.unravel_index(cell_flat, shape)
        parts = []
        for k, f in enumerate(names):
            if f in closure:
                parts.append(f"{f}=#{idx[k] + 1} within " + "/".join(closure[f]))
            else:
                parts.append(f"{f}={levels[f][idx[k]]}")
        return ", ".join(parts)

    for bad, what, fix in ((count == 0, "missing", "complete the design or drop the incomplete levels"),
                           (count > 1, "observed more than once",
                            "aggregate replicates first or add the replicate (e.g. sample) as a facet")):
        if bad.any():
            cells = np.flatnonzero(bad)
            ex = "; ".join(_label(int(c)) for c in cells[:_EXAMPLES_IN_MESSAGE])
            more = f" and {len(cells) - _EXAMPLES_IN_MESSAGE} more" if len(cells) > _EXAMPLES_IN_MESSAGE else ""
            raise AnalysisError(",".join(names), f"unbalanced design: {len(cells)} of {len(count)} cells "
                                f"{what} ({ex}{more})", fix)
    array = np.empty(len(count))
    array[flat] = vals                     # every cell exactly once, checked above
    design = design_from_array(array.reshape(shape), names, nested)
    return BalancedDesign(design.scores, design.facets, design.nested, levels)
