"""Engine registry: backend name → (module, class), imported lazily so that importing mirrorscan never
imports torch or vLLM. A test walks every entry."""

from __future__ import annotations

import importlib

ENGINES: dict[str, tuple[str, str]] = {
    "hf": ("actors.hf_sampler", "HFSampler"),
    "vllm": ("actors.vllm_sampler", "VLLMSampler"),
    "openai": ("actors.http_openai", "OpenAISampler"),
    "anthropic": ("actors.http_anthropic", "AnthropicSampler"),
}


def engine_class(backend: str):
    """The actor class for a backend (import happens here, not at package import)."""
    module, name = ENGINES[backend]
    return getattr(importlib.import_module(module), name)
