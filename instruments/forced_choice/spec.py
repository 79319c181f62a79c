"""The ``forced_choice`` section of config.json: which word pairs, in which envelopes and orderings.

Keys (all optional; older configs may write them at the top level instead of in a section):

    probe_set       pair CSV (pair_id,word_a,word_b), relative to config.json; default the starter set
    envelopes_file  envelopes.json; default the packaged one (6 load-bearing + stress envelopes)
    envelopes       list of envelope ids, "load_bearing" (default) or "all"
    orderings       ["AB", "BA"] (default), ["AB"] or ["BA"]

``frozen`` keeps what shapes a result: the probe set's path and SHA-256, the envelope texts actually used
(system, user template, idiom, language) with the envelope file's version and hash, and the orderings.
A run is rebuilt from that alone (``ForcedChoiceSpec.from_frozen``, ``grid.frozen_spec.FrozenSpec``): the
frozen JSON is read once into the typed, immutable ``ForcedChoiceSpec`` and ``EnvelopeFile``, whose fields the
instrument reads; the JSON itself (``ForcedChoiceSpec.frozen_json``) stays what the catalog stores and hashes,
and is never written back from the fields. The pair CSV is read again only to expand the grid, and a changed
file (another hash) is refused there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from mirrorscan.grid.errors import shorten
from mirrorscan.grid.frozen_spec import FrozenInput, FrozenSpec, defaults, frozen_field, read_record
from mirrorscan.grid.instrument import SpecContext
from mirrorscan.instruments.forced_choice.cells import ORDERINGS
from mirrorscan.instruments.forced_choice.envelopes import (PACKAGED, Envelope, envelopes_from_settings, load_bearing_ids,
                                                            load_envelopes)
from mirrorscan.instruments.forced_choice.pairs import STARTER, PairSet, load_pairs


@dataclass(frozen=True)
class Section:
    """The keys of a ``forced_choice`` config section, each with its default."""

    probe_set: str = STARTER
    """The pair CSV (pair_id,word_a,word_b), relative to config.json; default the starter set."""
    envelopes_file: str = PACKAGED
    """The envelopes JSON; default the packaged one."""
    envelopes: list | str = "load_bearing"
    """A list of envelope ids, or ``load_bearing`` / ``all``."""
    orderings: list = field(default_factory=lambda: ["AB", "BA"])
    """Orderings asked: ``["AB", "BA"]``, ``["AB"]`` or ``["BA"]``."""


SECTION_TYPES: dict[str, tuple[type, ...]] = {"probe_set": (str,), "envelopes_file": (str,), "envelopes": (list, str),
                                               "orderings": (list,)}
"""The types each section key accepts."""
SECTION_KEYS: dict[str, tuple[object, tuple[type, ...]]] = {k: (d, SECTION_TYPES[k]) for k, d in defaults(Section).items()}
"""Section keys with their default and accepted types."""


@dataclass(frozen=True)
class EnvelopeFile:
    """The envelopes file a run froze (its ``envelope_set`` entry); a key the section does not record is None (a
    section written to analyse stored rows may hold only the texts). Equal when file, version and hash are."""

    file: str | None = None
    """The file as loaded: an absolute path or the packaged file's path."""
    version: str | None = None
    """The file's own version string, stored on every row as ``envelope_version``."""
    sha256: str | None = None
    """Hex SHA-256 of the file's bytes when the run was frozen (catalog ``content_hashes``)."""
    texts: Mapping[str, Envelope] = frozen_field(read=lambda texts: MappingProxyType(envelopes_from_settings(texts)),
                                                 default_factory=lambda: MappingProxyType({}))
    """Envelope id → Envelope (the frozen texts: system, user template, idiom, language), read-only."""


@dataclass(frozen=True, kw_only=True)
class ForcedChoiceSpec(FrozenSpec):
    """A validated forced-choice section; equality and hash are those of its frozen settings."""

    envelope_ids: tuple[str, ...] = frozen_field("envelopes", read=tuple)
    """Envelopes asked, in grid order."""
    orderings: tuple[str, ...] = frozen_field(read=tuple)
    """Orderings asked: AB puts word_a into {a}; BA swaps the words."""
    probe_set: str = frozen_field()
    """Where the pair CSV is (absolute path, or the packaged starter set)."""
    probe_set_sha256: str = frozen_field()
    """Hex SHA-256 of the pair CSV's bytes when the run was frozen."""
    n_pairs: int | None = frozen_field("n_items", read=int, default=None)
    """Word pairs (rows) in the pair CSV when the run was frozen (the section's ``n_items``); None where the
    section does not record it."""
    envelopes_file: str | None = frozen_field(default=None)
    """The envelopes file as the config named it, resolved (absolute path, or the packaged file); None where
    the section does not record it."""
    envelope_file: EnvelopeFile = frozen_field("envelope_set", read=lambda entry: read_record(EnvelopeFile, entry))
    """The envelopes file as loaded: path, version and SHA-256."""

    @property
    def envelopes(self) -> Mapping[str, Envelope]:
        """Envelope id → Envelope (the frozen texts: system, user template, idiom, language), read-only."""
        return self.envelope_file.texts

    def pairs(self) -> PairSet:
        """The pair set, read again; a file whose bytes changed since the run was frozen is refused."""
        pairs = load_pairs(self.probe_set)
        FrozenInput("probe_set", self.probe_set, self.probe_set_sha256).check(pairs.sha256, pairs.path)
        return pairs


def _resolve_path(config_dir: str, value: str) -> str:
    if value.startswith("packaged") or Path(value).is_absolute():
        return value
    return str((Path(config_dir) / value).resolve())


def load_section(section: dict, ctx: SpecContext) -> ForcedChoiceSpec:
    """Validate a forced_choice section (unknown keys, types, files, envelope ids, orderings) and freeze it."""
    values = ctx.read(section, Section)
    for key, types in SECTION_TYPES.items():
        value = getattr(values, key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ctx.error(key, f"is {shorten(json.dumps(value))}", f"write {' or '.join(t.__name__ for t in types)}")
    orderings = values.orderings
    if not (orderings and all(o in ORDERINGS for o in orderings) and len(set(orderings)) == len(orderings)):
        raise ctx.error("orderings", f"is {orderings}", 'use ["AB", "BA"], ["AB"] or ["BA"]')
    probe_set = _resolve_path(ctx.config_dir, values.probe_set)
    envelopes_file = _resolve_path(ctx.config_dir, values.envelopes_file)
    envelope_set = load_envelopes(envelopes_file)
    selection = values.envelopes
    if isinstance(selection, str):
        if selection == "load_bearing":
            envelope_ids = load_bearing_ids(envelope_set)
        elif selection == "all":
            envelope_ids = list(envelope_set.envelopes)
        else:
            raise ctx.error("envelopes", f"is {selection!r}", 'write a list of envelope ids, "load_bearing" or "all"')
    else:
        if not selection or len(set(selection)) != len(selection) or not all(isinstance(s, str) for s in selection):
            raise ctx.error("envelopes", "must be a non-empty list of distinct envelope ids", "list each envelope id once")
        envelope_ids = [e.id for e in envelope_set.select(selection, ctx.file, f"{ctx.section}.envelopes" if ctx.section else "envelopes")]
    pairs = load_pairs(probe_set)
    frozen = {
        "probe_set": probe_set, "probe_set_sha256": pairs.sha256, "n_items": len(pairs),
        "envelopes_file": envelopes_file, "envelopes": list(envelope_ids), "orderings": list(orderings),
        "envelope_set": {"file": envelope_set.path, "version": envelope_set.version, "sha256": envelope_set.sha256,
                         "texts": {i: envelope_set.envelopes[i].frozen() for i in envelope_ids}},
    }
    return ForcedChoiceSpec.from_frozen(frozen)


def from_frozen(frozen: dict) -> ForcedChoiceSpec:
    """The spec of a frozen section (as stored in settings), read once: its keys become typed fields."""
    return ForcedChoiceSpec.from_frozen(frozen)

