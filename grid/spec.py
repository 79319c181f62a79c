"""The experiment spec: ``experiments/<name>/config.json``, validated before anything else runs.

``load_spec`` reads the file, checks the core fields (unknown keys, types, ranges, duplicate labels, ``|`` in
id components, secrets), resolves defaults, and hands the instrument's own section (``"<instrument>": {…}``)
to the instrument named by ``instrument`` (``grid.instrument``). Any problem is a ``ConfigError`` whose
one-line message names the file, the field and the fix; nothing has been written.

Which backends exist and which model keys each engine reads are engine facts, read from
``grid.engine_kinds`` (``ENGINE_MODEL_KEYS``, which a test holds against every registered engine's
declarations): a model entry that sets a key its engine would drop is refused here. The rules left in this
module are about values and combinations (an endpoint's shape, Anthropic's effort levels, ``add_bos`` behind
an API without a tokenizer).

``Spec.settings()`` is the frozen record of a run (``grid.settings``): what shapes a result (resolved
models, sampling, seeds, the instrument's frozen section with its item hashes) and, apart, how it executes;
secrets removed. It is what the catalog stores and what ``scan --resume`` rebuilds the grid from.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorscan.grid.config_keys import (INHERITED_MODEL_KEYS, MODEL_KEYS, TOP_LEVEL, TopLevel, check_range,
                                         check_type, default_of, read_keys, type_ok)
from mirrorscan.grid.device_map import check_device_map, default_num_gpus
from mirrorscan.grid.engine_kinds import (API_BACKENDS, BACKENDS, backend_reads, backends_reading,  # noqa: F401 - re-exported
                                          engine_reads, kind_reads)
from mirrorscan.grid.input_paths import experiment_folder, relative_inputs
from mirrorscan.grid.errors import ConfigError, refuse_duplicate_keys, unknown_key
from mirrorscan.grid.names import RESERVED_NAMES, check_experiment_name, check_name  # noqa: F401 - RESERVED_NAMES re-exported
from mirrorscan.grid.instrument import Instrument, SpecContext, resolve
from mirrorscan.grid.limits import INSTRUMENT_KEYS as LIMITED_SECTION_KEYS, check as check_limit, resolve as resolve_limits
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.secrets import check_config_values, check_endpoint_url
from mirrorscan.grid.settings import SAMPLER_VERSION, Execution, Settings
from mirrorscan.grid.batch_invariance import check_batch_invariant
from mirrorscan.grid.vllm_extraction import check_vllm_extraction

DEFAULT_ENDPOINTS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
BATCH_API_BACKENDS = ("openai_batch", "anthropic_batch", "batch")
"""Refused on purpose: a batch API is a different serving path (queued for hours, no streaming, no timing)."""
DTYPES = ("float32", "bfloat16", "float16", "auto")
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")
"""Values of the Messages API's ``output_config.effort`` (anthropic SDK 2.15), where backend "anthropic" sends effort."""


@dataclass(frozen=True)
class Spec:
    """A validated experiment spec with every default resolved; immutable once ``load_spec`` returns it
    (``dataclasses.replace`` gives a changed copy, e.g. with the store a scan resolved)."""

    config_path: str
    """The config.json read (as given: relative or absolute)."""
    experiment: str
    """Folder name of the experiment (``experiments/<name>/``)."""
    raw: dict
    """config.json as written, as parsed here (read-only by convention)."""
    models: tuple[ModelVariant, ...]
    """The model variants, resolved (``grid.records.ModelVariant``), in config order."""
    instrument: Instrument
    """The instrument the config names (resolved)."""
    instrument_spec: Any
    """The instrument's validated section (frozen, hashable)."""
    instrument_name: str
    """The instrument as config.json names it (a registry name or ``package.module:Attr``): what is frozen."""
    description: str = default_of(Settings, "description")
    """Free text from config.json."""
    samples: int = default_of(Settings, "samples")
    """Samples per cell; ``sample`` is 0-based."""
    temperature: float = default_of(Settings, "temperature")
    """Experiment sampling temperature (0 = greedy); a model may override it (``ModelVariant.temperature``)."""
    top_p: float = default_of(Settings, "top_p")
    """Experiment nucleus-sampling mass in (0, 1]; a model may override it."""
    max_tokens: int = default_of(Settings, "max_tokens")
    """Experiment limit of generated tokens per answer (tokens); a model may override it."""
    seed: int = default_of(Settings, "seed")
    """Root seed; each cell's seed is derived from it."""
    batch_size: int = default_of(Settings, "batch_size")
    """Cells per engine batch."""
    actor_pool_size: int = default_of(Execution, "actor_pool_size")
    """Engine actors per model, where a model sets no min_actors/max_actors."""
    max_concurrent_models: int | None = default_of(Execution, "max_concurrent_models")
    """Model pools at once; None: all on a cluster, one at a time on a local Ray."""
    store: str | None = None
    """Trace store URI (local folder or ``s3://``); None: ``$MIRRORSCAN_STORE`` or the home store, resolved by
    the run (which then holds a copy with it set)."""
    catalog_dsn: str | None = None
    """PostgreSQL DSN of the catalog as config.json names it (may hold a password; never frozen); None: the
    environment's or the embedded catalog."""
    limits_raised: dict = dataclasses.field(default_factory=dict)
    """Size limits set away from their defaults (``grid.limits``), by name; recorded in ``execution.limits``."""

    def settings(self) -> Settings:
        """The frozen settings of an invocation (``grid.settings.Settings``, format 2): no secrets. Input files
        inside the experiment folder are recorded by their path relative to it (``grid.input_paths``)."""
        folder = experiment_folder(self.config_path)
        return Settings(
            experiment=self.experiment, instrument=self.instrument_name, description=self.description,
            samples=self.samples, temperature=float(self.temperature), top_p=float(self.top_p),
            max_tokens=self.max_tokens, seed=self.seed, batch_size=self.batch_size, models=tuple(self.models),
            instrument_settings=relative_inputs(self.instrument.frozen(self.instrument_spec), folder),
            input_root=folder,
            sampler_version=SAMPLER_VERSION if self.samples_on_hf() else None,
            execution=Execution(store=self.store, actor_pool_size=self.actor_pool_size,
                                max_concurrent_models=self.max_concurrent_models,
                                catalog="embedded" if not self.catalog_dsn else "dsn",
                                limits=dict(self.limits_raised) if self.limits_raised else None,
                                written=("store", "actor_pool_size", "max_concurrent_models", "catalog")
                                + (("limits",) if self.limits_raised else ())),
            written=(*_SHAPING_ORDER, *(("sampler_version",) if self.samples_on_hf() else ()), "execution"))

    def samples_on_hf(self) -> bool:
        """Whether some cell is sampled (not greedy) on the in-process HF engine: a model at temperature > 0,
        or an instrument whose cells carry their own sampling (``sampled = True``). Only then does the HF
        sampler's version shape results (``grid.settings.SAMPLER_VERSION``)."""
        return any(m.backend == "hf" and (self.instrument.sampled or m.temperature > 0) for m in self.models)

    def n_cells(self) -> int:
        """Number of cells in the full grid (models × the instrument's cells per model × samples)."""
        return len(self.models) * self.instrument.n_items(self.instrument_spec) * self.samples


_SHAPING_ORDER = ("format", "experiment", "instrument", "description", "samples", "temperature", "top_p",
                  "max_tokens", "seed", "batch_size", "models", "instrument_settings")
"""The order of the settings' result-shaping keys as a new invocation writes them."""


def default_label(model: str, effort: str | None) -> str:
    """The id's last path segment, lower-cased, plus ``@<effort>`` when an effort is set."""
    last = re.split(r"[/:\\]", model.rstrip("/\\"))[-1].lower()
    return f"{last}@{effort}" if effort else last


def _load_models(file: str, top: TopLevel) -> list[ModelVariant]:
    raw_models = top.models
    if not raw_models:
        raise ConfigError(file, "models", "is empty", 'add at least one model, e.g. {"model": "packaged:smollm2-135m-instruct"}')
    models: list[ModelVariant] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw_models):
        where = f"models[{i}]"
        check_type(file, where, entry, (dict,))
        for key in entry:
            if key not in MODEL_KEYS:
                raise unknown_key(file, f"{where}.{key}", key, MODEL_KEYS)
        if "model" not in entry:
            raise ConfigError(file, f"{where}.model", "missing", "name a local path, hub id or packaged:smollm2-135m-instruct")
        resolved = {}
        for key, (default, types) in MODEL_KEYS.items():
            value = entry.get(key, default)
            if key in entry:
                check_type(file, f"{where}.{key}", value, types)
            resolved[key] = json.loads(json.dumps(value))   # plain copy
        for key in INHERITED_MODEL_KEYS:
            if resolved[key] is None:
                resolved[key] = getattr(top, key)
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
        check_name(resolved["label"], file, f"{where}.label")
        if resolved["label"] in seen:
            raise ConfigError(file, f"{where}.label", f"duplicate label {resolved['label']!r} (also models[{seen[resolved['label']]}])",
                              "give each model variant a unique label")
        seen[resolved["label"]] = i
        _validate_sampling(file, f"{where}.", resolved["temperature"], resolved["top_p"], resolved["max_tokens"])
        _resolve_engine(file, where, resolved)
        _resolve_pool(file, where, resolved, top.actor_pool_size)
        models.append(ModelVariant(**resolved))
    return models


def _resolve_engine(file: str, where: str, v: dict) -> None:
    """Fill in and check the engine/endpoint/resource keys of one model entry (in place)."""
    backend = v["backend"]
    check_endpoint_url(file, f"{where}.endpoint", v["endpoint"])   # before any message that prints the URL
    if backend in API_BACKENDS:
        v["endpoint"] = (v["endpoint"] or DEFAULT_ENDPOINTS[backend]).rstrip("/")
        check_range(file, f"{where}.endpoint", v["endpoint"].startswith(("http://", "https://")),
                     f"is {v['endpoint']!r}", "write an http:// or https:// base URL (openai: ending in /v1)")
    elif v["endpoint"] is not None:
        raise ConfigError(file, f"{where}.endpoint", f"is set but backend {backend!r} runs in-process",
                          'remove it, or use backend "openai" to reach an OpenAI-compatible server')
    for key in ("max_concurrency", "tensor_parallel_size"):
        check_range(file, f"{where}.{key}", v[key] >= 1, f"is {v[key]}", "use a positive integer")
    check_range(file, f"{where}.max_retries", v["max_retries"] >= 0, f"is {v['max_retries']}", "use 0 or more")
    check_range(file, f"{where}.timeout_s", v["timeout_s"] > 0, f"is {v['timeout_s']}", "use a positive number of seconds")
    v["timeout_s"] = float(v["timeout_s"])
    if v["tensor_parallel_size"] > 1 and not backend_reads(backend, "tensor_parallel_size"):
        raise ConfigError(file, f"{where}.tensor_parallel_size", f"is {v['tensor_parallel_size']} but backend is {backend!r}",
                          f"tensor parallelism needs backend {_quoted('tensor_parallel_size')}; remove the key or set it to 1")
    if v["engine_args"] and not backend_reads(backend, "engine_args"):
        raise ConfigError(file, f"{where}.engine_args", f"is only read by the {' or '.join(backends_reading('engine_args'))} "
                          f"backend, not {backend!r}",
                          "remove it, or pass provider extras in extra_body")
    _check_overrides(file, where, v)
    if v["num_gpus"] is None:
        v["num_gpus"] = default_num_gpus(backend, v["device"], v["tensor_parallel_size"])
    check_range(file, f"{where}.num_gpus", v["num_gpus"] >= 0, f"is {v['num_gpus']}", "use 0 or more")
    check_device_map(file, where, v)
    if v["score_api"] == "completions":   # the default, spelled out: one spelling per setting
        v["score_api"] = None
    check_range(file, f"{where}.score_api", v["score_api"] in (None, "chat"), f"is {v['score_api']!r}",
                 'use "completions" (/v1/completions with echo) or "chat" (/v1/chat/completions)')
    check_range(file, f"{where}.score_api", v["score_api"] is None or backend_reads(backend, "score_api"),
                 f"is set but backend is {backend!r}", f"remove it, or use backend {_quoted('score_api')}")
    check_range(file, f"{where}.memory_gb", v["memory_gb"] is None or v["memory_gb"] > 0, f"is {v['memory_gb']}",
                 "use a positive number of GiB, or leave it out")


def _quoted(key: str) -> str:
    """The backends whose engines read the selective model key ``key``, quoted as a config writes them
    (``"vllm"``; several joined by "or")."""
    return " or ".join(f'"{b}"' for b in backends_reading(key))


def _check_overrides(file: str, where: str, v: dict) -> None:
    """Refuse an effort, extra_body or chat-template kwarg that the model entry's backend would drop: an
    override counts only when it changes what is sent. (Whether a local model's chat template reads a kwarg
    needs its tokenizer; ``scan`` checks that before anything is written.)"""
    backend, extra = v["backend"], v["extra_body"]
    if extra and not backend_reads(backend, "extra_body"):   # hf
        raise ConfigError(file, f"{where}.extra_body", "the hf backend runs transformers in-process and sends no "
                          "request, so extra_body would be dropped", "remove it; pass template options in "
                          'chat_template_kwargs, or use backend "vllm" for sampling parameters (e.g. structured_outputs)')
    if "chat_template_kwargs" in extra:
        check_type(file, f"{where}.extra_body.chat_template_kwargs", extra["chat_template_kwargs"], (dict,))
    if not backend_reads(backend, "chat_template_kwargs"):   # anthropic
        for name, value in (("chat_template_kwargs", v["chat_template_kwargs"]),
                            ("extra_body.chat_template_kwargs", extra.get("chat_template_kwargs"))):
            if value:
                raise ConfigError(file, f"{where}.{name}", "the Anthropic Messages API renders its own prompt, so "
                                  "chat-template kwargs cannot be sent", "remove it (effort and extra_body.thinking "
                                  "ask for reasoning)")
    if backend != "anthropic" or v["effort"] is None:   # a value rule of the Messages API
        return
    check_range(file, f"{where}.effort", v["effort"] in ANTHROPIC_EFFORTS, f"is {v['effort']!r}, not an effort "
                 "level of the Messages API (sent as output_config.effort)",
                 f"use one of: {', '.join(ANTHROPIC_EFFORTS)}, or leave effort out")
    if isinstance(extra.get("output_config"), dict) and "effort" in extra["output_config"]:
        raise ConfigError(file, f"{where}.effort", "is set twice: also as extra_body.output_config.effort",
                          "keep one of them")


def _resolve_pool(file: str, where: str, v: dict, pool_size: int) -> None:
    """Resolve the model's actor pool bounds from min_actors/max_actors and the experiment's actor_pool_size."""
    lo = v["min_actors"] if v["min_actors"] is not None else pool_size
    hi = v["max_actors"] if v["max_actors"] is not None else max(lo, pool_size)
    check_range(file, f"{where}.min_actors", lo >= 1, f"is {lo}", "use 1 or more")
    check_range(file, f"{where}.max_actors", hi >= lo, f"is {hi}, below min_actors {lo}", "make max_actors ≥ min_actors")
    v["min_actors"], v["max_actors"] = lo, hi
    if v["tensor_parallel_size"] > 1 and hi > 1:   # each such engine needs its own placement group
        raise ConfigError(file, f"{where}.max_actors", f"is {hi} for a tensor-parallel model (tensor_parallel_size "
                          f"{v['tensor_parallel_size']}); one engine per model is supported for now",
                          "set min_actors and max_actors to 1 for this model (or actor_pool_size to 1)")


def _validate_sampling(file: str, prefix: str, temperature: float, top_p: float, max_tokens: int) -> None:
    """The ranges of one sampling (the experiment's: ``prefix`` "", or a model entry's: ``models[i].``)."""
    check_range(file, f"{prefix}temperature", 0 <= temperature <= 5, f"is {temperature}", "use a value in [0, 5] (0 = greedy)")
    check_range(file, f"{prefix}top_p", 0 < top_p <= 1, f"is {top_p}", "use a value in (0, 1]")
    check_range(file, f"{prefix}max_tokens", max_tokens >= 1, f"is {max_tokens}", "use a positive integer")


def load_spec(path: str | Path, experiment: str | None = None) -> Spec:
    """Read, validate and resolve ``config.json`` (or a folder holding one). The experiment is named by its
    folder, or by ``experiment`` (``scan --as``), which is then the only name checked: a folder whose name is no
    name ("my exp") can still be scanned under one."""
    p = Path(path)
    config_path = p / "config.json" if p.is_dir() or not p.suffix else p
    file = str(config_path)
    if not config_path.is_file():
        raise ConfigError(file, "(file)", "not found", "create experiments/<name>/config.json or check the path")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"), object_pairs_hook=refuse_duplicate_keys(file))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(file, "(file)", f"is not valid JSON ({exc})", "fix the JSON syntax") from exc
    except ValueError as exc:   # a number of thousands of digits: Python's int conversion limit
        raise ConfigError(file, "(file)", f"holds a number too long to read ({str(exc).split(':')[0]})",
                          "write numbers of at most a few digits") from None
    except RecursionError:
        raise ConfigError(file, "(file)", "nests arrays or objects too deeply to read",
                          "write the config as the documented flat object") from None
    check_type(file, "(top level)", raw, (dict,))
    check_config_values(file, raw)   # no NUL (the catalog cannot store it), no secret: before anything else
    if "instrument" not in raw:
        raise ConfigError(file, "instrument", "missing", "add 'instrument' (e.g. \"forced_choice\")")
    name = raw["instrument"]   # before the other keys: the instrument says which section keys are known
    check_type(file, "instrument", name, (str,))
    instrument = _resolve_instrument(file, name)
    instrument_keys = {instrument.name, *instrument.legacy_keys}
    for key in raw:
        if key not in TOP_LEVEL and key not in instrument_keys:
            raise unknown_key(file, key, key, TOP_LEVEL)
    top = read_keys(file, raw, TopLevel)
    _validate_sampling(file, "", top.temperature, top.top_p, top.max_tokens)
    for key, value in (("samples", top.samples), ("batch_size", top.batch_size), ("actor_pool_size", top.actor_pool_size)):
        check_range(file, key, value >= 1, f"is {value}", "use a positive integer")
    limits, raised = resolve_limits(file, top.limits)
    for key, value in (("samples", top.samples), ("batch_size", top.batch_size),
                       ("actor_pool_size", top.actor_pool_size), ("max_tokens", top.max_tokens)):
        check_limit(file, key, value, key, limits)
    pools = top.max_concurrent_models
    if pools is not None:
        check_range(file, "max_concurrent_models", pools >= 1, f"is {pools}", "use a positive integer, or leave it "
                     "out (all models at once on a cluster, one at a time on a local Ray)")
    config_dir = config_path.parent.resolve()
    models = _load_models(file, top)
    for i, m in enumerate(models):
        if m.add_bos is not None and not kind_reads(instrument.engine_kind, "add_bos"):
            raise ConfigError(file, f"models[{i}].add_bos", f"is only read by score engines, and {instrument.name!r} "
                              f"uses {instrument.engine_kind!r} engines", "remove it")
        if m.tokenizer is not None and not engine_reads(instrument.engine_kind, m.backend, "tokenizer"):
            raise ConfigError(file, f"models[{i}].tokenizer", "is only read by the openai backend's score engine "
                              f"(here: backend {m.backend!r}, {instrument.engine_kind!r} engines)", "remove it")
        if instrument.engine_kind == "activations" and m.backend == "vllm":
            check_vllm_extraction(file, f"models[{i}].model", m.model, str(config_path.parent.resolve()))
        check_batch_invariant(file, f"models[{i}]", m, "seed" in raw)
        if m.score_api is not None and not kind_reads(instrument.engine_kind, "score_api"):
            raise ConfigError(file, f"models[{i}].score_api", f"is only read by score engines, and {instrument.name!r} "
                              f"uses {instrument.engine_kind!r} engines", "remove it")
        for key in ("add_bos", "tokenizer"):
            if m.score_api == "chat" and getattr(m, key) is not None:
                raise ConfigError(file, f"models[{i}].{key}", "would be dropped: the chat scorer sends text messages "
                                  "and the server tokenizes them with its own rules", f"remove {key}, or leave "
                                  "score_api out to score through /v1/completions")
        if m.add_bos is not None and m.backend in API_BACKENDS and not m.tokenizer:
            raise ConfigError(file, f"models[{i}].add_bos", "would be dropped: without a tokenizer the prompt is sent "
                              "as text and the server applies its own BOS rule", "name models[].tokenizer, or remove add_bos")
        if m.tokenizer and not m.tokenizer.startswith("packaged:") and (config_path.parent / m.tokenizer).is_dir():
            models[i] = dataclasses.replace(m, tokenizer=str((config_path.parent / m.tokenizer).resolve()))
    for i, m in enumerate(models):
        check_limit(file, f"models[{i}].max_tokens", m.max_tokens, "max_tokens", limits)
        for key in ("min_actors", "max_actors"):
            check_limit(file, f"models[{i}].{key}", getattr(m, key), "actor_pool_size", limits)
    section = _instrument_section(file, raw, instrument)
    where = instrument.name if instrument.name in raw else ""   # legacy top-level keys are named as written
    for key, limit in LIMITED_SECTION_KEYS.items():   # before the instrument reads any file
        if type_ok(section.get(key), (int,)):
            check_limit(file, f"{where}.{key}" if where else key, section[key], limit, limits)
    instrument_spec = instrument.load_spec(section, SpecContext(file, where, str(config_dir)))
    if experiment is not None:
        experiment = check_experiment_name(experiment, "", "--as")
    else:
        try:
            experiment = check_experiment_name(config_dir.name, file, "(experiment folder name)")
        except ConfigError as exc:
            raise ConfigError(exc.file, exc.field, exc.problem, f"{exc.fix}, or name the experiment with --as NAME "
                              "(scan --as my-exp)") from None
    spec = Spec(config_path=file, experiment=experiment, raw=raw, models=tuple(models), instrument=instrument,
                instrument_spec=instrument_spec, instrument_name=top.instrument,
                description=top.description, samples=top.samples, temperature=float(top.temperature),
                top_p=float(top.top_p), max_tokens=top.max_tokens, seed=top.seed,
                batch_size=top.batch_size, actor_pool_size=top.actor_pool_size,
                max_concurrent_models=top.max_concurrent_models, store=top.store,
                catalog_dsn=top.catalog_dsn, limits_raised=raised)
    check_limit(file, "(grid)", spec.n_cells(), "grid_cells", limits)   # arithmetic, before any cell exists
    return spec


def _resolve_instrument(file: str, name: str) -> Instrument:
    """The instrument ``name`` names, with the config file in any error."""
    try:
        return resolve(name)
    except ConfigError as exc:
        raise ConfigError(file, exc.field, exc.problem, exc.fix) from exc.__cause__


def _instrument_section(file: str, raw: dict, instrument: Instrument) -> dict:
    """The instrument's section: ``raw[<name>]``, or, in configs written before sections, its legacy
    top-level keys (never both)."""
    legacy = {k: raw[k] for k in instrument.legacy_keys if k in raw}
    if instrument.name not in raw:
        return legacy
    if legacy:
        raise ConfigError(file, ", ".join(legacy), f"is given both at the top level and in the {instrument.name!r} section",
                          f"move it into the {instrument.name!r} section")
    section = raw[instrument.name]
    check_type(file, instrument.name, section, (dict,))
    return section
