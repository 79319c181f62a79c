"""open_scan's validated section as a typed, immutable record (``OpenScanSpec``), built once from the frozen
section stored with an invocation (``spec_from_frozen``).

A scan's frozen section holds the probe set (``ProbeSet``), the templates (``templates.Templates.frozen``), the
locale, the answer sampling (``Sampling``), the self-reports' length and the series; an imported file's section
(``open_scan import``) holds only its series and where its rows came from (``ImportedFile``). The frozen JSON
itself (``OpenScanSpec.frozen_json``) is what the catalog stores; the typed fields are read from it and never
written back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import lru_cache

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import file_sha256, packaged_path, stamp
from mirrorscan.instruments.open_scan.probes import PACKAGED as PACKAGED_PROBES
from mirrorscan.instruments.open_scan.probes import DATA, Probe, load_probes
from mirrorscan.instruments.open_scan.templates import Templates

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
    items: tuple[tuple[str, str], ...]
    """(query_id, hex SHA-256 of the query's UTF-8 bytes) of every probe, in file order."""


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

    file: str | None
    """The JSONL file's name."""
    path: str | None
    """The JSONL file's absolute path when imported."""
    sha256: str | None
    """Hex SHA-256 of the file's bytes."""
    lines: int | None
    """Lines in the file."""
    kept: int | None
    """Lines imported (joined to the experiment)."""
    dropped: int | None
    """Lines left out (their label or probe did not join)."""
    shape: str | None
    """Which of the method's line shapes the file holds."""
    importer_version: str | None
    """Version of the import rules (``importing.IMPORTER_VERSION``)."""
    scales: dict[str, tuple[int, int]] | None
    """``cold`` / ``posthoc`` → (lowest, highest) rating the replies were read on."""
    rating_disagreements: int | None
    """Lines whose stored rating differs from the one read from the reply."""


@dataclass(frozen=True)
class OpenScanSpec:
    """A validated open_scan section; equality and hash are those of its frozen settings (``frozen_json``)."""

    frozen_json: str
    """Canonical JSON of the frozen section (sorted keys, UTF-8 text): what the catalog stores."""
    series: str = field(compare=False)
    """The series this section's answers belong to: a hash (12 hex) of what shapes an answer, or
    ``imported:<12 hex>`` for an imported file."""
    probe_set: ProbeSet | None = field(compare=False)
    """The probe set a scan froze; None for an imported file."""
    templates: Templates | None = field(compare=False)
    """The templates as frozen (their texts are part of the frozen section); None for an imported file."""
    locale: str | None = field(compare=False)
    """Locale written into the user template, e.g. ``en-AU``; None for an imported file."""
    sampling: Sampling | None = field(compare=False)
    """The answers' sampling; None for an imported file."""
    report_max_tokens: int | None = field(compare=False)
    """Longest self-report reply, in generated tokens; None for an imported file."""
    imported: ImportedFile | None = field(compare=False)
    """Where an imported file's rows came from; None for a scan."""

    @property
    def frozen(self) -> dict:
        """The frozen section as plain JSON values (a fresh copy)."""
        return json.loads(self.frozen_json)

    @property
    def is_import(self) -> bool:
        """Whether the section is an imported file's (its series is ``imported:…``, or it records a file)."""
        return self.imported is not None or self.series.startswith(IMPORTED_PREFIX)

    def probes(self) -> tuple[Probe, ...]:
        """The probes, read once per process, and again after the file was written (``grid.files.stamp``); a
        file changed since the run was frozen is refused."""
        f = self.probe_set
        written = stamp(packaged_path(f.path, PACKAGED_PROBES, DATA))
        return _checked_probes(f.path, f.id_column, f.query_column, f.sha256, written)


def spec_from_frozen(frozen: dict) -> OpenScanSpec:
    """The record of a frozen section (a scan's or an imported file's), read once."""
    probes, sampling, imported = frozen.get("probes"), frozen.get("sampling"), frozen.get("imported")
    if imported:
        recorded = {f.name: imported.get(f.name) for f in fields(ImportedFile)}
        scales = {k: (int(low), int(high)) for k, (low, high) in (recorded.pop("scales") or {}).items()}
        imported = ImportedFile(**recorded, scales=scales or None)
    return OpenScanSpec(
        json.dumps(frozen, sort_keys=True, ensure_ascii=False), str(frozen.get("series", "")),
        ProbeSet(**{**probes, "items": tuple((q, h) for q, h in probes["items"])}) if probes else None,
        Templates.from_frozen(frozen["templates"]) if "templates" in frozen else None,
        frozen.get("locale"), Sampling(**sampling) if sampling is not None else None,
        frozen.get("report_max_tokens"), imported or None)


@lru_cache(maxsize=8)
def _checked_probes(path: str, id_column: str, query_column: str, sha256: str, written: tuple) -> tuple[Probe, ...]:
    actual = file_sha256(packaged_path(path, PACKAGED_PROBES, DATA))
    if actual != sha256:
        raise ConfigError(path, "probes", f"changed since the invocation was frozen (SHA-256 {actual[:12]}… ≠ "
                          f"{sha256[:12]}…)", "restore the file, or start a new invocation (scan without --resume)")
    return load_probes(path, id_column=id_column, query_column=query_column)
