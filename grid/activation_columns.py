"""The columns an ``activations`` engine reads and writes beside the core trace schema (an instrument of that
kind lists them among its own ``columns``). The text the model read sits in the core ``user_text``;
``prompt_tokens`` counts the tokens of the forward pass (after truncation).

How a cell is extracted is part of the cell (the request columns below, which the instrument also keeps as
coordinates, so every row records them): these choices can move a probe statistic more than the effects
it reports.
"""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.trace_schema import doc_field

RENDERINGS = ("chat_user", "raw")
"""``chat_user``: the text as the user turn of the model's chat template, generation prompt added (the template's own
special tokens, no others), with the system turn ``system`` says, ``user_suffix``, ``assistant_prefix`` and the
frozen ``date_string`` (``actors.activation_prompt``); ``raw``: the text (+ ``user_suffix``) alone, BOS as the
tokenizer's ``add_special_tokens=True`` puts it."""
SYSTEMS = ("none", "default", "text")
"""The system turn of a ``chat_user`` rendering: ``none`` (no system block, even where the template writes a
default one, as SmolLM2's and Qwen2.5's do), ``default`` (whatever the template writes for a lone user turn) or
``text`` (``system_prompt`` as the system turn)."""
DEFAULT_DATE = "26 Jul 2024"
"""The date a chat template that writes one (Llama 3.x: ``date_string``, else ``strftime_now``) is given unless a
cell says otherwise: frozen, so a rerun next month reads the same tokens (this one is Llama 3.x's own fallback)."""
DATE_FORMAT = "%d %b %Y"
"""The format of ``date_string`` (``26 Jul 2024``), as Llama 3.x's templates write it."""
POOLINGS = ("mean", "last_token")
"""``mean``: the mean over the kept positions; ``last_token``: the last kept position."""
VECTOR_DTYPES = ("float32", "float16")
"""Storage types of the pooled vectors (pooling itself is computed in float32)."""

ACTIVATION_OPTIONS = (
    doc_field("rendering", pa.string(), "how the text became the model's input: chat_user (the user turn of the "
              "chat template, generation prompt added; system turn, suffix, prefix and date in the columns below) or "
              "raw (the text alone, BOS per the tokenizer)"),
    doc_field("system", pa.string(), "chat_user's system turn: none (no system block), default (the template's "
              "own for a lone user turn) or text (system_prompt); null in rows stored before it was recorded, "
              "which rendered as default"),
    doc_field("system_prompt", pa.string(), "the system turn's text when system is text (null otherwise)"),
    doc_field("user_suffix", pa.string(), "text appended to the user turn (raw: to the text), e.g. '\\n\\nAnswer:'; "
              "empty for none"),
    doc_field("assistant_prefix", pa.string(), "text appended after the generation prompt, as the start of the "
              "assistant's turn; empty for none"),
    doc_field("date_string", pa.string(), "the date given to templates that write one (date_string, strftime_now), "
              "format '26 Jul 2024'; null: not frozen (rows stored before it was recorded)"),
    doc_field("pooling", pa.string(), "how a layer's token states became one vector: mean (over kept positions) "
              "or last_token (the last kept position)"),
    doc_field("drop_bos", pa.bool_(), "true: a BOS token at position 0 was left out of the pooling"),
    doc_field("drop_whitespace", pa.bool_(), "true: tokens that decode to whitespace only were left out of the pooling"),
    doc_field("max_input_tokens", pa.int32(), "truncation: at most this many tokens were read, the first ones "
              "(null: no truncation)"),
    doc_field("vector_dtype", pa.string(), "storage type of layer_vectors: float32 or float16 (pooled in float32)"),
    doc_field("text_withheld", pa.bool_(), "true: the text may not be redistributed, so user_text and "
              "input_token_ids are null and only the token count is kept (null: false)"),
)
"""Request columns that say how a cell is extracted; an ``activations`` instrument carries them as coordinates."""
ACTIVATION_INPUTS = ("text",) + tuple(f.name for f in ACTIVATION_OPTIONS)
"""Request columns of an ``activations`` cell: the text and how to extract it."""

LAYER_VECTORS = pa.field("layer_vectors", pa.list_(pa.list_(pa.float32())), metadata={
    "doc": "pooled hidden state per layer: entry 0 is the embedding output (hidden_states[0]), entries 1…L the "
           "blocks' outputs as transformers returns them (the last after the final norm); stored per part as "
           "fixed_size_list<fixed_size_list<vector_dtype>[hidden_size]>[n_layers] (read back as float32 lists); "
           "null when the row failed",
    "large": "true"})
"""The vectors. Their type is the model's (layers, width) and the configured dtype, so each part keeps its own
fixed-size type and readers cast to the nominal ``list<list<float32>>`` (``grid.trace_schema.conform``)."""

ACTIVATION_COLUMNS = ACTIVATION_OPTIONS + (
    doc_field("input_token_ids", pa.list_(pa.int32()), "token ids of the forward pass, special tokens included, "
              "after truncation"),
    doc_field("pooled_tokens", pa.int32(), "positions that entered the pooling (after truncation and dropping)"),
    doc_field("truncated", pa.bool_(), "true when the input was cut to max_input_tokens"),
    doc_field("n_layers", pa.int32(), "entries of layer_vectors: the blocks plus the embedding output"),
    doc_field("hidden_size", pa.int32(), "width of each pooled vector"),
    doc_field("model_parameters", pa.int64(), "parameters of the model that made the row (for scaling analyses)"),
    LAYER_VECTORS,
)
"""Columns of every ``activations`` engine's rows (the options echo the request)."""
