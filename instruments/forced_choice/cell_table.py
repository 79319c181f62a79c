"""The classified forced-choice traces as every number reads them: one row per cell, one model at a time.

Input: a pyarrow table with columns label, invocation_id, pair_id, word_a, word_b, envelope, ordering,
sample, class and error, one row per cell (``latest_rows`` picks that row from a table of attempts).
``model_cells`` reads a one-model table into ``Cell`` tuples and refuses a table that mixes several (split
it with ``by_model``); ``ExpectedCells`` says which cells each pair should have. ``JSONRecord`` is the
mixin every result record of the numbers shares.

Cells are plain Python tuples: a grid holds at most a few hundred thousand rows per model, and plain
loops keep each rule readable against its definition.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.instruments.forced_choice.cells import ORDERINGS

COLUMNS = ("label", "invocation_id", "pair_id", "word_a", "word_b", "envelope", "ordering", "sample",
           "class", "error")
"""Columns every number reads."""
_CLASSES = {"A", "B", "UNCLEAR", "REF"}


class JSONRecord:
    """Mixin of the result records: ``to_dict`` (JSON-ready, nested) and ``to_json`` (a string)."""

    def to_dict(self) -> dict:
        """The record as plain JSON values, nested records included."""
        return dataclasses.asdict(self)   # type: ignore[call-overload]  # only dataclasses take this mixin

    def to_json(self, **kwargs) -> str:
        """The record as a JSON string (``kwargs`` go to ``json.dumps``)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)


class Cell(NamedTuple):
    """One cell of one model: its coordinates, its class (A, B, UNCLEAR, REF) and its error (None if answered)."""

    pair_id: str
    word_a: str
    word_b: str
    envelope: str
    ordering: str
    sample: int
    cls: str | None
    error: str | None


@dataclass(frozen=True)
class ExpectedCells:
    """The cells every pair should have, from the grid: pair-commit spans exactly these.

    Cells of the traces outside this set (another envelope, a sample beyond the count) are not considered
    by pair-commit, so passing the six load-bearing envelopes gives the method's headline rule.
    """

    envelopes: tuple
    """Envelope ids the rule spans."""
    orderings: tuple = ORDERINGS
    """Orderings every envelope is asked in."""
    samples: tuple = (0,)
    """Sample indices of every (envelope, ordering)."""
    pair_ids: tuple | None = None
    """Pairs of the probe set; a pair with no row at all is then incomplete. None: the pairs seen."""

    def keys(self) -> set:
        return set(itertools.product(self.envelopes, self.orderings, self.samples))


def latest_rows(traces: pa.Table) -> pa.Table:
    """One row per cell (invocation_id, probe_id, sample): its successful row if any, else its last error.

    Among several successful rows the lowest ``attempt`` wins (a cell is not redone after a success, so
    this only settles duplicates); among error rows the highest ``attempt``, then the later row. Row order
    of the input is kept.
    """
    n = traces.num_rows
    keys = zip(*(traces.column(c).to_pylist() for c in ("invocation_id", "probe_id", "sample")))
    errors = traces.column("error").to_pylist()
    attempts = traces.column("attempt").to_pylist() if "attempt" in traces.column_names else [0] * n
    best: dict = {}
    for i, key in enumerate(keys):
        ok, attempt = errors[i] is None, attempts[i] or 0
        rank = (1, -attempt, -i) if ok else (0, attempt, i)
        if key not in best or rank > best[key][0]:
            best[key] = (rank, i)
    return traces.take(pa.array(sorted(i for _, i in best.values()), pa.int64()))


def by_model(traces: pa.Table) -> dict[tuple[str, str], pa.Table]:
    """The table split per (label, invocation_id), in order of first appearance."""
    labels, invocations = traces.column("label").to_pylist(), traces.column("invocation_id").to_pylist()
    rows: dict = defaultdict(list)
    for i, key in enumerate(zip(labels, invocations)):
        rows[key].append(i)
    return {key: traces.take(pa.array(idx, pa.int64())) for key, idx in rows.items()}


def model_cells(traces: pa.Table) -> tuple[str, str, list[Cell]]:
    """(label, invocation_id, cells) of a one-model table; AnalysisError naming what is wrong."""
    missing = [c for c in COLUMNS if c not in traces.column_names]
    if missing:
        raise AnalysisError("columns", f"traces lack columns {missing}",
                            "pass a traces table (grid.trace_schema) with its class column filled")
    groups = set(zip(traces.column("label").to_pylist(), traces.column("invocation_id").to_pylist()))
    if len(groups) != 1:
        raise AnalysisError("label", f"traces hold {len(groups)} (label, invocation_id) groups",
                            "split them with by_model() or call summarize()")
    (label, invocation_id), = groups
    cols = [traces.column(c).to_pylist() for c in COLUMNS[2:]]
    cells = [Cell(*row) for row in zip(*cols)]
    for c in cells:
        if c.error is None and c.cls not in _CLASSES:
            raise AnalysisError("class", f"cell {c.pair_id}/{c.envelope}/{c.ordering}/{c.sample} has class "
                                f"{c.cls!r}", "classify the traces first (instruments.forced_choice.classify.with_classes)")
    return label, invocation_id, cells


def by_pair(cells: list[Cell]) -> dict[str, list[Cell]]:
    """The cells grouped per pair id, pairs sorted by id."""
    out: dict = defaultdict(list)
    for c in cells:
        out[c.pair_id].append(c)
    return dict(sorted(out.items()))
