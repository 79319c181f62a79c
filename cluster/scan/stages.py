"""What one driver start runs, stage by stage: each stage's grid, minus the cells already held.

An instrument's grid has a first stage (its ``cells``) and optional later stages (``stages``: open_scan's
post-hoc self-report). A later stage's cells are built by the instrument from the previous stage's
successful rows — this invocation's, and for cells held elsewhere the earlier invocation's, so a later
stage that an interrupted invocation never reached runs in the next one — and its name is appended to their item_key (``<item_key>~<stage>``),
so every stage's cells have their own probe_ids and go through the same pool, journal and resume: a resume
rebuilds each stage from what is stored and runs only what is missing.

A cell is *held* when a successful row stores it: in this invocation (``grid.cells.plan_attempts``), or,
where the instrument widens "held" with its ``held_cells`` hook, in an earlier invocation of the same
experiment in the same store (open_scan appends only what no earlier invocation holds). Held-elsewhere
cells leave this invocation's grid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from mirrorscan.grid.cells import CELL_KEY, remove_held, with_probe_ids
from mirrorscan.grid.ids import SEP
from mirrorscan.grid.instrument import InstrumentRef, Stage
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import trace_schema

STAGE_SEP = "~"
"""Between an item_key and a later stage's name (``q17@1a2b3c4d~posthoc``)."""
NO_INVOCATION = "00000000-0000-0000-0000-000000000000"
"""An invocation id no run has: what "this invocation" holds before it exists (nothing)."""


def instrument_ref(settings: Settings) -> InstrumentRef:
    """The instrument of frozen ``settings``, as it travels to Ray workers."""
    return InstrumentRef(settings.instrument, settings.instrument_settings, settings.input_root)


def grid_cells(settings: Settings, *, compact: bool = False) -> pa.Table:
    """The full grid of frozen ``settings``: the instrument's cells for every model label, with probe ids
    (``compact``: text columns left dictionary-encoded, ``grid.cells.with_probe_ids``)."""
    ref = instrument_ref(settings)
    labels = [m.label for m in settings.models]
    return with_probe_ids(ref.instrument.cells(ref.spec, labels, settings.samples), instrument=ref.name,
                          compact=compact)


@dataclass(frozen=True)
class StageScope:
    """Whose stages are built and from what: an invocation of an experiment in a store, its instrument, and the
    model each label names now."""

    store: object
    """The opened trace store (``cluster.store.traces``)."""
    experiment: str
    """The experiment's name (the store's folder)."""
    invocation_id: str
    """The invocation whose rows count as "this invocation's" (``NO_INVOCATION`` before it exists)."""
    ref: InstrumentRef
    """The instrument and its frozen section."""
    model_sources: dict[str, str] | None = None
    """Label → canonical model source: earlier rows count only for the same model; None keeps every row."""


@dataclass(frozen=True)
class StageGrid:
    """One stage's cells for this invocation."""

    name: str
    """The stage's name ("" for the first stage)."""
    cells: pa.Table
    """Its cells with probe ids, minus those held by earlier invocations."""
    held_elsewhere: int
    """Cells of the stage that an earlier invocation already holds (left out of ``cells``)."""
    grid: pa.Table | None = None
    """The stage's every cell, those held elsewhere included (what ``cells`` was taken from)."""


def stage_names(ref: InstrumentRef) -> list[str]:
    """The names of the instrument's stages, first ("") included; checks that each can be a probe_id part."""
    names = [stage.name for stage in ref.instrument.stages]
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


def stage_columns(ref: InstrumentRef, stage: Stage) -> list[str] | None:
    """The columns a stage's ``cells`` reads from the previous stage's rows (None: every column)."""
    if not stage.reads:
        return None
    return list(dict.fromkeys([*IDENTITY_COLUMNS, "error", *ref.instrument.coordinates, *stage.reads]))


def successful_rows(scope: StageScope, cells: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """The invocation's stored successful rows of ``cells`` (``columns``, default all of the instrument's trace
    schema)."""
    rows = scope.store.read(scope.experiment, scope.invocation_id, columns=columns,
                            schema=trace_schema(scope.ref.instrument.columns))
    ok = pc.and_(pc.is_null(rows.column("error")), pc.is_in(rows.column("probe_id"), cells.column("probe_id")))
    return rows.filter(ok)


IDENTITY_COLUMNS = ("invocation_id", "probe_id", "sample", "label", "model", "model_canonical", "item_key",
                    "envelope", "ordering", "created_at")
"""Columns of earlier rows handed to an instrument's ``held_cells`` (with its coordinate columns)."""


def earlier_rows(scope: StageScope) -> pa.Table:
    """Successful rows of the experiment's other invocations in this store (identity and coordinate columns,
    and ``part``: the file holding the row), read through their indexes (``cluster.store.row_index``): those of
    each label answered by the model source it has now (``scope.model_sources``; None keeps every row)."""
    from mirrorscan.cluster.store.row_index import read_successful_rows

    ref = scope.ref
    rows = read_successful_rows(scope.store, scope.experiment, index_columns(ref), trace_schema(ref.instrument.columns),
                                exclude=scope.invocation_id)
    return rows if scope.model_sources is None else of_model_sources(rows, scope.model_sources)


def index_columns(ref: InstrumentRef) -> list[str]:
    """What an invocation's index holds of each row: identity, error and the instrument's coordinates."""
    return list(dict.fromkeys([*IDENTITY_COLUMNS, "error", *ref.instrument.coordinates]))


def of_model_sources(rows: pa.Table, model_sources: dict[str, str]) -> pa.Table:
    """The rows whose (label, model_canonical) is a pair of ``model_sources`` (label → canonical model source)."""
    if rows.num_rows == 0:
        return rows
    labels = pa.array(list(model_sources), pa.string())
    expected = pc.take(pa.array(list(model_sources.values()), pa.string()), pc.index_in(rows.column("label"), labels))
    return rows.filter(pc.fill_null(pc.equal(rows.column("model_canonical"), expected), False))


def held_elsewhere(scope: StageScope, earlier: pa.Table | None = None) -> pa.Table | None:
    """(probe_id, sample) keys the instrument counts as held by earlier invocations of the experiment (its
    ``held_cells``, given ``earlier_rows``, or ``earlier`` where the caller read them already); None when it
    keeps no grid across invocations (``appends`` false)."""
    ref = scope.ref
    if not ref.instrument.appends:
        return None
    if earlier is None:
        earlier = earlier_rows(scope)
    return ref.instrument.held_cells(ref.spec, earlier).select(list(CELL_KEY))


def held_rows(scope: StageScope, cells: pa.Table, held: pa.Table, earlier: pa.Table, stage: str,
              columns: list[str] | None = None) -> tuple[pa.Table, int]:
    """(earlier invocations' successful rows (``columns``, default all) of the ``cells`` that ``held`` counts
    as held there and whose cell in the later stage ``stage`` is not held yet; how many of those cells' later
    cells are held already). A later stage is built from these rows too, so an earlier invocation's
    unfinished later stage finishes here. Only the parts holding them are read (``earlier``'s ``part``)."""
    schema = trace_schema(scope.ref.instrument.columns)
    key_schema = pa.schema([("probe_id", pa.string()), ("sample", pa.int32())])
    held = held.cast(key_schema).group_by(list(CELL_KEY)).aggregate([])
    wanted = cells.select(["label", "item_key", *CELL_KEY]).cast(
        pa.schema([("label", pa.string()), ("item_key", pa.string()), *key_schema])).join(
        held, keys=list(CELL_KEY), join_type="inner")
    # a previous cell whose (label, item_key~stage, sample) is held already builds nothing new: never read it
    parts = pc.split_pattern(held.column("probe_id"), SEP, max_splits=2)
    held_next = pc.binary_join_element_wise(pc.list_element(parts, 0), pc.list_element(parts, 1),
                                            held.column("sample").cast(pa.string()), "\x1f")
    next_key = pc.binary_join_element_wise(
        wanted.column("label"), pc.binary_join_element_wise(wanted.column("item_key"), pa.scalar(stage), STAGE_SEP),
        wanted.column("sample").cast(pa.string()), "\x1f")
    later_held = pc.is_in(next_key, held_next)
    skipped = len(next_key.filter(later_held).unique())   # held later cells (two previous rows may share one)
    wanted = wanted.filter(pc.invert(later_held)).select(list(CELL_KEY))
    if wanted.num_rows == 0:
        empty = schema.empty_table()
        return (empty if columns is None else empty.select(columns)), skipped
    holding = earlier.filter(pc.is_in(_cell_keys(earlier), _cell_keys(wanted))).column("part").unique().to_pylist()
    rows = pads.dataset(holding, schema=schema, format="parquet", filesystem=scope.store.fs).to_table(columns=columns, filter=pc.field("error").is_null())
    rows = rows.filter(pc.is_in(_cell_keys(rows), _cell_keys(wanted)))   # (not a join: payload may be lists)
    return _first_per_cell(rows), skipped


def _cell_keys(table: pa.Table) -> pa.Array:
    """``probe_id`` and ``sample`` joined into one string per row (a set-membership key)."""
    return pc.binary_join_element_wise(table.column("probe_id").cast(pa.string()),
                                       table.column("sample").cast(pa.string()), "\x1f")


def _first_per_cell(rows: pa.Table) -> pa.Table:
    """One row per (probe_id, sample), the newest (a cell held by two earlier invocations)."""
    if rows.num_rows == 0:
        return rows
    rows = rows.sort_by([("created_at", "descending")])
    seen, keep = set(), []
    for i, key in enumerate(zip(rows.column("probe_id").to_pylist(), rows.column("sample").to_pylist())):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return rows.take(pa.array(keep, pa.int64()))


def stage_grids(scope: StageScope, first: pa.Table, earlier: pa.Table | None = None, hold: bool = True,
                previous: Callable[[Stage, pa.Table], pa.Table] | None = None) -> Iterator[StageGrid]:
    """Each stage's grid in order, the first from ``first``; a later one is built (lazily) from the previous
    stage's stored rows — this invocation's and, for held cells, the earlier invocation's that holds them — so
    the caller runs a stage before asking for the next. ``scope.model_sources`` limits held cells to rows of the same
    model; ``earlier``: ``earlier_rows`` already read with those model sources. ``hold`` False (a reproduction): no
    cell counts as held by another invocation, every stage is the full grid. ``previous(stage, cells)``, when
    given, stands in for the stored rows: the rows the stage after ``stage`` is built from, given ``stage``'s
    every cell (a plan's rows that do not exist yet, ``cluster.scan.plan``)."""
    ref = scope.ref
    if not hold:
        held = None
    else:
        if ref.instrument.appends and earlier is None:
            earlier = earlier_rows(scope)
        held = held_elsewhere(scope, earlier)
    cells = first
    for index, name in enumerate(stage_names(ref)):
        skipped = 0   # held later-stage cells whose previous rows were not even read
        if index:
            before = ref.instrument.stages[index - 1]
            if previous is not None:
                rows = previous(before, cells)
            else:
                columns = stage_columns(ref, before)
                rows = successful_rows(scope, cells, columns)
                if held is not None and held.num_rows:
                    earlier_held, skipped = held_rows(scope, cells, held, earlier, name, columns)
                    rows = pa.concat_tables([rows, earlier_held.select(rows.column_names).cast(rows.schema)])
            cells = later_stage_cells(ref, index, rows)
        kept = cells if held is None else remove_held(cells, held)
        yield StageGrid(name, kept, cells.num_rows - kept.num_rows + skipped, cells)
