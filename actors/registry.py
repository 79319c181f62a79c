"""Engine registry: (engine kind, backend) → (module, class), imported lazily so that importing mirrorscan never
imports torch or vLLM. A test walks every entry.

Kinds (``grid.instrument.ENGINE_KINDS``) say what a cell asks of an engine; every engine keeps one contract:
``Engine(variant, model_source, run)`` loads once per actor, and ``engine(batch)`` turns a batch of rendered
cells into one trace row per cell. ``generate`` engines take ``system_text``/``user_text`` and sample an
answer. ``score`` engines take ``prefix``/``target``/``add_bos`` and return the target tokens'
log-probabilities (``grid.engine_kinds.SCORE``). ``activations`` engines take ``text`` and how to extract it and
return per-layer pooled hidden states (``grid.engine_kinds.ACTIVATIONS``).
"""

from __future__ import annotations

import importlib

from mirrorscan.grid.errors import ConfigError

ENGINES: dict[tuple[str, str], tuple[str, str]] = {
    ("generate", "hf"): ("mirrorscan.actors.hf_sampler", "HFSampler"),
    ("generate", "vllm"): ("mirrorscan.actors.vllm_sampler", "VLLMSampler"),
    ("generate", "openai"): ("mirrorscan.actors.http_openai", "OpenAISampler"),
    ("generate", "anthropic"): ("mirrorscan.actors.http_anthropic", "AnthropicSampler"),
    ("score", "hf"): ("mirrorscan.actors.hf_scorer", "HFScorer"),
    ("score", "vllm"): ("mirrorscan.actors.vllm_scorer", "VLLMScorer"),
    ("score", "openai"): ("mirrorscan.actors.http_scorer", "OpenAIScorer"),
    ("score", "anthropic"): ("mirrorscan.actors.score_proxy", "AnthropicProxyScorer"),
    ("activations", "hf"): ("mirrorscan.actors.hf_activations", "HFActivations"),
    ("activations", "vllm"): ("mirrorscan.actors.vllm_activations", "VLLMActivations"),
}


def check_engine(kind: str, backend: str, file: str = "", field: str = "") -> None:
    """ConfigError (naming ``file`` and ``field``) unless an engine of ``kind`` exists for ``backend``."""
    if (kind, backend) not in ENGINES:
        offered = sorted(b for k, b in ENGINES if k == kind)
        raise ConfigError(file, field, f"backend {backend!r} has no {kind!r} engine",
                          f"use one of: {', '.join(offered) or '(none yet)'}")


def engine_class(backend: str, kind: str = "generate"):
    """The engine class of ``kind`` for ``backend`` (import happens here, not at package import)."""
    check_engine(kind, backend, field="backend")
    module, name = ENGINES[(kind, backend)]
    return getattr(importlib.import_module(module), name)
