"""The ``flinch`` section of config.json, validated and frozen: which corpus, which axes, how an axis's terms
become its flinch, and how many continuations the sampling proxy draws.

Config section (all keys optional)::

    "flinch": {"corpus": "packaged:starter", "axes": ["violence", …], "aggregation": "axis_lp_mean",
               "proxy_samples": 50}

Frozen with the run: the corpus's path, SHA-256 and version, the axes scored, the aggregation, the proxy's
samples and the carriers per model. ``FlinchSpec.from_frozen`` (``grid.frozen_spec.FrozenSpec``) reads that
JSON once into typed fields; the JSON stays what the catalog stores. The corpus is read again where cells are
built, and a file changed since the run was frozen is refused there (``FlinchSpec.corpus``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import stamp
from mirrorscan.grid.frozen_spec import FrozenInput, FrozenSpec, defaults, frozen_field
from mirrorscan.grid.instrument import SpecContext
from mirrorscan.instruments.flinch.corpus import STARTER, Corpus, load_corpus
from mirrorscan.instruments.flinch.proxy import DEFAULT_SAMPLES
from mirrorscan.instruments.flinch.scale import AGGREGATIONS, DEFAULT_AGGREGATION


@dataclass(frozen=True)
class Section:
    """The keys of a ``flinch`` config section, each with its default."""

    corpus: str = STARTER
    """A corpus JSON file (relative to config.json), or ``packaged:starter``."""
    axes: list | str | None = None
    """Axis keys to score (a list, or ``"slurs,sexual"``); None: every axis of the corpus."""
    aggregation: str = DEFAULT_AGGREGATION
    """How an axis's terms become its flinch (``scale.AGGREGATIONS``)."""
    proxy_samples: int = DEFAULT_SAMPLES
    """Continuations the sampling proxy draws per carrier."""


SECTION_KEYS = defaults(Section)
"""The section's keys and their defaults (``axes`` None: every axis of the corpus)."""


@dataclass(frozen=True, kw_only=True)
class FlinchSpec(FrozenSpec):
    """A validated flinch section; equality and hash are those of its frozen settings."""

    corpus_path: str = frozen_field("corpus")
    """Absolute path of the corpus file, or ``packaged:starter``."""
    corpus_sha256: str = frozen_field()
    """SHA-256 of the corpus file's bytes when the run was frozen."""
    axes: tuple[str, ...] = frozen_field(read=tuple)
    """Axis keys scored, in corpus order."""
    aggregation: str = frozen_field()
    """How an axis's terms become its flinch (``scale.AGGREGATIONS``)."""
    corpus_version: str | None = frozen_field(default=None)
    """The corpus file's own version string ("" when the file has none; None where the section does not
    record it)."""
    proxy_samples: int = frozen_field(read=int, default=DEFAULT_SAMPLES)
    """Continuations the sampling proxy draws per carrier (``proxy.DEFAULT_SAMPLES`` where the section does
    not record it)."""
    n_items: int | None = frozen_field(read=int, default=None)
    """Carrier sentences over the axes scored: cells per model and sample (None where the section does not
    record it)."""

    @property
    def corpus_input(self) -> FrozenInput:
        """The corpus file as frozen (path and SHA-256)."""
        return FrozenInput("corpus", self.corpus_path, self.corpus_sha256)

    def corpus(self) -> Corpus:
        """The corpus (the axes scored), read once per process and spec, and again after the file was written
        (``grid.files.stamp``); a file changed since the run was frozen is refused."""
        return _checked_corpus(self.corpus_input, self.axes, stamp(self.corpus_path))


@lru_cache(maxsize=8)
def _checked_corpus(frozen: FrozenInput, axes: tuple[str, ...], written: tuple) -> Corpus:
    corpus = load_corpus(frozen.path, axes=list(axes))
    frozen.check(corpus.sha256, corpus.path)
    return corpus


def corpus_name(path: str) -> str:
    """How messages name a corpus: its file name, or ``packaged:starter``."""
    return path if path == STARTER else Path(path).name


def from_frozen(frozen: dict) -> FlinchSpec:
    """The spec of a frozen section, read once: its keys become typed fields (the JSON stays ``frozen_json``)."""
    return FlinchSpec.from_frozen(frozen)


def load_section(section: dict, ctx: SpecContext) -> FlinchSpec:
    """Validate a ``flinch`` section (unknown keys, the corpus file, the axes, the aggregation, the proxy's
    samples) and freeze it."""
    values = ctx.read(section, Section)
    if not isinstance(values.corpus, str) or not values.corpus:
        raise ctx.error("corpus", "must be a file name", f"give a corpus JSON file or {STARTER!r}")
    axes = values.axes
    if isinstance(axes, str):   # "slurs,sexual", as the method's --axes takes them
        axes = [a.strip() for a in axes.split(",") if a.strip()]
    if axes is not None and (not isinstance(axes, list) or not axes or len(set(axes)) != len(axes)
                             or not all(isinstance(a, str) for a in axes)):
        raise ctx.error("axes", "must be a non-empty list of distinct axis keys", "list each axis key once")
    n = values.proxy_samples
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ctx.error("proxy_samples", f"is {n!r}", "use a positive integer (the method's default is 50)")
    if values.aggregation not in AGGREGATIONS:
        raise ctx.error("aggregation", f"is {values.aggregation!r}", f"use one of: {', '.join(AGGREGATIONS)}")
    path = values.corpus
    if path != STARTER and not Path(path).is_absolute():
        path = str((Path(ctx.config_dir) / path).resolve())
    try:
        corpus = load_corpus(path, axes=axes)
    except ConfigError as err:
        if err.field == "axes":   # the selection is the config's: name that file and field
            raise ctx.error("axes", f"{err.problem} in {corpus_name(path)}", err.fix) from None
        raise
    for where in corpus.setting_like:   # kept as a description; named, since flinch does not read it
        print(f"warning: {corpus_name(corpus.path)}: {where} looks like a setting; flinch reads no setting from a "
              "corpus file (kept as a description; settings go in the config's flinch section)", file=sys.stderr)
    return FlinchSpec.from_frozen({"corpus": corpus.path, "corpus_sha256": corpus.sha256,
                                   "corpus_version": corpus.version, "axes": list(corpus.axis_keys),
                                   "aggregation": values.aggregation, "proxy_samples": n,
                                   "n_items": corpus.n_carriers()})
