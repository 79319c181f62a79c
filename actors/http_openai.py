"""OpenAI-compatible chat-completions sampler (vLLM's own server, OpenAI, hosted providers), streamed.

Request (POST ``<endpoint>/chat/completions``, endpoint = the base URL ending in ``/v1``):
``model`` = the API model name, ``messages`` = the system text as a system message (left out when the
cell has none) and the user text as the user message; ``temperature``/``top_p``/``max_tokens`` from the
cell where it carries them, else the variant (``actors.rows.cell_sampling``; greedy = temperature 0, sent as 0); ``seed`` = the cell's seed; ``stream: true`` with
``stream_options.include_usage``; ``reasoning_effort`` = the variant's effort when set;
``chat_template_kwargs`` = the variant's chat_template_kwargs when set (an extra parameter of vLLM's and
other open servers, which hand it to the model's chat template; OpenAI itself refuses it, and that
refusal is an error row), merged with ``extra_body.chat_template_kwargs``; ``extra_body`` merged last (it
may override sampling keys; when it carries ``max_completion_tokens``, ``max_tokens`` is not sent, since
newer OpenAI models refuse both). A server renders the template itself: whether a template kwarg changed
the prompt cannot be seen from here (vLLM drops kwargs its template does not declare). Auth: ``Authorization: Bearer`` with the key from
``api_key_env``; no variable named → no auth header (a local server needs none).

Stream: each ``data:`` chunk's ``choices[0].delta`` gives ``content`` (answer) and ``reasoning_content`` or
``reasoning`` (reasoning, counted for ttft_ms but not ttft_answer_ms); the usage chunk gives the token
counts. A stream is complete at ``data: [DONE]`` (or, for servers that omit it, a clean end after a
finish_reason); anything shorter is a cut stream and is retried from scratch. Shared behaviour
(retries, timeouts, error rows, secrets) is in ``actors.http_common``.
"""

from __future__ import annotations

import json
from contextlib import aclosing

import httpx

from mirrorscan.actors.http_common import Answer, Fatal, HTTPSampler, Retryable, sse_events
from mirrorscan.actors.rows import cell_sampling
from mirrorscan.actors.streaming import StreamClock


class OpenAISampler(HTTPSampler):
    """Engine for backend "openai": one OpenAI-compatible endpoint, streamed chat completions."""

    kind, backend = "generate", "openai"
    model_keys = frozenset({"endpoint", "extra_body", "chat_template_kwargs"})
    effort_path = ("reasoning_effort",)

    def post_url(self, base: str) -> str:
        """``<base>/chat/completions`` (base: the API root ending in /v1)."""
        return f"{base}/chat/completions"

    def provider_headers(self) -> dict:
        """Content type and SSE accept header."""
        return {"Content-Type": "application/json", "Accept": "text/event-stream"}

    def auth_headers(self, key: str) -> dict:
        """Bearer token (never recorded)."""
        return {"Authorization": f"Bearer {key}"}

    def body(self, cell: dict) -> dict:
        """Chat-completions body for ``cell``: prompt, sampling, seed, streaming with usage, extras."""
        v = self.variant
        temperature, top_p, max_tokens = cell_sampling(v, cell)
        messages = ([{"role": "system", "content": cell["system_text"]}] if cell.get("system_text") else [])
        messages.append({"role": "user", "content": cell["user_text"]})
        body = {"model": self.source, "messages": messages, "temperature": temperature,
                "top_p": top_p, "max_tokens": max_tokens, "seed": int(cell["seed"]),
                "stream": True, "stream_options": {"include_usage": True}}
        if v.effort:
            body["reasoning_effort"] = v.effort
        extra = v.extra_body
        body.update({k: value for k, value in extra.items() if k != "chat_template_kwargs"})
        template = {**v.chat_template_kwargs, **(extra.get("chat_template_kwargs") or {})}
        if template:
            body["chat_template_kwargs"] = template
        if "max_completion_tokens" in extra:
            body.pop("max_tokens", None)
        return body

    async def read_stream(self, response: httpx.Response, clock: StreamClock) -> Answer:
        """Read chat-completion chunks until [DONE]; raise Retryable for a cut stream or a 5xx error chunk."""
        answer = Answer()
        async with aclosing(sse_events(response)) as events:
            async for _, data in events:
                if data.strip() == "[DONE]":
                    return answer
                try:
                    chunk = json.loads(data)
                except ValueError as exc:
                    raise Retryable(f"unreadable stream chunk {data[:80]!r}") from exc
                take_chunk(chunk, answer, clock)
        if answer.finish_reason is None:
            raise Retryable(f"stream cut before [DONE] after {clock.n_chunks} chunks (partial answer discarded)")
        return answer   # ended cleanly after a finish_reason: a server that omits [DONE]


def take_chunk(chunk: dict, answer: Answer, clock: StreamClock) -> None:
    """Apply one chat-completion chunk to ``answer`` and ``clock`` (choice 0 only; usage when present)."""
    if isinstance(chunk.get("error"), dict):
        err = chunk["error"]
        text = f"stream error {err.get('type') or ''} {err.get('code') or ''}: {err.get('message')}"
        code = err.get("code")
        transient = (isinstance(code, int) and code >= 500) or err.get("type") in ("server_error", "overloaded_error")
        raise Retryable(text) if transient else Fatal(text)
    usage = chunk.get("usage")
    if usage:
        answer.prompt_tokens = usage.get("prompt_tokens", answer.prompt_tokens)
        answer.completion_tokens = usage.get("completion_tokens", answer.completion_tokens)
    for choice in chunk.get("choices") or []:
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        text, reasoning = delta.get("content"), delta.get("reasoning_content") or delta.get("reasoning")
        text = text if isinstance(text, str) and text else None
        reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
        clock.chunk(text=text, reasoning=reasoning)
        if text:
            answer.text.append(text)
        if reasoning:
            answer.reasoning.append(reasoning)
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]
