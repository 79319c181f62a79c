"""How a (prefix, target) pair becomes token ids, the same for every ``score`` engine.

The prefix is tokenized on its own and the target on its own (no special tokens), and the two id lists
are concatenated: the target's tokens are then exactly those scored, whatever the tokenizer would merge
across the boundary of the joined text. BOS before the prefix follows the tokenizer's own
``add_special_tokens=True`` behaviour unless forced per model, and is never a chat-template token (a
tokenizer whose BOS token is one, as ChatML's ``<|im_start|>``, cannot have it forced).
"""

from __future__ import annotations


class ScoreTokenError(ValueError):
    """A (prefix, target) pair that cannot be scored as asked (the row records it as its error)."""


def adds_bos(tokenizer) -> bool:
    """Whether ``tokenizer`` puts its BOS token first when asked for special tokens."""
    bos = tokenizer.bos_token_id
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bos is not None and len(probe) > 0 and probe[0] == bos


def score_ids(tokenizer, prefix: str, target: str, add_bos: bool | None = None) -> tuple[list[int], list[int], bool]:
    """(prefix ids, target ids, whether BOS was added) for scoring ``target`` after ``prefix``.

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
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    if not target_ids:
        raise ScoreTokenError(f"the target {target!r} has no tokens")
    if not prefix_ids:
        raise ScoreTokenError("empty prefix and no BOS token: the first target token has no position to be "
                              "scored at (put words before the blank, or force BOS for this model)")
    return list(prefix_ids), list(target_ids), bos_added
