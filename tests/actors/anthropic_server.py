"""A small real HTTP server on 127.0.0.1 speaking the Anthropic Messages SSE protocol (and, for the same
faults, OpenAI chat-completions SSE framing), with faults injected per probe_id. For tests only: the real
Anthropic API cannot be reached from here.

What it covers of the Anthropic Messages API (``POST /v1/messages``, ``stream: true`` only):
- auth: ``x-api-key`` must be present (else 401 authentication_error); ``anthropic-version`` must be present
  (else 400 invalid_request_error); ``model``, ``max_tokens`` and ``messages`` are required (else 400).
- extended thinking: with ``thinking: {"type": "enabled", ...}`` a ``temperature`` other than 1 is refused
  with 400 invalid_request_error, message as the API words it; otherwise a thinking block streams first.
- events, HTTP/1.1 chunked: message_start (usage.input_tokens = words of system + user text), a thinking
  block when enabled (content_block_start, thinking_delta × 2, signature_delta, content_block_stop),
  ping, a text block (content_block_start, text_delta per piece of ANSWER_PIECES, content_block_stop),
  message_delta (stop_reason end_turn, usage.output_tokens = deltas sent), message_stop.
- error bodies ``{"type": "error", "error": {"type": ..., "message": ...}}``; 429 carries ``Retry-After``.
Not covered: non-streamed requests, tools, images, multi-turn content blocks, prompt caching, token counting.

OpenAI framing (``POST /v1/chat/completions``): ``Authorization: Bearer`` required; a role-only first
chunk, ``delta.reasoning`` chunks when ``reasoning_effort`` is sent, ``delta.content`` per piece, a
finish_reason chunk, a usage chunk when ``stream_options.include_usage``, then ``data: [DONE]``; errors
as ``{"error": {"message", "type", "param", "code"}}``; temperature 0 together with reasoning_effort is
refused (400, param temperature), as OpenAI's reasoning models do.

Faults, keyed by the (percent-decoded) ``X-Probe-Id`` header, set with ``server.faults[probe_id] = mode``
or ``POST /control`` with a JSON object {probe_id: mode}; n is the request count for that probe_id:
``429_once`` (n=1: 429, Retry-After 0), ``500_twice`` (n≤2: 500), ``500_always``, ``cut_once`` (n=1: the
connection is closed after two text deltas, no terminating chunk), ``stall_once`` (n=1: a few events,
then silence for STALL_S or until close), ``overloaded_once`` (n=1: a mid-stream error event
overloaded_error / an error chunk with code 503), ``401_echo`` (401 whose message echoes the key received,
as a careless proxy might), ``slow`` (DELTA_DELAY_S × 20 between deltas). ``server.answers[probe_id] = [pieces]`` changes what that
probe's answers spell out. Every request is counted
(``counts``) and recorded (``requests``: path, headers, body); ``max_inflight`` is the most requests
seen streaming at once. ``GET /counts`` returns the counts as JSON.

Chat template: with ``server.tokenizer`` set (a transformers tokenizer), each request's turns (Anthropic:
the top-level ``system`` as a system turn first) are rendered through its chat template, as vLLM's server
renders them; a template that raises answers 400 with the exception's text (vLLM's BadRequestError, e.g.
"System role not supported"), and a rendered prompt is kept in ``server.prompts[probe_id]``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER_PIECES = ["I ", "pick ", "the ", "first ", "word."]
"""The answer every successful stream spells out, one delta per piece."""
THINKING_PIECES = ["Two words; ", "the first one it is."]
DELTA_DELAY_S = 0.005
"""Pause between deltas, so chunks arrive at distinct times."""
STALL_S = 30.0
"""How long a stalled stream stays silent (unless the server closes first)."""
TEMPERATURE_WITH_THINKING = ("`temperature` may only be set to 1 when thinking is enabled. Please consult our "
                             "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking")


class FaultServer:
    """The server object: start with ``with FaultServer() as server:``; ``server.url`` is its base URL."""

    def __init__(self):
        self.faults: dict[str, str] = {}
        self.answers: dict[str, list[str]] = {}
        """probe_id → the answer's pieces for that probe (default ANSWER_PIECES)."""
        self.counts: Counter = Counter()
        self.requests: list[dict] = []
        self.tokenizer = None
        """A transformers tokenizer whose chat template renders (or refuses) each request's turns; None: not rendered."""
        self.prompts: dict[str, str] = {}
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:PORT (Anthropic endpoint; the OpenAI one is url + '/v1')."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()   # releases stalled streams
        self.httpd.shutdown()
        self.httpd.server_close()

    def _enter(self, probe_id: str, record: dict) -> int:
        with self.lock:
            self.counts[probe_id] += 1
            self.requests.append(record)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            return self.counts[probe_id]

    def _leave(self) -> None:
        with self.lock:
            self.inflight -= 1


class _QuietServer(ThreadingHTTPServer):
    """Threaded server that does not print a traceback when a client drops a kept-alive connection."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _handler(server: FaultServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:   # quiet
            pass

        # ---- plumbing ----------------------------------------------------------------------------
        def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
            raw = json.dumps(obj).encode()
            self._leave_once()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _start_stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _leave_once(self) -> None:
            """Count this request as finished, once. Called before the write that lets the client finish (the
            closing event, an error body, a cut), so that a client that starts its next request the moment
            it has read an answer is never counted as one more in flight."""
            if not getattr(self, "_left", True):
                self._left = True
                server._leave()

        def _send(self, text: str) -> None:
            raw = text.encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()

        def _end(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _cut(self) -> None:
            """Close the connection mid-body (no terminating chunk)."""
            self._leave_once()
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _stall(self) -> None:
            server.closing.wait(STALL_S)
            self._cut()

        # ---- routes ------------------------------------------------------------------------------
        def do_GET(self) -> None:
            if self.path == "/counts":
                with server.lock:
                    self._json(200, dict(server.counts))
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad JSON"}})
                return
            if self.path == "/control":
                with server.lock:
                    server.faults.update(body)
                self._json(200, {"ok": True})
                return
            if self.path not in ("/v1/messages", "/v1/chat/completions"):
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                return
            probe_id = self.probe_id = urllib.parse.unquote(self.headers.get("X-Probe-Id") or "")
            n = server._enter(probe_id, {"path": self.path, "headers": dict(self.headers.items()), "body": body})
            self._left = False
            try:
                mode = server.faults.get(probe_id, "ok")
                if self.path == "/v1/messages":
                    self._anthropic(body, mode, n)
                else:
                    self._openai(body, mode, n)
            except (BrokenPipeError, ConnectionResetError):   # the client gave up on a stalled stream
                self.close_connection = True
            finally:
                self._leave_once()

        def _fault_status(self, mode: str, n: int, error: callable) -> bool:
            """Answer with an injected error status; True when one was sent."""
            if mode == "429_once" and n == 1:
                error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit.", {"Retry-After": "0"})
            elif (mode == "500_twice" and n <= 2) or mode == "500_always":
                error(500, "api_error", "Internal server error")
            else:
                return False
            return True

        def _render(self, messages: list, refuse) -> bool:
            """Render ``messages`` through server.tokenizer's template (kept in prompts); True when refused."""
            if server.tokenizer is None:
                return False
            try:
                text = server.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            except Exception as exc:   # jinja's TemplateError: vLLM answers 400 with its text
                refuse(str(exc))
                return True
            with server.lock:
                server.prompts[self.probe_id] = text
            return False

        # ---- Anthropic ---------------------------------------------------------------------------
        def _anthropic(self, body: dict, mode: str, n: int) -> None:
            def error(status: int, kind: str, message: str, headers: dict | None = None) -> None:
                self._json(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

            key = self.headers.get("x-api-key")
            if not key:
                return error(401, "authentication_error", "x-api-key header is required")
            if mode == "401_echo":
                return error(401, "authentication_error", f"invalid x-api-key: {key}")
            if not self.headers.get("anthropic-version"):
                return error(400, "invalid_request_error", "anthropic-version header is required")
            for field in ("model", "max_tokens", "messages"):
                if field not in body:
                    return error(400, "invalid_request_error", f"{field}: Field required")
            thinking = (body.get("thinking") or {}).get("type") == "enabled"
            if thinking and "temperature" in body and body["temperature"] != 1:
                return error(400, "invalid_request_error", TEMPERATURE_WITH_THINKING)
            system = [{"role": "system", "content": body["system"]}] if body.get("system") else []
            if self._render(system + body["messages"], lambda m: error(400, "invalid_request_error", m)):
                return
            if self._fault_status(mode, n, error):
                return
            delay = DELTA_DELAY_S * (20 if mode == "slow" else 1)
            words = len((body.get("system") or "").split()) + sum(len(str(m.get("content", "")).split())
                                                                  for m in body["messages"])

            def event(name: str, obj: dict) -> None:
                self._send(f"event: {name}\ndata: {json.dumps(obj)}\n\n")

            self._start_stream()
            event("message_start", {"type": "message_start", "message": {
                "id": f"msg_{n}", "type": "message", "role": "assistant", "content": [], "model": body["model"],
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": words, "output_tokens": 1}}})
            sent, index = 0, 0
            if thinking:
                event("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "thinking", "thinking": ""}})
                for piece in THINKING_PIECES:
                    time.sleep(delay)
                    event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "thinking_delta", "thinking": piece}})
                    sent += 1
                event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "signature_delta", "signature": "c2ln"}})
                event("content_block_stop", {"type": "content_block_stop", "index": 0})
                index = 1
            event("content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}})
            self._send('event: ping\ndata: {"type": "ping"}\n\n')
            for i, piece in enumerate(server.answers.get(self.probe_id, ANSWER_PIECES)):
                if i == 2 and n == 1 and mode in ("cut_once", "stall_once", "overloaded_once"):
                    if mode == "cut_once":
                        return self._cut()
                    if mode == "stall_once":
                        return self._stall()
                    self._leave_once()
                    event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                    return self._end()
                time.sleep(delay)
                event("content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}})
                sent += 1
            event("content_block_stop", {"type": "content_block_stop", "index": index})
            event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                    "usage": {"output_tokens": sent}})
            self._leave_once()
            event("message_stop", {"type": "message_stop"})
            self._end()

        # ---- OpenAI ------------------------------------------------------------------------------
        def _openai(self, body: dict, mode: str, n: int) -> None:
            def error(status: int, kind: str, message: str, headers: dict | None = None, param: str | None = None):
                self._json(status, {"error": {"message": message, "type": kind, "param": param, "code": None}}, headers)

            auth = self.headers.get("Authorization") or ""
            if not auth.startswith("Bearer "):
                return error(401, "invalid_request_error", "You didn't provide an API key.")
            if mode == "401_echo":
                return error(401, "invalid_request_error", f"Incorrect API key provided: {auth[7:]}")
            if body.get("reasoning_effort") and body.get("temperature") not in (None, 1):
                return error(400, "invalid_request_error", "Unsupported value: 'temperature' does not support "
                             f"{body['temperature']} with this model. Only the default (1) value is supported.",
                             param="temperature")
            if self._render(body.get("messages") or [], lambda m: error(400, "BadRequestError", m)):
                return
            if self._fault_status(mode, n, error):
                return
            delay = DELTA_DELAY_S * (20 if mode == "slow" else 1)

            def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> None:
                obj = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": body.get("model"),
                       "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
                if usage:
                    obj["usage"] = usage
                self._send(f"data: {json.dumps(obj)}\n\n")

            self._start_stream()
            chunk({"role": "assistant", "content": ""})
            sent = 0
            if body.get("reasoning_effort"):
                for piece in THINKING_PIECES:
                    time.sleep(delay)
                    chunk({"reasoning": piece})
                    sent += 1
            for i, piece in enumerate(server.answers.get(self.probe_id, ANSWER_PIECES)):
                if i == 2 and n == 1 and mode in ("cut_once", "stall_once", "overloaded_once"):
                    if mode == "cut_once":
                        return self._cut()
                    if mode == "stall_once":
                        return self._stall()
                    self._leave_once()
                    self._send(f"data: {json.dumps({'error': {'message': 'overloaded', 'type': 'server_error', 'code': 503}})}\n\n")
                    return self._end()
                time.sleep(delay)
                chunk({"content": piece})
                sent += 1
            chunk({}, finish="stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(None, usage={"prompt_tokens": 7, "completion_tokens": sent, "total_tokens": 7 + sent})
            self._leave_once()
            self._send("data: [DONE]\n\n")
            self._end()

    return Handler
