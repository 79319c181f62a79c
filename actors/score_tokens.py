"""How a (prefix, target) pair becomes token ids, the same for every ``score`` engine.

The prefix is tokenized on its own and the target on its own (no special tokens), and the two id lists
are concatenated: the target's tokens are then exactly those scored, whatever the tokenizer would merge
across the boundary of the joined text. BOS before the prefix follows the tokenizer's own
``add_special_tokens=True`` behaviour unless forced per model, and is never a chat-template token (a
tokenizer whose BOS token is one, as ChatML's ``<|im_start|>``, cannot have it forced).

The target is a space and a word, and the space belongs to the word, counted once. A SentencePiece tokenizer
that puts a "▁" before every text it tokenizes (legacy Llama and Mistral) writes " word" alone as a lone
"▁" token followed by "▁word": the first of those is a space token that a running sentence never contains,
and its log-probability is not the word's. Such a target is scored as the tokenizer writes the word with its
one space ("▁word", the word tokenized without the leading space), and the row records it
(``target_space``, ``grid.engine_kinds.SCORE``).
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from mirrorscan.grid.engine_kinds import SCORE_COLUMNS
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

SPACE_MARK = "\u2581"
"""SentencePiece's space mark "▁" (U+2581), which starts every word piece that follows a space."""
LONE_SPACE_DROPPED = "lone_space_dropped"
"""``target_space``: the tokenizer split the target's space into a lone "▁" token; the target was scored as
the word's own tokens, whose first carries the space."""


class ScoreTokenError(ValueError):
    """A (prefix, target) pair that cannot be scored as asked (the row records it as its error)."""


def adds_bos(tokenizer) -> bool:
    """Whether ``tokenizer`` puts its BOS token first when asked for special tokens."""
    bos = tokenizer.bos_token_id
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bos is not None and len(probe) > 0 and probe[0] == bos


class ScoreIds(NamedTuple):
    """The token ids one (prefix, target) pair is scored on."""

    prefix_ids: list[int]
    """What the model reads before the target, BOS included when added."""
    target_ids: list[int]
    """The target's tokens, each scored."""
    bos_added: bool
    """Whether BOS was put before the prefix."""
    target_space: str | None
    """None, or ``LONE_SPACE_DROPPED`` when a lone space token at the target's start was not scored."""


def target_tokens(tokenizer, target: str) -> tuple[list[int], str | None]:
    """(token ids, ``target_space``) of ``target`` tokenized on its own without special tokens, its space
    counted once: when the tokenizer writes the target's leading space as a lone "▁" token and writes the word
    without that space starting with "▁" (it puts a "▁" before every text: module docstring), the word's own
    tokens are returned (as in a running sentence, the one space is their first "▁") with
    ``LONE_SPACE_DROPPED``. A tokenizer that adds no "▁" of its own keeps its lone "▁": there it is the space."""
    ids = list(tokenizer(target, add_special_tokens=False)["input_ids"])
    if len(ids) < 2 or not target.startswith(" ") or tokenizer.convert_ids_to_tokens(ids[0]) != SPACE_MARK:
        return ids, None
    word = list(tokenizer(target[1:], add_special_tokens=False)["input_ids"])
    first = tokenizer.convert_ids_to_tokens(word[0]) if word else ""
    return (word, LONE_SPACE_DROPPED) if first.startswith(SPACE_MARK) else (ids, None)


def score_ids(tokenizer, prefix: str, target: str, add_bos: bool | None = None) -> ScoreIds:
    """(prefix ids, target ids, whether BOS was added, ``target_space``) for scoring ``target`` after
    ``prefix``; the target's ids by ``target_tokens``.

    ``add_bos`` None follows the tokenizer; True or False forces it. Raises ScoreTokenError for an empty
    target, a forced BOS the tokenizer lacks or that is a chat-template token, and an empty prefix without
    BOS (the first target token would have nothing to be predicted from)."""
    bos_added = adds_bos(tokenizer) if add_bos is None else bool(add_bos)
    if bos_added and add_bos:
        bos = tokenizer.bos_token
        if tokenizer.bos_token_id is None:
            raise ScoreTokenError("BOS forced, but the tokenizer has no BOS token")
        if bos and bos in (getattr(tokenizer, "chat_template", None) or ""):
            raise ScoreTokenError(f"BOS forced, but the tokenizer's BOS token {bos!r} is a chat-template token")
    prefix_ids = ([tokenizer.bos_token_id] if bos_added else []) + tokenizer(prefix, add_special_tokens=False)["input_ids"]
    target_ids, space = target_tokens(tokenizer, target)
    if not target_ids:
        raise ScoreTokenError(f"the target {target!r} has no tokens")
    if not prefix_ids:
        raise ScoreTokenError("empty prefix and no BOS token: the first target token has no position to be "
                              "scored at (put words before the blank, or force BOS for this model)")
    return ScoreIds(list(prefix_ids), list(target_ids), bos_added, space)


def requested_bos(cell_value: bool | None, model_value: bool | None) -> bool | None:
    """The BOS rule for one cell: the cell's own ``add_bos`` when set, else the model's (``models[].add_bos``),
    else None (the tokenizer decides)."""
    return cell_value if cell_value is not None else model_value


def prepare_cells(tokenizer, cells: list[dict], model_bos: bool | None, context: int | None) -> tuple[list, dict]:
    """Token ids of every cell, the same for every ``score`` engine: (prepared, errors). ``prepared`` holds
    (index, cell, prefix ids, target ids, BOS added) for the cells that can be scored; ``errors`` maps the
    index of every other cell to its row fields (the error and, for an over-long one, its token count).
    ``context`` is the model's window in tokens (None: unchecked)."""
    prepared, errors = [], {}
    for i, cell in enumerate(cells):
        try:
            prefix_ids, target_ids, bos, space = score_ids(tokenizer, cell["prefix"], cell["target"],
                                                           requested_bos(cell.get("add_bos"), model_bos))
        except ScoreTokenError as exc:
            errors[i] = {"error": f"ScoreTokenError: {exc}"}
            continue
        n = len(prefix_ids) + len(target_ids)
        if context and n > context:
            errors[i] = {"prompt_tokens": n, "error": f"ContextExceeded: {n} tokens exceed the model's context "
                                                      f"window of {context} tokens"}
            continue
        prepared.append((i, cell, prefix_ids, target_ids, bos, space))
    return prepared, errors


def score_fields(prefix_ids: list[int], target_ids: list[int], bos: bool, logprobs: list[float],
                 target_space: str | None = None) -> dict:
    """The ``grid.engine_kinds.SCORE`` values of one scored cell (log-probs in nats, one per target token)."""
    return {"bos_added": bos, "target_space": target_space, "prefix_token_ids": prefix_ids, "target_token_ids": target_ids,
            "target_logprobs": logprobs, "lp_mean": sum(logprobs) / len(logprobs), "lp_min": min(logprobs),
            "prompt_tokens": len(prefix_ids) + len(target_ids), "completion_tokens": 0}


def score_safely(prepared: list, score, error_row) -> list[dict]:
    """``score(prepared)``; if the whole call fails, each cell alone, so that only the failing cells become
    error rows (``error_row(cell, message)``). Rows in ``prepared``'s order."""
    try:
        return score(prepared)
    except Exception as exc:
        if len(prepared) == 1:
            return [error_row(prepared[0][1], f"{type(exc).__name__}: {exc}")]
        return [row for item in prepared for row in score_safely([item], score, error_row)]


class LocalScorer:
    """What the engines that score on a model in their own process (HF, vLLM) share: ``__call__`` turns a
    batch of cells into one row per cell. A subclass sets ``tokenizer``, ``variant`` and ``context`` (the
    window in tokens) and defines ``_score(prepared)`` (rows of cells ``prepare_cells`` could tokenize, in
    their order) and ``_row(cell, **fields)`` (a trace row)."""

    schema = trace_schema(SCORE_COLUMNS)
    """The rows' Arrow schema: the core trace columns and ``grid.engine_kinds.SCORE``."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score every cell of ``batch``; rows in the cells' order, a cell that cannot be tokenized or scored
        an error row."""
        cells = batch.to_pylist()
        prepared, errors = prepare_cells(self.tokenizer, cells, self.variant.add_bos, self.context)
        rows = {i: self._row(cells[i], **fields) for i, fields in errors.items()}
        if prepared:
            for (i, *_), row in zip(prepared, self._score_safely(prepared)):
                rows[i] = row
        return to_trace_table([rows[i] for i in range(len(cells))], self.schema)

    def _score_safely(self, prepared: list) -> list[dict]:
        """Score; if the batch fails, cell by cell (``score_safely``)."""
        return score_safely(prepared, self._score, lambda cell, message: self._row(cell, error=message))
