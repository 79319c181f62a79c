"""What an instrument is, as the grid engine sees it: a few typed parts with defaults, and the lazy registry.

An instrument is one folder, ``instruments/<name>/``, exposing one object: an instance of a subclass of
``Instrument``, which composes five parts. Each part is a base class holding its members' defaults, so the
grid engine (spec core, cells, pipeline, crash journal, store, catalog, ``analyze``, reproduce, diff, report,
browse) calls every member and never asks whether one exists:

    Items       what its items are: ``load_spec(section, ctx)`` → a frozen, hashable spec; ``frozen(spec)`` →
                plain JSON (part of the hashed settings); ``from_frozen(frozen)`` → the spec again (resume,
                workers, analysis); ``n_items``; ``cells(spec, labels, samples)`` → the grid (coordinate
                columns + item_key, envelope, ordering, label, sample); ``coordinates``; ``stages`` (later
                stages, each built from the previous stage's rows); ``content_hashes`` (its input files);
                ``legacy_keys``; and, for an instrument whose experiment keeps one grid across invocations
                (``appends``), ``held_cells``, ``scanned_rows`` and ``check_append``
    Renderer    how a cell is rendered: ``engine_kind``; ``render(block, spec)`` → the request columns of that
                kind; ``envelope_version``; ``sampled``; ``empty_prefix_items`` (``score`` instruments)
    Annotator   its in-actor step: ``annotate(rows, spec)``, in the engine actor after the engine, before the
                rows are stored (default: rows unchanged)
    Analyzer    how it analyses: ``analyze(traces, settings)`` → numbers, tables, charts and text, with no I/O;
                optionally ``compare`` two sides (``compares``)
    Presenter   how it presents: ``same_answer`` (diff, reproduce), ``headline`` and ``headline_sources`` and
                ``headline_units`` (report, diff), ``matrix_coordinates`` and ``cell_value`` (the browser's
                matrix), ``describe_cell``, ``suggested_query`` (a scan's summary)

``Instrument`` is generic over its spec type: ``class Flinch(Instrument[FlinchSpec])`` says which record every
member's ``spec`` is, and when that type is a ``grid.frozen_spec.FrozenSpec`` (every registered instrument's
is) ``frozen`` and ``from_frozen`` come from it, so the instrument writes neither. ``Instrument`` itself adds
``name``, ``columns`` (extra trace columns: Arrow fields with a ``doc``, beside the core schema) and
``cli``/``tools`` (``mirrorscan <name> …``, its own tools, handed a ``grid.reader.Reader`` for the catalog,
the store and the engines; a registered instrument's ``tools`` line is its registry entry's). A subclass
defines ``name``, ``engine_kind`` and the ``REQUIRED`` methods; ``resolve`` refuses anything else with a
ConfigError saying what to add. The parts are base classes of one class, not objects held by the instrument:
one object is what a config names and what travels to every worker, and its members read as
``instrument.cells(…)`` everywhere. (This module is longer than most: the whole contract and its
documentation are here, in one place.)

A dry run (``cluster.scan.plan``) states each instrument's plan from these same members, as the scan would
walk them: ``cells`` and each ``Stage.cells`` (a later stage from stand-in rows of the previous stage's cells),
``held_cells`` (cells held by earlier invocations), ``render`` (the sampling each cell carries and the request
texts whose tokens it counts) and ``engine_kind`` (whether anything is generated).

A config names an instrument by a registry name (``"forced_choice"``, ``grid.instrument_registry``) or by an
import path (``"package.module:Attr"``); every Ray worker resolves that string itself by import, so an
instrument outside this package (a user's, or a test's) runs on a real multi-process Ray as long as its module
is importable there.

Engine kinds (what an instrument's cells ask of an engine actor; ``actors.registry`` maps
(kind, backend) to an engine class): ``generate`` (rendered chat turns in, sampled text out), ``score``
(prefix and target token ids in, target log-probs out) and ``activations`` (rendered text in,
per-layer pooled hidden states out). One contract for all: a batch of rendered cells in, one row per
cell out, in the same order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args, get_origin

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.frozen_spec import FrozenSpec, read_section
from mirrorscan.grid.instrument_registry import REGISTRY
from mirrorscan.grid.matrix import CellValue
from mirrorscan.grid.reader import Reader
from mirrorscan.grid.settings import Settings

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ENGINE_KINDS = ("generate", "score", "activations")
"""What a cell asks of an engine: sampled text, target log-probs, or per-layer hidden states."""

S = TypeVar("S")
"""An instrument's spec type: what ``load_spec`` returns and every member that takes a ``spec`` reads."""
R = TypeVar("R", bound="DataclassInstance")

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

    def refuse_unknown(self, mapping: Mapping, known, path: str = "") -> None:
        """Raise the error for the first key of ``mapping`` (at ``<section>.<path>``) that is not in ``known``,
        suggesting the closest known key."""
        from mirrorscan.grid.errors import unknown_key

        for key in mapping:
            if key not in known:
                error = unknown_key(self.file, key, key, known)
                raise self.error(f"{path}.{key}" if path else key, error.problem, error.fix)

    def read(self, section: Mapping, keys: type[R]) -> R:
        """The section's values as the record ``keys`` (a dataclass of the section's keys and defaults,
        ``grid.frozen_spec.read_section``); a key that is none of its fields is refused here."""
        return read_section(section, keys, self.refuse_unknown)


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
    stage's cells: the columns ``Instrument.cells`` returns (item_key as in the previous stage: the grid engine
    appends the stage name), plus any column its ``render`` reads (e.g. the previous answer)."""
    reads: tuple[str, ...] = ()
    """Trace columns ``cells`` reads besides the identity and coordinate columns (open_scan: ``response``);
    empty: all of them. Naming them keeps a plan over a large store from reading every stored column."""


DEFAULT_QUERY = "SELECT probe_id, response FROM traces WHERE invocation_id = {invocation} LIMIT 5"
"""The summary's query where an instrument suggests none of its own: a generating instrument's first answers."""


def headline_units(name: str) -> dict:
    """The ``headline_units`` of the instrument a config names (how report and diff write its headline numbers);
    empty when it declares none or cannot be imported here."""
    try:
        return dict(resolve(name).headline_units)
    except ConfigError:
        return {}


class Items(Generic[S]):
    """What an instrument's items are: its config section validated into a spec, that spec frozen into the
    settings and read back, and the grid of cells it expands to — with later stages and, for an instrument that
    keeps one grid across the invocations of an experiment, which cells earlier invocations already hold."""

    spec_type: type | None = None
    """The spec's class, read from the subclass's base ``Instrument[SpecType]``; a ``FrozenSpec`` subclass gives
    ``frozen`` and ``from_frozen``."""
    coordinates: tuple[str, ...] = ()
    """The instrument columns ``cells`` produces (the grid engine copies them from each cell into its row)."""
    legacy_keys: tuple[str, ...] = ()
    """Top-level config keys read into the section for configs written before sections existed."""
    stages: tuple[Stage, ...] = ()
    """Later stages, in order, each built from the previous stage's rows (``cluster.scan.stages`` runs them)."""
    appends: bool = False
    """Whether an experiment keeps one grid across its invocations: a new invocation runs only the cells no
    earlier one holds (``held_cells``, after ``check_append``), and one driver at a time runs the experiment."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Read ``spec_type`` from a base written ``Instrument[SpecType]`` (or any part's). A plug-in written
        before ``held_cells`` had its name defines ``done_cells``: that method is its ``held_cells``, so its
        held cells are not asked again."""
        super().__init_subclass__(**kwargs)
        if "done_cells" in vars(cls) and "held_cells" not in vars(cls):
            setattr(cls, "held_cells", vars(cls)["done_cells"])
        if "spec_type" in vars(cls):   # written out by the class itself
            return
        for base in vars(cls).get("__orig_bases__", ()):
            args = get_args(base)
            if isinstance(get_origin(base), type) and issubclass(get_origin(base), Items) and args \
                    and isinstance(args[0], type):
                cls.spec_type = args[0]

    def load_spec(self, section: dict, ctx: SpecContext) -> S:
        """Validate the config section (errors through ``ctx.error``) and return a frozen, hashable spec."""
        raise NotImplementedError

    def frozen(self, spec: S) -> dict:
        """The spec as plain JSON: what shapes results (item hashes, templates); hashed, compared on resume.
        Default, for a ``FrozenSpec``: the section it was read from."""
        if isinstance(spec, FrozenSpec):
            return spec.frozen
        raise NotImplementedError

    def from_frozen(self, frozen: dict) -> S:
        """The spec rebuilt from ``frozen`` (on resume, in Ray workers, for analysis). Default, for a
        ``FrozenSpec`` spec type: its ``from_frozen``."""
        spec_type = _frozen_spec_type(self)
        if spec_type is not None:
            return spec_type.from_frozen(frozen)
        raise NotImplementedError

    def n_items(self, spec: S) -> int:
        """Cells per model and sample (items × envelopes × orderings), for counts and dry runs."""
        raise NotImplementedError

    def cells(self, spec: S, labels: list[str], samples: int) -> pa.Table:
        """Every cell: label, item_key, envelope, ordering ('-' where absent), sample (int32) and the
        ``coordinates``, in a stable order. Text columns may be plain or dictionary-encoded (a large grid
        holds each distinct value once; ``grid.cells.with_probe_ids`` decodes them for the scan and keeps them
        encoded for the dry run's plan). The grid engine adds probe_id, seeds, attempts and resume."""
        raise NotImplementedError

    def content_hashes(self, spec: S) -> dict:
        """Input name → SHA-256 (hex) of each file the spec was read from (the catalog's ``content_hashes``;
        a resume refuses changed files). Empty: the instrument reads no files of its own, and the grid engine
        records a hash of its frozen settings instead."""
        return {}

    def held_cells(self, spec: S, earlier: pa.Table) -> pa.Table:
        """With ``appends``: the (probe_id, sample) keys earlier invocations hold (``earlier``: their successful
        rows, all trace columns); they leave this invocation's grid. Default: every earlier cell."""
        return earlier.select(["probe_id", "sample"])

    def scanned_rows(self, earlier: pa.Table) -> pa.Table:
        """With ``appends``: the earlier rows a scan made, which fix which model each label names (rows
        imported from elsewhere name their models their own way). Default: all of them."""
        return earlier

    def check_append(self, spec: S, earlier: pa.Table, accept_changed: bool, scans: list | None = None) -> list[str]:
        """With ``appends``, before a new invocation: refuse (ConfigError) items that changed since the earlier
        invocations unless ``accept_changed``, and return lines to print and record with the invocation.
        ``scans``: the earlier scan invocations as (invocation id, start, frozen instrument settings), oldest
        first, or None where no catalog is at hand. Default: nothing to say."""
        return []


class Renderer(Generic[S]):
    """How a cell is rendered: the engine kind it asks of an engine actor and the request columns of that kind."""

    engine_kind: str = ""
    """One of ENGINE_KINDS."""
    sampled: bool = False
    """Whether the cells carry their own sampling, so that answers are sampled whatever a model's temperature
    (then the in-process HF sampler's version shapes results)."""

    def render(self, block: pa.Table, spec: S) -> pa.Table:
        """``block`` plus the request columns of ``engine_kind`` (generate: system_text, user_text)."""
        raise NotImplementedError

    def envelope_version(self, spec: S) -> str | None:
        """Version of the envelope (prompt wrapper) set the cells are rendered in, stored on every row as
        ``envelope_version``; None: the instrument has no versioned envelopes."""
        return None

    def empty_prefix_items(self, spec: S) -> tuple[str, list[str]]:
        """A ``score`` instrument: (file, field paths) of the items whose rendered prefix is empty (a model
        without a BOS token cannot score their first target token); ("", []) when none are."""
        return "", []


class Annotator(Generic[S]):
    """The in-actor step: what becomes of an engine's rows inside the actor, before they are stored."""

    def annotate(self, rows: pa.Table, spec: S) -> pa.Table:
        """Rows after the engine (may fill instrument columns, e.g. forced_choice's class). Default: unchanged."""
        return rows


class Analyzer:
    """How an instrument analyses the stored rows of an invocation (and, optionally, compares two)."""

    name: str   # the instrument's (``Instrument.name``)

    compares: bool = False
    """Whether ``compare`` is offered (``mirrorscan compare``, diff's fingerprint distances, browse)."""

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """The instrument's numbers of one invocation (one row per attempt in ``traces``) under its frozen
        ``settings`` (its own section: ``settings.instrument_settings``, read with ``from_frozen``); no I/O. With
        ``reannotate`` (``analyze --reannotate``), the in-actor step is run again on the stored rows."""
        raise NotImplementedError

    def compare(self, left: tuple[pa.Table, Settings], right: tuple[pa.Table, Settings], *, label_a: str | None = None,
                label_b: str | None = None, rule: str | None = None) -> Analysis:
        """With ``compares``: two sides ((traces, settings) each; a model label of each) side by side
        (forced_choice: fingerprint distances under ``rule``)."""
        raise ConfigError("", "A, B", f"instrument {self.name!r} offers no comparison", "use mirrorscan analyze")


class Presenter:
    """How an instrument's results are shown: by reproduce, diff, report, browse and a scan's summary."""

    cell_value: CellValue | tuple[str, str] = CellValue(None, "none")
    """The browser matrix's value of a cell: ``(column, "class" | "score")`` or a ``CellValue`` derived from each
    row; read through ``grid.matrix.cell_value(instrument)``. Default: none (cells show row counts)."""
    headline_units: Mapping[str, int | str] = MappingProxyType({})
    """Headline number name (or ``prefix*``) → how report and diff write it as ``analyze`` prints it (decimals
    as an int, or percent / points / ms / s / fixed; ``grid.formatting.headline``)."""
    sources: str = ""
    """Import path of the instrument's sources module, imported on first use: its ``headline_sources(analysis,
    settings, invocation_id)`` and ``suggested_sql(invocation_id)`` answer ``headline_sources`` and
    ``suggested_query``. Empty: the defaults (no sources, ``DEFAULT_QUERY``)."""

    def same_answer(self, left: dict, right: dict) -> bool:
        """Whether two rows of one cell (two runs) agree, for diff and reproduce. Default: the same response."""
        return left.get("response") == right.get("response")

    def headline(self, analysis: Analysis) -> dict:
        """The few numbers a report or a diff puts side by side: model key → {number name → value}; their
        definitions are ``headline_sources``. Default: none."""
        return {}

    def headline_sources(self, analysis: Analysis, settings: Settings, invocation_id: str) -> tuple:
        """A ``grid.headline.HeadlineSource`` per headline number: its definition and the ``mirrorscan sql``
        query (or the query and ``mirrorscan stats`` command) that gets it again. Default: the ``sources``
        module's, else none."""
        if self.sources:
            return importlib.import_module(self.sources).headline_sources(analysis, settings, invocation_id)
        return ()

    def suggested_query(self, invocation_id: str) -> str:
        """The one ``mirrorscan sql`` query (DuckDB text) a scan's summary prints to look at what it stored.
        Default: the ``sources`` module's ``suggested_sql``, else ``DEFAULT_QUERY`` (probe ids and responses)."""
        from mirrorscan.grid.headline import sql_text

        if self.sources:
            return importlib.import_module(self.sources).suggested_sql(invocation_id)
        return DEFAULT_QUERY.format(invocation=sql_text(invocation_id))

    def matrix_coordinates(self) -> tuple[str, str]:
        """(row, column) coordinate names of the browser's matrix. Default: ("label", "item_key")."""
        return "label", "item_key"

    def describe_cell(self, row: dict) -> str:
        """One line saying what was asked in this row's cell (reports, the browser); "" says nothing more than
        the cell's probe id."""
        return ""


class Instrument(Items[S], Renderer[S], Annotator[S], Analyzer, Presenter):
    """One instrument: its parts composed, a name, its stored columns and its own command-line tools. A
    subclass defines ``name``, ``engine_kind`` and the methods listed in ``REQUIRED``; the rest have defaults."""

    name: str = ""
    """Stored in every trace row's ``instrument`` column and in the settings."""
    columns: tuple[pa.Field, ...] = ()
    """Extra trace columns, each with a ``doc`` in its field metadata; coordinate columns the cells carry are
    copied into every row by the grid engine."""

    @property
    def tools(self) -> str:
        """One line saying what ``cli`` offers (``mirrorscan <name> …``); empty: the instrument has no tools. A
        registered instrument's is its registry entry's (``grid.instrument_registry``), so the verb list reads
        it without importing the instrument; an instrument named by import path may set it as a class attribute."""
        entry = REGISTRY.get(self.name)
        return entry.tools if entry is not None else ""

    def cli(self, argv: list[str], prog: str, reader: Reader) -> int:
        """With ``tools``: ``mirrorscan <name> …``, the instrument's own tools; returns the exit code. ``reader``
        (``grid.reader``) reaches the catalog, the store and the engines: an instrument imports none of them."""
        raise ConfigError("", "instrument", f"instrument {self.name!r} has no tools of its own",
                          "use the mirrorscan verbs (mirrorscan --help)")

    def unimplemented(self) -> list[str]:
        """The names in ``REQUIRED`` this instrument leaves to the bases (empty for a complete instrument)."""
        own = [vars(c) for c in type(self).__mro__ if c not in _PARTS]
        given = FROM_SPEC_TYPE if _frozen_spec_type(self) is not None else ()
        missing = [n for n in REQUIRED if n not in given and not any(n in d for d in own)]
        return [n for n, value in (("name", self.name), ("engine_kind", self.engine_kind)) if not value] + missing


_PARTS = (Instrument, Items, Renderer, Annotator, Analyzer, Presenter, Generic, object)

REQUIRED = ("load_spec", "frozen", "from_frozen", "n_items", "cells", "render", "analyze")
"""The methods every instrument defines itself (with ``name`` and ``engine_kind``); its parts give the rest."""
FROM_SPEC_TYPE = ("frozen", "from_frozen")
"""The members of ``REQUIRED`` that a ``FrozenSpec`` spec type gives (``Instrument[SpecType]``)."""


def _frozen_spec_type(instrument: Items) -> type[FrozenSpec] | None:
    """The instrument's spec type when it is a ``FrozenSpec``, else None."""
    spec_type = instrument.spec_type
    return spec_type if isinstance(spec_type, type) and issubclass(spec_type, FrozenSpec) else None


def is_reference(name: str) -> bool:
    """Whether ``name`` is an import path ``package.module:Attr`` rather than a registry name."""
    return ":" in name


@lru_cache(maxsize=None)
def resolve(name: str) -> Instrument:
    """The instrument a config names: a registry name or ``package.module:Attr``, imported here (on every
    worker that asks). Raises ConfigError naming the field and the fix when it can't be found."""
    entry = REGISTRY.get(name)
    ref = entry.ref if entry is not None else (name if is_reference(name) else None)
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
                          "check the module path, and that it is importable (PYTHONPATH) wherever the invocation "
                          "is read: the scan, analyze, report, browse") from exc
    try:
        instrument = getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError("", "instrument", f"{module_name!r} has no attribute {attr!r}",
                          "name the object that implements the Instrument protocol") from exc
    if isinstance(instrument, type) and issubclass(instrument, Instrument):
        raise ConfigError("", "instrument", f"{ref} names the class {instrument.__name__}, not an instrument",
                          f"name an instance of it (e.g. {attr.upper()} = {instrument.__name__}()) and write that name")
    if not isinstance(instrument, Instrument):
        raise ConfigError("", "instrument", f"{ref} is {type(instrument).__name__!r}, which lacks the Instrument base class",
                          "make it an instance of a subclass of mirrorscan.grid.instrument.Instrument (see its parts "
                          "Items, Renderer, Annotator, Analyzer, Presenter)")
    missing = instrument.unimplemented()
    if missing:
        raise ConfigError("", "instrument", f"{ref} lacks {', '.join(missing)} of the Instrument parts",
                          "define them in its class (see mirrorscan.grid.instrument)")
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
    """The instrument's frozen section (``Settings.instrument_settings``)."""
    root: str | None = None
    """The experiment folder its relative input paths are read from (``Settings.input_root``); None: as written."""

    @property
    def instrument(self) -> Instrument:
        """The instrument, imported in this process."""
        return resolve(self.name)

    @property
    def spec(self) -> Any:
        """The instrument spec, built once per process (input paths under ``root``)."""
        from mirrorscan.grid.input_paths import absolute_inputs

        return spec_from_frozen(self.name, absolute_inputs(self.frozen, self.root))


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
