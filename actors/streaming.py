"""Per-request streaming timing, one definition for every streamed backend (vLLM, HTTP, the tap).

Clock: ``time.monotonic``; the request is sent at 0. Only *content-bearing* chunks count: a chunk that
carries generated text or reasoning. Role-only chunks, keep-alives and usage-only chunks are not chunks
of the answer and are ignored.

- ``ttft_ms``: first chunk carrying generated text or reasoning.
- ``ttft_answer_ms``: first chunk of the answer itself (later than ``ttft_ms`` for reasoning models).
- ``intervals_ms``: gaps between consecutive content-bearing chunks (``n_chunks - 1`` values).
- ``n_chunks``: content-bearing chunks.
- ``total_ms``: the last content-bearing chunk.
- ``decode_tok_s``: (completion_tokens − 1) ÷ (total − ttft) in tokens per second; null when there is
  one token or no time between first and last chunk.

Invariants (``timing_problems`` checks them; tests run it on every streamed row): 0 < ttft_ms ≤ total_ms;
len(intervals_ms) = n_chunks − 1; ttft_ms + Σ intervals_ms = total_ms within 5 %.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

TIMING_TOLERANCE = 0.05
"""Relative tolerance for ttft + Σ intervals = total (they are equal by construction up to rounding)."""


class StreamClock:
    """Times one streamed request: ``start()`` when it is sent, ``chunk(...)`` per received chunk."""

    def __init__(self) -> None:
        self.started_at: datetime | None = None
        """Wall clock (UTC) at send, for the log; never used for durations."""
        self._t0: float | None = None
        self._times: list[float] = []
        self._first_answer: float | None = None

    def start(self) -> None:
        """Mark the request as sent (monotonic 0) and note the wall-clock send time."""
        self.started_at = datetime.now(timezone.utc)
        self._t0 = time.monotonic()

    def chunk(self, text: str | None = None, reasoning: str | None = None) -> None:
        """Record a received chunk; it counts only when it carries answer text or reasoning."""
        if not text and not reasoning:
            return
        now = time.monotonic()
        self._times.append(now)
        if text and self._first_answer is None:
            self._first_answer = now

    @property
    def n_chunks(self) -> int:
        """Content-bearing chunks received so far."""
        return len(self._times)

    def fields(self, completion_tokens: int | None) -> dict:
        """The timing fields of a trace / inference-log row (ms, monotonic; tokens/s)."""
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
