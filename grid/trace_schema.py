"""The traces schema: one Parquet row per attempt at a cell.

Each field carries its meaning and unit as Arrow field metadata (``doc``), so a reader of any part file
can find out what a column means. Clocks: ``created_at`` is wall clock (UTC); every ``*_ms`` duration is
measured on the engine's monotonic clock.
"""

from __future__ import annotations

import pyarrow as pa

_FIELDS: list[tuple[str, pa.DataType, str]] = [
    # identity
    ("invocation_id", pa.string(), "uuid of the scan invocation (the method's experiment_version)"),
    ("experiment", pa.string(), "experiment folder name"),
    ("instrument", pa.string(), "forced_choice | open_scan | flinch | lens"),
    ("probe_id", pa.string(), "label|item_key|envelope|ordering ('-' where absent)"),
    ("sample", pa.int32(), "0-based sample index of the cell"),
    ("attempt", pa.int32(), "1-based attempt number at this (probe_id, sample) within the invocation"),
    # coordinates
    ("label", pa.string(), "model variant label (unique in the experiment)"),
    ("model", pa.string(), "model as named in config.json (path, hub id or alias)"),
    ("model_canonical", pa.string(), "resolved model source (absolute path or hub id)"),
    ("backend", pa.string(), "engine backend: hf, vllm, openai, anthropic"),
    ("pair_id", pa.string(), "pair id from the probe set (forced_choice)"),
    ("word_a", pa.string(), "first word of the pair as listed in the probe set"),
    ("word_b", pa.string(), "second word of the pair as listed in the probe set"),
    ("item_key", pa.string(), "item key: word_a|word_b for forced_choice"),
    ("envelope", pa.string(), "envelope id"),
    ("envelope_version", pa.string(), "version string of the envelopes file"),
    ("ordering", pa.string(), "AB (word_a fills {a}) or BA (word_b fills {a})"),
    # prompt and answer
    ("system_text", pa.string(), "rendered system prompt, verbatim ('' for none)"),
    ("user_text", pa.string(), "rendered user prompt, verbatim"),
    ("system_folded", pa.bool_(), "true when the chat template rejected a system role and the system text was folded into the first user turn"),
    ("response", pa.string(), "full generated text, verbatim (null when the attempt failed)"),
    ("class", pa.string(), "A, B, UNCLEAR or REF (filled by the classifier; null before)"),
    ("classifier_version", pa.string(), "version of the classifier that wrote class"),
    # sampling
    ("temperature", pa.float64(), "sampling temperature (0 = greedy)"),
    ("top_p", pa.float64(), "nucleus sampling mass"),
    ("max_tokens", pa.int32(), "maximum generated tokens"),
    ("seed", pa.int64(), "cell seed = hash(root seed, probe_id, sample)"),
    ("generation_overrides", pa.string(), "JSON of effort, extra_body and chat-template kwargs sent to the engine"),
    # tokens and timing
    ("prompt_tokens", pa.int32(), "tokens in the templated prompt"),
    ("completion_tokens", pa.int32(), "generated tokens, up to and including the stop token"),
    ("finish_reason", pa.string(), "stop (end-of-turn token) or length (max_tokens reached)"),
    ("reasoning", pa.string(), "reasoning/thinking text streamed before the answer, verbatim (null when none)"),
    ("timing_scope", pa.string(), "batch: timings are of the engine batch the row ran in; request: of this row's own stream"),
    ("batch_size", pa.int32(), "cells in the engine batch this row ran in"),
    ("prefill_ms", pa.float64(), "ms, monotonic: batch start to the first generated token of the batch"),
    ("started_at", pa.timestamp("us", tz="UTC"), "wall clock (UTC) when the request (or batch) was sent"),
    ("ttft_ms", pa.float64(), "ms, monotonic: request (or batch) start to this row's first chunk carrying text or reasoning"),
    ("ttft_answer_ms", pa.float64(), "ms, monotonic: request start to the first chunk of the answer itself (after any reasoning)"),
    ("intervals_ms", pa.list_(pa.float64()), "ms, monotonic: gaps between consecutive content-bearing chunks (n_chunks - 1 values; null for batch timing)"),
    ("n_chunks", pa.int32(), "content-bearing streamed chunks (role-only and usage chunks not counted; null for batch timing)"),
    ("total_ms", pa.float64(), "ms, monotonic: request (or batch) start to this row's last chunk/token"),
    ("decode_tok_s", pa.float64(), "tokens/s: (completion_tokens - 1) / (total - ttft); null for one token"),
    # where it ran and what was sent
    ("endpoint", pa.string(), "where the request went: an http(s) URL for API backends, engine://<backend>/<model> in-process"),
    ("request_params", pa.string(), "JSON of the generation parameters actually sent to the engine or API"),
    ("request_headers", pa.string(), "JSON of the request headers sent (X-Probe-Id; never auth headers)"),
    ("node_id", pa.string(), "Ray node id that ran the engine"),
    ("actor_id", pa.string(), "Ray actor id of the engine"),
    ("hostname", pa.string(), "host name of the engine's machine"),
    # outcome
    ("error", pa.string(), "null when fine; else the error type and message"),
    ("created_at", pa.timestamp("us", tz="UTC"), "wall clock (UTC) when the row was produced"),
]

TRACE_SCHEMA = pa.schema([pa.field(name, dtype, metadata={"doc": doc}) for name, dtype, doc in _FIELDS])
"""Schema of every traces part file."""
TRACE_COLUMNS = [name for name, _, _ in _FIELDS]


def to_trace_table(rows: list[dict]) -> pa.Table:
    """Rows (dicts) as a table in TRACE_SCHEMA; missing fields become null, unknown keys are an error."""
    extra = set().union(*(r.keys() for r in rows)) - set(TRACE_COLUMNS) if rows else set()
    if extra:
        raise ValueError(f"rows carry fields outside TRACE_SCHEMA: {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)
