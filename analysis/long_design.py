"""Measurement designs as they come from real scans: a long table with missing cells and replicates allowed.

:func:`analysis.design.pivot_long` refuses anything but a complete, balanced design, which is what the ANOVA
G-study needs. A scan with error rows, a failed variant or a partial import leaves cells missing; REML
(:mod:`analysis.reml`), the intervals (:mod:`analysis.intervals`) and the pigeonhole bootstrap
(:mod:`analysis.pigeonhole`) read the table as a :class:`LongDesign` instead: one integer code per row and
facet, the level labels, and the scores.

Effects are the facet sets closed under nesting, as in :mod:`analysis.gtheory`; one level of an effect is one
observed combination of its facets' labels, so item ``7`` nested in model A and item ``7`` of model B are
different levels of ``item:model``. A *cell* is one combination of every facet; a cell observed more than
once holds replicates (the residual is then the within-cell variance and the highest-order interaction has
its own component).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.design import BalancedDesign, _column, _scores, design_from_array, design_names
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import RESIDUAL, _effects


@dataclass(frozen=True)
class Effect:
    """One random effect of a design: a facet set closed under nesting, and each row's level of it."""

    name: str
    """Report name, as :class:`analysis.gtheory.Component` names it (``model:wrapper``, ``item:model``)."""
    facets: frozenset[str]
    """Every facet the effect's index carries (primary and nesting)."""
    primary: tuple[str, ...]
    """Facets the effect varies over, in facet order."""
    nesting: tuple[str, ...]
    """Facets the primary ones are nested in, in facet order."""
    codes: np.ndarray = field(repr=False)
    """Level of this effect for each row (0 … levels − 1), int64."""
    levels: int
    """Number of observed levels."""
    keys: np.ndarray = field(repr=False)
    """Sorted key of each observed level (:meth:`LongDesign.key` of its facets' codes); level k has keys[k]."""


@dataclass(frozen=True)
class LongDesign:
    """A long table of scores with one integer code per facet and row; cells may be missing or repeated."""

    scores: np.ndarray = field(repr=False)
    """One score per row, float64, finite; units are those of the score column."""
    facets: tuple[str, ...]
    """Facet names; ``facets[0]`` is the object of measurement."""
    codes: Mapping[str, np.ndarray] = field(repr=False)
    """Facet → each row's label code (0 … len(labels) − 1), int64; nested facets coded by their own label."""
    labels: Mapping[str, np.ndarray] = field(repr=False)
    """Facet → its distinct labels in code order."""
    nested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Facet → every facet it is nested in (transitively)."""

    @property
    def object(self) -> str:
        """The object of measurement: the first facet."""
        return self.facets[0]

    @property
    def single_object(self) -> bool:
        """True when the table holds one object: its interactions are then confounded with the facets' own
        effects, so no effect holding the object is estimated (every effect is error for its score)."""
        return len(self.labels[self.object]) == 1

    @property
    def n_rows(self) -> int:
        """Number of observations (rows)."""
        return int(self.scores.size)

    @cached_property
    def cell_codes(self) -> np.ndarray:
        """Each row's cell (one combination of every facet) as a code 0 … n_cells_observed − 1."""
        return _combine([self.codes[f] for f in self.facets])[0]

    @cached_property
    def n_cells_observed(self) -> int:
        """Distinct cells holding at least one row."""
        return int(self.cell_codes.max()) + 1 if self.n_rows else 0

    @cached_property
    def n_cells_full(self) -> int:
        """Cells of the full design: crossed units' levels multiplied (a nested facet's levels counted inside
        the ancestor combinations observed, see :meth:`units`)."""
        return int(np.prod([len(u[1]) for u in self.units()]))

    @property
    def missing_cells(self) -> int:
        """Cells of the full design with no row."""
        return self.n_cells_full - self.n_cells_observed

    @property
    def replicated(self) -> bool:
        """True when some cell holds more than one row."""
        return self.n_cells_observed < self.n_rows

    @property
    def complete(self) -> bool:
        """Every cell of the full design observed exactly once: the ANOVA G-study applies."""
        return self.missing_cells == 0 and not self.replicated

    def units(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """The crossed units of the full design: each top-level facet with the facets nested in it, and the
        observed combinations of their codes (rows of the array). Their Cartesian product is the full design."""
        out = []
        for f in self.facets:
            if f in self.nested:
                continue
            members = (f, *(c for c in self.facets if f in self.nested.get(c, ())))
            stack = np.stack([self.codes[m] for m in members], axis=1)
            out.append((members, np.unique(stack, axis=0)))
        return out

    def effects(self) -> list[Effect]:
        """Every effect of the design, main effects first; the highest-order one is ``residual`` unless the
        design has replicates (then it is an interaction and the residual is the within-cell variance)."""
        out = []
        top = frozenset(self.facets[1:] if self.single_object else self.facets)
        for fs, primary, nesting in _effects(self.facets, self.nested):
            if fs == top and not self.replicated:
                continue
            if self.single_object and self.object in fs:
                continue
            keys, codes = np.unique(self.key(fs, self.codes), return_inverse=True)
            out.append(Effect(":".join(primary + nesting), fs, primary, nesting, codes.ravel().astype(np.int64),
                              int(len(keys)), keys))
        return out

    def key(self, facets: frozenset[str] | Sequence[str], codes: Mapping[str, np.ndarray]) -> np.ndarray:
        """One int64 per row for the combination of ``facets``' codes (mixed radix over the label counts), so
        the same combination has the same key in any array of codes (observed rows or the full design)."""
        key = np.zeros(len(next(iter(codes.values()))), dtype=np.int64)
        span = 1
        for f in self.facets:
            if f in facets:
                width = len(self.labels[f])
                span *= width
                if span >= 2 ** 62:
                    raise AnalysisError(",".join(sorted(facets)), f"{span:.3g} possible combinations of levels",
                                        "give fewer levels (relabel facets) or split the table")
                key = key * width + codes[f]
        return key

    def full_design(self) -> dict[str, np.ndarray]:
        """Codes of every cell of the full design (the Cartesian product of :meth:`units`), facet → array."""
        units = self.units()
        sizes = [len(u[1]) for u in units]
        if int(np.prod(sizes)) > 20_000_000:
            raise AnalysisError(",".join(self.facets), f"the full design has {int(np.prod(sizes)):,} cells",
                                "analyse a subset of levels (at most 20 million cells)")
        grids = np.meshgrid(*[np.arange(n) for n in sizes], indexing="ij")
        out: dict[str, np.ndarray] = {}
        for (members, combos), idx in zip(units, grids):
            for j, f in enumerate(members):
                out[f] = combos[idx.ravel(), j]
        return out

    def balanced(self) -> BalancedDesign:
        """The complete design as a :class:`BalancedDesign` (axis per facet) for the ANOVA path; with a single
        object, the design of the other facets (the object's one level dropped)."""
        if not self.complete:
            raise AnalysisError(",".join(self.facets), f"{self.missing_cells} missing cell(s), "
                                f"{self.n_rows - self.n_cells_observed} replicate row(s)", "use REML")
        within: dict[str, np.ndarray] = {}
        for f in self.facets:
            anc = self.nested.get(f)
            if not anc:
                within[f] = self.codes[f]
                continue
            group = _combine([self.codes[a] for a in anc])[0]
            pairs, inv = np.unique(np.stack([group, self.codes[f]], axis=1), axis=0, return_inverse=True)
            first = np.searchsorted(pairs[:, 0], pairs[:, 0], side="left")   # pairs sorted by group first
            within[f] = (np.arange(len(pairs)) - first)[inv.ravel()]
        shape = [int(within[f].max()) + 1 for f in self.facets]
        if int(np.prod(shape)) != self.n_rows:
            raise AnalysisError(",".join(self.facets), "nested facets have unequal numbers of levels",
                                "use REML (stats gstudy does so itself)")
        arr = np.empty(self.n_rows)
        arr[np.ravel_multi_index(tuple(within[f] for f in self.facets), shape)] = self.scores
        if self.single_object:                  # the object's axis has one level: the design is the facets'
            return design_from_array(arr.reshape(shape)[0], self.facets[1:], self.nested)
        return design_from_array(arr.reshape(shape), self.facets, self.nested)


def _combine(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """Rows' combinations of several code columns → dense codes 0 … k − 1 (in sorted order) and k."""
    if not columns:
        raise AnalysisError("facets", "no facet", "name at least one facet")
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        width = int(col.max()) + 1 if len(col) else 1
        key = key * width + col
        if key.size and key.max() > 2 ** 62 // max(width, 1):
            key = np.unique(key, return_inverse=True)[1].ravel().astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    return inv.ravel().astype(np.int64), int(len(uniq))


def long_design(table: Any, score: str, object: str, facets: Sequence[str],
                nested: Mapping[str, Any] | None = None) -> LongDesign:
    """Read a long table (dict of columns or pyarrow Table) into a :class:`LongDesign`.

    Measures nothing. Refuses an unknown column, non-numeric or missing scores, null labels, a facet with
    fewer than two levels (the object may have one), and an object nested in another facet; missing cells and
    replicates are allowed.
    """
    names, closure = design_names(score, object, facets, nested)
    if object in closure:
        raise AnalysisError(object, f"the object of measurement is nested in {list(closure[object])}",
                            "analyse the outer facet as the object")
    y = _scores(_column(table, score), score)
    codes, labels = {}, {}
    for f in names:
        col = _column(table, f)
        if len(col) != len(y):
            raise AnalysisError(f, f"has {len(col)} rows but {score!r} has {len(y)}", "give equal columns")
        if col.dtype == object:
            if any(v is None for v in col.tolist()):
                raise AnalysisError(f, "has missing (null) labels", "label every row")
            col = col.astype(str)
        elif col.dtype.kind == "f" and np.isnan(col).any():
            raise AnalysisError(f, "has missing (null) labels", "label every row")
        uniq, inv = np.unique(col, return_inverse=True)
        if len(uniq) < 2 and f != object:
            raise AnalysisError(f, f"has {len(uniq)} level(s); a variance needs at least 2",
                                "observe at least two levels or drop the facet")
        codes[f], labels[f] = inv.ravel().astype(np.int64), uniq
    if len(y) < 3:
        raise AnalysisError(score, f"{len(y)} row(s)", "give at least three observations")
    return LongDesign(y, names, codes, labels, closure)


__all__ = ["Effect", "LongDesign", "long_design", "RESIDUAL"]
