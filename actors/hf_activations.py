"""HF activations actor: every layer's hidden states of a transformers model, pooled to one vector per layer.

A batch of ``activations`` cells (``grid.engine_kinds.ACTIVATIONS``: the text and how to extract it) becomes one
forward pass with ``output_hidden_states``: right padding with an attention mask, so every real position
sees exactly the tokens it would see alone. Entry 0 of a row's vectors is the embedding output
(``hidden_states[0]``), entries 1…L the blocks' outputs as transformers returns them.

Per cell, in this order: the input is rendered (``actors.activation_prompt``: ``chat_user`` through the chat
template with the cell's system turn, user suffix, assistant prefix and frozen date, tokenized without adding
special tokens, since the template holds its own; ``raw``: the text tokenized with the tokenizer's
``add_special_tokens=True``), cut to its first
``max_input_tokens`` tokens, then the positions to pool are chosen (a BOS token at position 0 and
whitespace-only tokens left out when asked), then pooled in float32 (``mean`` or ``last_token``) and stored
in ``vector_dtype``. Timing is of the batch's forward pass (``timing_scope='batch'``, monotonic clock).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from mirrorscan.actors.activation_prompt import RenderingError, cell_options, rendered_ids
from mirrorscan.actors.engine import Engine
from mirrorscan.actors.hf_env import load_causal_lm
from mirrorscan.actors.rows import trace_row, where_am_i
from mirrorscan.grid.engine_kinds import ACTIVATION_COLUMNS, LAYER_VECTORS
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

_SCHEMA = trace_schema(tuple(f for f in ACTIVATION_COLUMNS if f.name != LAYER_VECTORS.name))


class ExtractionError(ValueError):
    """A cell that cannot be extracted as asked (the row records it as its error)."""


def input_ids(tokenizer, text: str, rendering: str, **options) -> list[int]:
    """Token ids the model reads for ``text`` in ``rendering`` (``grid.engine_kinds.RENDERINGS``) with the
    rendering ``options`` of ``actors.activation_prompt.rendered_ids``; without options, ``chat_user`` renders as
    rows stored before the options were recorded did (the template's default system turn, no date frozen)."""
    try:
        return rendered_ids(tokenizer, text, rendering, **(options or {"system": "default"}))
    except RenderingError as exc:
        raise ExtractionError(str(exc)) from None


def pooled_positions(ids: list[int], bos_id: int | None, whitespace_ids: set[int], drop_bos: bool,
                     drop_whitespace: bool) -> list[int]:
    """Positions of ``ids`` that enter the pooling: all, less a BOS token at position 0 (``drop_bos``) and
    tokens that decode to whitespace only (``drop_whitespace``)."""
    keep = []
    for pos, token in enumerate(ids):
        if drop_bos and pos == 0 and bos_id is not None and token == bos_id:
            continue
        if drop_whitespace and token in whitespace_ids:
            continue
        keep.append(pos)
    return keep


def pool(states: np.ndarray, positions: list[int], pooling: str) -> np.ndarray:
    """(layers, hidden) pooled from one sequence's ``states`` (layers, tokens, hidden), float32: the mean over
    ``positions`` or the state at the last of them."""
    if pooling == "mean":
        return states[:, positions, :].astype(np.float32).mean(axis=1)
    if pooling == "last_token":
        return states[:, positions[-1], :].astype(np.float32)
    raise ExtractionError(f"unknown pooling {pooling!r}")


class HFActivations(Engine):
    """One transformers model held for the run; ``__call__`` extracts a batch of cells, one row per cell."""

    kind, backend = "activations", "hf"
    model_keys = frozenset({"device_map"})

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Load the model of ``variant``, whose rows belong to ``run``."""
        self.variant, self.run, self.source = variant, run, model_source
        self.tokenizer, self.model, self.pad_id, self.context = load_causal_lm(variant, model_source)
        self.parameters = sum(p.numel() for p in self.model.parameters())
        """The model's parameter count, recorded on every row (scaling analyses read it)."""
        self.body = self.model.base_model
        """The model without its language-model head: hidden states only, no projection onto the vocabulary."""
        self._whitespace: dict[int, bool] = {}
        self.where = where_am_i()

    def whitespace_ids(self, ids: list[int]) -> set[int]:
        """The ids among ``ids`` whose token decodes to whitespace only (decoded once per id)."""
        for token in ids:
            if token not in self._whitespace:
                self._whitespace[token] = self.tokenizer.decode([token]).strip() == ""
        return {t for t in ids if self._whitespace[t]}

    def prepare(self, cell: dict) -> tuple[list[int], list[int], bool]:
        """(ids read, positions pooled, truncated) of one cell; raises ExtractionError."""
        ids = input_ids(self.tokenizer, cell["text"], cell["rendering"], **cell_options(cell))
        limit = cell.get("max_input_tokens")
        truncated = bool(limit) and len(ids) > limit
        ids = ids[:limit] if truncated else ids
        if self.context and len(ids) > self.context:
            raise ExtractionError(f"ContextExceeded: {len(ids)} tokens exceed the model's context window of "
                                  f"{self.context} tokens (set max_input_tokens to truncate)")
        positions = pooled_positions(ids, self.tokenizer.bos_token_id, self.whitespace_ids(ids),
                                     bool(cell.get("drop_bos")), bool(cell.get("drop_whitespace")))
        if not positions:
            raise ExtractionError("no token is left to pool after dropping BOS and whitespace tokens")
        return ids, positions, truncated

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Extract every cell of ``batch``; rows in the cells' order."""
        cells = batch.to_pylist()
        rows: dict[int, dict] = {}
        vectors: dict[int, np.ndarray] = {}
        prepared = []
        for i, cell in enumerate(cells):
            try:
                prepared.append((i, cell, *self.prepare(cell)))
            except ExtractionError as exc:
                rows[i] = self._row(cell, error=f"ExtractionError: {exc}")
        if prepared:
            try:
                self._extract(prepared, rows, vectors)
            except Exception as exc:   # the batch failed: each cell alone, so only the failing cells are errors
                if len(prepared) == 1:
                    rows[prepared[0][0]] = self._row(prepared[0][1], error=f"{type(exc).__name__}: {exc}")
                else:
                    for item in prepared:
                        try:
                            self._extract([item], rows, vectors)
                        except Exception as one:
                            rows[item[0]] = self._row(item[1], error=f"{type(one).__name__}: {one}")
        table = to_trace_table([rows[i] for i in range(len(cells))], _SCHEMA)
        return table.append_column(LAYER_VECTORS.name, vector_array([vectors.get(i) for i in range(len(cells))],
                                                                    [c.get("vector_dtype") for c in cells]))

    def _extract(self, prepared: list, rows: dict, vectors: dict) -> None:
        import torch

        width = max(len(ids) for _, _, ids, _, _ in prepared)
        ids = torch.full((len(prepared), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prepared), width), dtype=torch.long)
        for r, (_, _, seq, _, _) in enumerate(prepared):
            ids[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[r, :len(seq)] = 1
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        with torch.inference_mode():
            out = self.body(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                            output_hidden_states=True)
            states = torch.stack(out.hidden_states).float().cpu().numpy()   # (layers, batch, tokens, hidden)
        total_ms = (time.monotonic() - start) * 1000
        params = json.dumps({"forward": "hidden_states", "dtype": self.variant.dtype, "padding": "right"},
                            sort_keys=True)
        for r, (i, cell, seq, positions, truncated) in enumerate(prepared):
            pooled = pool(states[:, r], positions, cell["pooling"])
            vectors[i] = pooled
            rows[i] = self._row(cell, input_token_ids=seq, pooled_tokens=len(positions), truncated=truncated,
                                n_layers=pooled.shape[0], hidden_size=pooled.shape[1],
                                model_parameters=self.parameters, prompt_tokens=len(seq),
                                completion_tokens=0, batch_size=len(prepared), total_ms=total_ms,
                                started_at=started_at, request_params=params)

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell``: the run's identity, the coordinates, the text as read, ``fields``."""
        system = cell_options(cell)["system"]     # the system text as sent: given, none, or the template's (null)
        system_text = cell.get("system_prompt") if system == "text" else ("" if system == "none" else None)
        if cell.get("text_withheld"):             # a text that may not be redistributed: its count, not its tokens
            fields["input_token_ids"] = None
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text=system_text,
                         user_text=None if cell.get("text_withheld") else cell["text"], timing_scope="batch",
                         endpoint=f"engine://hf/{self.source}", **fields)


def vector_array(vectors: list[np.ndarray | None], dtypes: list[str | None]) -> pa.Array:
    """The ``layer_vectors`` column of one batch: fixed_size_list<fixed_size_list<dtype>[hidden]>[layers], null
    for a cell without vectors (all null: the nominal type). One model and one dtype per batch."""
    present = [v for v in vectors if v is not None]
    if not present:
        return pa.nulls(len(vectors), LAYER_VECTORS.type)
    kinds = {d or "float32" for d, v in zip(dtypes, vectors) if v is not None}
    if len(kinds) != 1:
        raise ValueError(f"one vector_dtype per batch, got {sorted(kinds)}")
    dtype = np.dtype(kinds.pop())
    layers, hidden = present[0].shape
    values = np.zeros((len(vectors), layers, hidden), dtype=dtype)
    for r, v in enumerate(vectors):
        if v is not None:
            values[r] = v
    inner = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), hidden)
    mask = pa.array([v is None for v in vectors])
    return pa.FixedSizeListArray.from_arrays(inner, layers, mask=mask)
