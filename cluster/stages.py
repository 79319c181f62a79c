"""What one driver start runs, stage by stage: each stage's grid, minus the cells already held.

An instrument's grid has a first stage (its ``cells``) and optional later stages (``stages``: open_scan's
post-hoc self-report). A later stage's cells are built by the instrument from the previous stage's
successful rows of this invocation, and its name is appended to their item_key (``<item_key>~<stage>``),
so every stage's cells have their own probe_ids and go through the same pool, journal and resume: a resume
rebuilds each stage from what is stored and runs only what is missing.

A cell is *held* when a successful row stores it: in this invocation (``grid.cells.plan_attempts``), or,
where the instrument widens "done" with its ``done_cells`` hook, in an earlier invocation of the same
experiment in the same store (open_scan appends only what no earlier invocation holds). Held-elsewhere
cells leave this invocation's grid.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from grid.cells import CELL_KEY, remove_done, with_probe_ids
from grid.ids import SEP
from grid.instrument import InstrumentRef
from grid.trace_schema import trace_schema

STAGE_SEP = "~"
"""Between an item_key and a later stage's name (``q17@1a2b3c4d~posthoc``)."""


@dataclass(frozen=True)
class StageGrid:
    """One stage's cells for this invocation."""

    name: str
    """The stage's name ("" for the first stage)."""
    cells: pa.Table
    """Its cells with probe ids, minus those held by earlier invocations."""
    held_elsewhere: int
    """Cells of the stage that an earlier invocation already holds (left out of ``cells``)."""


def stage_names(ref: InstrumentRef) -> list[str]:
    """The names of the instrument's stages, first ("") included; checks that each can be a probe_id part."""
    names = [stage.name for stage in getattr(ref.instrument, "stages", ())]
    for name in names:
        if not name or SEP in name or STAGE_SEP in name or name != name.strip():
            raise ValueError(f"instrument {ref.name!r}: stage name {name!r} must be non-empty, without "
                             f"{SEP!r}, {STAGE_SEP!r} or surrounding spaces")
    if len(set(names)) != len(names):
        raise ValueError(f"instrument {ref.name!r}: stage names repeat: {names}")
    return ["", *names]


def later_stage_cells(ref: InstrumentRef, index: int, previous_rows: pa.Table) -> pa.Table:
    """Cells of later stage ``index`` (1-based) built by the instrument from the previous stage's successful
    rows, with ``~<stage>`` appended to their item_key and probe ids added."""
    stage = ref.instrument.stages[index - 1]
    cells = stage.cells(ref.spec, previous_rows)
    keys = pc.binary_join_element_wise(cells.column("item_key").cast(pa.string()), pa.scalar(stage.name),
                                       STAGE_SEP)
    cells = cells.set_column(cells.schema.get_field_index("item_key"), "item_key", keys)
    return with_probe_ids(cells, instrument=ref.name)


def successful_rows(store, experiment: str, invocation_id: str, ref: InstrumentRef, cells: pa.Table) -> pa.Table:
    """The invocation's stored successful rows of ``cells`` (all columns of the instrument's trace schema)."""
    rows = store.read(experiment, invocation_id, schema=trace_schema(ref.instrument.columns))
    ok = pc.and_(pc.is_null(rows.column("error")), pc.is_in(rows.column("probe_id"), cells.column("probe_id")))
    return rows.filter(ok)


def held_elsewhere(store, experiment: str, invocation_id: str, ref: InstrumentRef) -> pa.Table | None:
    """(probe_id, sample) keys the instrument counts as done by earlier invocations of the experiment (its
    ``done_cells`` hook, given their successful rows in this store); None when it has no such hook."""
    hook = getattr(ref.instrument, "done_cells", None)
    if hook is None:
        return None
    rows = store.dataset(experiment, schema=trace_schema(ref.instrument.columns)).to_table(
        filter=(pc.field("invocation_id") != invocation_id) & pc.field("error").is_null())
    return hook(ref.spec, rows).select(list(CELL_KEY))


def stage_grids(ref: InstrumentRef, first: pa.Table, store, experiment: str, invocation_id: str) -> Iterator[StageGrid]:
    """Each stage's grid in order; a later one is built (lazily) from what the previous stage stored, so the
    caller runs a stage before asking for the next."""
    held = held_elsewhere(store, experiment, invocation_id, ref)
    cells = first
    for index, name in enumerate(stage_names(ref)):
        if index:
            cells = later_stage_cells(ref, index, successful_rows(store, experiment, invocation_id, ref, cells))
        kept = cells if held is None else remove_done(cells, held)
        yield StageGrid(name, kept, cells.num_rows - kept.num_rows)
        cells = kept
