"""The one timing definition (``actors.streaming``): a chunk is timed once, at its arrival, whatever it
carries; what is derived (decode_tok_s) follows from token counts and the first/last chunk; each invariant
``timing_problems`` checks is caught when broken.

Chunks are fed with real sleeps between them (monotonic clock); the bounds asserted are far below the
sleeps, so a busy machine can only make gaps longer, never make a test fail.
"""

from __future__ import annotations

import time

import pytest

from mirrorscan.actors.streaming import StreamClock, timing_problems

GAP_S = 0.02
"""Sleep between two fed chunks (s)."""


def feed(clock: StreamClock, tokens_per_chunk: list[int]) -> None:
    """Start ``clock`` and feed one answer chunk per entry (carrying that many tokens), GAP_S apart."""
    clock.start()
    for n in tokens_per_chunk:
        time.sleep(GAP_S)
        clock.chunk(text="x" * n, tokens=n)


def test_merged_chunks_are_one_chunk_and_one_interval_each():
    """Four chunks carrying 1, 3, 1 and 4 tokens (9 tokens): four chunks, three intervals, none of them a
    made-up 0 ms gap — so n_chunks = chunks < completion_tokens, and n_chunks == completion_tokens fails."""
    clock = StreamClock()
    merged = [1, 3, 1, 4]
    feed(clock, merged)
    tokens = sum(merged)
    row = {**clock.fields(tokens), "completion_tokens": tokens}
    assert timing_problems(row) == []
    assert row["n_chunks"] == len(merged) == 4 and row["completion_tokens"] == 9
    assert len(row["intervals_ms"]) == row["n_chunks"] - 1 == 3
    assert row["n_chunks"] < row["completion_tokens"]   # the old invariant n_chunks == completion_tokens fails
    assert min(row["intervals_ms"]) >= GAP_S * 1000 * 0.9   # every gap is a real arrival gap, no 0 ms entries
    assert clock.chunk_tokens == merged and sum(clock.chunk_tokens) == row["completion_tokens"]


def test_decode_rate_is_derived_from_tokens_and_the_first_and_last_chunk():
    """decode_tok_s = (completion_tokens − 1) / (total − ttft): the same chunk times with more tokens in the
    chunks give a proportionally higher rate (it is not measured per token)."""
    clock = StreamClock()
    feed(clock, [1, 3, 1, 4])
    fields = clock.fields(9)
    span_s = (fields["total_ms"] - fields["ttft_ms"]) / 1000.0
    assert fields["decode_tok_s"] == pytest.approx(8 / span_s)
    assert clock.fields(3)["decode_tok_s"] == pytest.approx(2 / span_s)   # same times, fewer tokens
    assert clock.fields(1)["decode_tok_s"] is None and clock.fields(None)["decode_tok_s"] is None


def test_only_content_bearing_chunks_count():
    """Role-only, empty and usage-only chunks are not counted or timed; reasoning is, and the first answer
    chunk sets ttft_answer_ms after it."""
    clock = StreamClock()
    clock.start()
    clock.chunk()                                     # a keep-alive / usage-only chunk
    clock.chunk(text="", reasoning="")                # a role-only chunk
    time.sleep(GAP_S)
    clock.chunk(reasoning="hmm", tokens=2)
    time.sleep(GAP_S)
    clock.chunk(text="A", tokens=1)
    fields = clock.fields(3)
    assert fields["n_chunks"] == 2 and clock.chunk_tokens == [2, 1] and len(fields["intervals_ms"]) == 1
    assert fields["ttft_answer_ms"] - fields["ttft_ms"] >= GAP_S * 1000 * 0.9
    assert fields["ttft_ms"] >= GAP_S * 1000 * 0.9   # the empty chunks at ~0 ms were not the first chunk


def test_no_chunk_gives_null_timing_and_fields_before_start_is_an_error():
    clock = StreamClock()
    with pytest.raises(RuntimeError, match="before start"):
        clock.fields(None)
    clock.start()
    fields = clock.fields(0)
    assert fields["n_chunks"] == 0
    assert (fields["ttft_ms"], fields["intervals_ms"], fields["total_ms"], fields["decode_tok_s"]) == (None,) * 4


@pytest.mark.parametrize("broken, message", [
    ({"n_chunks": 5}, "n_chunks − 1"),                                   # intervals for 4 chunks, 5 claimed
    ({"intervals_ms": [10.0, 20.0]}, "n_chunks − 1"),                   # 2 intervals for 4 chunks
    ({"total_ms": 100.0}, "Σ intervals"),                                 # 10 + 30 ≠ 100
    ({"ttft_ms": 0.0, "total_ms": 30.0}, "0 < ttft_ms"),
    ({"ttft_ms": None}, "missing timing fields"),
])
def test_timing_problems_catches_each_broken_invariant(broken, message):
    good = {"ttft_ms": 10.0, "intervals_ms": [10.0, 10.0, 10.0], "n_chunks": 4, "total_ms": 40.0}
    assert timing_problems(good) == []
    problems = timing_problems({**good, **broken})
    assert problems and any(message in p for p in problems), problems
