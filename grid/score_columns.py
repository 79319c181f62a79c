"""The columns a ``score`` engine writes beside the core trace schema (an instrument of that kind lists them
among its own ``columns``). The text the model read sits in the core ``user_text``; ``prompt_tokens``
counts the prefix and target tokens together."""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.trace_schema import doc_field

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
"""Output columns of every ``score`` engine: exact engines fill the log-prob columns, the sampling proxy
(``actors.score_proxy``) the ``proxy_`` ones; a row never carries both."""
SCORE_INPUTS = ("prefix", "target", "add_bos", "proxy_samples")
"""Request columns a ``score`` cell is rendered to: the prefix and target texts, ``add_bos`` (true or
false to force, null for the model's setting or the tokenizer's own ``add_special_tokens=True``
behaviour), and ``proxy_samples`` (continuations the sampling proxy draws; exact engines ignore it)."""
