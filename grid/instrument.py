"""The ``Instrument`` protocol and its lazy registry: how the grid engine runs an instrument it never imports.

An instrument is one folder, ``instruments/<name>/``, exposing one object that satisfies ``Instrument``.
The engine (spec core, cells, pipeline, crash journal, store, catalog, ``analyze``) calls these hooks
and nothing else:

    load_spec(section, ctx)       the config's ``<name>`` section → a frozen, hashable instrument spec
    frozen(spec)                  that spec as plain JSON: part of the result-shaping settings (hashed)
    from_frozen(frozen)           the spec again, from frozen settings (resume, workers, analysis)
    cells(spec, labels, samples)  the grid: coordinate columns + item_key, envelope, ordering, label, sample
    render(block, spec)           request columns of its engine kind for a block of cells
    columns                       extra trace columns (Arrow fields with a ``doc``), beside the core schema
    annotate(rows, spec)          optional, in the actor after the engine, before the rows are stored
    stages                        optional later stages (``Stage``: each built from the previous stage's
                                  successful rows; ``cluster.stages`` runs them)
    done_cells(spec, earlier)     optional: (probe_id, sample) keys that earlier invocations of the experiment
                                  hold (``earlier``: their successful rows); they leave this invocation's grid
    analyze(traces, settings)     numbers, tables, charts and text, with no I/O

    cli(argv, prog)               optional: ``mirrorscan <name> …``, the instrument's own tools (exit code)

A dry run (``jobs.plan``) states each instrument's plan from these same hooks, as the scan would walk them:
``cells`` and each ``Stage.cells`` (a later stage from stand-in rows of the previous stage's cells),
``done_cells`` (cells held by earlier invocations), ``render`` (the sampling each cell carries and the
request texts whose tokens it counts) and ``engine_kind`` (whether anything is generated).

and, for reproduce / diff / report / browse, ``same_answer``, ``headline``, ``matrix_coordinates`` and
``describe_cell`` (see the protocol below), optionally ``cell_value`` (the browser matrix's value of a cell:
``(column, "class" | "score")``, or a ``CellValue`` derived from each row), and optionally ``headline_sources(analysis, settings,
invocation_id)``: a ``grid.headline.HeadlineSource`` per headline number, its definition and the
``mirrorscan sql`` query (or the query and ``mirrorscan stats`` command) that gets it again, and optionally
``suggested_query(invocation_id)``: the one ``mirrorscan sql`` query a scan's summary suggests to look at what
it stored (default ``DEFAULT_QUERY``: probe ids and responses; see ``suggested_query``), and optionally
``headline_units``: headline number name (or ``prefix*``) → how report and diff write it as ``analyze`` prints
it (decimals as an int, or percent / points / ms / s / fixed; ``grid.formatting.headline``). Optional hooks
are not members of the ``Instrument`` protocol class (``isinstance`` would require them); callers check
with ``getattr``. A config names an instrument by a registry name
(``"forced_choice"``) or by an import path (``"package.module:Attr"``); every Ray worker resolves that
string itself by import, so an instrument outside this package (a user's, or a test's) runs on a real
multi-process Ray as long as its module is importable there.

Engine kinds (what an instrument's cells ask of an engine actor; ``actors.registry`` maps
(kind, backend) to a class): ``generate`` (rendered chat turns in, sampled text out), ``score``
(prefix and target token ids in, target log-probs out) and ``activations`` (rendered text in,
per-layer pooled hidden states out). One contract for all: a batch of rendered cells in, one row per
cell out, in the same order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError

ENGINE_KINDS = ("generate", "score", "activations")
"""What a cell asks of an engine: sampled text, target log-probs, or per-layer hidden states."""

REQUIRED_HOOKS = ("name", "engine_kind", "columns", "load_spec", "frozen", "from_frozen", "n_items", "cells",
                  "render", "analyze")
"""What every instrument must have; the rest of the protocol is optional (the engine checks before calling)."""

REGISTRY: dict[str, str] = {
    "forced_choice": "mirrorscan.instruments.forced_choice:INSTRUMENT",
    "flinch": "mirrorscan.instruments.flinch.instrument:INSTRUMENT",
    "lens": "mirrorscan.instruments.lens.instrument:INSTRUMENT",
    "open_scan": "mirrorscan.instruments.open_scan.instrument:INSTRUMENT",
}
"""Instrument name → ``"module:attr"``, imported on first use (importing mirrorscan imports no instrument)."""

LEGACY_PARTS = ("grid", "cluster", "jobs", "actors", "analysis", "results", "instruments")
"""Top-level names the package's parts had before they were installed under ``mirrorscan``: an import path
starting with one (``instruments.lens.instrument:INSTRUMENT`` in an older config or frozen settings) is read
as the same path under ``mirrorscan.``."""


@dataclass(frozen=True)
class SpecContext:
    """Where an instrument's config section comes from, so its errors name the file and the field path."""

    file: str
    """The config.json being read (for error messages)."""
    section: str
    """The section's key in config.json (the instrument's name), the prefix of every field path ("" for an
    older config whose instrument keys sit at the top level)."""
    config_dir: str
    """Absolute folder of config.json: relative file names in the section are resolved against it."""

    def error(self, path: str, problem: str, fix: str) -> ConfigError:
        """A ConfigError for ``<section>.<path>`` of this config file."""
        field_path = f"{self.section}.{path}" if self.section and path else (path or self.section or "(top level)")
        return ConfigError(self.file, field_path, problem, fix)

    def refuse_unknown(self, mapping: dict, known, path: str = "") -> None:
        """Raise the error for the first key of ``mapping`` (at ``<section>.<path>``) that is not in ``known``,
        suggesting the closest known key."""
        from mirrorscan.grid.errors import unknown_key

        for key in mapping:
            if key not in known:
                error = unknown_key(self.file, key, key, known)
                raise self.error(f"{path}.{key}" if path else key, error.problem, error.fix)


@dataclass(frozen=True)
class Analysis:
    """What an instrument's analysis of one invocation produced; ``analyze`` writes it, the instrument does no I/O."""

    text: str
    """The readable summary printed to the terminal."""
    numbers: dict
    """Plain-JSON headline numbers and their definitions (written as ``summary.json``)."""
    tables: Mapping[str, pa.Table] = field(default_factory=dict)
    """Named tables (written as ``<name>.parquet``)."""
    charts: Mapping[str, bytes] = field(default_factory=dict)
    """Named PNG charts (written as ``<name>.png``)."""
    documents: Mapping[str, Any] = field(default_factory=dict)
    """Named plain-JSON documents (written as ``<name>.json``), e.g. one result file per model."""
    notes: tuple[str, ...] = ()
    """Lines printed after the list of written files (caveats a reader must see)."""
    json_view: Any = None
    """What ``analyze --json`` prints (default: ``numbers``)."""
    detail: Any = None
    """The instrument's own result object, for callers that know the instrument (not written)."""


@dataclass(frozen=True)
class Stage:
    """A later stage of an instrument's grid (open_scan's post-hoc self-report): its cells are built from the
    previous stage's stored rows and run through the same pool, journal and resume; its name is part of the
    probe_id's item_key."""

    name: str
    """Short name, appended to the item_key of the stage's cells as ``<item_key>~<name>`` (no '|' or '~')."""
    cells: Callable[[Any, pa.Table], pa.Table]
    """(instrument spec, previous stage's successful rows of the invocation, all trace columns) → this
    stage's cells: the columns ``Instrument.cells`` returns (item_key as in the previous stage: the engine
    appends the stage name), plus any column its ``render`` reads (e.g. the previous answer)."""
    reads: tuple[str, ...] = ()
    """Trace columns ``cells`` reads besides the identity and coordinate columns (open_scan: ``response``);
    empty: all of them. Naming them keeps a plan over a large store from reading every stored column."""


@dataclass(frozen=True)
class CellValue:
    """What one cell of the browser's matrix shows: a stored trace column, or one number derived from each
    stored row (an instrument whose answer is not a scalar: lens's per-layer vectors). The plain form
    ``cell_value = (column, kind)`` is this without ``derive``."""

    column: str | None
    """The stored trace column (plain form), or the derived value's name (shown as the cell's column name);
    None: the instrument names none and cells show row counts."""
    kind: str
    """``class`` (counted per value) or ``score`` (averaged over a cell's successful rows); ``none`` without a
    column."""
    reads: tuple[str, ...] = ()
    """The trace columns ``derive`` reads (only they are read from each part); empty for a stored column."""
    derive: Callable[[pa.Table], pa.Array] | None = None
    """Rows (the ``reads`` columns of one part) → one value per row, null where a row has none (a failed row);
    text for ``class``, float64 for ``score``. It runs where the browser indexes, once per part."""
    doc: str = ""
    """One line saying what the value is (the matrix legend shows it)."""


def cell_value(instrument) -> CellValue:
    """The instrument's ``cell_value`` (``(column, "class" | "score")`` or a ``CellValue``) as a CellValue, checked;
    an instrument without one: ``CellValue(None, "none")`` (cells show row counts)."""
    hook = getattr(instrument, "cell_value", None)
    if not hook:
        return CellValue(None, "none")
    value = hook if isinstance(hook, CellValue) else CellValue(*hook)
    if value.kind not in ("class", "score"):
        raise ValueError(f"instrument {instrument.name!r}: cell_value kind {value.kind!r} is not 'class' or 'score'")
    if value.derive is not None and not value.reads:
        raise ValueError(f"instrument {instrument.name!r}: a derived cell_value must name the columns it reads")
    return value


DEFAULT_QUERY = "SELECT probe_id, response FROM traces WHERE invocation_id = {invocation} LIMIT 5"
"""The summary's query for an instrument without ``suggested_query``: a generating instrument's first answers."""


def suggested_query(instrument, invocation_id: str) -> str:
    """The ``mirrorscan sql`` query (DuckDB text) a scan's summary prints for ``invocation_id``: the instrument's
    ``suggested_query`` hook (its own stored numbers: flinch's log-probs per term, lens's rows per rendering,
    open_scan's answers with their ratings), else ``DEFAULT_QUERY``."""
    from mirrorscan.grid.headline import sql_text

    hook = getattr(instrument, "suggested_query", None)
    if hook is None:
        return DEFAULT_QUERY.format(invocation=sql_text(invocation_id))
    return hook(invocation_id)


def headline_units(name: str) -> dict:
    """The ``headline_units`` of the instrument a config names (how report and diff write its headline numbers);
    empty when it declares none or cannot be imported here."""
    try:
        return dict(getattr(resolve(name), "headline_units", None) or {})
    except ConfigError:
        return {}


@runtime_checkable
class Instrument(Protocol):
    """One instrument, as the engine sees it (see the module docstring for the order the hooks run in)."""

    name: str
    """Stored in every trace row's ``instrument`` column and in the settings."""
    engine_kind: str
    """One of ENGINE_KINDS."""
    columns: tuple[pa.Field, ...]
    """Extra trace columns, each with a ``doc`` in its field metadata; coordinate columns the cells carry are
    copied into every row by the engine."""
    coordinates: tuple[str, ...]
    """The subset of ``columns`` that ``cells`` produces (copied from each cell into its row)."""
    legacy_keys: tuple[str, ...]
    """Top-level config keys read into the section for configs written before sections existed."""

    def load_spec(self, section: dict, ctx: SpecContext) -> Any:
        """Validate the config section (errors through ``ctx.error``) and return a frozen, hashable spec."""

    def frozen(self, spec: Any) -> dict:
        """The spec as plain JSON: what shapes results (item hashes, templates); hashed, compared on resume."""

    def from_frozen(self, frozen: dict) -> Any:
        """The spec rebuilt from ``frozen`` (on resume, in Ray workers, for analysis)."""

    def n_items(self, spec: Any) -> int:
        """Cells per model and sample (items × envelopes × orderings), for counts and dry runs."""

    def cells(self, spec: Any, labels: list[str], samples: int) -> pa.Table:
        """Every cell: label, item_key, envelope, ordering ('-' where absent), sample (int32), the
        coordinate columns, in a stable order. The engine adds probe_id, seeds, attempts and resume."""

    def render(self, block: pa.Table, spec: Any) -> pa.Table:
        """``block`` plus the request columns of ``engine_kind`` (generate: system_text, user_text)."""

    def annotate(self, rows: pa.Table, spec: Any) -> pa.Table:
        """Rows after the engine, inside the actor, before they are stored (may fill instrument columns)."""

    def analyze(self, traces: pa.Table, settings: dict, *, reannotate: bool = False) -> Analysis:
        """The instrument's numbers of one invocation (one row per attempt in ``traces``); no I/O. With
        ``reannotate`` (``analyze --reannotate``), the in-actor step is run again on the stored rows."""

    def same_answer(self, left: dict, right: dict) -> bool:
        """Whether two rows of one cell (two runs) agree, for diff and reproduce."""

    def headline(self, analysis: Analysis) -> dict:
        """The few numbers a report or a diff puts side by side: model key → {number name → value}; their
        definitions are ``headline_sources``."""

    def matrix_coordinates(self) -> tuple[str, str]:
        """(row, column) coordinate names of the browser's matrix, e.g. ("label", "item_key")."""

    def describe_cell(self, row: dict) -> str:
        """One line saying what was asked in this row's cell (for reports and the browser)."""


def is_reference(name: str) -> bool:
    """Whether ``name`` is an import path ``package.module:Attr`` rather than a registry name."""
    return ":" in name


@lru_cache(maxsize=None)
def resolve(name: str) -> Instrument:
    """The instrument a config names: a registry name or ``package.module:Attr``, imported here (on every
    worker that asks). Raises ConfigError naming the field and the fix when it can't be found."""
    ref = REGISTRY.get(name, name if is_reference(name) else None)
    if ref is None:
        raise ConfigError("", "instrument", f"unknown instrument {name!r}",
                          f"use one of: {', '.join(REGISTRY)}, or a 'package.module:Attr' import path")
    module_name, _, attr = ref.partition(":")
    if module_name.split(".")[0] in LEGACY_PARTS:   # written before the parts moved under `mirrorscan.`
        module_name = f"mirrorscan.{module_name}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("", "instrument", f"cannot import {module_name!r} for instrument {name!r} ({exc})",
                          "check the module path, and that it is importable where the scan runs") from exc
    try:
        instrument = getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError("", "instrument", f"{module_name!r} has no attribute {attr!r}",
                          "name the object that implements the Instrument protocol") from exc
    missing = [hook for hook in REQUIRED_HOOKS if not hasattr(instrument, hook)]
    if missing:
        raise ConfigError("", "instrument", f"{ref} lacks {', '.join(missing)} of the Instrument protocol",
                          "implement them (see grid/instrument.py)")
    if instrument.engine_kind not in ENGINE_KINDS:
        raise ConfigError("", "instrument", f"{ref} asks for engine kind {instrument.engine_kind!r}",
                          f"use one of: {', '.join(ENGINE_KINDS)}")
    return instrument


@dataclass(frozen=True)
class InstrumentRef:
    """How an instrument and its frozen section travel to Ray workers: by name, resolved there by import."""

    name: str
    """Registry name or ``package.module:Attr``, as the config wrote it."""
    frozen: dict
    """The instrument's frozen section (``settings["instrument_settings"]``)."""

    @property
    def instrument(self) -> Instrument:
        """The instrument, imported in this process."""
        return resolve(self.name)

    @property
    def spec(self) -> Any:
        """The instrument spec, built once per process."""
        return spec_from_frozen(self.name, self.frozen)


def ref_from_section(name: str, section: dict, config_dir: str = ".") -> InstrumentRef:
    """The instrument ``name`` with a config section validated as a scan validates it (for benchmarks and
    tools that build a grid without an experiment folder); file names resolve against ``config_dir``."""
    import os

    instrument = resolve(name)
    spec = instrument.load_spec(section, SpecContext("(section)", instrument.name, os.path.abspath(config_dir)))
    return InstrumentRef(name, instrument.frozen(spec))


def registered() -> list[Instrument]:
    """Every instrument of the registry, imported (for views and reports across instruments)."""
    return [resolve(name) for name in REGISTRY]


@lru_cache(maxsize=1)
def known_trace_schema() -> pa.Schema:
    """The core trace schema plus every registered instrument's columns (large vector columns left out):
    what a reader of traces of any registered instrument gets, null where a row's instrument lacks one."""
    from mirrorscan.grid.trace_schema import union_schema

    return union_schema({i.name: i.columns for i in registered()})


@lru_cache(maxsize=64)
def _spec_from_json(name: str, frozen_json: str) -> Any:
    import json

    return resolve(name).from_frozen(json.loads(frozen_json))


def spec_from_frozen(name: str, frozen: dict) -> Any:
    """The instrument spec of frozen settings, built once per process (render tasks and actors call this per
    block)."""
    import json

    return _spec_from_json(name, json.dumps(frozen, sort_keys=True))
