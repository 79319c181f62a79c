"""The keys a ``config.json`` may hold, at the top level and in each ``models[]`` entry: their types and
defaults, and the type checks ``grid.spec`` validates them with.

Every default is the records' (``grid.settings.Settings`` and ``Execution`` for the top level,
``grid.records.ModelVariant`` for a model entry), read from their fields, so a config and frozen settings
of an older format fill in the same values from one place.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mirrorscan.grid.errors import ConfigError, shorten
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import Execution, Settings


def default_of(record: type, name: str) -> Any:
    """The default of ``record``'s field ``name``: the one place each default is written (typed as the field is)."""
    f = next(f for f in dataclasses.fields(record) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


# Top-level keys with their default (None = required or resolved later) and expected type. The defaults are
# the records' (``grid.settings.Settings``, ``Execution``), so a config and frozen settings read alike.
TOP_LEVEL: dict[str, tuple[object, tuple[type, ...]]] = {
    "instrument": (None, (str,)),                 # a registry name, or "package.module:Attr"
    "description": (default_of(Settings, "description"), (str,)),
    "models": (None, (list,)),
    "samples": (default_of(Settings, "samples"), (int,)),          # samples per cell; sample is 0-based
    "temperature": (default_of(Settings, "temperature"), (int, float)),   # 0 = greedy
    "top_p": (default_of(Settings, "top_p"), (int, float)),
    "max_tokens": (default_of(Settings, "max_tokens"), (int,)),    # generated tokens per answer, at most
    "seed": (default_of(Settings, "seed"), (int,)),                # root seed; each cell's seed is derived from it
    "batch_size": (default_of(Settings, "batch_size"), (int,)),    # cells per engine batch
    "actor_pool_size": (default_of(Execution, "actor_pool_size"), (int,)),   # engine actors per model
    "max_concurrent_models": (default_of(Execution, "max_concurrent_models"), (int, type(None))),  # None = all on a cluster, else 1
    "store": (None, (str, type(None))),           # trace store URI; None = $MIRRORSCAN_STORE or the home store
    "catalog_dsn": (None, (str, type(None))),     # PostgreSQL DSN; None = embedded catalog
    "limits": ({}, (dict,)),                      # raised size limits (grid.limits); recorded, not hashed
}
INHERITED_MODEL_KEYS = ("temperature", "top_p", "max_tokens")
"""Model keys that default to the experiment's top-level value of the same name."""
_MODEL_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),                              # local path, hub id or packaged alias
    "label": (str,),                              # unique variant name; default from model (+ @effort)
    "backend": (str,),
    "dtype": (str,),
    "device": (str,),
    "effort": (str, type(None)),                  # reasoning effort, part of the default label
    "extra_body": (dict,),                        # provider/engine extras, recorded verbatim
    "chat_template_kwargs": (dict,),              # passed to the chat template (e.g. enable_thinking)
    "temperature": (int, float, type(None)),      # per-model overrides of the top-level values
    "top_p": (int, float, type(None)),
    "max_tokens": (int, type(None)),
    "api_key_env": (str, type(None)),             # NAME of the environment variable holding a key
    "endpoint": (str, type(None)),                # API base URL (openai: .../v1); None = the provider's
    "max_concurrency": (int,),                    # requests in flight per endpoint (HTTP backends)
    "timeout_s": (int, float),                    # per-request timeout, seconds (HTTP: also per stalled read)
    "max_retries": (int,),                        # retries of 429/5xx/cut streams, with backoff and jitter
    "tensor_parallel_size": (int,),               # vLLM: GPUs per engine (k > 1 → placement group of k GPUs)
    "engine_args": (dict,),                       # vLLM engine arguments (per-model overrides), recorded verbatim
    "batch_invariant": (bool, type(None)),        # vLLM on a GPU: VLLM_BATCH_INVARIANT=1 in this model's engine actors
    "num_gpus": (int, float, type(None)),         # GPUs per engine actor; None = vllm: tensor_parallel_size, hf: 1 on cuda, else 0
    "memory_gb": (int, float, type(None)),        # memory request per engine actor (GiB), for scheduling
    "device_map": (str, dict, type(None)),        # hf: accelerate's placement over the actor's GPUs (grid.device_map)
    "min_actors": (int, type(None)),              # actor pool bounds for this model; None = actor_pool_size
    "max_actors": (int, type(None)),
    "add_bos": (bool, type(None)),                # score engines: force BOS (true/false); None = the tokenizer's rule
    "tokenizer": (str, type(None)),               # score engines behind an API: the served model's tokenizer
    "score_api": (str, type(None)),               # score engine of backend openai: "completions" (default) or "chat"
}
MODEL_KEYS: dict[str, tuple[object, tuple[type, ...]]] = {
    key: (None if key in ("model", "label", *INHERITED_MODEL_KEYS) else default_of(ModelVariant, key), types)
    for key, types in _MODEL_TYPES.items()}
"""Model entry keys with their default (``ModelVariant``'s; None: required, derived, or the experiment's
value) and expected types."""
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object",
              type(None): "null", bool: "true/false"}
"""How an error message names each JSON type."""


def type_ok(value: object, types: tuple[type, ...]) -> bool:
    """Whether ``value`` is one of ``types`` (true/false is never a number)."""
    if isinstance(value, bool):   # bool is an int in Python; never accept it for a number
        return bool in types
    return isinstance(value, types)


def check_type(file: str, name: str, value: object, types: tuple[type, ...]) -> None:
    """ConfigError naming ``file`` and field ``name`` unless ``value`` is one of ``types``."""
    if not type_ok(value, types):
        wanted = " or ".join(TYPE_NAMES.get(t, t.__name__) for t in types)
        raise ConfigError(file, name, f"is {shorten(json.dumps(value))}, not {wanted}", f"write {wanted}")


def check_range(file: str, name: str, ok: bool, problem: str, fix: str) -> None:
    """ConfigError naming ``file``, field ``name``, ``problem`` and ``fix`` unless ``ok``."""
    if not ok:
        raise ConfigError(file, name, problem, fix)
