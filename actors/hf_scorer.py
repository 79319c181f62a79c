"""HF scorer actor: the log-probability a transformers causal LM gives each target token after a prefix.

A batch of ``score`` cells (``prefix``, ``target``, ``add_bos``; ``grid.engine_kinds.SCORE``) is tokenized by
the rule every score engine shares (``actors.score_tokens``) and scored in as few forward passes as pay:
right padding with an attention mask, so every real position sees exactly its own prefix, and each target
token's log-probability is read at its own position (log-softmax in float32 over the logits that predict
it). A sequence's last token predicts nothing that is scored, so it is not fed. Only the positions that
predict target tokens are projected onto the vocabulary (``logits_to_keep`` with their indices).

Padding costs compute, and so does every pass (the weights are read once per pass). The batch's cells are
grouped by token length into passes that minimise padded positions plus ``PASS_COST_POSITIONS`` per pass
(``length_groups``): on one CPU thread a pass of the demo model costs about what 50 more positions do
(~150 ms against ~3 ms per position), so a batch whose lengths spread widely is split into two or three
passes, and a batch of similar lengths stays one. On an accelerator a pass costs far more positions'
worth (the weights' read against a position's matmuls), so batches stay whole there.

In float32 a cell's numbers in a batch differ from the same cell alone by up to ~3e-5 nats on the demo model
(the starter corpus, batches of 16 or 32): the kernels' shapes change with the batch. The instrument orders
its cells shortest first, so a batch's rows are of similar length. Timing is of the batch's forward passes
together (``timing_scope='batch'``, monotonic clock).
"""

from __future__ import annotations

import inspect
import json
import time
from datetime import datetime, timezone

from mirrorscan.actors.engine import Engine
from mirrorscan.actors.hf_env import load_causal_lm
from mirrorscan.actors.rows import trace_row, where_am_i
from mirrorscan.actors.score_tokens import LocalScorer, score_fields
from mirrorscan.grid.records import ModelVariant, InvocationContext

PASS_COST_POSITIONS = {"cpu": 48}
"""What one forward pass costs, in padded token positions' worth of compute, per device type (the module
docstring); a device not named here keeps each batch in one pass."""


def length_groups(lengths: list[int], pass_cost: int | None) -> list[list[int]]:
    """Indices of ``lengths`` (tokens fed per sequence) grouped into forward passes: each pass is padded to
    its longest sequence; the grouping minimises padded positions in all plus ``pass_cost`` per pass, over
    groups of consecutive lengths in sorted order (exact, O(n²)). ``pass_cost`` None: one pass."""
    if pass_cost is None or len(lengths) < 2:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    n = len(order)
    best, start = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for end in range(1, n + 1):
        width = lengths[order[end - 1]]
        for first in range(end):
            cost = best[first] + (end - first) * width + pass_cost
            if cost < best[end]:
                best[end], start[end] = cost, first
    groups, end = [], n
    while end:
        groups.append(order[start[end]:end])
        end = start[end]
    return groups[::-1]


class HFScorer(LocalScorer, Engine):
    """One transformers model held for the run; ``__call__`` scores a batch of cells, one row per cell."""

    kind, backend = "score", "hf"
    model_keys = frozenset({"device_map", "add_bos"})

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Load the model of ``variant``, whose rows belong to ``run``."""
        self.variant, self.run, self.source = variant, run, model_source
        self.tokenizer, self.model, self.pad_id, self.context = load_causal_lm(variant, model_source)
        self.trims_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        """Whether the model can project only the last positions onto the vocabulary (transformers' models can)."""
        self.where = where_am_i()

    def _score(self, prepared: list) -> list[dict]:
        lengths = [len(p) + len(t) - 1 for _, _, p, t, *_ in prepared]
        device = getattr(self.model.device, "type", str(self.model.device))
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        scored = {}
        for group in length_groups(lengths, PASS_COST_POSITIONS.get(device)):
            for i, lps in zip(group, self._forward([prepared[i] for i in group])):
                scored[i] = lps
        total_ms = (time.monotonic() - start) * 1000
        params = json.dumps({"forward": "logits", "dtype": self.variant.dtype, "padding": "right"}, sort_keys=True)
        return [self._row(cell, target_text=cell["target"], **score_fields(prefix_ids, target_ids, bos, scored[i], space),
                          batch_size=len(prepared), total_ms=total_ms, started_at=started_at, request_params=params)
                for i, (_, cell, prefix_ids, target_ids, bos, space) in enumerate(prepared)]

    def _forward(self, prepared: list) -> list[list[float]]:
        """One right-padded forward pass over ``prepared``: each cell's target-token log-probs (nats)."""
        import torch

        seqs = [(p + t)[:-1] for _, _, p, t, *_ in prepared]   # the last token predicts nothing scored
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, :len(s)] = 1
        # Only the positions that predict target tokens need the vocabulary projection: from the shortest
        # prefix's last token to the longest fed sequence's last, the same indices for every row.
        first_kept = min(len(p) for _, _, p, *_ in prepared) - 1 if self.trims_logits else 0
        trim = {"logits_to_keep": torch.arange(first_kept, width)} if self.trims_logits else {}
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                                **trim).logits
        out = []
        for r, (_, _, prefix_ids, target_ids, *_) in enumerate(prepared):
            first = len(prefix_ids) - 1 - first_kept   # the logits that predict the first target token
            predicting = logits[r, first:first + len(target_ids)].float()
            lps = torch.log_softmax(predicting, dim=-1).gather(1, torch.tensor(target_ids).unsqueeze(1).to(predicting.device))
            out.append([float(x) for x in lps.squeeze(1).tolist()])
        return out

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell``: the run's identity, the coordinates, the prefix as the text read, ``fields``."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text="",
                         user_text=cell["prefix"], timing_scope="batch", endpoint=f"engine://hf/{self.source}",
                         **fields)
