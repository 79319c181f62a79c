"""The sampling proxy engine (``score`` kind, backend anthropic): for chat-only APIs that give no
log-probabilities, N sampled continuations of each prefix, from which the instrument counts hits.

Each cell (``prefix``, ``target``, ``proxy_samples`` N) becomes N chat requests through the backend's own
streaming sampler (``actors.http_anthropic``: its retries, timeouts, concurrency bound and secrets
handling), all with the cell's probe_id, at temperature 1 and top_p 1 (the method's settings, whatever
the model entry says), at most ``PROXY_MAX_TOKENS`` tokens, with the fixed, recorded template below. The
row keeps every continuation in order (``proxy_continuations``) and N (``proxy_n``); the log-prob
columns stay null. If any of the N samples fails after its retries, the cell is an error row naming how
many failed and the first error (a resume asks again), so k/N is always over N answers.

Timing: the wall time of the cell's N requests together (``timing_scope='batch'``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from datetime import datetime, timezone

import pyarrow as pa

from mirrorscan.actors.engine import Engine
from mirrorscan.actors.rows import trace_row, where_am_i
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.secrets import strip_userinfo
from mirrorscan.grid.engine_kinds import SCORE_COLUMNS
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

PROXY_SYSTEM = ("You continue text. Reply with the words that come next, and nothing else: do not repeat the "
                "text, do not comment on it.")
"""System prompt of every proxy request."""
PROXY_USER = "Continue this text:\n\n{prefix}"
"""User turn of every proxy request; ``{prefix}`` is the carrier's text before the blank."""
PROXY_MAX_TOKENS = 16
"""Tokens per continuation: the first words are all the hit rule reads."""
TEMPLATE_SHA256 = hashlib.sha256(json.dumps([PROXY_SYSTEM, PROXY_USER]).encode()).hexdigest()
"""Hash of the template, recorded on every row."""
_SCHEMA = trace_schema(SCORE_COLUMNS)


class AnthropicProxyScorer(Engine):
    """N sampled continuations per cell through the Anthropic sampler; one row per cell."""

    kind, backend = "score", "anthropic"
    model_keys = frozenset({"endpoint", "extra_body"})
    CONCURRENT_BATCHES = 2

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, **backoff):
        """The chat sampler of ``variant`` at temperature 1, top_p 1 and PROXY_MAX_TOKENS."""
        from mirrorscan.actors.http_anthropic import AnthropicSampler

        self.variant, self.run, self.source = variant, run, model_source
        chat_variant = dataclasses.replace(variant, temperature=1.0, top_p=1.0, max_tokens=PROXY_MAX_TOKENS)
        self.chat = AnthropicSampler(chat_variant, model_source, run, **backoff)
        self.where = where_am_i()

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """A quarter CPU: the work is waiting on the network."""
        return {"num_cpus": 0.25}

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Sample every cell's continuations (all requests of the batch in flight, bounded by the sampler)."""
        cells = batch.to_pylist()
        counts = [int(c["proxy_samples"]) for c in cells]   # N comes with each cell (the instrument's setting)
        requests = [{"probe_id": c["probe_id"], "sample": c["sample"], "attempt": c.get("attempt", 1),
                     "seed": c["seed"], "item_key": c.get("item_key"), "system_text": PROXY_SYSTEM,
                     "user_text": PROXY_USER.format(prefix=c["prefix"])}
                    for c, n in zip(cells, counts) for _ in range(n)]
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        answers = self.chat(pa.Table.from_pylist(requests)).to_pylist() if requests else []
        total_ms = (time.monotonic() - start) * 1000
        rows, at = [], 0
        for cell, n in zip(cells, counts):
            mine, at = answers[at:at + n], at + n
            failed = [a["error"] for a in mine if a["error"] is not None]
            params = json.dumps({"proxy": True, "samples": n, "temperature": 1.0, "top_p": 1.0,
                                 "max_tokens": PROXY_MAX_TOKENS, "template_sha256": TEMPLATE_SHA256,
                                 "system": PROXY_SYSTEM, "user": PROXY_USER, "seeded": False}, sort_keys=True)
            common = {"target_text": cell["target"], "proxy_n": n, "request_params": params,
                      "started_at": started_at, "total_ms": total_ms, "batch_size": len(requests),
                      "prompt_tokens": sum(a["prompt_tokens"] or 0 for a in mine) or None,
                      "completion_tokens": sum(a["completion_tokens"] or 0 for a in mine) or None}
            if failed:
                rows.append(self._row(cell, **common, error=f"ProxySampleError: {len(failed)} of {n} samples "
                                                            f"failed; first: {failed[0]}"))
            else:
                rows.append(self._row(cell, **common, proxy_continuations=[a["response"] for a in mine]))
        return to_trace_table(rows, _SCHEMA)

    def close(self) -> None:
        """Close the sampler's client and loop."""
        self.chat.close()

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell``: the prefix as the text read, the sampler's endpoint."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text=PROXY_SYSTEM,
                         user_text=cell["prefix"], timing_scope="batch", endpoint=strip_userinfo(self.chat.url),
                         backend=self.variant.backend, **fields)
