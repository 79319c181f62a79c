"""The engine of backend "openai", kind ``score``: which of the two OpenAI-compatible scorers a model entry gets.

``"score_api": "chat"`` → the chat-completions scorer (``actors.http_chat_scorer``); otherwise (None) the
completions scorer with ``echo`` and ``logprobs`` (``actors.http_completions``). The registry names this
class; the choice is made per model entry when the engine is built.
"""

from __future__ import annotations

from mirrorscan.actors.http_chat_scorer import OpenAIChatScorer
from mirrorscan.actors.http_completions import OpenAICompletionsScorer
from mirrorscan.grid.records import ModelVariant


class OpenAIScorer(OpenAICompletionsScorer):
    """Engine for backend "openai", kind ``score``: a completions scorer, or for a model entry with
    ``score_api`` "chat" a chat scorer (``OpenAIScorer(variant, …)`` returns that engine, fully built)."""

    def __new__(cls, variant: ModelVariant, *args, **kwargs):
        """The chat scorer of ``variant`` when its ``score_api`` is "chat"; else a new completions scorer."""
        if variant.score_api == "chat":
            return OpenAIChatScorer(variant, *args, **kwargs)   # not an OpenAIScorer: its __init__ has run
        return super().__new__(cls)
