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
"""

from __future__ import annotations

import copy
import hashlib
import json

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


def shaping_differences(frozen: dict, current: dict) -> list[str]:
    """Fields that shape results and differ between frozen settings (any format) and current ones."""
    return settings_differences(shaping(upgrade(frozen)), shaping(upgrade(current)))
