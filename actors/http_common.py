"""What the HTTP samplers (OpenAI-compatible, Anthropic) share: the loop, retries, SSE, error rows.

One ``HTTPSampler`` object is one engine actor. Ray Data calls ``__call__`` synchronously; the object owns
an asyncio loop on a daemon thread and one ``httpx.AsyncClient`` on it, so connections stay warm across
batches and the cells of a batch run concurrently, at most ``per_actor_concurrency(variant)`` at a time.

Per cell (``_answer``): post, read the SSE stream, time it with ``StreamClock``. Retried, from scratch,
with exponential backoff and full jitter (``Retry-After`` honoured, capped): 408/409/425/429/5xx/529,
transport errors, a read that stalls longer than ``timeout_s`` (httpx read timeout: no byte for that
long — SSE pings count as liveness), a stream cut before its end marker, and a mid-stream error event the
provider marks as transient. A retried attempt's partial answer is discarded, never stitched. Anything
else (a 4xx, retries spent) ends as an error row. Every cell yields exactly one row, in input order;
``request_params`` records the body sent (minus the prompt) and ``http_attempts``; ``generation_overrides``
records the overrides found in that body (``sent_overrides``), never one the subclass left out.

System turn: the envelope's system text is sent in the provider's system slot. A server whose chat template
rejects a system role answers 4xx with an error naming the system role (vLLM: "System role not supported");
the cell is then resent once with the system text folded into the user turn as ``system + "\\n\\n" + user``
— the rule ``actors.chat.render_chat`` applies in-process, so every backend sends the same bytes — and the
row records ``system_folded=True`` (its ``system_text``/``user_text`` stay the envelope's). The actor
remembers the rejection and folds the model's later cells at once; the rejected try counts in ``http_attempts``.

Secrets: the key is read from the environment variable named by ``api_key_env`` when the sampler is
built. A missing variable is not raised: every cell becomes an error row naming the variable (the actor
may run on a machine whose environment differs from the driver's, and a row says so where a crashed
actor would not). The key goes only into the auth header; auth headers are never recorded, and every
text written to a row is scrubbed of the key (a proxy may echo it in an error body).

One module past 400 lines on purpose: the retry, rejection-folding and scrubbing rules are shared by every HTTP
engine and read as one policy; the engines' own modules hold only what differs between APIs.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import urllib.parse
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import httpx
import pyarrow as pa

from mirrorscan.actors.chat import FOLD_SEPARATOR
from mirrorscan.actors.engine import Engine
from mirrorscan.actors.rows import generation_overrides, trace_row, where_am_i
from mirrorscan.actors.streaming import StreamClock
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.secrets import strip_userinfo
from mirrorscan.grid.trace_schema import to_trace_table

BACKOFF_BASE_S = 1.0
"""First retry waits up to this long (full jitter: uniform in [0, base·2^(k-1)]); tests pass a small one."""
BACKOFF_CEILING_S = 30.0
"""No computed backoff exceeds this, however many retries."""
RETRY_AFTER_CAP_S = 60.0
"""A server's Retry-After is honoured up to this many seconds (a larger value is capped, not obeyed)."""
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
"""HTTP statuses retried (529: Anthropic 'overloaded'); any other status ≥ 500 is retried too."""
AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
"""Headers never recorded anywhere."""
PROTECTED_BODY_KEYS = frozenset({"messages", "stream", "model", "system"})
"""Body keys ``extra_body`` may not replace: they are the prompt, the model and the streaming mode."""
SAMPLING_FIX = ("set a per-model {field} (models[{label}].{field}) the provider accepts, "
                "or use ≥ 5 samples at default sampling")
ERROR_SNIPPET = 400
"""Characters of a provider's error body kept in an error row."""


def header_value(text: str) -> str:
    """``text`` as an ASCII header value: '%' and non-printable/non-ASCII characters percent-encoded
    (``urllib.parse.unquote`` restores it; plain ASCII probe ids pass unchanged)."""
    return urllib.parse.quote(text, safe="".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%"))


def per_actor_concurrency(variant: ModelVariant) -> int:
    """Requests one actor keeps in flight: the endpoint's ``max_concurrency`` shared by the model's
    actor pool (÷ max_actors, at least 1)."""
    return max(1, variant.max_concurrency // (variant.max_actors or 1))


def backoff_s(retry: int, base: float, ceiling: float, retry_after: float | None, cap: float,
              rng: random.Random) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): the server's Retry-After (capped at
    ``cap``) when given, else full jitter over base·2^(retry-1) capped at ``ceiling``."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap)
    return rng.uniform(0.0, min(ceiling, base * 2 ** (retry - 1)))


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds()
    except (TypeError, ValueError):
        return None


async def sse_events(response: httpx.Response):
    """Server-sent events of a streamed response as (event name or None, data string). Use it under
    ``contextlib.aclosing`` when the reader may stop before the end."""
    event, data = None, []
    async with aclosing(response.aiter_lines()) as lines:   # closed even when the reader stops early
        async for line in lines:
            if line == "":
                if data:
                    yield event, "\n".join(data)
                event, data = None, []
            elif line.startswith(":"):
                continue   # comment / keep-alive
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
    if data:
        yield event, "\n".join(data)


class Retryable(Exception):
    """A failed attempt worth repeating (transient status, cut or stalled stream, transient stream error)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Fatal(Exception):
    """A failed attempt that repeating cannot fix; its message is the row's error."""


class SystemRoleRejected(Fatal):
    """The server's chat template refused the system turn: resend with the system text folded (once)."""


def rejects_system_role(status: int, message: str | None) -> bool:
    """True when a 4xx error message says the system role is not accepted (e.g. vLLM's "System role not
    supported" from a Gemma-style template): the message names ``system`` and a role, support or allowance."""
    if not message or not 400 <= status < 500 or status in (401, 403, 404, 429):
        return False
    return (re.search(r"\bsystem\b", message, re.IGNORECASE) is not None
            and re.search(r"role|support|allow|accept", message, re.IGNORECASE) is not None)


def folded_cell(cell: dict) -> dict:
    """``cell`` with its system text folded into the user text (``system + "\\n\\n" + user``) and no
    system text: what a template without a system role is sent, byte for byte as ``actors.chat`` folds."""
    return {**cell, "system_text": "", "user_text": cell["system_text"] + FOLD_SEPARATOR + cell["user_text"]}


@dataclass
class Answer:
    """What one complete stream gave."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


class HTTPSampler(Engine):
    """Base of the HTTP engines; subclasses say where to post, what to send and how to read the stream."""

    backend = "http"
    CONCURRENT_BATCHES = 2
    """Batches the pipeline may hand this actor at once (requests stay bounded by max_concurrency)."""
    default_key_env: str | None = None
    """Variable read when ``api_key_env`` is not set (None: send no auth header)."""
    schema = None
    """The rows' Arrow schema when the engine writes columns beyond the core ones (score engines), else None."""
    effort_path: tuple[str, ...] = ()
    """Where the body carries the variant's effort (e.g. ("reasoning_effort",)); () = the effort is not sent."""

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, *, backoff_base_s: float = BACKOFF_BASE_S,
                 backoff_ceiling_s: float = BACKOFF_CEILING_S, retry_after_cap_s: float = RETRY_AFTER_CAP_S):
        """Read the key from the environment and start the loop thread. ``model_source`` is the API's
        model name; backoff settings default to the module constants (tests pass small ones)."""
        self.variant, self.run, self.source = variant, run, model_source
        self.backoff = (float(backoff_base_s), float(backoff_ceiling_s), float(retry_after_cap_s))
        for key in PROTECTED_BODY_KEYS & set(variant.extra_body):
            raise ConfigError("", f"models[{variant.label}].extra_body.{key}", "replaces a field the sampler "
                              "sets itself (the prompt, model or streaming mode)", f"remove extra_body.{key}")
        self.key_env = variant.api_key_env or self.default_key_env
        self._key = (os.environ.get(self.key_env) or None) if self.key_env else None   # empty = unset
        self.url = self.post_url((variant.endpoint or "").rstrip("/"))
        self.timeout_s = float(variant.timeout_s)
        self.max_retries = int(variant.max_retries)
        self.concurrency = per_actor_concurrency(variant)
        self.where = where_am_i()
        self._rng = random.Random()
        self._fold_system = False   # set once the server has refused a system turn for this model
        self._client: httpx.AsyncClient | None = None
        self._gate: asyncio.Semaphore | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"http-{variant.label}", daemon=True)
        self._thread.start()

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """Ray resources of one actor: a quarter CPU (the work is waiting on the network)."""
        return {"num_cpus": 0.25}

    # ---- what subclasses provide ------------------------------------------------------------------
    def post_url(self, base: str) -> str:
        """The URL requests are posted to, from the endpoint base URL."""
        raise NotImplementedError

    def body(self, cell: dict) -> dict:
        """The JSON request body for ``cell`` (prompt included), extra_body merged in."""
        raise NotImplementedError

    def provider_headers(self) -> dict:
        """Non-secret headers the provider needs (content type, API version …)."""
        raise NotImplementedError

    def auth_headers(self, key: str) -> dict:
        """The header(s) carrying the key."""
        raise NotImplementedError

    async def read_stream(self, response: httpx.Response, clock: StreamClock) -> Answer:
        """Consume one streamed response; raise Retryable when it is cut or errors transiently."""
        raise NotImplementedError

    def answer_fields(self, cell: dict, answer: Answer, clock: StreamClock) -> dict:
        """The row fields of a complete answer (text, reasoning, token counts, timing); raise Fatal when the
        answer cannot be read as a result."""
        return {"response": "".join(answer.text), "reasoning": "".join(answer.reasoning) or None,
                "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                "finish_reason": answer.finish_reason, **clock.fields(answer.completion_tokens)}

    def recorded_params(self, body: dict) -> dict:
        """request_params: the body sent, minus the prompt (recorded in system_text / user_text)."""
        return {k: v for k, v in body.items() if k not in ("messages", "system")}

    def sent_overrides(self, body: dict) -> str:
        """generation_overrides of a request: the variant's effort when ``body`` carries it at ``effort_path``,
        the body's chat_template_kwargs, and the extra_body keys as sent (chat_template_kwargs apart)."""
        effort, sent = self.variant.effort, body if self.effort_path else None
        for part in self.effort_path:
            sent = sent.get(part) if isinstance(sent, dict) else None
        extra = self.variant.extra_body
        return generation_overrides(
            effort=effort if effort is not None and sent == effort else None,
            chat_template_kwargs=body.get("chat_template_kwargs") if isinstance(body.get("chat_template_kwargs"), dict)
            else None,
            extra_body={k: body[k] for k in extra if k in body and k != "chat_template_kwargs"})

    # ---- the engine interface -----------------------------------------------------------------------
    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer every cell of ``batch`` concurrently (bounded) and return one trace row per cell, in order."""
        cells = batch.to_pylist()
        future = asyncio.run_coroutine_threadsafe(self._answer_all(cells), self._loop)
        try:
            rows = future.result()
        except Exception as exc:   # the loop itself failed: still one row per cell
            rows = [self._row(c, error=self._scrub(f"{type(exc).__name__}: {exc}")) for c in cells]
        return to_trace_table(rows, self.schema) if self.schema is not None else to_trace_table(rows)

    def close(self) -> None:
        """Close the client and stop the loop thread (the object is unusable afterwards)."""
        if self._loop.is_closed():
            return
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _answer_all(self, cells: list[dict]) -> list[dict]:
        if self._client is None:
            t = self.timeout_s
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=t, read=t, write=t, pool=None),
                limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency))
            self._gate = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(*(self._answer_safely(c) for c in cells), return_exceptions=True)
        return [r if isinstance(r, dict) else self._row(c, error=self._scrub(f"{type(r).__name__}: {r}"))
                for c, r in zip(cells, results)]

    async def _answer_safely(self, cell: dict) -> dict:
        async with self._gate:
            try:
                return await self._answer(cell)
            except Fatal as exc:   # a cell that cannot be sent (its message names the fix)
                return self._row(cell, error=self._scrub(str(exc)))
            except Exception as exc:   # a bug or a surprise must still end as this cell's row
                return self._row(cell, error=self._scrub(f"{type(exc).__name__}: {exc}"))

    def _headers(self, cell: dict) -> dict:
        """The recordable headers of a request: provider headers plus the probe keys a tap logs by."""
        return {**self.provider_headers(), "X-Probe-Id": header_value(cell["probe_id"]),
                "X-Probe-Sample": str(cell["sample"]), "X-Probe-Attempt": str(cell.get("attempt", 1)),
                "X-Invocation-Id": header_value(self.run.invocation_id)}

    async def _answer(self, cell: dict) -> dict:
        """One cell's row: attempts until an answer, a non-retryable failure or max_retries retries."""
        headers = self._headers(cell)
        folded = bool(cell.get("system_text")) and self._fold_system
        body = self.body(folded_cell(cell) if folded else cell)
        recorded = {"request_headers": json.dumps({k: v for k, v in headers.items() if k.lower() not in AUTH_HEADERS},
                                                  sort_keys=True)}

        def with_attempts(n: int) -> dict:
            params = self.recorded_params(body)
            return {**recorded, "generation_overrides": self.sent_overrides(body), "system_folded": folded,
                    "request_params": json.dumps({**params, "http_attempts": n}, sort_keys=True)}

        if self.key_env and self._key is None:
            return self._row(cell, error=f"MissingAPIKey: environment variable {self.key_env} is not set where the "
                             f"engine runs — fix: export {self.key_env}=<key> in the environment of the Ray workers, "
                             f"or name another variable in models[{self.variant.label}].api_key_env",
                             **with_attempts(0))
        send = {**headers, **(self.auth_headers(self._key) if self._key else {})}
        base, ceiling, cap = self.backoff
        attempts = 0
        while True:
            attempts += 1
            clock = StreamClock()
            try:
                answer = await self._attempt(send, body, clock)
            except SystemRoleRejected as exc:
                if folded or not cell.get("system_text"):
                    return self._row(cell, error=self._scrub(str(exc)), started_at=clock.started_at,
                                     **with_attempts(attempts))
                self._fold_system, folded = True, True
                body = self.body(folded_cell(cell))
                continue
            except Fatal as exc:
                return self._row(cell, error=self._scrub(str(exc)), started_at=clock.started_at,
                                 **with_attempts(attempts))
            except Retryable as exc:
                if attempts <= self.max_retries:
                    await asyncio.sleep(backoff_s(attempts, base, ceiling, exc.retry_after, cap, self._rng))
                    continue
                hint = (f" — fix: lower models[{self.variant.label}].max_concurrency or raise max_retries"
                        if str(exc).startswith("HTTP 429") else "")
                return self._row(cell, error=self._scrub(f"{exc} (gave up after {attempts} HTTP attempts, "
                                                         f"max_retries={self.max_retries}){hint}"),
                                 started_at=clock.started_at, **with_attempts(attempts))
            try:
                fields = self.answer_fields(cell, answer, clock)
            except Fatal as exc:   # an answer that cannot be read as this engine's result
                return self._row(cell, error=self._scrub(str(exc)), started_at=clock.started_at,
                                 **with_attempts(attempts))
            return self._row(cell, **fields, **with_attempts(attempts))

    async def _attempt(self, headers: dict, body: dict, clock: StreamClock) -> Answer:
        """One HTTP attempt: post, check the status, read the stream."""
        clock.start()
        try:
            async with self._client.stream("POST", self.url, json=body, headers=headers) as response:
                if response.status_code != 200:
                    raw = (await response.aread()).decode("utf-8", "replace")
                    self._raise_for_status(response, raw, body)
                return await self.read_stream(response, clock)
        except httpx.TimeoutException as exc:
            raise Retryable(f"{type(exc).__name__}: no data for {self.timeout_s:g} s (timeout_s)") from exc
        except httpx.TransportError as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc

    def _raise_for_status(self, response: httpx.Response, raw: str, body: dict) -> None:
        status = response.status_code
        kind, message, param = error_parts(raw)
        text = f"HTTP {status}{' ' + kind if kind else ''}: {message or raw[:ERROR_SNIPPET]}"
        if status in RETRY_STATUS or status >= 500:
            raise Retryable(text, parse_retry_after(response.headers.get("retry-after")))
        if rejects_system_role(status, message or raw):
            raise SystemRoleRejected(f"{text} — the system turn was refused")
        if status in (401, 403):
            raise Fatal(f"{text} — fix: check the key in environment variable {self.key_env or '(none set)'} "
                        f"(models[{self.variant.label}].api_key_env)")
        name = param or rejected_field(message, body)
        if name is None:
            raise Fatal(f"{text} — fix: check models[{self.variant.label}] settings and extra_body against the "
                        "provider's API")
        sent = body
        for part in name.split("."):
            sent = sent.get(part, "(not sent)") if isinstance(sent, dict) else "(not sent)"
        if name in ("temperature", "top_p"):
            fix = SAMPLING_FIX.format(field=name, label=self.variant.label)
        else:
            fix = f"change or remove models[{self.variant.label}].{name} (or extra_body.{name})"
        raise Fatal(f"{text} — field: {name} (sent {json.dumps(sent)}) — fix: {fix}; nothing was changed or resent")

    def _scrub(self, text: str) -> str:
        """``text`` with the API key replaced (error bodies may echo it)."""
        return text.replace(self._key, "[redacted]") if self._key else text

    def _row(self, cell: dict, **fields) -> dict:
        return trace_row(self.variant, self.run, self.source, self.where, cell, backend=self.backend,
                         endpoint=strip_userinfo(self.url),
                         **{"timing_scope": "request", "system_folded": False, **fields})


def error_parts(raw: str) -> tuple[str | None, str | None, str | None]:
    """(error type, message, param) from an OpenAI- or Anthropic-style JSON error body (Nones when not JSON)."""
    try:
        err = json.loads(raw)
    except ValueError:
        return None, None, None
    if isinstance(err, dict) and isinstance(err.get("error"), dict):
        err = err["error"]
    if not isinstance(err, dict):
        return None, None, None
    message = err.get("message")
    return (str(err["type"]) if err.get("type") else None, str(message) if message is not None else None,
            str(err["param"]) if err.get("param") else None)


def rejected_field(message: str | None, body: dict) -> str | None:
    """The body field an error message names, else None. Sampling fields are looked for first (a message
    such as "temperature may only be set to 1 when thinking is enabled" blames temperature), then the other
    sent keys, longest first, then nested keys as ``outer.inner``; whole words only."""
    if not message:
        return None

    def named(word: str) -> bool:
        return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", message) is not None

    keys = [k for k in body if k not in PROTECTED_BODY_KEYS]
    nested = [f"{k}.{sub}" for k in keys if isinstance(body[k], dict) for sub in body[k]]
    first = [k for k in ("temperature", "top_p", "top_k", "max_tokens", "seed") if k in keys]
    for key in first + nested + sorted(set(keys) - set(first), key=len, reverse=True):
        if named(key):
            return key
    for path in nested:
        if named(path.split(".", 1)[1]):
            return path
    return None
