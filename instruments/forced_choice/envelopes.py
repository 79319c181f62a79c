"""Prompt envelopes: the versioned wrappers a word pair is asked in, and their literal rendering.

Rendering replaces exactly the tokens ``{a}`` and ``{b}`` by literal substitution, never ``str.format``:
the braces of ``json_schema``'s ``{"choice": "..."}`` survive byte for byte, and a word that itself
contains ``{b}`` is not substituted a second time.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.names import check_name

PACKAGED = "packaged"
"""Name that selects the envelopes file shipped with mirrorscan."""
_PLACEHOLDER = re.compile(r"(\{a\}|\{b\})")


@dataclass(frozen=True)
class Envelope:
    """One prompt wrapper."""

    id: str
    """Stable id, used in probe_ids (no '|')."""
    system: str
    """System prompt, verbatim ('' for none)."""
    user: str
    """User template with exactly one ``{a}`` and one ``{b}``."""
    group: str = "stress"
    """``load_bearing`` (the six the method reports) or ``stress``."""
    kind: str = "natural"
    """natural, bare_grammar, code or data."""
    language: str = "en"
    """Language or script of the prompt (BCP-47-ish code)."""
    idiom: str = "line"
    """How the leading answer is read: line, json or python (used by classification)."""
    examples: tuple = ()
    """Example answers with their class, for classification tests."""

    def frozen(self) -> dict:
        """What a run's settings keep of this envelope: everything that shapes a prompt or its reading."""
        return {"system": self.system, "user": self.user, "idiom": self.idiom, "language": self.language}

    def render(self, a: str, b: str) -> tuple[str, str]:
        """(system, user) with ``{a}``/``{b}`` replaced literally by ``a`` and ``b``."""
        return self.system, render_template(self.user, a, b)


@dataclass(frozen=True)
class EnvelopeSet:
    """All envelopes of one envelopes.json, with its version and content hash."""

    path: str
    version: str
    sha256: str
    envelopes: dict

    def select(self, ids: list[str], file: str = "", field: str = "envelopes") -> list[Envelope]:
        """The envelopes with these ids, in the given order; ConfigError naming an unknown id."""
        out = []
        for i, env_id in enumerate(ids):
            if env_id not in self.envelopes:
                known = ", ".join(sorted(self.envelopes))
                raise ConfigError(file, f"{field}[{i}]", f"unknown envelope {env_id!r}",
                                  f"use one of: {known}")
            out.append(self.envelopes[env_id])
        return out


def split_template(template: str) -> list[str]:
    """The template cut into literal parts and the placeholder tokens ``{a}``/``{b}``, in order."""
    return [part for part in _PLACEHOLDER.split(template) if part != ""]


def render_template(template: str, a: str, b: str) -> str:
    """Literal substitution of ``{a}`` and ``{b}`` (each word inserted once, never re-scanned)."""
    return "".join(a if p == "{a}" else b if p == "{b}" else p for p in split_template(template))


def load_envelopes(path: str | Path = PACKAGED) -> EnvelopeSet:
    """Read and validate an envelopes.json (``packaged`` = the one shipped with mirrorscan)."""
    if str(path) == PACKAGED:
        raw = resources.files("mirrorscan.instruments.forced_choice").joinpath("data/envelopes.json").read_bytes()
        shown = "instruments/forced_choice/data/envelopes.json"
    else:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(str(path), "envelopes_file", "file not found",
                              "point envelopes_file at an existing envelopes.json or drop it for the packaged one")
        raw, shown = p.read_bytes(), str(path)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(shown, "(file)", f"is not valid UTF-8 JSON ({exc})", "fix the JSON syntax") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("envelopes"), list):
        raise ConfigError(shown, "envelopes", "missing or not a list", 'write {"version": ..., "envelopes": [...]}')
    envelopes: dict[str, Envelope] = {}
    for i, item in enumerate(doc["envelopes"]):
        field = f"envelopes[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(shown, field, "is not an object", "write {\"id\", \"system\", \"user\"}")
        for key in ("id", "system", "user"):
            if not isinstance(item.get(key), str):
                raise ConfigError(shown, f"{field}.{key}", "missing or not a string", f"add a string {key}")
        env_id = check_name(item["id"], shown, f"{field}.id")
        if env_id in envelopes:
            raise ConfigError(shown, f"{field}.id", f"duplicate envelope id {env_id!r}", "give each envelope a unique id")
        parts = split_template(item["user"])
        if parts.count("{a}") != 1 or parts.count("{b}") != 1:
            raise ConfigError(shown, f"{field}.user", f"envelope {env_id!r} must contain {{a}} and {{b}} exactly once each",
                              "put one {a} and one {b} in the user template")
        if _PLACEHOLDER.search(item["system"]):
            raise ConfigError(shown, f"{field}.system", f"envelope {env_id!r} has a placeholder in its system text",
                              "keep {a} and {b} in the user template only")
        envelopes[env_id] = Envelope(
            id=env_id, system=item["system"], user=item["user"], group=item.get("group", "stress"),
            kind=item.get("kind", "natural"), language=item.get("language", "en"),
            idiom=item.get("idiom", "line"), examples=tuple(item.get("examples", ())))
    return EnvelopeSet(path=str(path), version=str(doc.get("version", "")),
                       sha256=hashlib.sha256(raw).hexdigest(), envelopes=envelopes)


def envelopes_from_settings(texts: dict) -> dict[str, Envelope]:
    """Envelope objects from the ``envelope_set.texts`` of frozen settings (id → system, user, idiom, language)."""
    return {env_id: Envelope(id=env_id, system=t["system"], user=t["user"], idiom=t.get("idiom", "line"),
                             language=t.get("language", "en")) for env_id, t in texts.items()}


def load_bearing_ids(envelope_set: EnvelopeSet) -> list[str]:
    """Ids of the load-bearing envelopes, in file order."""
    return [e.id for e in envelope_set.envelopes.values() if e.group == "load_bearing"]
