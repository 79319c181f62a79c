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
    ("instrument", pa.string(), "name of the instrument that made the row (forced_choice, or a plug-in's name)"),
    ("probe_id", pa.string(), "label|item_key|envelope|ordering ('-' where absent)"),
    ("sample", pa.int32(), "0-based sample index of the cell"),
    ("attempt", pa.int32(), "1-based attempt number at this (probe_id, sample) within the invocation"),
    # coordinates
    ("label", pa.string(), "model variant label (unique in the experiment)"),
    ("model", pa.string(), "model as named in config.json (path, hub id or alias)"),
    ("model_canonical", pa.string(), "resolved model source (absolute path or hub id)"),
    ("backend", pa.string(), "engine backend: hf, vllm, openai, anthropic"),
    ("item_key", pa.string(), "the item's key, as its instrument defines it"),
    ("envelope", pa.string(), "envelope (prompt wrapper) id; '-' where the instrument has none"),
    ("envelope_version", pa.string(), "version string of the envelope (wrapper) set, when the instrument has one"),
    ("ordering", pa.string(), "the item's ordering, as its instrument defines it; '-' where absent"),
    # prompt and answer
    ("system_text", pa.string(), "rendered system prompt, verbatim ('' for none)"),
    ("user_text", pa.string(), "rendered user prompt, verbatim"),
    ("system_folded", pa.bool_(), "true when the chat template rejected a system role and the system text was folded into the first user turn"),
    ("response", pa.string(), "full generated text, verbatim (null when the attempt failed)"),
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
    ("intervals_ms", pa.list_(pa.float64()), "ms, monotonic: gaps between the arrivals of consecutive content-bearing chunks, one per chunk after the first (n_chunks - 1 values; a chunk carrying several tokens is one gap, not split; null for batch timing)"),
    ("n_chunks", pa.int32(), "content-bearing streamed chunks as received (an SSE event, or a vLLM delta; one chunk may carry several tokens, so n_chunks need not equal completion_tokens; role-only and usage chunks not counted; null for batch timing)"),
    ("total_ms", pa.float64(), "ms, monotonic: request (or batch) start to this row's last chunk/token"),
    ("decode_tok_s", pa.float64(), "tokens/s, derived (no token is timed alone): (completion_tokens - 1) / (total_ms - ttft_ms) in seconds; null for one token"),
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
"""The core schema: the columns every instrument's trace parts have."""
TRACE_COLUMNS = [name for name, _, _ in _FIELDS]


def doc_field(name: str, dtype: pa.DataType, doc: str) -> pa.Field:
    """An Arrow field carrying its meaning and unit as ``doc`` metadata (how instruments declare columns)."""
    return pa.field(name, dtype, metadata={"doc": doc})


def trace_schema(extra: tuple[pa.Field, ...] | list[pa.Field] = ()) -> pa.Schema:
    """The core schema followed by an instrument's extra columns; an extra column may not redefine a core
    one, and each must say what it holds (a ``doc`` in its metadata)."""
    for f in extra:
        if f.name in TRACE_COLUMNS:
            raise ValueError(f"instrument column {f.name!r} is a core trace column")
        if not (f.metadata or {}).get(b"doc"):
            raise ValueError(f"instrument column {f.name!r} has no doc metadata (use grid.trace_schema.doc_field)")
    return pa.schema(list(TRACE_SCHEMA) + list(extra))


def union_schema(columns_by_instrument: dict[str, tuple[pa.Field, ...]]) -> pa.Schema:
    """The core schema plus every instrument's columns (for one view over all traces): a column two
    instruments share must have one type; columns marked ``large`` in their metadata (per-layer vectors)
    are left out."""
    fields: dict[str, pa.Field] = {}
    for name, columns in columns_by_instrument.items():
        for f in columns:
            if is_large(f):
                continue
            if f.name in fields and not fields[f.name].type.equals(f.type):
                raise ValueError(f"column {f.name!r} of instrument {name!r} is {f.type}, another's is {fields[f.name].type}")
            fields.setdefault(f.name, f)
    return trace_schema(list(fields.values()))


def to_trace_table(rows: list[dict], schema: pa.Schema = TRACE_SCHEMA) -> pa.Table:
    """Rows (dicts) as a table in ``schema``; missing fields become null, unknown keys are an error."""
    extra = set().union(*(r.keys() for r in rows)) - set(schema.names) if rows else set()
    if extra:
        raise ValueError(f"rows carry fields outside the trace schema: {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=schema)


def is_large(f: pa.Field) -> bool:
    """Whether ``f`` holds per-layer vectors (``large`` in its metadata): left out of cross-instrument views, and
    stored in the fixed-size type of the model that wrote it."""
    return (f.metadata or {}).get(b"large") == b"true"


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order and type; a column it lacks becomes null. A large
    column (``is_large``) keeps the list type it has (its fixed sizes are the model's: readers cast it). A
    column already of its type is taken as it is (a cast per column costs more than the rest together)."""
    present = dict(zip(table.schema.names, table.columns))
    arrays, fields = [], []
    for f in schema:
        column = present.get(f.name)
        if column is None:
            arrays.append(pa.nulls(table.num_rows, f.type))
            fields.append(f)
        elif is_large(f) and pa.types.is_fixed_size_list(column.type):
            arrays.append(column)
            fields.append(f.with_type(column.type))
        else:
            arrays.append(column if column.type.equals(f.type) else column.cast(f.type))
            fields.append(f)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
