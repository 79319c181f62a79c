"""What each engine kind asks and answers, and which model keys each engine reads: the engine facts that
config validation, instruments and engines share.

An **engine kind** (``generate``, ``score``, ``activations``) says what a cell asks of an engine. Its
description (``EngineKind``) names the request columns an instrument renders a cell to and the answer columns
every engine of that kind writes beside the core trace schema (``grid.trace_schema``); an instrument of that
kind lists the answer columns among its own ``columns``. The column definitions below are the stored format
(their ``doc`` goes into the Parquet field metadata): they change only with a new stored format.

``ENGINE_MODEL_KEYS`` says, per engine (kind, backend), which of the model keys that only some engines read
(``SELECTIVE_KEYS``) it reads. ``grid.spec`` refuses a model entry that sets such a key for an engine that
would drop it. The table lives here, not in ``actors/``, because ``grid/`` imports no other part: the
engine classes (``actors.engine.Engine``) declare the same facts beside the code that reads them
(``model_keys``, and their registry key for the kinds a backend offers), and ``tests/actors/
test_engine_contract.py`` holds every registered engine against this table, so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.grid.trace_schema import doc_field


@dataclass(frozen=True)
class EngineKind:
    """One engine kind: the cell it is asked and the row it answers."""

    name: str
    """The kind's name, as an instrument's ``engine_kind`` and the registry's key say it."""
    request: tuple[str, ...]
    """Request columns a cell of this kind is rendered to (``Renderer.render``), read by every engine of it."""
    answer: tuple[pa.Field, ...]
    """Columns every engine of this kind writes beside the core trace schema (documented fields); () for none."""
    doc: str
    """What a cell asks and what comes back, in words."""


# ---- generate ----------------------------------------------------------------------------------------------
GENERATE_INPUTS = ("system_text", "user_text", "temperature", "top_p", "max_tokens")
"""Request columns of a ``generate`` cell: the system and user texts of one chat turn (``system_text`` empty for
none), and optionally the cell's own sampling (``temperature``, ``top_p``, ``max_tokens``; null or absent: the
model variant's, ``actors.rows.cell_sampling``)."""

# ---- score -------------------------------------------------------------------------------------------------
SCORE_COLUMNS = (
    doc_field("target_text", pa.string(), "the text scored after the prefix, verbatim (a space and the term)"),
    doc_field("bos_added", pa.bool_(), "true when a BOS token was put before the prefix (the tokenizer's own rule, or forced per model)"),
    doc_field("prefix_token_ids", pa.list_(pa.int32()), "token ids the model read before the target, BOS included when added"),
    doc_field("target_token_ids", pa.list_(pa.int32()), "token ids of the target, tokenized on its own without special tokens"),
    doc_field("target_space", pa.string(), "null when the target's tokens are its own tokenization; "
              "'lone_space_dropped' when the tokenizer wrote the target's leading space as a lone SentencePiece '▁' "
              "token before a word piece that starts with '▁' again, and the target was scored as the word's own "
              "tokens (the space counted once, as in a running sentence; ``actors.score_tokens``)"),
    doc_field("target_logprobs", pa.list_(pa.float64()), "nats: log-probability of each target token at its position, given everything before it"),
    doc_field("lp_mean", pa.float64(), "nats per token: mean of target_logprobs"),
    doc_field("lp_min", pa.float64(), "nats: the lowest of target_logprobs"),
    doc_field("proxy_n", pa.int32(), "sampling proxy (chat-only APIs, no log-probs): continuations sampled for the prefix; null for exact rows"),
    doc_field("proxy_continuations", pa.list_(pa.string()), "sampling proxy: each sampled continuation of the prefix, in the order sampled"),
)
"""Answer columns of every ``score`` engine: exact engines fill the log-prob columns, the sampling proxy
(``actors.score_proxy``) the ``proxy_`` ones; a row never carries both. The text the model read sits in the
core ``user_text``; ``prompt_tokens`` counts the prefix and target tokens together."""
SCORE_INPUTS = ("prefix", "target", "add_bos", "proxy_samples")
"""Request columns a ``score`` cell is rendered to: the prefix and target texts, ``add_bos`` (true or
false to force, null for the model's setting or the tokenizer's own ``add_special_tokens=True``
behaviour), and ``proxy_samples`` (continuations the sampling proxy draws; exact engines ignore it)."""

# ---- activations -------------------------------------------------------------------------------------------
# How a cell is extracted is part of the cell (the request columns below, which the instrument also keeps as
# coordinates, so every row records them): these choices can move a probe statistic more than the effects it
# reports. The text the model read sits in the core ``user_text``; ``prompt_tokens`` counts the tokens of the
# forward pass (after truncation).
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
"""Answer columns of every ``activations`` engine's rows (the options echo the request)."""

# ---- the kinds ---------------------------------------------------------------------------------------------
GENERATE = EngineKind("generate", GENERATE_INPUTS, (),
                      "chat turns in, sampled text out (the core columns: response, reasoning, tokens, timing)")
SCORE = EngineKind("score", SCORE_INPUTS, SCORE_COLUMNS,
                   "prefix and target in, the target tokens' log-probabilities out (or, for chat-only APIs, "
                   "sampled continuations of the prefix)")
ACTIVATIONS = EngineKind("activations", ACTIVATION_INPUTS, ACTIVATION_COLUMNS,
                         "text and extraction options in, per-layer pooled hidden states out")
KINDS: dict[str, EngineKind] = {k.name: k for k in (GENERATE, SCORE, ACTIVATIONS)}
"""Every engine kind by name, in the order of ``grid.instrument.ENGINE_KINDS``."""

# ---- backends and the model keys their engines read ---------------------------------------------------------
BACKENDS = ("hf", "vllm", "openai", "anthropic")
"""Model backends: in-process engines (hf, vllm) and online streaming HTTP APIs (openai-compatible, anthropic)."""
API_BACKENDS = ("openai", "anthropic")
"""Backends reached over HTTP: the model is an API name at an ``endpoint``, not a local folder."""

SELECTIVE_KEYS = ("endpoint", "device_map", "tensor_parallel_size", "engine_args", "extra_body",
                  "chat_template_kwargs", "add_bos", "tokenizer", "score_api")
"""Model keys that only some engines read; every other model key is read by every engine or by the grid engine
(label, sampling, pool bounds, ``num_gpus``, ``memory_gb``) and checked on its own. ``tensor_parallel_size``
counts as set when above 1."""

ENGINE_MODEL_KEYS: dict[tuple[str, str], frozenset[str]] = {
    ("generate", "hf"): frozenset({"device_map", "chat_template_kwargs"}),
    ("generate", "vllm"): frozenset({"tensor_parallel_size", "engine_args", "extra_body", "chat_template_kwargs"}),
    ("generate", "openai"): frozenset({"endpoint", "extra_body", "chat_template_kwargs"}),
    ("generate", "anthropic"): frozenset({"endpoint", "extra_body"}),
    ("score", "hf"): frozenset({"device_map", "add_bos"}),
    ("score", "vllm"): frozenset({"tensor_parallel_size", "engine_args", "add_bos"}),
    ("score", "openai"): frozenset({"endpoint", "extra_body", "add_bos", "tokenizer", "score_api"}),
    ("score", "anthropic"): frozenset({"endpoint", "extra_body"}),
    ("activations", "hf"): frozenset({"device_map"}),
    ("activations", "vllm"): frozenset({"tensor_parallel_size", "engine_args"}),
}
"""(engine kind, backend) → the ``SELECTIVE_KEYS`` its engine reads. The keys of this table are the engines
there are: ``actors.registry.ENGINES`` has the same keys, and each engine class's ``model_keys`` is its row
(a test holds them together). ``openai``'s score engine reads ``add_bos`` only with a ``tokenizer`` and
neither under ``score_api: "chat"``; ``grid.spec`` checks those combinations itself."""


def backend_reads(backend: str, key: str) -> bool:
    """Whether some engine of ``backend`` (of any kind) reads the selective model key ``key``."""
    return any(key in keys for (_, b), keys in ENGINE_MODEL_KEYS.items() if b == backend)


def kind_reads(kind: str, key: str) -> bool:
    """Whether some engine of ``kind`` (of any backend) reads the selective model key ``key``."""
    return any(key in keys for (k, _), keys in ENGINE_MODEL_KEYS.items() if k == kind)


def engine_reads(kind: str, backend: str, key: str) -> bool:
    """Whether the engine of ``kind`` for ``backend`` reads the selective model key ``key`` (False where there is
    no such engine)."""
    return key in ENGINE_MODEL_KEYS.get((kind, backend), ())


def backends_reading(key: str) -> tuple[str, ...]:
    """The backends (in ``BACKENDS`` order) some engine of which reads ``key``: for messages that name them."""
    return tuple(b for b in BACKENDS if backend_reads(b, key))
