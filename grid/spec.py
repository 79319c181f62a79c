"""The experiment spec: ``experiments/<name>/config.json``, validated before anything else runs.

``load_spec`` reads the file, checks every field (unknown keys, types, ranges, files, duplicate labels,
envelope placeholders, pair ids, ``|`` in id components, secrets) and resolves defaults. Any problem is a
``ConfigError`` whose one-line message names the file, the field and the fix; nothing has been written.

``Spec.settings()`` is the frozen record of a run: everything that shapes a result (resolved models,
the envelope texts actually used, probe-set hash, sampling parameters, seeds), with secrets removed.
It is what the catalog stores and what ``scan --resume`` rebuilds the grid from.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from grid.envelopes import PACKAGED, EnvelopeSet, load_bearing_ids, load_envelopes
from grid.errors import ConfigError
from grid.ids import ORDERINGS, check_component
from grid.probesets import STARTER, PairSet, load_pairs

INSTRUMENTS = ("forced_choice",)
"""Instruments the grid engine can run now (open_scan, flinch and lens come with later parts)."""
BACKENDS = ("hf", "vllm", "openai", "anthropic")
"""Model backends: in-process engines (hf, vllm) and online streaming HTTP APIs (openai-compatible, anthropic)."""
API_BACKENDS = ("openai", "anthropic")
"""Backends reached over HTTP: the model is an API name, not a local folder."""
DEFAULT_ENDPOINTS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
BATCH_API_BACKENDS = ("openai_batch", "anthropic_batch", "batch")
"""Refused on purpose: a batch API is a different serving path (queued for hours, no streaming, no timing)."""
DTYPES = ("float32", "bfloat16", "float16", "auto")
RESERVED_NAMES = ("gstudy", "dstudy", "kendall", "auroc", "null", "bootstrap", "scaling", "compare")
"""Subcommands of ``mirrorscan analyze``: no experiment may be named after one."""

# Top-level keys with their default (None = required or resolved later) and expected type.
TOP_LEVEL: dict[str, tuple[object, tuple[type, ...]]] = {
    "instrument": (None, (str,)),
    "description": ("", (str,)),
    "models": (None, (list,)),
    "probe_set": (STARTER, (str,)),
    "envelopes_file": (PACKAGED, (str,)),
    "envelopes": ("load_bearing", (list, str)),   # list of ids, or "load_bearing" / "all"
    "orderings": (["AB", "BA"], (list,)),
    "samples": (1, (int,)),                       # samples per cell; sample is 0-based
    "temperature": (0.0, (int, float)),           # 0 = greedy
    "top_p": (1.0, (int, float)),
    "max_tokens": (64, (int,)),                   # generated tokens per answer, at most
    "seed": (0, (int,)),                          # root seed; each cell's seed is derived from it
    "batch_size": (16, (int,)),                   # cells per engine batch
    "actor_pool_size": (1, (int,)),               # engine actors per model
    "store": (None, (str, type(None))),           # trace store URI; None = $MIRRORSCAN_STORE or the home store
    "catalog_dsn": (None, (str, type(None))),     # PostgreSQL DSN; None = embedded catalog
}
MODEL_KEYS: dict[str, tuple[object, tuple[type, ...]]] = {
    "model": (None, (str,)),                      # local path, hub id or packaged alias
    "label": (None, (str,)),                      # unique variant name; default from model (+ @effort)
    "backend": ("hf", (str,)),
    "dtype": ("float32", (str,)),
    "device": ("cpu", (str,)),
    "effort": (None, (str, type(None))),          # reasoning effort, part of the default label
    "extra_body": ({}, (dict,)),                  # provider/engine extras, recorded verbatim
    "chat_template_kwargs": ({}, (dict,)),        # passed to the chat template (e.g. enable_thinking)
    "temperature": (None, (int, float, type(None))),   # per-model overrides of the top-level values
    "top_p": (None, (int, float, type(None))),
    "max_tokens": (None, (int, type(None))),
    "api_key_env": (None, (str, type(None))),     # NAME of the environment variable holding a key
    "endpoint": (None, (str, type(None))),        # API base URL (openai: .../v1); None = the provider's
    "max_concurrency": (8, (int,)),               # requests in flight per endpoint (HTTP backends)
    "timeout_s": (120.0, (int, float)),           # per-request timeout, seconds (HTTP: also per stalled read)
    "max_retries": (4, (int,)),                   # retries of 429/5xx/cut streams, with backoff and jitter
    "tensor_parallel_size": (1, (int,)),          # vLLM: GPUs per engine (k > 1 → placement group of k GPUs)
    "engine_args": ({}, (dict,)),                 # vLLM engine arguments (per-model overrides), recorded verbatim
    "num_gpus": (None, (int, float, type(None))), # GPUs per engine actor; None = tensor_parallel_size on cuda, else 0
    "memory_gb": (None, (int, float, type(None))),# memory request per engine actor (GiB), for scheduling
    "min_actors": (None, (int, type(None))),      # actor pool bounds for this model; None = actor_pool_size
    "max_actors": (None, (int, type(None))),
}
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|passw(or)?d|authorization|credential)", re.I)
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object",
               type(None): "null", bool: "true/false"}


@dataclass
class ModelVariant:
    """One model variant of an experiment (model + effort/overrides), named by a unique label."""

    label: str
    """Unique in the experiment; the first probe_id component."""
    model: str
    """As written in config.json: local path, hub id or packaged alias."""
    backend: str = "hf"
    dtype: str = "float32"
    device: str = "cpu"
    effort: str | None = None
    extra_body: dict = field(default_factory=dict)
    chat_template_kwargs: dict = field(default_factory=dict)
    temperature: float = 0.0
    """Resolved: the model's override or the experiment's value."""
    top_p: float = 1.0
    max_tokens: int = 64
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    endpoint: str | None = None
    """API base URL for HTTP backends (resolved to the provider's default); None for in-process engines."""
    max_concurrency: int = 8
    """Requests in flight per endpoint (HTTP backends), shared by the model's actor pool."""
    timeout_s: float = 120.0
    """Per-request timeout in seconds; a stream that stalls this long is cut and retried."""
    max_retries: int = 4
    """Retries of 429/5xx responses and cut streams (exponential backoff with jitter)."""
    tensor_parallel_size: int = 1
    """vLLM: GPUs one engine spans; > 1 runs the engine in a placement group of that many GPU bundles."""
    engine_args: dict = field(default_factory=dict)
    """vLLM engine arguments for this model (e.g. max_model_len), recorded verbatim."""
    num_gpus: float | None = None
    """GPUs requested per engine actor (resolved: tensor_parallel_size for vLLM on cuda, else 0)."""
    memory_gb: float | None = None
    """Memory (GiB) requested per engine actor, so the scheduler packs big models onto big nodes."""
    min_actors: int | None = None
    """Lower bound of this model's actor pool (resolved: actor_pool_size)."""
    max_actors: int | None = None
    """Upper bound of this model's actor pool (resolved: actor_pool_size); > min lets the pool autoscale."""

    def as_dict(self) -> dict:
        """Plain-JSON form for settings (no secret values: api_key_env is only a variable name)."""
        return dict(self.__dict__)


@dataclass
class Spec:
    """A validated experiment spec with defaults resolved."""

    config_path: str
    experiment: str
    """Folder name of the experiment (``experiments/<name>/``)."""
    raw: dict
    """config.json as written."""
    values: dict
    """Top-level values with defaults filled in."""
    models: list[ModelVariant]
    envelope_set: EnvelopeSet
    envelope_ids: list[str]
    pairs: PairSet

    def settings(self) -> dict:
        """The frozen settings of an invocation: what shapes the results, no secrets, plain JSON."""
        values = {k: v for k, v in self.values.items() if k not in ("models", "envelopes", "catalog_dsn")}
        envelopes = {i: self.envelope_set.envelopes[i].frozen() for i in self.envelope_ids}
        return {
            "format": 1,
            "experiment": self.experiment,
            **values,
            "temperature": float(values["temperature"]),
            "top_p": float(values["top_p"]),
            "models": [m.as_dict() for m in self.models],
            "envelopes": list(self.envelope_ids),
            "envelope_set": {"file": self.envelope_set.path, "version": self.envelope_set.version,
                             "sha256": self.envelope_set.sha256, "texts": envelopes},
            "probe_set_sha256": self.pairs.sha256,
            "n_items": len(self.pairs),
            "catalog": "embedded" if not self.values.get("catalog_dsn") else "dsn",
        }

    def n_cells(self) -> int:
        """Number of cells in the full grid (models × items × envelopes × orderings × samples)."""
        return (len(self.models) * len(self.pairs) * len(self.envelope_ids)
                * len(self.values["orderings"]) * self.values["samples"])


def settings_hash(settings: dict) -> str:
    """SHA-256 over the canonical JSON of settings: equal hashes mean the same grid and parameters."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def default_label(model: str, effort: str | None) -> str:
    """The id's last path segment, lower-cased, plus ``@<effort>`` when an effort is set."""
    last = re.split(r"[/:\\]", model.rstrip("/\\"))[-1].lower()
    return f"{last}@{effort}" if effort else last


def _type_ok(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):   # bool is an int in Python; never accept it for a number
        return bool in types
    return isinstance(value, types)


def _check_type(file: str, name: str, value: object, types: tuple[type, ...]) -> None:
    if not _type_ok(value, types):
        wanted = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise ConfigError(file, name, f"is {json.dumps(value)[:60]}, not {wanted}", f"write {wanted}")


def _reject_secrets(file: str, obj: object, path: str) -> None:
    """Secrets never enter config.json: they would reach settings, logs and Parquet."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            if _SECRET_KEY.search(str(key)) and not str(key).endswith("_env") and key != "max_tokens":
                raise ConfigError(file, sub, "looks like a secret; secrets must not be written in config.json",
                                  "put it in an environment variable and name that variable in api_key_env")
            _reject_secrets(file, value, sub)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            _reject_secrets(file, value, f"{path}[{i}]")


def _resolve_path(config_dir: Path, value: str) -> str:
    if value.startswith("packaged") or Path(value).is_absolute():
        return value
    return str((config_dir / value).resolve())


def _check_range(file: str, name: str, ok: bool, problem: str, fix: str) -> None:
    if not ok:
        raise ConfigError(file, name, problem, fix)


def _load_models(file: str, raw_models: list, values: dict) -> list[ModelVariant]:
    if not raw_models:
        raise ConfigError(file, "models", "is empty", 'add at least one model, e.g. {"model": "packaged:smollm2-135m-instruct"}')
    models, seen = [], {}
    for i, entry in enumerate(raw_models):
        where = f"models[{i}]"
        _check_type(file, where, entry, (dict,))
        for key in entry:
            if key not in MODEL_KEYS:
                raise ConfigError(file, f"{where}.{key}", "unknown key", f"remove it or use one of: {', '.join(MODEL_KEYS)}")
        if "model" not in entry:
            raise ConfigError(file, f"{where}.model", "missing", "name a local path, hub id or packaged:smollm2-135m-instruct")
        resolved = {}
        for key, (default, types) in MODEL_KEYS.items():
            value = entry.get(key, default)
            if key in entry:
                _check_type(file, f"{where}.{key}", value, types)
            resolved[key] = json.loads(json.dumps(value))   # plain copy
        for key in ("temperature", "top_p", "max_tokens"):
            if resolved[key] is None:
                resolved[key] = values[key]
        resolved["temperature"], resolved["top_p"] = float(resolved["temperature"]), float(resolved["top_p"])
        if resolved["backend"] in BATCH_API_BACKENDS or "batch" in resolved["extra_body"]:
            raise ConfigError(file, f"{where}.backend", "asks for a batch API, which mirrorscan refuses: batch "
                              "requests are queued for hours on a different serving path, without streaming or "
                              "per-request timing, so their answers are not comparable",
                              'use backend "openai" or "anthropic" (online streaming)')
        if resolved["backend"] not in BACKENDS:
            raise ConfigError(file, f"{where}.backend", f"unknown backend {resolved['backend']!r}",
                              f"use one of: {', '.join(BACKENDS)}")
        if resolved["dtype"] not in DTYPES:
            raise ConfigError(file, f"{where}.dtype", f"unknown dtype {resolved['dtype']!r}", f"use one of: {', '.join(DTYPES)}")
        if resolved["label"] is None:
            resolved["label"] = default_label(resolved["model"], resolved["effort"])
        check_component(resolved["label"], file, f"{where}.label")
        if resolved["label"] in seen:
            raise ConfigError(file, f"{where}.label", f"duplicate label {resolved['label']!r} (also models[{seen[resolved['label']]}])",
                              "give each model variant a unique label")
        seen[resolved["label"]] = i
        _validate_sampling(file, where, resolved)
        _resolve_engine(file, where, resolved)
        _resolve_pool(file, where, resolved, values["actor_pool_size"])
        models.append(ModelVariant(**resolved))
    return models


def _resolve_engine(file: str, where: str, v: dict) -> None:
    """Fill in and check the engine/endpoint/resource keys of one model entry (in place)."""
    backend = v["backend"]
    if backend in API_BACKENDS:
        v["endpoint"] = (v["endpoint"] or DEFAULT_ENDPOINTS[backend]).rstrip("/")
        _check_range(file, f"{where}.endpoint", v["endpoint"].startswith(("http://", "https://")),
                     f"is {v['endpoint']!r}", "write an http:// or https:// base URL (openai: ending in /v1)")
    elif v["endpoint"] is not None:
        raise ConfigError(file, f"{where}.endpoint", f"is set but backend {backend!r} runs in-process",
                          'remove it, or use backend "openai" to reach an OpenAI-compatible server')
    for key in ("max_concurrency", "tensor_parallel_size"):
        _check_range(file, f"{where}.{key}", v[key] >= 1, f"is {v[key]}", "use a positive integer")
    _check_range(file, f"{where}.max_retries", v["max_retries"] >= 0, f"is {v['max_retries']}", "use 0 or more")
    _check_range(file, f"{where}.timeout_s", v["timeout_s"] > 0, f"is {v['timeout_s']}", "use a positive number of seconds")
    v["timeout_s"] = float(v["timeout_s"])
    if v["tensor_parallel_size"] > 1 and backend != "vllm":
        raise ConfigError(file, f"{where}.tensor_parallel_size", f"is {v['tensor_parallel_size']} but backend is {backend!r}",
                          'tensor parallelism needs backend "vllm"; remove the key or set it to 1')
    if v["engine_args"] and backend != "vllm":
        raise ConfigError(file, f"{where}.engine_args", f"is only read by the vllm backend, not {backend!r}",
                          "remove it, or pass provider extras in extra_body")
    if v["num_gpus"] is None:
        v["num_gpus"] = float(v["tensor_parallel_size"]) if backend == "vllm" and v["device"].startswith("cuda") else 0.0
    _check_range(file, f"{where}.num_gpus", v["num_gpus"] >= 0, f"is {v['num_gpus']}", "use 0 or more")
    _check_range(file, f"{where}.memory_gb", v["memory_gb"] is None or v["memory_gb"] > 0, f"is {v['memory_gb']}",
                 "use a positive number of GiB, or leave it out")


def _resolve_pool(file: str, where: str, v: dict, pool_size: int) -> None:
    """Resolve the model's actor pool bounds from min_actors/max_actors and the experiment's actor_pool_size."""
    lo = v["min_actors"] if v["min_actors"] is not None else pool_size
    hi = v["max_actors"] if v["max_actors"] is not None else max(lo, pool_size)
    _check_range(file, f"{where}.min_actors", lo >= 1, f"is {lo}", "use 1 or more")
    _check_range(file, f"{where}.max_actors", hi >= lo, f"is {hi}, below min_actors {lo}", "make max_actors ≥ min_actors")
    v["min_actors"], v["max_actors"] = lo, hi
    if v["tensor_parallel_size"] > 1 and hi > 1:   # each such engine needs its own placement group
        raise ConfigError(file, f"{where}.max_actors", f"is {hi} for a tensor-parallel model (tensor_parallel_size "
                          f"{v['tensor_parallel_size']}); one engine per model is supported for now",
                          "set min_actors and max_actors to 1 for this model (or actor_pool_size to 1)")


def _validate_sampling(file: str, where: str, v: dict) -> None:
    prefix = f"{where}." if where else ""
    _check_range(file, f"{prefix}temperature", 0 <= v["temperature"] <= 5, f"is {v['temperature']}", "use a value in [0, 5] (0 = greedy)")
    _check_range(file, f"{prefix}top_p", 0 < v["top_p"] <= 1, f"is {v['top_p']}", "use a value in (0, 1]")
    _check_range(file, f"{prefix}max_tokens", v["max_tokens"] >= 1, f"is {v['max_tokens']}", "use a positive integer")


def load_spec(path: str | Path) -> Spec:
    """Read, validate and resolve ``config.json`` (or a folder holding one)."""
    p = Path(path)
    config_path = p / "config.json" if p.is_dir() or not p.suffix else p
    file = str(config_path)
    if not config_path.is_file():
        raise ConfigError(file, "(file)", "not found", "create experiments/<name>/config.json or check the path")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(file, "(file)", f"is not valid JSON ({exc})", "fix the JSON syntax") from exc
    _check_type(file, "(top level)", raw, (dict,))
    _reject_secrets(file, {k: v for k, v in raw.items() if k != "catalog_dsn"}, "")
    for key in raw:
        if key not in TOP_LEVEL:
            raise ConfigError(file, key, "unknown key", f"remove it or use one of: {', '.join(TOP_LEVEL)}")
    values = {}
    for key, (default, types) in TOP_LEVEL.items():
        if key not in raw:
            if default is None and key in ("instrument", "models"):
                raise ConfigError(file, key, "missing", f"add {key!r}")
            values[key] = json.loads(json.dumps(default))
            continue
        _check_type(file, key, raw[key], types)
        values[key] = raw[key]
    if values["instrument"] not in INSTRUMENTS:
        raise ConfigError(file, "instrument", f"unknown instrument {values['instrument']!r}", f"use one of: {', '.join(INSTRUMENTS)}")
    _validate_sampling(file, "", values)
    for key in ("samples", "batch_size", "actor_pool_size"):
        _check_range(file, key, values[key] >= 1, f"is {values[key]}", "use a positive integer")
    orderings = values["orderings"]
    _check_range(file, "orderings", bool(orderings) and all(o in ORDERINGS for o in orderings) and len(set(orderings)) == len(orderings),
                 f"is {orderings}", 'use ["AB", "BA"], ["AB"] or ["BA"]')
    config_dir = config_path.parent.resolve()
    values["probe_set"] = _resolve_path(config_dir, values["probe_set"])
    values["envelopes_file"] = _resolve_path(config_dir, values["envelopes_file"])
    models = _load_models(file, values["models"], values)
    envelope_set = load_envelopes(values["envelopes_file"])
    selection = values["envelopes"]
    if isinstance(selection, str):
        if selection == "load_bearing":
            envelope_ids = load_bearing_ids(envelope_set)
        elif selection == "all":
            envelope_ids = list(envelope_set.envelopes)
        else:
            raise ConfigError(file, "envelopes", f"is {selection!r}", 'write a list of envelope ids, "load_bearing" or "all"')
    else:
        if not selection or len(set(selection)) != len(selection) or not all(isinstance(s, str) for s in selection):
            raise ConfigError(file, "envelopes", "must be a non-empty list of distinct envelope ids", "list each envelope id once")
        envelope_ids = [e.id for e in envelope_set.select(selection, file)]
    pairs = load_pairs(values["probe_set"])
    experiment = check_component(config_dir.name, file, "(experiment folder name)")
    if experiment in RESERVED_NAMES:
        raise ConfigError(file, "(experiment folder name)", f"{experiment!r} is reserved for `mirrorscan analyze {experiment}`",
                          "rename the experiment folder")
    return Spec(config_path=file, experiment=experiment, raw=raw, values=values, models=models,
                envelope_set=envelope_set, envelope_ids=envelope_ids, pairs=pairs)


def settings_differences(frozen: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the fields where two settings dicts differ (for ``scan --resume``)."""
    if isinstance(frozen, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(frozen) | set(current)):
            out += settings_differences(frozen.get(key), current.get(key), f"{prefix}.{key}" if prefix else key)
        return out
    if isinstance(frozen, list) and isinstance(current, list) and len(frozen) == len(current):
        out = []
        for i, (a, b) in enumerate(zip(frozen, current)):
            out += settings_differences(a, b, f"{prefix}[{i}]")
        return out
    return [] if frozen == current else [prefix]
