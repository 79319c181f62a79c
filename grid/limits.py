"""Upper bounds on the sizes a config may ask for, so that no typed value exhausts the driver or a cluster.

Each limit caps one integer a config sets (or, for ``grid_cells``, one product of them). The defaults cover
every grid this project's experiments run with a wide margin; a value above its limit is refused by
``grid.spec.load_spec`` with a ``ConfigError`` naming the field, the limit and how to raise it — each size
before the instrument reads its input files, and the grid's total before any cell exists (it is computed as
models × cells per model × samples, never by building the cells). ``scan``, ``scan --dry-run`` and
``submit`` all go through ``load_spec``, so they refuse the same values; ``reproduce`` reruns frozen
settings that passed them when they ran.

A cluster that needs more raises a limit in one of two ways; the raised values are recorded in the
invocation's frozen settings (``settings.execution.limits``, not hashed: a limit shapes no result):

- the config's ``"limits"`` object, e.g. ``"limits": {"samples": 200000, "grid_cells": 50000000}``
  (travels with the experiment, also to a submitted job);
- the environment variable ``MIRRORSCAN_LIMITS``, e.g. ``MIRRORSCAN_LIMITS="samples=200000,grid_cells=5e7"``
  (this machine only; the config's object wins where both name a limit).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mirrorscan.grid.errors import ConfigError

ENV = "MIRRORSCAN_LIMITS"
"""Environment variable raising limits on this machine: ``name=value`` pairs separated by commas."""


@dataclass(frozen=True)
class Limit:
    """One cap: its name (as in the ``limits`` object), default value and what it bounds."""

    name: str
    default: int
    """The largest value accepted unless raised (a count, unit as in ``what``)."""
    what: str
    """What the limit bounds, and why, in a few words (quoted in the error)."""


LIMITS: dict[str, Limit] = {lim.name: lim for lim in (
    Limit("samples", 100_000, "samples per cell"),
    Limit("max_tokens", 1_048_576, "generated tokens per answer (top level or per model)"),
    Limit("batch_size", 4_096, "cells per engine batch (one batch is held in an actor's memory)"),
    Limit("actor_pool_size", 512, "engine actors per model (also min_actors / max_actors)"),
    Limit("grid_cells", 5_000_000, "cells in the whole grid (models × cells per model × samples; the driver "
                                   "plans them in memory)"),
    Limit("null_permutations", 1_000_000, "permutations of a null distribution (lens: null_permutations, "
                                          "contrastive_permutations)"),
    Limit("bootstrap_draws", 1_000_000, "bootstrap draws (lens: bootstrap_draws)"),
    Limit("proxy_samples", 10_000, "continuations drawn per flinch carrier by the sampling proxy"),
)}
"""Every limit by name."""

INSTRUMENT_KEYS: dict[str, str] = {
    "null_permutations": "null_permutations",
    "contrastive_permutations": "null_permutations",
    "bootstrap_draws": "bootstrap_draws",
    "proxy_samples": "proxy_samples",
}
"""Keys of an instrument's config section that are capped, and the limit that caps each (checked wherever
the key appears in the section, before the instrument reads its files)."""


def _parse_env(text: str) -> dict[str, int]:
    """``name=value,…`` from ``MIRRORSCAN_LIMITS`` as {name: int}; ConfigError naming the variable when malformed."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in LIMITS:
            raise ConfigError("", ENV, f"holds {part[:40]!r}, not name=value with a known limit",
                              f"write e.g. {ENV}=samples=200000 using: {', '.join(LIMITS)}")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number >= 1 or number != int(number) or number > 1e15:
            raise ConfigError("", f"{ENV}:{name}", f"is {value.strip()[:20]!r}", "use a positive whole number")
        out[name] = int(number)
    return out


def resolve(file: str, config_limits: object, environ: dict | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """The limits in force for one config: (every limit's value, the ones raised or lowered from their
    defaults). ``config_limits`` is the config's ``"limits"`` object (or None); ``environ`` defaults to
    ``os.environ``. ConfigError for an unknown name or a value that is not a positive integer."""
    env = environ if environ is not None else os.environ
    overrides = _parse_env(env.get(ENV, ""))
    if config_limits is not None:
        if not isinstance(config_limits, dict):
            raise ConfigError(file, "limits", "is not an object", 'write e.g. "limits": {"samples": 200000}')
        for name, value in config_limits.items():
            if name not in LIMITS:
                raise ConfigError(file, f"limits.{name}", "is not a limit", f"use one of: {', '.join(LIMITS)}")
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(file, f"limits.{name}", f"is {str(value)[:20]!r}", "use a positive integer")
            overrides[name] = value
    values = {name: overrides.get(name, lim.default) for name, lim in LIMITS.items()}
    changed = {name: v for name, v in overrides.items() if v != LIMITS[name].default}
    return values, changed


def check(file: str, field: str, value: int | None, limit: str, limits: dict[str, int]) -> None:
    """ConfigError when ``value`` (at ``field`` of ``file``) exceeds the limit named ``limit``; None passes."""
    cap = limits[limit]
    if value is not None and value > cap:
        raise ConfigError(file, field, f"is {value}, above the limit of {cap} {LIMITS[limit].what}",
                          f"use at most {cap}, or raise it with \"limits\": {{\"{limit}\": N}} in config.json "
                          f"(or {ENV}={limit}=N)")
