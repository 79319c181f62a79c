"""Per-request streaming timing, one definition for every streamed backend (vLLM, HTTP, the tap).

Clock: ``time.monotonic``; the request is sent at 0. A *chunk* is one piece of the stream as it reached
the reader: an SSE event for the HTTP backends and the tap, one ``RequestOutput`` delta for the in-process
vLLM engine. A chunk may carry several tokens (an engine or a server merges tokens that are ready
together); the timing records chunks as they arrived and never splits one into tokens. Only
*content-bearing* chunks count: a chunk that carries generated text or reasoning (for vLLM: at least one
generated token, even one whose text is ''). Role-only chunks, keep-alives and usage-only chunks are not
chunks of the answer and are ignored.

Measured (ms, monotonic, from the send):

- ``ttft_ms``: first chunk carrying generated text or reasoning.
- ``ttft_answer_ms``: first chunk of the answer itself (later than ``ttft_ms`` for reasoning models).
- ``intervals_ms``: gaps between consecutive content-bearing chunks (``n_chunks - 1`` values), one per
  arrival after the first: a merged chunk is one gap, not a run of 0 ms gaps.
- ``n_chunks``: content-bearing chunks; at most ``completion_tokens`` when a chunk carries whole tokens
  (equal only when every chunk carried exactly one token).
- ``total_ms``: the last content-bearing chunk.

Derived, not measured per token:

- ``decode_tok_s``: (completion_tokens − 1) ÷ (total − ttft) in tokens per second, i.e. the tokens after
  the first (assumed to be one) spread evenly over the time between the first and the last chunk; null
  when there is one token or no time between first and last chunk. It is not the mean of per-token gaps:
  no token is timed on its own.

Tokens per chunk are kept by ``StreamClock.chunk_tokens`` when the reader knows them (vLLM); they are not
a trace column.

Invariants (``timing_problems`` checks them; tests run it on every streamed row): 0 < ttft_ms ≤ total_ms;
len(intervals_ms) = n_chunks − 1; ttft_ms + Σ intervals_ms = total_ms within 5 %.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

TIMING_TOLERANCE = 0.05
"""Relative tolerance for ttft + Σ intervals = total (they are equal by construction up to rounding)."""


class StreamClock:
    """Times one streamed request: ``start()`` when it is sent, ``chunk(...)`` once per received chunk
    (however many tokens it carries)."""

    def __init__(self) -> None:
        self.started_at: datetime | None = None
        """Wall clock (UTC) at send, for the log; never used for durations."""
        self._t0: float | None = None
        self._times: list[float] = []
        self._tokens: list[int | None] = []
        self._first_answer: float | None = None

    def start(self) -> None:
        """Mark the request as sent (monotonic 0) and note the wall-clock send time."""
        self.started_at = datetime.now(timezone.utc)
        self._t0 = time.monotonic()

    def chunk(self, text: str | None = None, reasoning: str | None = None, tokens: int | None = None) -> None:
        """Record one received chunk at its arrival (monotonic now); it counts only when it carries answer
        text or reasoning. ``tokens``: how many generated tokens it carries, when the reader knows (else None)."""
        if not text and not reasoning:
            return
        now = time.monotonic()
        self._times.append(now)
        self._tokens.append(tokens)
        if text and self._first_answer is None:
            self._first_answer = now

    @property
    def n_chunks(self) -> int:
        """Content-bearing chunks received so far."""
        return len(self._times)

    @property
    def chunk_tokens(self) -> list[int | None]:
        """Tokens carried by each content-bearing chunk, in arrival order (None where the reader did not say).
        Not written to rows (there is no such column); for readers that want the merge pattern."""
        return list(self._tokens)

    def fields(self, completion_tokens: int | None) -> dict:
        """The timing fields of a trace / inference-log row: ms on the monotonic clock from ``start()``,
        one interval per chunk after the first; ``decode_tok_s`` (tokens/s) derived from
        ``completion_tokens`` as described in the module docstring."""
        if self._t0 is None:
            raise RuntimeError("StreamClock.fields() before start()")
        if not self._times:
            return {"started_at": self.started_at, "ttft_ms": None, "ttft_answer_ms": None, "intervals_ms": None,
                    "n_chunks": 0, "total_ms": None, "decode_tok_s": None, "timing_scope": "request"}
        ms = [(t - self._t0) * 1000.0 for t in self._times]
        ttft, total = ms[0], ms[-1]
        decode = None
        if completion_tokens and completion_tokens > 1 and total > ttft:
            decode = (completion_tokens - 1) / ((total - ttft) / 1000.0)
        return {
            "started_at": self.started_at, "ttft_ms": ttft,
            "ttft_answer_ms": (self._first_answer - self._t0) * 1000.0 if self._first_answer is not None else None,
            "intervals_ms": [b - a for a, b in zip(ms, ms[1:])], "n_chunks": len(ms), "total_ms": total,
            "decode_tok_s": decode, "timing_scope": "request",
        }


def timing_problems(row: dict) -> list[str]:
    """Which timing invariants a streamed row breaks (empty list = all hold)."""
    problems = []
    ttft, total, intervals, n = row.get("ttft_ms"), row.get("total_ms"), row.get("intervals_ms"), row.get("n_chunks")
    if ttft is None or total is None or intervals is None or n is None:
        return ["missing timing fields"]
    if not 0 < ttft <= total:
        problems.append(f"0 < ttft_ms ≤ total_ms fails: ttft {ttft}, total {total}")
    if len(intervals) != n - 1:
        problems.append(f"len(intervals_ms) = {len(intervals)} but n_chunks − 1 = {n - 1}")
    if abs(ttft + sum(intervals) - total) > TIMING_TOLERANCE * total:
        problems.append(f"ttft + Σ intervals = {ttft + sum(intervals):.3f} ms vs total {total:.3f} ms (> 5 %)")
    return problems
