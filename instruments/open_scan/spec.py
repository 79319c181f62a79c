"""The ``open_scan`` section of config.json, validated (``load_section``) into a typed, immutable record
(``OpenScanSpec``, a ``grid.frozen_spec.FrozenSpec``), built once from the frozen section stored with an
invocation (``spec_from_frozen``).

Config section (all keys optional)::

    "open_scan": {"probes": "probes.csv" | {"path": …, "id": "query_id", "query": "query"},
                  "templates": "packaged:v1" | folder, "template_files": {"system"|"user"|"cold"|"posthoc": path},
                  "locale": "en-AU", "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 768},
                  "report_max_tokens": 16}

A scan's frozen section holds the probe set (``ProbeSet``), the templates (``templates.Templates.frozen``), the
locale, the answer sampling (``Sampling``), the self-reports' length and the series; an imported file's section
(``open_scan import``) holds only its series and where its rows came from (``ImportedFile``). The frozen JSON
itself (``OpenScanSpec.frozen_json``) is what the catalog stores; the typed fields are read from it and never
written back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import file_sha256, packaged_path, stamp
from mirrorscan.grid.frozen_spec import FrozenInput, FrozenSpec, defaults, frozen_field, read_record
from mirrorscan.grid.instrument import SpecContext
from mirrorscan.grid.settings import SAMPLER_VERSION
from mirrorscan.instruments.open_scan.probes import PACKAGED as PACKAGED_PROBES
from mirrorscan.instruments.open_scan.probes import DATA, Probe, load_probes
from mirrorscan.instruments.open_scan.templates import Templates, load_templates

IMPORTED_PREFIX = "imported:"
"""Series of an imported file's rows (``imported:<sha256 of the file, 12 hex>``)."""


@dataclass(frozen=True)
class ProbeSet:
    """The probe CSV a scan froze: where it is, how its columns are named, and what it held."""

    path: str
    """The file: ``packaged:<name>`` or an absolute path (resolved against config.json when validated)."""
    id_column: str
    """Name of the column holding each probe's stable id."""
    query_column: str
    """Name of the column holding each probe's query text."""
    sha256: str
    """Hex SHA-256 of the file's bytes when frozen (a file changed since is refused)."""
    n: int
    """Number of probes (rows) in the file."""
    items: tuple[tuple[str, str], ...] = frozen_field(read=lambda items: tuple((q, h) for q, h in items))
    """(query_id, hex SHA-256 of the query's UTF-8 bytes) of every probe, in file order."""

    @property
    def frozen_input(self) -> FrozenInput:
        """The probe file as frozen (path and SHA-256)."""
        return FrozenInput("probes", self.path, self.sha256)


@dataclass(frozen=True)
class Sampling:
    """How answers are sampled (the self-reports are greedy)."""

    temperature: float
    """Sampling temperature (0–5; 0 is greedy)."""
    top_p: float
    """Nucleus sampling's probability mass (0–1]."""
    max_tokens: int
    """Longest answer, in generated tokens."""


@dataclass(frozen=True)
class ImportedFile:
    """Where an imported invocation's rows came from (``open_scan import``); a key an older import did not
    record is None."""

    file: str | None = None
    """The JSONL file's name."""
    path: str | None = None
    """The JSONL file's absolute path when imported."""
    sha256: str | None = None
    """Hex SHA-256 of the file's bytes."""
    lines: int | None = None
    """Lines in the file."""
    kept: int | None = None
    """Lines imported (joined to the experiment)."""
    dropped: int | None = None
    """Lines left out (their label or probe did not join)."""
    shape: str | None = None
    """Which of the method's line shapes the file holds."""
    importer_version: str | None = None
    """Version of the import rules (``importing.IMPORTER_VERSION``)."""
    scales: dict[str, tuple[int, int]] | None = frozen_field(
        read=lambda scales: {k: (int(low), int(high)) for k, (low, high) in scales.items()} or None, default=None)
    """``cold`` / ``posthoc`` → (lowest, highest) rating the replies were read on."""
    rating_disagreements: int | None = None
    """Lines whose stored rating differs from the one read from the reply."""


@dataclass(frozen=True)
class ScanParts:
    """What a scan's section froze, every part set: the cells are built and rendered from these."""

    probe_set: ProbeSet
    """The probe set (``OpenScanSpec.probe_set``)."""
    templates: Templates
    """The templates as frozen."""
    locale: str
    """Locale written into the user template."""
    sampling: Sampling
    """The answers' sampling."""
    report_max_tokens: int
    """Longest self-report reply, in generated tokens."""


@dataclass(frozen=True, kw_only=True)
class OpenScanSpec(FrozenSpec):
    """A validated open_scan section; equality and hash are those of its frozen settings (``frozen_json``)."""

    series: str = frozen_field(read=str, default="")
    """The series this section's answers belong to: a hash (12 hex) of what shapes an answer, or
    ``imported:<12 hex>`` for an imported file."""
    probe_set: ProbeSet | None = frozen_field("probes", read=lambda probes: read_record(ProbeSet, probes) if probes else None,
                                              default=None)
    """The probe set a scan froze; None for an imported file."""
    templates: Templates | None = frozen_field(read=Templates.from_frozen, default=None)
    """The templates as frozen (their texts are part of the frozen section); None for an imported file."""
    locale: str | None = frozen_field(default=None)
    """Locale written into the user template, e.g. ``en-AU``; None for an imported file."""
    sampling: Sampling | None = frozen_field(read=lambda sampling: read_record(Sampling, sampling), default=None)
    """The answers' sampling; None for an imported file."""
    report_max_tokens: int | None = frozen_field(default=None)
    """Longest self-report reply, in generated tokens; None for an imported file."""
    imported: ImportedFile | None = frozen_field(read=lambda imported: read_record(ImportedFile, imported)
                                                 if imported else None, default=None)
    """Where an imported file's rows came from; None for a scan."""

    @property
    def is_import(self) -> bool:
        """Whether the section is an imported file's (its series is ``imported:…``, or it records a file)."""
        return self.imported is not None or self.series.startswith(IMPORTED_PREFIX)

    @property
    def scan(self) -> ScanParts:
        """The parts a scan froze (probe set, templates, locale, sampling, self-report length), each set. An
        imported file's section holds none of them: its rows are analysed, never asked of a model, so building
        or rendering its cells is refused (ConfigError)."""
        f, templates, sampling = self.probe_set, self.templates, self.sampling
        if f is None or templates is None or self.locale is None or sampling is None or self.report_max_tokens is None:
            raise ConfigError("", "open_scan", f"the section of series {self.series or '(none)'} holds no probe set, "
                              "templates, locale, sampling or self-report length (an imported file's rows, or a "
                              "section stored without them), so its cells cannot be built",
                              "scan the experiment with a config of its own")
        return ScanParts(f, templates, self.locale, sampling, self.report_max_tokens)

    def probes(self) -> tuple[Probe, ...]:
        """The probes, read once per process, and again after the file was written (``grid.files.stamp``); a
        file changed since the run was frozen is refused."""
        f = self.scan.probe_set
        written = stamp(packaged_path(f.path, PACKAGED_PROBES, DATA))
        return _checked_probes(f.frozen_input, f.id_column, f.query_column, written)


def spec_from_frozen(frozen: dict) -> OpenScanSpec:
    """The record of a frozen section (a scan's or an imported file's), read once."""
    return OpenScanSpec.from_frozen(frozen)


@lru_cache(maxsize=8)
def _checked_probes(frozen: FrozenInput, id_column: str, query_column: str, written: tuple) -> tuple[Probe, ...]:
    frozen.check(file_sha256(packaged_path(frozen.path, PACKAGED_PROBES, DATA)))
    return load_probes(frozen.path, id_column=id_column, query_column=query_column)


DEFAULT_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 768}
"""The method's answer sampling."""


@dataclass(frozen=True)
class Section:
    """The keys of an ``open_scan`` config section, each with its default."""

    probes: str | dict = "packaged:demo"
    """The probe CSV, or ``{"path", "id", "query"}`` naming its id and query columns."""
    templates: str = "packaged:v1"
    """The template set: ``packaged:v1`` or a folder."""
    template_files: dict = field(default_factory=dict)
    """Single template files that replace the set's (``system``, ``user``, ``cold``, ``posthoc`` → path)."""
    locale: str = "en-AU"
    """Locale written into the user template."""
    sampling: dict = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    """The answers' sampling: ``temperature``, ``top_p``, ``max_tokens``."""
    report_max_tokens: int = 16
    """Longest self-report reply, in generated tokens."""


SECTION_KEYS = defaults(Section)
"""The section's keys and their defaults."""


def series_of(templates: dict, locale: str, sampling: dict, report_max_tokens: int) -> str:
    """12 hex digits of SHA-256 over what shapes an answer besides the model: templates, locale, sampling,
    self-report length and the HF sampler's version."""
    shaping = {"templates": {k: v for k, v in templates.items()}, "locale": locale, "sampling": sampling,
               "report_max_tokens": report_max_tokens, "sampler_version": SAMPLER_VERSION}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:12]


def _number(ctx: SpecContext, path: str, value, low: float, high: float, integer: bool = False):
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
        raise ctx.error(path, f"is {value!r}", f"use {'an integer' if integer else 'a number'} in [{low}, {high}]")
    return value


def _resolve(name: str, ctx: SpecContext, packaged) -> str:
    if not isinstance(name, str) or not name:
        raise ctx.error("probes", f"{name!r} is not a file name", "give a path relative to config.json")
    if name in packaged or name.startswith("packaged:") or Path(name).is_absolute():
        return name
    return str((Path(ctx.config_dir) / name).resolve())


def load_section(section: dict, ctx: SpecContext) -> OpenScanSpec:
    """Validate an ``open_scan`` section — the probe CSV (read verbatim), the templates, locale, sampling and
    self-report length — and freeze it."""
    values = ctx.read(section, Section)
    probes_value = values.probes
    if isinstance(probes_value, str):
        probes_value = {"path": probes_value}
    if not isinstance(probes_value, dict) or not isinstance(probes_value.get("path"), str):
        raise ctx.error("probes", "must be a CSV file name or {\"path\", \"id\", \"query\"}",
                        'give e.g. "probes.csv" or {"path": "probes.csv", "id": "qid", "query": "text"}')
    ctx.refuse_unknown(probes_value, ("path", "id", "query"), "probes")
    path = _resolve(probes_value["path"], ctx, PACKAGED_PROBES)
    id_column, query_column = probes_value.get("id", "query_id"), probes_value.get("query", "query")
    probes = load_probes(path, id_column=id_column, query_column=query_column)
    files = values.template_files
    if not isinstance(files, dict):
        raise ctx.error("template_files", "must be an object", 'give e.g. {"cold": "my_cold.json"}')
    ctx.refuse_unknown(files, ("system", "user", "cold", "posthoc"), "template_files")
    templates = load_templates(_resolve(values.templates, ctx, {"packaged:v1": ""}),
                               {k: _resolve(v, ctx, {}) for k, v in files.items()},
                               file=ctx.file, field=f"{ctx.section}.templates")
    locale = values.locale
    if not isinstance(locale, str) or not locale.strip() or "\n" in locale:
        raise ctx.error("locale", f"is {locale!r}", 'give a locale tag such as "en-AU"')
    sampling = values.sampling
    if not isinstance(sampling, dict):
        raise ctx.error("sampling", "must be an object", 'give {"temperature": 0.7, "top_p": 0.95, "max_tokens": 768}')
    ctx.refuse_unknown(sampling, DEFAULT_SAMPLING, "sampling")
    asked = read_record(Sampling, {**DEFAULT_SAMPLING, **sampling})
    sampling = {"temperature": float(_number(ctx, "sampling.temperature", asked.temperature, 0, 5)),
                "top_p": float(_number(ctx, "sampling.top_p", asked.top_p, 1e-6, 1)),
                "max_tokens": _number(ctx, "sampling.max_tokens", asked.max_tokens, 1, 1_000_000, True)}
    report_max = _number(ctx, "report_max_tokens", values.report_max_tokens, 1, 4096, True)
    frozen_templates = templates.frozen()
    return OpenScanSpec.from_frozen({
        "probes": {"path": path, "id_column": id_column, "query_column": query_column,
                   "sha256": file_sha256(packaged_path(path, PACKAGED_PROBES, DATA)), "n": len(probes),
                   "items": [[p.query_id, p.query_hash] for p in probes]},
        "templates": frozen_templates, "locale": locale, "sampling": sampling, "report_max_tokens": report_max,
        "series": series_of(frozen_templates, locale, sampling, report_max)})
