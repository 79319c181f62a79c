"""Flinch corpora: axes of terms, each term with carrier sentences that make it the obvious completion.

File format (JSON, UTF-8), the method's own::

    {"version": "…", "description": "…",
     "axes": {axis_key: {"label": "…", "terms": [{"word": "…", "carriers": ["… {BLANK} …", …]}, …]}}}

The method's six axis keys are ``anti_china``, ``anti_america``, ``anti_europe``, ``slurs``, ``sexual`` and
``violence`` (``METHOD_AXES``); any other key is allowed. Keys beyond those read (a top-level ``notes``, an
axis's or a term's ``description``, a ``source``, …) are kept as written and recorded (``Corpus.extra``,
written with the analysis): they describe the corpus and change no number. An extra key that looks like a
setting — a number, a boolean or null, or a name such as ``weight`` or ``aggregation`` — is kept too but
named in a warning (``Corpus.setting_like``), since flinch does not read it: settings live in the config's
``flinch`` section.

Each carrier is a declarative sentence with exactly one ``{BLANK}`` where the term belongs. What the model
reads is the **prefix** — the text before the blank, trailing whitespace removed — and what is scored is
the **target**, a space and the term. Refused, each in one line naming axis, term and carrier: a carrier
without exactly one ``{BLANK}``, a question (a carrier ending in "?"), a term that is empty or holds a
control character, a term listed twice in one axis. A carrier that begins with the blank has an empty
prefix: it is kept here and refused later for a model whose tokenizer adds no BOS token
(``starts_with_blank``), since an empty prefix then scores the wrong position. Fewer than
``MIN_CARRIERS`` carriers per term or ``MIN_TERMS`` terms per axis is allowed with a warning: one term is
noisy, and the method's value is in axes of terms.

The starter corpus ships with mirrorscan (``packaged:starter``). Slurs and explicit vocabulary are never
committed: such an axis is loaded from a user's own file in this format.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from mirrorscan.grid.errors import ConfigError, file_error, refuse_duplicate_keys
from mirrorscan.grid.frozen_spec import read_record
from mirrorscan.grid.ids import check_component
from mirrorscan.grid.names import check_name

BLANK = "{BLANK}"
"""Placeholder for the term in a carrier sentence."""
STARTER = "packaged:starter"
"""Selects the starter corpus shipped with mirrorscan (five axes, 8 terms × 4 carriers)."""
METHOD_AXES = ("anti_china", "anti_america", "anti_europe", "slurs", "sexual", "violence")
"""The method's six axis keys, in its order (its corpus files and reference table use them)."""


@dataclass(frozen=True)
class AxisEntry:
    """The keys flinch reads of an axis in a corpus file, as written (``_axis`` checks them); None: left out."""

    label: Any = None
    """The axis's label for people (non-empty text)."""
    terms: Any = None
    """Its terms: a non-empty list of ``{"word", "carriers"}`` objects."""


@dataclass(frozen=True)
class TermEntry:
    """The keys flinch reads of a term in a corpus file, as written (``_axis`` checks them); None: left out."""

    word: Any = None
    """The term (text)."""
    carriers: Any = None
    """Its carrier sentences, each with one ``{BLANK}``."""


READ_KEYS = {"(file)": ("axes", "version", "description"), "axis": tuple(f.name for f in fields(AxisEntry)),
             "term": tuple(f.name for f in fields(TermEntry))}
"""The keys flinch reads at each level of a corpus file; any other key is kept as a description."""
SETTING_NAMES = frozenset({
    "aggregation", "scale", "add_bos", "bos", "samples", "proxy_samples", "temperature", "top_p", "top_k", "weight",
    "weights", "threshold", "thresholds", "lp_at_zero", "lp_at_hundred", "min_carriers", "min_terms", "enabled",
    "disabled", "skip", "exclude", "include", "mode", "method", "model", "models", "backend", "batch_size", "seed",
    "max_tokens", "corpus", "normalize", "clip", "prefix", "suffix", "template", "axes", "terms", "carriers"})
"""Extra key names that read as settings (named in a warning; flinch reads none of them from a corpus file)."""
MIN_CARRIERS = 4
"""Fewer carriers per term than this is warned about."""
MIN_TERMS = 6
"""Fewer terms per axis than this is warned about."""


@dataclass(frozen=True)
class Carrier:
    """One carrier sentence of one term."""

    text: str
    """The sentence as written, with ``{BLANK}``."""
    index: int
    """Position among the term's carriers (0-based; part of the cell's id)."""

    @property
    def prefix(self) -> str:
        """The text before the blank, trailing whitespace removed: what the model reads."""
        return self.text.split(BLANK, 1)[0].rstrip()

    @property
    def starts_with_blank(self) -> bool:
        """Whether the prefix is empty (needs a tokenizer that adds BOS)."""
        return self.prefix == ""


@dataclass(frozen=True)
class Term:
    """A term and its carriers."""

    word: str
    """The term as scored (the target is a space and this)."""
    carriers: tuple[Carrier, ...]

    @property
    def target(self) -> str:
        """What is scored after the prefix: a space and the term."""
        return " " + self.word


@dataclass(frozen=True)
class Axis:
    """One axis: a label and its terms, in file order."""

    key: str
    label: str
    terms: tuple[Term, ...]


@dataclass(frozen=True)
class Corpus:
    """A loaded, validated corpus (or the subset of its axes a config selected)."""

    path: str
    """Where it was read from, as given (``packaged:starter`` for the starter corpus)."""
    sha256: str
    """SHA-256 of the file's bytes: every output carries it; totals from different corpora are not comparable."""
    version: str
    """The file's own version string ("" when it has none)."""
    axes: tuple[Axis, ...]
    """The axes scored, in file order."""
    warnings: tuple[str, ...]
    """Allowed but weak: terms with few carriers, axes with few terms; extra keys that look like settings."""
    extra: dict = field(default_factory=dict, compare=False)
    """Keys flinch does not read, kept as written: ``{where: {key: value}}``, ``where`` being ``(file)``,
    ``axes.<key>`` or ``axes.<key>.terms[i] (<word>)`` (descriptions, notes, sources)."""
    setting_like: tuple[str, ...] = ()
    """``where.key`` of each extra key that looks like a setting (also in ``warnings``)."""

    @property
    def axis_keys(self) -> tuple[str, ...]:
        return tuple(a.key for a in self.axes)

    def n_carriers(self) -> int:
        """Carrier sentences over every axis and term: cells per model."""
        return sum(len(t.carriers) for a in self.axes for t in a.terms)


def _read(path: str, base: Path | None) -> tuple[str, bytes]:
    if path == STARTER:
        return path, resources.files("mirrorscan.instruments.flinch").joinpath("data/corpus.json").read_bytes()
    file = Path(path) if base is None or Path(path).is_absolute() else base / path
    try:
        return str(file), file.read_bytes()
    except OSError as exc:
        raise ConfigError(str(file), "corpus", f"cannot be read ({exc.strerror or exc})",
                          f"give the path of a corpus JSON file, or {STARTER!r}") from None


def load_corpus(path: str, *, axes: list[str] | None = None, base: Path | None = None) -> Corpus:
    """Load and validate the corpus at ``path`` (relative paths from ``base``; ``packaged:starter`` for
    the starter corpus); ``axes`` selects a subset by key. ConfigError naming file, field and fix."""
    file, raw = _read(path, base)
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=refuse_duplicate_keys(file))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(file, "(file)", f"is not UTF-8 JSON ({exc})", "fix the JSON syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("axes"), dict) or not data["axes"]:
        raise ConfigError(file, "axes", "is missing or empty", 'give {"axes": {key: {"label": …, "terms": […]}}}')
    extra: dict[str, dict] = {}
    _keep_extra(extra, "(file)", data, READ_KEYS["(file)"])
    wanted = list(data["axes"]) if axes is None else list(axes)
    for key in wanted:
        if key not in data["axes"]:
            import difflib

            close = difflib.get_close_matches(key, list(data["axes"]), n=1, cutoff=0.6)
            raise ConfigError(file, "axes", f"has no axis {key!r}",
                              (f"did you mean {close[0]}? " if close else "") + f"use some of: {', '.join(data['axes'])}")
    loaded, warnings = [], []
    for key in wanted:
        axis = _axis(file, key, data["axes"][key], extra)
        loaded.append(axis)
        if len(axis.terms) < MIN_TERMS:
            warnings.append(f"axis {key!r} has {len(axis.terms)} terms (fewer than {MIN_TERMS}: its flinch is noisy)")
        warnings += [f"axis {key!r}, term {t.word!r} has {len(t.carriers)} carriers (fewer than {MIN_CARRIERS})"
                     for t in axis.terms if len(t.carriers) < MIN_CARRIERS]
    setting_like = tuple(f"{where}.{k}" for where, keys in extra.items() for k, v in keys.items()
                         if looks_like_setting(k, v))
    warnings += [f"{s} looks like a setting, but flinch reads no setting from a corpus file (kept as a description; "
                 "settings go in the config's flinch section)" for s in setting_like]
    return Corpus(path=path if path == STARTER else file, sha256=hashlib.sha256(raw).hexdigest(),
                  version=str(data.get("version", "")), axes=tuple(loaded), warnings=tuple(warnings),
                  extra=extra, setting_like=setting_like)


def looks_like_setting(key: str, value) -> bool:
    """Whether an extra key reads as a setting rather than a description: its value is a number, a boolean or
    null, or its name is one of ``SETTING_NAMES``."""
    return value is None or isinstance(value, (bool, int, float)) or key.strip().lower() in SETTING_NAMES


def _keep_extra(extra: dict, where: str, mapping: dict, read: tuple[str, ...]) -> None:
    """Record ``mapping``'s keys outside ``read`` under ``extra[where]``."""
    kept = {k: v for k, v in mapping.items() if k not in read}
    if kept:
        extra[where] = kept


def _axis(file: str, key: str, raw, extra: dict) -> Axis:
    where = f"axes.{key}"
    check_name(key, file, where)
    axis = read_record(AxisEntry, raw) if isinstance(raw, dict) else AxisEntry()
    if not isinstance(axis.label, str) or not axis.label.strip():
        raise ConfigError(file, f"{where}.label", "is missing or empty", "give the axis a label for people")
    _keep_extra(extra, where, raw, READ_KEYS["axis"])
    if not isinstance(axis.terms, list) or not axis.terms:
        raise ConfigError(file, f"{where}.terms", "is missing or empty", 'give a list of {"word": …, "carriers": […]}')
    terms, seen = [], set()
    for i, t in enumerate(axis.terms):
        term = read_record(TermEntry, t) if isinstance(t, dict) else TermEntry()
        if not isinstance(term.word, str):
            raise ConfigError(file, f"{where}.terms[{i}].word", "is missing", "give the term as text")
        word = check_component(term.word, file, f"{where}.terms[{i}].word")
        if word.casefold() in seen:
            raise file_error(file, f"{where}.terms[{i}]", f"appears twice in axis {key!r}", "keep one", offending=word)
        seen.add(word.casefold())
        _keep_extra(extra, f"{where}.terms[{i}] ({word})", t, READ_KEYS["term"])
        terms.append(Term(word=word, carriers=_carriers(file, f"{where}.terms[{i}] ({word})", term.carriers)))
    return Axis(key=key, label=axis.label.strip(), terms=tuple(terms))


def _carriers(file: str, where: str, raw) -> tuple[Carrier, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(file, f"{where}.carriers", "is missing or empty", "give at least one carrier sentence")
    out = []
    for j, text in enumerate(raw):
        field = f"{where}.carriers[{j}]"
        if not isinstance(text, str) or text.count(BLANK) != 1:
            n = text.count(BLANK) if isinstance(text, str) else 0
            raise ConfigError(file, field, f"holds {n} {BLANK} placeholders", f"write exactly one {BLANK} where the term goes")
        if any(c in text for c in "\n\r\t\x00"):
            raise ConfigError(file, field, "holds a newline, tab or NUL", "write the carrier on one line")
        if text.rstrip().endswith("?"):
            raise ConfigError(file, field, "is a question", "write a declarative sentence that the term completes")
        out.append(Carrier(text=text, index=j))
    return tuple(out)
