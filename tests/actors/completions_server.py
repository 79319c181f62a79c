"""A small real HTTP server on 127.0.0.1 speaking the OpenAI completions API (``POST /v1/completions``,
``GET /v1/models``) the way a hosted provider does that refuses token-id prompts. For tests only: the numbers
are real, computed by a transformers model loaded from a local folder (a forward pass, log-softmax, float32).

What it covers:
- auth: with ``api_key`` set, ``Authorization: Bearer <key>`` must match (else 401 invalid_request_error).
- ``model`` must be the served name (else 404 model_not_found); ``prompt`` is required.
- ``prompt`` as a list of ints or a list of lists (token ids) is refused with 400 invalid_request_error,
  ``param: "prompt"``, message "... prompt must be a string ...". A string (or a list of one string) is
  tokenized with the folder's tokenizer and its own BOS rule (``add_special_tokens=True``).
- answer (not streamed): one choice; generation is greedy (temperature ignored), ``max_tokens`` 0 or more
  (0: the prompt only, as vLLM does with echo). With ``echo`` the prompt's tokens come first; with
  ``logprobs`` set, ``choices[0].logprobs`` carries ``tokens`` (each token decoded alone), ``token_logprobs``
  (the first prompt token null, nats), ``top_logprobs`` (the chosen token only) and ``text_offset``.
- ``tokens`` and ``text_offset`` follow vLLM's server (``_create_completion_logprobs``, ``token_texts`` below):
  the first offset is 0 and each next one adds the length of the previous token's text. Without special
  tokens that is the character offset into the prompt (a token ending inside a UTF-8 character counts as
  "", except the prompt's first, which counts as U+FFFD); a BOS token adds its text's length (13 for
  ``<|endoftext|>``). Checked against vLLM's own server on "日本語の文" and on a BOS-adding tokenizer.
- ``usage``: prompt_tokens, completion_tokens, total_tokens.
Not covered: streaming, ``n`` > 1, stop strings, sampling, batches of several prompts, suffix, best_of.

Every request is recorded in ``requests`` (method, path, headers, body, status answered). ``script`` is a list
of statuses answered to the next requests in order, before any other check (e.g. ``[429]``: the first request
gets 429 with ``Retry-After: 0``, as a rate-limited provider answers).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REFUSE_IDS = ("Invalid type for 'prompt': prompt must be a string or an array of strings; token-id prompts "
              "are not supported for this model.")
"""The 400 message for a token-id prompt (worded as hosted providers word it)."""


class CompletionsServer:
    """Start with ``with CompletionsServer(folder) as server:``; ``server.url`` ends in /v1."""

    def __init__(self, model_dir: Path, served_name: str = "tiny", api_key: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.served_name, self.api_key = served_name, api_key
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.requests: list[dict] = []
        self.script: list[int] = []
        self.lock = threading.Lock()   # one forward pass at a time (torch is not made to share a model)
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL of the API, http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> CompletionsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self) -> None:
        """Forget the requests recorded and the statuses scripted."""
        with self.lock:
            self.requests.clear()
            self.script.clear()

    def score(self, text: str, max_tokens: int) -> dict:
        """Ids of ``text`` (tokenizer's BOS rule), each one's log-prob given those before (first None), and
        ``max_tokens`` greedy continuation ids with their log-probs."""
        import torch

        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        lps: list[float | None] = [None]
        gen: list[int] = []
        def forward(seq: list[int]):
            return torch.log_softmax(self.model(input_ids=torch.tensor([seq])).logits[0].float(), dim=-1)

        with self.lock, torch.inference_mode():
            logprobs = forward(ids)
            lps += [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]
            while len(gen) < max_tokens:
                nxt = int(logprobs[-1].argmax())
                gen.append(nxt)
                lps.append(float(logprobs[-1, nxt]))
                if len(gen) < max_tokens:
                    logprobs = forward(ids + gen)
        return {"prompt_ids": ids, "gen_ids": gen, "logprobs": lps}

    def completion(self, body: dict, prompt: str) -> dict:
        """The completions answer for a text ``prompt``."""
        max_tokens = int(body.get("max_tokens", 16))
        s = self.score(prompt, max_tokens)
        echo = bool(body.get("echo"))
        lps = s["logprobs"] if echo else s["logprobs"][len(s["prompt_ids"]):]
        gen_text = self.tokenizer.decode(s["gen_ids"])
        choice = {"index": 0, "text": (prompt if echo else "") + gen_text, "logprobs": None,
                  "finish_reason": "length" if max_tokens else "stop"}
        if body.get("logprobs") is not None:
            tokens = token_texts(self.tokenizer, s["prompt_ids"]) if echo else []
            tokens += token_texts(self.tokenizer, s["gen_ids"])
            offsets, at = [], 0
            for tok in tokens:
                offsets.append(at)
                at += len(tok)
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": lps, "text_offset": offsets,
                                  "top_logprobs": [None if lp is None else {t: lp} for t, lp in zip(tokens, lps)]}
        n_prompt, n_gen = len(s["prompt_ids"]), len(s["gen_ids"])
        return {"id": f"cmpl-{len(self.requests)}", "object": "text_completion", "created": 0,
                "model": self.served_name, "choices": [choice],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}}


def token_texts(tokenizer, ids: list[int]) -> list[str]:
    """The text vLLM's server reports for each of a run of tokens (the prompt's, or the generated ones): the
    token decoded alone; one ending in U+FFFD (part of a UTF-8 character) after the first is redecoded with up to
    4 tokens before it, and is "" while the character is still incomplete, else the text it completes (vLLM's
    ``LogprobsProcessor._correct_decoded_token``). The first token has no log-prob entry, so it is never
    corrected, nor counted as context."""
    texts = []
    for i, tid in enumerate(ids):
        text = tokenizer.decode([tid])
        if i > 0 and text.endswith("\ufffd"):
            text = _completed(tokenizer, tid, ids[max(1, i - 4):i])
        texts.append(text)
    return texts


def _completed(tokenizer, tid: int, context: list[int]) -> str:
    for n in range(1, len(context) + 1):
        ctx = context[-n:]
        full = tokenizer.decode(ctx + [tid])
        if full.endswith("\ufffd"):
            continue
        clean_end = len(ctx)
        for j in range(len(ctx) - 1, -1, -1):
            if not tokenizer.decode([ctx[j]]).endswith("\ufffd"):
                break
            clean_end = j
        clean = tokenizer.decode(ctx[:clean_end]) if clean_end else ""
        if full.startswith(clean):
            return full[len(clean):]
        common = next((k for k, (a, b) in enumerate(zip(clean, full)) if a != b), min(len(clean), len(full)))
        return full[common:]
    return ""


class _QuietServer(ThreadingHTTPServer):
    """Threaded server that does not print a traceback when a client drops a kept-alive connection."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _is_ids(prompt) -> bool:
    """A token-id prompt: a list of ints, or a list of such lists."""
    return isinstance(prompt, list) and len(prompt) > 0 and all(
        isinstance(p, int) or (isinstance(p, list) and all(isinstance(i, int) for i in p)) for p in prompt)


def _handler(server: CompletionsServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:   # quiet
            pass

        def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
            raw = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)
            self.record["status"] = status

        def _error(self, status: int, kind: str, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> None:
            self._json(status, {"error": {"message": message, "type": kind, "param": param, "code": code}}, headers)

        def _enter(self, method: str, body) -> None:
            self.record = {"method": method, "path": self.path, "headers": dict(self.headers.items()), "body": body,
                           "status": None}
            with server.lock:
                server.requests.append(self.record)
                self.scripted = server.script.pop(0) if server.script else None

        def _authorized(self) -> bool:
            if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                return True
            self._error(401, "invalid_request_error", "Incorrect API key provided.", code="invalid_api_key")
            return False

        def do_GET(self) -> None:
            self._enter("GET", None)
            if self.path != "/v1/models":
                return self._error(404, "invalid_request_error", f"Unknown request URL: GET {self.path}")
            if self._authorized():
                self._json(200, {"object": "list", "data": [{"id": server.served_name, "object": "model",
                                                             "created": 0, "owned_by": "test"}]})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            self._enter("POST", body)
            if self.scripted is not None:
                return self._error(self.scripted, "rate_limit_error" if self.scripted == 429 else "server_error",
                                   "Rate limit reached; please retry." if self.scripted == 429 else "Server error.",
                                   headers={"Retry-After": "0"})
            if self.path != "/v1/completions":
                return self._error(404, "invalid_request_error", f"Unknown request URL: POST {self.path}")
            if not self._authorized():
                return
            if not isinstance(body, dict):
                return self._error(400, "invalid_request_error", "We could not parse the JSON body of your request.")
            if body.get("model") != server.served_name:
                return self._error(404, "invalid_request_error", f"The model `{body.get('model')}` does not exist.",
                                   param="model", code="model_not_found")
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if _is_ids(prompt):
                return self._error(400, "invalid_request_error", REFUSE_IDS, param="prompt")
            if not isinstance(prompt, str):
                return self._error(400, "invalid_request_error", "'prompt' is a required property", param="prompt")
            self._json(200, server.completion(body, prompt))

    return Handler
