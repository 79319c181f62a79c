"""Engine registry: (engine kind, backend) → (module, class), imported lazily so that importing mirrorscan never
imports torch or vLLM. A test walks every entry (``tests/actors/test_engine_contract.py``).

Every registered class subclasses ``actors.engine.Engine`` and keeps its contract: ``Engine(variant,
model_source, run)`` loads once per engine actor, and ``engine(batch)`` turns a batch of rendered cells (the
request columns of its kind, ``grid.engine_kinds``) into one trace row per cell, in order. The class
declares what the grid engine reads without probing: ``kind`` and ``backend`` (its key here), ``model_keys``,
``requires`` (optional dependencies, checked before a scan records anything), ``CONCURRENT_BATCHES``,
``ray_resources(variant)`` and ``shutdown()``; the base class holds the defaults.

Kinds: ``generate`` engines take ``system_text``/``user_text`` and sample an answer; ``score`` engines take
``prefix``/``target``/``add_bos`` and return the target tokens' log-probabilities; ``activations`` engines take
``text`` and how to extract it and return per-layer pooled hidden states (``grid.engine_kinds``: GENERATE,
SCORE, ACTIVATIONS).

Adding an engine:

1. a class in its own module of ``actors/`` subclassing ``Engine`` (or an engine of the same kind), setting
   ``kind``, ``backend``, ``model_keys`` and, where they differ from the defaults, ``requires`` (e.g.
   ``actors.engine.VLLM``), ``CONCURRENT_BATCHES``, ``ray_resources`` and ``shutdown``; its module imports the
   required packages inside methods, so it imports without them;
2. its entry here;
3. its row in ``grid.engine_kinds.ENGINE_MODEL_KEYS`` (equal to ``model_keys``): config validation lives in
   ``grid/``, which imports no engine, and refuses a model key the engine would not read by that table.

The contract test fails until the three agree.
"""

from __future__ import annotations

import importlib

from mirrorscan.actors.engine import Engine
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


def engine_class(backend: str, kind: str = "generate") -> type[Engine]:
    """The engine class of ``kind`` for ``backend`` (import happens here, not at package import)."""
    check_engine(kind, backend, field="backend")
    module, name = ENGINES[(kind, backend)]
    return getattr(importlib.import_module(module), name)
