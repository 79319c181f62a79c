"""HF scorer actor: the log-probability a transformers causal LM gives each target token after a prefix.

A batch of ``score`` cells (``prefix``, ``target``, ``add_bos``; ``grid.score_columns``) is tokenized by
the rule every score engine shares (``actors.score_tokens``) and scored in one forward pass: right padding
with an attention mask, so every real position sees exactly its own prefix, and each target token's
log-probability is read at its own position (log-softmax in float32 over the logits that predict it). Only
the positions that predict target tokens are projected onto the vocabulary (``logits_to_keep`` with their
indices). In float32 a cell's numbers in a batch differ from the same cell alone by up to ~3e-5 nats on
the demo model (the starter corpus, batches of 16 or 32): the kernels' shapes change with the batch, and
grouping cells of equal length instead of padding moved them just as much, in 2-3× the time. The
instrument orders its cells shortest first, so a batch's rows are of similar length and little is padded.
Timing is of the batch's forward pass (``timing_scope='batch'``, monotonic clock).
"""

from __future__ import annotations

import inspect
import json
import time
from datetime import datetime, timezone

import pyarrow as pa

from actors.hf_env import load_causal_lm
from actors.rows import trace_row, where_am_i
from actors.score_tokens import prepare_cells, score_fields, score_safely
from grid.records import ModelVariant, RunContext
from grid.score_columns import SCORE_COLUMNS
from grid.trace_schema import trace_schema, to_trace_table

_SCHEMA = trace_schema(SCORE_COLUMNS)


class HFScorer:
    """One transformers model held for the run; ``__call__`` scores a batch of cells, one row per cell."""

    def __init__(self, variant: ModelVariant, model_source: str, run: RunContext):
        """Load the model of ``variant``, whose rows belong to ``run``."""
        self.variant, self.run, self.source = variant, run, model_source
        self.tokenizer, self.model, self.pad_id, self.context = load_causal_lm(variant, model_source)
        self.trims_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        """Whether the model can project only the last positions onto the vocabulary (transformers' models can)."""
        self.where = where_am_i()

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score every cell of ``batch``; rows in the cells' order."""
        cells = batch.to_pylist()
        prepared, errors = prepare_cells(self.tokenizer, cells, self.variant.add_bos, self.context)
        rows = {i: self._row(cells[i], **fields) for i, fields in errors.items()}
        if prepared:
            for (i, *_), row in zip(prepared, self._score_safely(prepared)):
                rows[i] = row
        return to_trace_table([rows[i] for i in range(len(cells))], _SCHEMA)

    def _score_safely(self, prepared: list) -> list[dict]:
        """Score; if the batch fails, cell by cell (``actors.score_tokens.score_safely``)."""
        return score_safely(prepared, self._score, lambda cell, message: self._row(cell, error=message))

    def _score(self, prepared: list) -> list[dict]:
        import torch

        seqs = [p + t for _, _, p, t, _ in prepared]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, :len(s)] = 1
        # Only the positions that predict target tokens need the vocabulary projection: from the shortest
        # prefix's last token to the longest sequence's second-to-last, the same indices for every row.
        first_kept = min(len(p) for _, _, p, _, _ in prepared) - 1 if self.trims_logits else 0
        last_kept = max(len(s) for s in seqs) - 1 if self.trims_logits else width
        trim = {"logits_to_keep": torch.arange(first_kept, last_kept)} if self.trims_logits else {}
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                                **trim).logits
        rows = []
        for r, (_, cell, prefix_ids, target_ids, bos) in enumerate(prepared):
            first = len(prefix_ids) - 1 - first_kept   # the logits that predict the first target token
            predicting = logits[r, first:first + len(target_ids)].float()
            lps = torch.log_softmax(predicting, dim=-1).gather(1, torch.tensor(target_ids).unsqueeze(1).to(predicting.device))
            rows.append((cell, prefix_ids, target_ids, bos, [float(x) for x in lps.squeeze(1).tolist()]))
        total_ms = (time.monotonic() - start) * 1000
        params = json.dumps({"forward": "logits", "dtype": self.variant.dtype, "padding": "right"}, sort_keys=True)
        return [self._row(cell, target_text=cell["target"], **score_fields(prefix_ids, target_ids, bos, lps),
                          batch_size=len(prepared), total_ms=total_ms, started_at=started_at, request_params=params)
                for cell, prefix_ids, target_ids, bos, lps in rows]

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell``: the run's identity, the coordinates, the prefix as the text read, ``fields``."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text="",
                         user_text=cell["prefix"], timing_scope="batch", endpoint=f"engine://hf/{self.source}",
                         **fields)
