"""A small real HTTP server on 127.0.0.1 speaking the OpenAI chat completions API (``POST
/v1/chat/completions``, not streamed) with log-probs, in three behaviours a chat scorer meets. For tests only:
the numbers are real, from a transformers model loaded from a local folder (forward pass, log-softmax, float32).

- The prompt is the folder's chat template applied to ``messages`` (``continue_final_message`` /
  ``add_generation_prompt`` as sent, vLLM's defaults otherwise), tokenized without special tokens as vLLM's
  server does for chat; one greedy token is generated.
- ``logprobs: true`` with ``top_logprobs`` k: ``choices[0].logprobs.content[0]`` holds the generated token and
  its k most likely alternatives (``token`` decoded alone, ``logprob``, ``bytes``), as OpenAI's API answers.
- ``prompt_logprobs`` (``mode="vllm"`` only): vLLM's extension, one ``{token_id: {logprob, rank,
  decoded_token}}`` per prompt token, the first null.
- ``mode="openai"`` behaves as OpenAI's hosted API: ``continue_final_message``, ``add_generation_prompt`` and
  ``prompt_logprobs`` are refused with 400 "Unrecognized request argument supplied: <name>".
- ``mode="continues"`` continues the final message and gives top log-probs, but has no prompt_logprobs (it
  ignores the field, as lenient servers do).
Every request's body is recorded in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from completions_server import _QuietServer

MODES = ("vllm", "continues", "openai")


class ChatServer:
    """Start with ``with ChatServer(folder, mode) as server:``; ``server.url`` ends in /v1."""

    def __init__(self, model_dir: Path, mode: str = "vllm", served_name: str = "chat"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        assert mode in MODES
        self.mode, self.served_name = mode, served_name
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, body: dict) -> dict:
        """The chat completion of ``body``."""
        import torch

        continues = bool(body.get("continue_final_message", False))
        text = self.tokenizer.apply_chat_template(body["messages"], tokenize=False, continue_final_message=continues,
                                                  add_generation_prompt=bool(body.get("add_generation_prompt", True)))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        with self.lock, torch.inference_mode():
            logprobs = torch.log_softmax(self.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        last = logprobs[-1]
        gen = int(last.argmax())
        choice = {"index": 0, "message": {"role": "assistant", "content": self.tokenizer.decode([gen])},
                  "logprobs": None, "finish_reason": "length"}
        if body.get("logprobs"):
            k = int(body.get("top_logprobs") or 0)
            top = torch.topk(last, k).indices.tolist() if k else []
            choice["logprobs"] = {"content": [{**self._entry(gen, last), "top_logprobs": [self._entry(t, last) for t in top]}]}
        out = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
               "model": self.served_name, "choices": [choice],
               "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1}}
        if self.mode == "vllm" and body.get("prompt_logprobs") is not None:
            out["prompt_logprobs"] = [None] + [
                {str(t): {"logprob": float(logprobs[i - 1, t]), "rank": int((logprobs[i - 1] > logprobs[i - 1, t]).sum()) + 1,
                          "decoded_token": self.tokenizer.decode([t])}} for i, t in enumerate(ids) if i > 0]
        return out

    def _entry(self, token: int, logprobs) -> dict:
        text = self.tokenizer.decode([token])
        return {"token": text, "logprob": float(logprobs[token]), "bytes": list(text.encode())}


def _handler(server: ChatServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, obj: dict) -> None:
            raw = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with server.lock:
                server.requests.append(body)
            if self.path != "/v1/chat/completions":
                return self._json(404, {"error": {"message": f"Unknown request URL: POST {self.path}",
                                                  "type": "invalid_request_error", "param": None, "code": None}})
            if server.mode == "openai":
                for name in ("continue_final_message", "add_generation_prompt", "prompt_logprobs"):
                    if name in body:
                        return self._json(400, {"error": {"message": f"Unrecognized request argument supplied: {name}",
                                                          "type": "invalid_request_error", "param": None, "code": None}})
            self._json(200, server.answer(body))

    return Handler
