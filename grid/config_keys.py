"""The keys a ``config.json`` may hold, at the top level and in each ``models[]`` entry: their types and
defaults, and the type checks ``grid.spec`` validates them with. The top level is a record (``TopLevel``) that
``read_keys`` fills field by field, so each key is read once, by name, here.

Every default is the records' (``grid.settings.Settings`` and ``Execution`` for the top level,
``grid.records.ModelVariant`` for a model entry), read from their fields, so a config and frozen settings
of an older format fill in the same values from one place.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mirrorscan.grid.errors import ConfigError, shorten
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import Execution, Settings

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")


def default_of(record: type, name: str) -> Any:
    """The default of ``record``'s field ``name``: the one place each default is written (typed as the field is)."""
    f = next(f for f in dataclasses.fields(record) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


TYPES = "config_types"
"""Field metadata of a config record (``config_key``): the JSON types its value may have."""


def config_key(types: tuple[type, ...], default: Any = dataclasses.MISSING, *,
               default_factory: Any = dataclasses.MISSING) -> Any:
    """A field of a config record read by ``read_keys``: the JSON ``types`` its value may have, and its default
    (neither ``default`` nor ``default_factory``: the key is required)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={TYPES: types})


@dataclass(frozen=True, kw_only=True)
class TopLevel:
    """The top-level keys of a config.json (besides the instrument's section), each read once and type-checked
    by ``read_keys``. The defaults are the records' (``grid.settings.Settings``, ``Execution``), so a config and
    frozen settings read alike."""

    instrument: str = config_key((str,))
    """A registry name, or ``package.module:Attr``."""
    description: str = config_key((str,), default_of(Settings, "description"))
    """Free text."""
    models: list = config_key((list,))
    """The model entries, as written (``MODEL_KEYS``)."""
    samples: int = config_key((int,), default_of(Settings, "samples"))
    """Samples per cell; sample is 0-based."""
    temperature: float = config_key((int, float), default_of(Settings, "temperature"))
    """Sampling temperature; 0 = greedy."""
    top_p: float = config_key((int, float), default_of(Settings, "top_p"))
    """Nucleus-sampling mass."""
    max_tokens: int = config_key((int,), default_of(Settings, "max_tokens"))
    """Generated tokens per answer, at most."""
    seed: int = config_key((int,), default_of(Settings, "seed"))
    """Root seed; each cell's seed is derived from it."""
    batch_size: int = config_key((int,), default_of(Settings, "batch_size"))
    """Cells per engine batch."""
    actor_pool_size: int = config_key((int,), default_of(Execution, "actor_pool_size"))
    """Engine actors per model."""
    max_concurrent_models: int | None = config_key((int, type(None)), default_of(Execution, "max_concurrent_models"))
    """Model pools at once; None = all on a cluster, else 1."""
    store: str | None = config_key((str, type(None)), None)
    """Trace store URI; None = $MIRRORSCAN_STORE or the home store."""
    catalog_dsn: str | None = config_key((str, type(None)), None)
    """PostgreSQL DSN; None = embedded catalog."""
    limits: dict = config_key((dict,), default_factory=dict)
    """Raised size limits (``grid.limits``); recorded, not hashed."""


def _default(f: dataclasses.Field) -> object:
    """A config record field's default (a fresh one from its factory); None where the key is required."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else \
        None if f.default is dataclasses.MISSING else f.default


TOP_LEVEL: dict[str, tuple[object, tuple[type, ...]]] = {
    f.name: (_default(f), f.metadata[TYPES]) for f in dataclasses.fields(TopLevel)}
"""Top-level keys with their default (None = required or resolved later) and expected types, in config order
(``TopLevel``'s fields)."""
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


def read_keys(file: str, mapping: Mapping, record: type[R], where: str = "") -> R:
    """``mapping``'s values as ``record`` (a dataclass of ``config_key`` fields), field by field in declaration
    order: a value of another type is ``check_type``'s ConfigError naming ``file`` and the field
    (``<where>.<key>``), a required key left out is a ConfigError "missing", any other takes its field's default.
    Keys that are none of the fields are the caller's to refuse (before, so that a misspelt key is named as
    such)."""
    values = {}
    for f in dataclasses.fields(record):
        name = f"{where}.{f.name}" if where else f.name
        if f.name not in mapping:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(file, name, "missing", f"add {f.name!r}")
            continue
        value = mapping[f.name]
        check_type(file, name, value, f.metadata[TYPES])
        values[f.name] = value
    return record(**values)
