"""What a scan would run, stage by stage and model by model, computed as the scan computes it.

``scan_plan`` builds the stages as the driver does (``cluster.scan.run.ScanRun``), through
``cluster.scan.stages.stage_grids``: the instrument's ``cells`` (the first stage), each later ``Stage.cells``,
its ``held_cells`` (cells earlier invocations of the experiment hold, read from the store's row indexes),
``grid.cells.plan_attempts`` against the rows an unfinished invocation already stored, and ``render`` for the request columns each cell
carries (its own ``temperature``/``top_p``/``max_tokens`` where the instrument sets them, else the
model's). A later stage is built from rows that do not exist yet: the previous stage's planned cells stand
in for them, each taken as answered (``response`` and any other column the stage reads are empty text),
so the plan counts a later stage as if every earlier cell succeeds — the scan runs fewer when some fail.

Per (stage, model) it states: the stage's cells, those held by earlier invocations, those this invocation
holds already (a resume), those given up, the cells to run, the engine kind, the sampling the cells carry,
the input tokens of the cells to run (their rendered request texts through the model's own tokenizer, when
a local ``tokenizer.json`` is found; null otherwise, and without chat-template tokens; a later stage's
texts lack the earlier answers they quote, so its count is a lower bound) and the bound on generated tokens
(the sum of the cells' ``max_tokens`` for a generating engine; 0 for score and activations engines run in
process; null for a score instrument's API engine, which samples). Nothing is started or written; the
store is read only where it exists.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.spec import API_BACKENDS

EMPTY_PRIOR = pa.schema([("probe_id", pa.string()), ("sample", pa.int32()), ("error", pa.string())])
"""The prior rows of an invocation that stored nothing."""
CHUNK = 8_192
"""Cells rendered (and their texts counted) at a time."""


@dataclass(frozen=True)
class StagePlan:
    """One stage of one model's grid, as the scan would meet it."""

    stage: str
    """The stage's name ("" for the first stage)."""
    label: str
    """The model's label."""
    kind: str
    """The engine kind the cells ask for (``generate``, ``score``, ``activations``)."""
    backend: str
    """The model's backend."""
    cells: int
    """Cells of the stage's grid for this model."""
    held_elsewhere: int
    """Of those, cells earlier invocations of the experiment hold (not run again)."""
    held_here: int
    """Cells the invocation being resumed holds already (0 for a new invocation)."""
    given_up: int
    """Cells that failed ``max_attempts`` times in the invocation being resumed (not run again)."""
    run: int
    """Cells the scan would run: cells − held_elsewhere − held_here − given_up."""
    sampling: tuple[tuple[float, float, int], ...]
    """The distinct (temperature, top_p, max_tokens) the stage's cells carry (empty for non-generating kinds)."""
    tokens_in: int | None
    """Tokens of the rendered request texts of the cells to run (model's tokenizer), null when no local
    tokenizer reads them."""
    tokens_out_bound: int | None
    """Upper bound on generated tokens: Σ max_tokens over cells to run (generate), 0 (score, activations in
    process), null (unknown: a score instrument's API engine samples)."""

    def sampling_text(self) -> str:
        """The sampling the stage's cells carry, in words (``temperature 0.7, top_p 0.95, max_tokens 768``;
        several joined by ' | '); ``no sampling (<kind>)`` for an engine that generates nothing."""
        if self.kind != "generate":
            return f"no sampling ({self.kind})"
        return " | ".join(f"temperature {t:g}, top_p {p:g}, max_tokens {m}" for t, p, m in self.sampling)


def _stand_in_rows(cells: pa.Table, reads: tuple[str, ...]) -> pa.Table:
    """The rows a stage would store for ``cells`` when every cell is answered: the cells themselves, with
    ``error`` null and each column a later stage reads (``response`` at least) empty text where missing."""
    rows = cells
    for name in dict.fromkeys(("response", *reads)):
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.array([""] * rows.num_rows, pa.string()))
    if "error" not in rows.column_names:
        rows = rows.append_column("error", pa.nulls(rows.num_rows, pa.string()))
    return rows


def _tokenizer(source: str | None):
    """The ``tokenizers`` tokenizer of a local model folder (its tokenizer.json), or None."""
    import os

    if not source or not os.path.isfile(os.path.join(source, "tokenizer.json")):
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(os.path.join(source, "tokenizer.json"))
    except Exception:   # noqa: BLE001 - an unreadable tokenizer makes the count unknown, not the plan wrong
        return None


def _request_texts(rendered: pa.Table, before: list[str]) -> pa.Array:
    """Per cell, the text columns ``render`` added (the request's texts), joined by newlines, empty and null
    values left out (an empty string where a cell has none)."""
    names = [f.name for f in rendered.schema if f.name not in before and pa.types.is_string(f.type)]
    joined = pa.array([""] * rendered.num_rows, pa.string())
    for name in names:   # folded pairwise: join's null_handling="skip" drops a trailing all-null row (pyarrow 26)
        value = pc.fill_null(rendered.column(name), "")
        both = pc.binary_join_element_wise(joined, value, "\n")
        joined = pc.if_else(pc.equal(joined, ""), value, pc.if_else(pc.equal(value, ""), joined, both))
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _sampling(rendered: pa.Table, model: ModelVariant) -> pa.Table:
    """temperature (float64), top_p (float64) and max_tokens (int64) of each rendered cell: its own request
    columns, else the model's."""
    def column(name, default, kind):
        if name not in rendered.column_names:
            return pa.array(np.full(rendered.num_rows, default, dtype=kind))
        return pc.fill_null(rendered.column(name).cast(pa.from_numpy_dtype(np.dtype(kind))), default)

    return pa.table({"temperature": column("temperature", float(model.temperature), np.float64),
                     "top_p": column("top_p", float(model.top_p), np.float64),
                     "max_tokens": column("max_tokens", int(model.max_tokens), np.int64)})


class _TokenCounter:
    """Input tokens of request texts through one tokenizer, each distinct text encoded once (the count of a
    text is the same every time; ``CACHED`` texts are remembered across chunks by a 128-bit digest of the
    text, not the text itself, later ones encoded again)."""

    CACHED = 65_536
    """Distinct texts whose counts are remembered across chunks."""
    BATCH = 1_024
    """Texts encoded in one call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.known = tokenizer, {}

    def total(self, texts: pa.Array) -> int:
        """Σ tokens over ``texts`` (one per cell, repeats counted each time)."""
        if not len(texts):
            return 0
        counted = pc.value_counts(texts)
        values, counts = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
        keys = [hashlib.blake2b(v.encode(), digest_size=16).digest() for v in values]
        missing = [i for i, k in enumerate(keys) if k not in self.known]
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)   # same ids, no offsets
        new = {}
        for start in range(0, len(missing), self.BATCH):   # a batch's encodings (every token's parts) at a time
            batch = missing[start:start + self.BATCH]
            new.update((keys[i], len(e.ids)) for i, e in zip(batch, encode([values[i] for i in batch],
                                                                             add_special_tokens=False)))
        del values
        total = sum(n * (new[k] if k in new else self.known[k]) for k, n in zip(keys, counts))
        for key, length in new.items():
            if len(self.known) >= self.CACHED:
                break
            self.known[key] = length
        return total


def _distinct(asked: pa.Table) -> list[tuple[float, float, int]]:
    """The distinct (temperature, top_p, max_tokens) rows of ``asked``."""
    unique = asked.group_by(list(asked.column_names)).aggregate([])
    return list(zip(*(unique.column(n).to_pylist() for n in asked.column_names)))


def _is(column: pa.ChunkedArray, value: str) -> pa.ChunkedArray:
    """Per row, whether ``column`` holds ``value`` (a dictionary-encoded column is compared through its
    dictionary, not decoded)."""
    if not pa.types.is_dictionary(column.type):
        return pc.equal(column, value)
    return pa.chunked_array([pc.equal(chunk.dictionary, value).take(chunk.indices) for chunk in column.chunks],
                            pa.bool_())


def _mine(table: pa.Table, label: str) -> pa.Table:
    """The rows of ``table`` whose label is ``label`` (the table itself when all are: no copy)."""
    if not table.num_rows:
        return table
    mask = _is(table.column("label"), label)
    return table if pc.all(mask).as_py() else table.filter(mask)


def _count(table: pa.Table, label: str) -> int:
    """Rows of ``table`` whose label is ``label``."""
    return int(pc.sum(_is(table.column("label"), label)).as_py() or 0) if table.num_rows else 0


def _keys(table: pa.Table) -> pa.Array:
    """(probe_id, sample) of each row as one string (a membership key)."""
    return pc.binary_join_element_wise(table.column("probe_id").cast(pa.string()),
                                       table.column("sample").cast(pa.string()), "\x1f")


@dataclass(frozen=True)
class PlanScope:
    """What a plan is of, besides the frozen settings: which invocation, in which store, from which cells."""

    store: object = None
    """The opened trace store, or None when it does not exist yet (nothing is held there)."""
    invocation_id: str | None = None
    """The unfinished invocation whose resume is planned (its stored cells are not run again); None: a new one."""
    model_sources: dict | None = None
    """Label → canonical model source: held cells count only for the same model; a local folder's tokenizer
    counts tokens. None: no model source is known (nothing held elsewhere counts, no tokens are counted)."""
    max_attempts: int = 3
    """Attempts per cell before a resume gives it up."""
    first: pa.Table | None = None
    """The first stage's cells with probe ids (a reproduction's, rebuilt from stored coordinates); None: the
    instrument expands them from the settings."""
    hold: bool = True
    """False (a reproduction): no cell counts as held by another invocation."""
    count_tokens: bool = True
    """Count the input tokens of the cells to run (False: ``tokens_in`` is None, nothing is tokenized)."""


def scan_plan(settings: Settings, scope: PlanScope = PlanScope()) -> list[StagePlan]:
    """The plan (see the module docstring) of frozen ``settings``: a new invocation, or the resume of
    ``scope.invocation_id``, in ``scope.store``, as ``scope`` says (``PlanScope``)."""
    from mirrorscan.cluster.scan.stages import NO_INVOCATION, StageScope, grid_cells, instrument_ref, stage_grids
    from mirrorscan.grid.cells import plain, plan_attempts

    store, invocation_id, max_attempts, count_tokens = (scope.store, scope.invocation_id, scope.max_attempts,
                                                        scope.count_tokens)
    ref = instrument_ref(settings)
    instrument = ref.instrument
    models = {m.label: m for m in settings.models}
    model_sources = dict(scope.model_sources or {})
    exists = store is not None
    own = invocation_id or NO_INVOCATION
    experiment = settings.experiment
    prior = (store.read(experiment, own, columns=["probe_id", "sample", "error"])
             if exists and invocation_id and store.list_parts(experiment, own) else EMPTY_PRIOR.empty_table())
    tokenizers = {label: _tokenizer(model_sources.get(label)) for label in models} if count_tokens else {}
    # the grid the scan expands, its text columns left dictionary-encoded (each text held once): a chunk is
    # decoded to the scan's plain columns just before render
    first = grid_cells(settings, compact=True) if scope.first is None else scope.first
    pool = pa.default_memory_pool()
    pool.release_unused()   # the expansion's temporaries
    out: list[StagePlan] = []
    # the stages as the scan builds them, with held cells only where the store exists; a later stage from the
    # previous stage's planned cells, each taken as answered
    grids = stage_grids(StageScope(store, experiment, own, ref, model_sources or None), first,
                        hold=scope.hold and exists,
                        previous=lambda stage, cells: _stand_in_rows(plain(cells), stage.reads))
    for stage in grids:
        name, cells, kept = stage.name, stage.grid, stage.cells
        todo, gave_up = plan_attempts(kept, prior, max_attempts)
        for label, model in models.items():
            all_cells, kept_n, todo_m, gave_n = (_mine(cells, label), _count(kept, label), _mine(todo, label),
                                                 _count(gave_up, label))
            generate = instrument.engine_kind == "generate"
            sampling, tokens_in, bound = set(), (0 if count_tokens else None), 0
            if all_cells.num_rows:
                # every cell of the grid is rendered as the scan renders a batch (render is row by row), a
                # chunk at a time so that the texts of a large grid are never all held at once
                every = todo_m.num_rows == all_cells.num_rows   # todo ⊆ cells, one row per cell: all run
                runs = None if every or not todo_m.num_rows else pc.is_in(_keys(all_cells), _keys(todo_m))
                tok = tokenizers.get(label)
                counter = _TokenCounter(tok) if tok is not None and todo_m.num_rows else None
                tokens = 0
                for offset in range(0, all_cells.num_rows, CHUNK):
                    chunk = all_cells.slice(offset, CHUNK)
                    ran = runs.slice(offset, CHUNK) if runs is not None else None
                    if not every and ran is None:
                        ran = pa.array(np.zeros(chunk.num_rows, bool))
                    rendered = instrument.render(plain(chunk), ref.spec)
                    if generate:
                        asked = _sampling(rendered, model)
                        sampling.update(_distinct(asked))
                        maxima = asked.column("max_tokens") if ran is None else asked.column("max_tokens").filter(ran)
                        bound += int(pc.sum(maxima).as_py() or 0)
                    if counter is not None:
                        texts = _request_texts(rendered, chunk.column_names)
                        tokens += counter.total(texts if ran is None else texts.filter(ran))
                    del rendered
                    pool.release_unused()   # each chunk's buffers go back, so the peak is one chunk's
                if tok is None:
                    tokens_in = None if todo_m.num_rows else tokens_in
                else:
                    tokens_in = tokens
            if not generate:
                bound = None if model.backend in API_BACKENDS else 0
            out.append(StagePlan(name, label, instrument.engine_kind, model.backend, all_cells.num_rows,
                                 all_cells.num_rows - kept_n, kept_n - todo_m.num_rows - gave_n, gave_n,
                                 todo_m.num_rows, tuple(sorted(sampling)) if generate else (), tokens_in, bound))
    return out


def existing_store(uri: str):
    """The trace store at ``uri`` when it exists (opened without creating anything), else None."""
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.errors import ConfigError

    try:
        return open_store(uri, create=False)
    except ConfigError:
        return None


def plan_model_sources(spec) -> dict[str, str]:
    """Label → the canonical model source a scan would use, where it is known without converting or loading
    anything (an API model's name; a local folder; the demo model once converted)."""
    from mirrorscan.cluster.models.demo import demo_model_dir
    from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS, resolve_model_source

    model_sources = {}
    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS:
            model_sources[m.label] = m.model
        elif m.model == DEMO_MODEL_ALIAS:
            if (demo_model_dir() / "config.json").is_file():
                model_sources[m.label] = str(demo_model_dir())
        else:
            model_sources[m.label] = resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
    return model_sources


def model_source_text(spec, i: int) -> str:
    """Where model ``i`` of ``spec`` would come from, in words, found without loading (or converting) anything
    (the line ``scan --dry-run`` prints beside the model)."""
    from mirrorscan.cluster.models.demo import demo_model_dir
    from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS, resolve_model_source

    m = spec.models[i]
    if m.backend in API_BACKENDS:
        return f"API model {m.model!r} at {m.endpoint}"
    if m.model == DEMO_MODEL_ALIAS:
        folder = demo_model_dir()
        ready = (folder / "config.json").is_file()
        return f"packaged demo model ({folder}{'' if ready else '; converted at the first scan, ~45 s'})"
    return resolve_model_source(m.model, spec.config_path, f"models[{i}].model")


def model_totals(plans: list[StagePlan], label: str) -> tuple[list[StagePlan], int, int | None]:
    """Model ``label``'s stages of ``plans``, the cells they would run, and the bound on their generated tokens
    (the sum of the stages' bounds; None when any stage's is unknown)."""
    mine = [p for p in plans if p.label == label]
    bounds = [p.tokens_out_bound for p in mine]
    return mine, sum(p.run for p in mine), None if None in bounds else sum(b or 0 for b in bounds)


def unfinished_invocation(dsn: str, experiment: str) -> dict | None:
    """The newest unfinished invocation of ``experiment``, read in a read-only transaction (no migration)."""
    import psycopg
    from psycopg.rows import dict_row

    from mirrorscan.grid.errors import CatalogError

    try:
        with psycopg.connect(dsn, connect_timeout=5, row_factory=dict_row) as conn:
            conn.read_only = True
            exists = conn.execute("SELECT to_regclass('public.scan_invocations') IS NOT NULL AS ok").fetchone()
            if not exists["ok"]:
                return None
            return conn.execute("SELECT invocation_id, status, settings, store_uri, content_hashes FROM scan_invocations "
                                "WHERE experiment = %s AND status <> 'complete' ORDER BY started_at DESC LIMIT 1",
                                [experiment]).fetchone()
    except psycopg.Error as exc:
        from mirrorscan.cluster.catalog.client import redact_dsn

        raise CatalogError(f"catalog: cannot read {redact_dsn(dsn)} ({str(exc).splitlines()[0]})") from None
