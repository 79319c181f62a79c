"""What a scan would run, stage by stage and model by model, computed as the scan computes it.

``scan_plan`` walks the same hooks the driver walks (``jobs.scan._execute`` through ``cluster.stages``):
the instrument's ``cells`` (the first stage), each later ``Stage.cells``, its ``done_cells`` (cells earlier
invocations of the experiment hold, read from the store's row indexes), ``grid.cells.plan_attempts``
against the rows an unfinished invocation already stored, and ``render`` for the request columns each cell
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

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from grid.records import ModelVariant
from grid.spec import API_BACKENDS

EMPTY_PRIOR = pa.schema([("probe_id", pa.string()), ("sample", pa.int32()), ("error", pa.string())])
"""The prior rows of an invocation that stored nothing."""


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
    """Cells the invocation being resumed stored already (0 for a new invocation)."""
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


def _request_texts(rendered: pa.Table, before: list[str]) -> list[str]:
    """Per cell, the text columns ``render`` added (the request's texts), joined."""
    names = [f.name for f in rendered.schema if f.name not in before and pa.types.is_string(f.type)]
    columns = [rendered.column(n).to_pylist() for n in names]
    return ["\n".join(v for v in values if v) for values in zip(*columns)] if columns else [""] * rendered.num_rows


def _sampling(rendered: pa.Table, model: ModelVariant) -> list[tuple[float, float, int]]:
    """(temperature, top_p, max_tokens) of each rendered cell: its own request columns, else the model's."""
    def column(name, default):
        if name not in rendered.column_names:
            return [default] * rendered.num_rows
        return [default if v is None else v for v in rendered.column(name).to_pylist()]

    return list(zip([float(t) for t in column("temperature", model.temperature)],
                    [float(p) for p in column("top_p", model.top_p)],
                    [int(m) for m in column("max_tokens", model.max_tokens)]))


def _keys(table: pa.Table) -> pa.Array:
    """(probe_id, sample) of each row as one string (a membership key)."""
    return pc.binary_join_element_wise(table.column("probe_id").cast(pa.string()),
                                       table.column("sample").cast(pa.string()), "\x1f")


def scan_plan(settings: dict, *, store=None, invocation_id: str | None = None, sources: dict | None = None,
              max_attempts: int = 3, first: pa.Table | None = None, hold: bool = True,
              count_tokens: bool = True) -> list[StagePlan]:
    """The plan (see the module docstring) of (format 2) ``settings``: a new invocation, or with
    ``invocation_id`` the resume of that unfinished one, in ``store`` (an opened trace store, or None when it
    does not exist yet). ``sources``: label → canonical model source (held cells count only for the same
    model; a local folder's tokenizer counts tokens). ``first``: the first stage's cells (a reproduction's);
    ``hold`` False: no cell counts as held elsewhere (a reproduction)."""
    from cluster.stages import earlier_rows, held_elsewhere, later_stage_cells, stage_names
    from grid.cells import plan_attempts, remove_done
    from jobs.scan import NO_INVOCATION, grid_cells, instrument_ref

    ref = instrument_ref(settings)
    instrument = ref.instrument
    models = {m["label"]: ModelVariant.from_settings(m) for m in settings["models"]}
    sources = sources or {}
    exists = store is not None
    own = invocation_id or NO_INVOCATION
    held = None
    if hold and exists and getattr(instrument, "done_cells", None) is not None:
        earlier = earlier_rows(store, settings["experiment"], own, ref, sources or None)
        held = held_elsewhere(store, settings["experiment"], own, ref, sources or None, earlier)
    prior = (store.read(settings["experiment"], own, columns=["probe_id", "sample", "error"])
             if exists and invocation_id and store.list_parts(settings["experiment"], own) else EMPTY_PRIOR.empty_table())
    tokenizers = {label: _tokenizer(sources.get(label)) for label in models} if count_tokens else {}
    stages = list(getattr(instrument, "stages", ()))
    cells = grid_cells(settings) if first is None else first
    out: list[StagePlan] = []
    for index, name in enumerate(stage_names(ref)):
        if index:
            cells = later_stage_cells(ref, index, _stand_in_rows(cells, stages[index - 1].reads))
        kept = cells if held is None else remove_done(cells, held)
        todo, gave_up = plan_attempts(kept, prior, max_attempts)
        for label, model in models.items():
            def mine(table: pa.Table) -> pa.Table:
                return table.filter(pc.equal(table.column("label"), label)) if table.num_rows else table

            all_cells, kept_m, todo_m, gave_m = mine(cells), mine(kept), mine(todo), mine(gave_up)
            generate = instrument.engine_kind == "generate"
            sampling, tokens_in, bound = [], (0 if count_tokens else None), 0
            if all_cells.num_rows:
                rendered = instrument.render(all_cells, ref.spec)
                sampling = _sampling(rendered, model)
                runs = pc.is_in(_keys(all_cells), _keys(todo_m)).to_pylist() if todo_m.num_rows else \
                    [False] * all_cells.num_rows
                tok = tokenizers.get(label)
                if tok is None:
                    tokens_in = None if todo_m.num_rows else tokens_in
                else:
                    texts = [t for t, r in zip(_request_texts(rendered, all_cells.column_names), runs) if r]
                    tokens_in = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)) \
                        if texts else 0
                bound = sum(m for (_, _, m), r in zip(sampling, runs) if r)
            if not generate:
                bound = None if model.backend in API_BACKENDS else 0
            out.append(StagePlan(name, label, instrument.engine_kind, model.backend, all_cells.num_rows,
                                 all_cells.num_rows - kept_m.num_rows,
                                 kept_m.num_rows - todo_m.num_rows - gave_m.num_rows, gave_m.num_rows,
                                 todo_m.num_rows, tuple(sorted(set(sampling))) if generate else (),
                                 tokens_in, bound))
    return out
