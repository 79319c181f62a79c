"""The base of every instrument's spec: a frozen record whose identity is its frozen section, and the input
files that section names, checked against the hashes frozen with the run.

An instrument's spec (``Items.load_spec``) is what its cells are built from, and the frozen section
(``Items.frozen``) is what the catalog stores and the settings hash covers. ``FrozenSpec`` holds both at
once: ``frozen_json``, the section's canonical JSON, is the spec's identity (its equality and hash), and the
other fields are typed values read from that JSON once (``from_frozen``), never written back — so the stored
section stays byte for byte what was validated, whatever the typed fields look like. A subclass declares its
typed fields with ``frozen_field`` (the key it is read from, how a value is converted, its default where a
section frozen earlier lacks the key) and, where a field is built from several keys, ``derived_fields``.

``read_record`` fills any such record from a JSON mapping by its fields (the nested records of a spec: an
envelope file, a sampling setting), and ``read_section`` a config section's keys into the record of its keys
and defaults: an instrument reads its settings as fields, not by string key.

``FrozenInput`` is one input file as the run froze it (the config field that names it, where it is, the
SHA-256 of its bytes); ``check`` refuses a file whose bytes changed since, with the one message every
instrument gives (restore it, or start a new invocation).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from mirrorscan.grid.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")

KEY = "frozen_key"
"""Field metadata: the JSON key a field is read from (default: the field's name)."""
READ = "frozen_read"
"""Field metadata: a function applied to the stored value (not to a missing or null one)."""
SKIP = "frozen_skip"
"""Field metadata: the field is not read from a key (``derived_fields`` gives it)."""


def canonical_json(frozen: Mapping) -> str:
    """The canonical text of a frozen section: keys sorted, non-ASCII kept as UTF-8 text (what the catalog
    stores and hashes)."""
    return json.dumps(frozen, sort_keys=True, ensure_ascii=False)


def frozen_field(key: str | None = None, *, read: Callable[[Any], Any] | None = None, default: Any = MISSING,
                 default_factory: Callable[[], Any] | Any = MISSING, derived: bool = False) -> Any:
    """A typed field of a ``FrozenSpec`` or of a record ``read_record`` fills: read from ``key`` (default: the
    field's name) through ``read``; ``default`` where the mapping lacks the key (without one a missing key is a
    KeyError, as for a section that is not one of this instrument's); ``derived``: not read from one key but
    given by ``derived_fields``. Never part of the spec's identity (``compare=False``)."""
    metadata = {KEY: key, READ: read, SKIP: derived}
    if default_factory is not MISSING:
        return field(compare=False, default_factory=default_factory, metadata=metadata)
    return field(compare=False, default=default, metadata=metadata)


def read_record(cls: type[R], data: Mapping, **given: Any) -> R:
    """A dataclass ``cls`` filled from ``data`` by its fields: each from its ``frozen_field`` key (else its name),
    converted by its ``read`` unless the value is None; a key ``data`` lacks takes the field's default; ``given``
    fills fields by name, before anything is read."""
    values = dict(given)
    for f in fields(cls):
        if f.name in values or f.metadata.get(SKIP) or not f.init:
            continue
        key = f.metadata.get(KEY) or f.name
        if key not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(key)
            continue
        value, read = data[key], f.metadata.get(READ)
        values[f.name] = read(value) if read is not None and value is not None else value
    return cls(**values)


def read_section(section: Mapping, keys: type[R], refuse_unknown: Callable[[Mapping, Any], None]) -> R:
    """A config section's values as the record ``keys`` (a dataclass whose fields are the section's keys, each
    with its default): ``refuse_unknown(section, names)`` refuses a key that is none of them, a key left out
    takes its field's default. The types are the instrument's to check (each names its own fix)."""
    names = [f.name for f in fields(keys)]
    refuse_unknown(section, names)
    return keys(**section)


def defaults(keys: type) -> dict[str, Any]:
    """A section record's keys with their defaults, in declaration order (for help texts and checks)."""
    return {f.name: f.default_factory() if f.default_factory is not MISSING else f.default for f in fields(keys)}


@dataclass(frozen=True)
class FrozenSpec:
    """The base of an instrument spec: equality and hash are those of the frozen section (``frozen_json``); the
    typed fields a subclass adds (``frozen_field``) are read from it once, by ``from_frozen``."""

    frozen_json: str
    """Canonical JSON of the frozen section (``canonical_json``): the spec's identity, what the catalog stores."""

    @property
    def frozen(self) -> dict:
        """The frozen section as plain JSON values (a fresh copy)."""
        return json.loads(self.frozen_json)

    @classmethod
    def from_frozen(cls, frozen: Mapping):
        """The spec of a frozen section (as validated, or as stored in settings): its JSON kept as the identity,
        its keys read once into the typed fields."""
        return read_record(cls, frozen, frozen_json=canonical_json(frozen), **cls.derived_fields(frozen))

    @classmethod
    def derived_fields(cls, frozen: Mapping) -> dict[str, Any]:
        """The fields declared ``derived``, built from ``frozen`` (default: none)."""
        return {}


def identity_only(spec_type: type) -> list[str]:
    """The fields of a ``FrozenSpec`` subclass that take part in its equality besides ``frozen_json`` (empty for
    a well-formed spec: two specs of one frozen section are equal, whatever their typed fields hold)."""
    return [f.name for f in fields(spec_type) if f.compare and f.name != "frozen_json"]


@dataclass(frozen=True)
class FrozenInput:
    """An input file as a run froze it: the config field that names it, where it is, its bytes' SHA-256."""

    field: str
    """The config field that names the file (``probe_set``, ``corpus``, …), for the error."""
    path: str
    """The file as frozen: an absolute path, or a ``packaged:`` name."""
    sha256: str
    """Hex SHA-256 of the input when the run was frozen."""

    def check(self, actual: str, file: str | None = None) -> None:
        """Refuse (ConfigError naming ``file``, default ``path``) an input whose SHA-256 is now ``actual``, not
        the frozen one: its cells would no longer be the invocation's."""
        if actual != self.sha256:
            raise ConfigError(file or self.path, self.field, "changed since the invocation was frozen (SHA-256 "
                              f"{actual[:12]}… ≠ {self.sha256[:12]}…)",
                              "restore the file, or start a new invocation (scan without --resume)")
