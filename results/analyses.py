"""An invocation's instrument analysis, computed and written beside it, and found again.

``analyze`` runs the instrument's ``analyze(traces, settings)`` (no I/O) on an invocation read by
``results.invocations.load`` (``analyze_invocation``: found by id or experiment, with the design plans of its
headline intervals costed from its inference log, for ``mirrorscan analyze``), and ``write_analysis`` stores what it produced under
``<store>/<experiment>/<invocation>/analysis/<instrument>/<stamp>/`` (summary.json, one Parquet file per
table, one PNG per chart, one JSON per document), never overwriting an earlier analysis.

``summary.json`` also holds, under ``"analysis_provenance"``, what the analysis was computed from
(``fingerprint``), the text and notes it printed and the files of its folder, so that ``reusable`` can find
the newest analysis of the same code and inputs and ``read_analysis`` can give it back without computing it
again. Two analyses have the same code and inputs when their fingerprints are equal: the invocation id,
its frozen settings' hash, the names of its stored trace parts (the store is append-only and a part's name
is unique, so the same names are the same rows) and its row count, the analysis settings (``reannotate``),
the mirrorscan version, a SHA-256 over the analysis code and data (every file under ``grid/``,
``analysis/`` and ``instruments/``, and the modules that read traces and write analyses; a dirty work tree
counts), and the versions of the numeric libraries the analysis runs on.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Analysis
from mirrorscan.results.invocations import Invocation

PROVENANCE_KEY = "analysis_provenance"
"""The summary.json key holding the fingerprint, text, notes and file list (not one of the numbers)."""
FINGERPRINT_VERSION = 1
"""Bumped when what the fingerprint covers changes (an older fingerprint then never matches)."""
CODE_DIRS = ("grid", "analysis", "instruments")
"""Source folders whose every file (code and data) the analysis may depend on."""
CODE_FILES = ("results/analyses.py", "results/invocations.py")
"""Further modules on the path from stored rows to written numbers."""
LIBRARIES = ("numpy", "scipy", "pyarrow", "matplotlib", "scikit-learn", "duckdb")
"""Libraries whose version can change an analysis's numbers or charts."""


def analyze(inv: Invocation, *, reannotate: bool = False) -> Analysis:
    """The instrument's analysis of the invocation (``Instrument.analyze``; computed, not written)."""
    return inv.instrument.analyze(inv.traces, inv.settings, reannotate=reannotate)


@lru_cache(maxsize=1)
def code_sha256() -> str:
    """SHA-256 (hex) of the analysis code and data as installed or checked out now (``tree_sha256`` of
    mirrorscan's source root)."""
    return tree_sha256(Path(__file__).resolve().parent.parent)


def tree_sha256(root: Path) -> str:
    """SHA-256 (hex) over the relative path and content of every file under ``root`` that an analysis may
    depend on (``CODE_DIRS``, ``CODE_FILES``; caches, compiled and hidden files left out)."""
    files = [root / f for f in CODE_FILES if (root / f).is_file()]
    for folder in CODE_DIRS:
        for here, dirs, names in os.walk(root / folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            files += [Path(here) / n for n in names if not n.endswith((".pyc", ".pyo")) and not n.startswith(".")]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
        digest.update(b"\0")
    return digest.hexdigest()


def _versions() -> dict:
    """Installed versions of mirrorscan and ``LIBRARIES`` (None where one is not installed)."""
    from importlib import metadata

    out = {}
    for name in ("mirrorscan", *LIBRARIES):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def fingerprint(inv: Invocation, *, reannotate: bool = False) -> dict:
    """What an analysis of ``inv`` is computed from (see the module docstring): plain JSON, compared as a whole.
    ``trace_parts`` is the number of stored parts and a SHA-256 over their sorted names; ``rows`` the rows read."""
    parts = sorted(p.rsplit("/", 1)[-1] for p in inv.store.list_parts(inv.experiment, inv.invocation_id))
    return {"version": FINGERPRINT_VERSION, "invocation_id": inv.invocation_id,
            "settings_hash": inv.row.get("settings_hash"),
            "trace_parts": {"count": len(parts), "names_sha256": hashlib.sha256("\n".join(parts).encode()).hexdigest()},
            "rows": inv.traces.num_rows, "analysis_settings": {"reannotate": bool(reannotate)},
            "code_sha256": code_sha256(), "versions": _versions()}


def write_analysis(inv: Invocation, analysis: Analysis, *, reannotate: bool = False) -> list[str]:
    """Store ``analysis`` under ``<invocation>/analysis/<instrument>/<stamp>/`` (a new folder each time, complete
    or absent: ``TraceStore.write_analysis_folder``), with its fingerprint (``reannotate``: the analysis setting
    it was computed with), text and notes in summary.json; returns the display paths of the files written,
    summary.json first."""
    import pyarrow.parquet as pq

    from mirrorscan.cluster.runtime.provenance import git_state

    name = inv.instrument.name
    stamp = f"{name}/{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"   # unique per analysis
    outputs: dict[str, bytes] = {}
    for table_name, table in analysis.tables.items():
        buf = io.BytesIO()
        pq.write_table(table, buf)
        outputs[f"{table_name}.parquet"] = buf.getvalue()
    outputs.update({f"{chart}.png": png for chart, png in analysis.charts.items()})
    outputs.update({f"{doc}.json": json.dumps(body, indent=2, ensure_ascii=False).encode()
                    for doc, body in analysis.documents.items()})
    sha, dirty = git_state()
    provenance = {"fingerprint": fingerprint(inv, reannotate=reannotate), "git_sha": sha, "git_dirty": dirty,
                  "text": analysis.text, "notes": list(analysis.notes), "files": list(outputs)}
    summary = {"invocation_id": inv.invocation_id, "experiment": inv.experiment, "instrument": name,
               "settings_hash": inv.row["settings_hash"], **analysis.numbers, PROVENANCE_KEY: provenance}
    outputs = {"summary.json": json.dumps(summary, indent=2, ensure_ascii=False).encode(), **outputs}
    return inv.store.write_analysis_folder(inv.experiment, inv.invocation_id, stamp, outputs)


def analysis_folders(inv: Invocation) -> dict[str, set[str]]:
    """The invocation's analysis folders of its instrument that hold a summary.json (store path → the names of
    its files, relative to it), newest first (by stamp: the time it was written, then its random suffix);
    temporary folders are left out."""
    import pyarrow.fs as pafs

    base = f"{inv.store.invocation_dir(inv.experiment, inv.invocation_id)}/analysis/{inv.instrument.name}"
    if inv.store.fs.get_file_info(base).type == pafs.FileType.NotFound:
        return {}
    folders: dict[str, set[str]] = {}
    for info in inv.store.fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        stamp, _, name = info.path[len(base) + 1:].partition("/")
        if info.type == pafs.FileType.File and name and not stamp.startswith("."):
            folders.setdefault(f"{base}/{stamp}", set()).add(name)
    return {f: names for f, names in sorted(folders.items(), reverse=True) if "summary.json" in names}


def reusable(inv: Invocation, *, reannotate: bool = False) -> str | None:
    """Store path of the newest analysis folder of ``inv`` whose fingerprint equals the one an analysis now
    would have (same code and inputs) and whose listed files are all present; None when there is none."""
    want = None
    for folder, names in analysis_folders(inv).items():
        try:
            provenance = json.loads(inv.store.read_bytes(f"{folder}/summary.json")).get(PROVENANCE_KEY)
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(provenance, dict):
            continue
        want = want or fingerprint(inv, reannotate=reannotate)
        if provenance.get("fingerprint") == want and set(provenance.get("files", ())) <= names:
            return folder
    return None


def read_analysis(inv: Invocation, folder: str) -> Analysis:
    """The analysis stored in ``folder`` (a store path from ``reusable``): numbers (summary.json without its
    provenance), text and notes as printed, tables, charts and documents; ``json_view`` and ``detail``,
    never written, are None."""
    import pyarrow.parquet as pq

    summary = json.loads(inv.store.read_bytes(f"{folder}/summary.json"))
    provenance = summary.pop(PROVENANCE_KEY)
    tables, charts, documents = {}, {}, {}
    for name in provenance.get("files", ()):
        data = inv.store.read_bytes(f"{folder}/{name}")
        stem, _, ext = name.rpartition(".")
        if ext == "parquet":
            tables[stem] = pq.read_table(io.BytesIO(data))
        elif ext == "png":
            charts[stem] = data
        elif ext == "json":
            documents[stem] = json.loads(data)
    return Analysis(text=provenance.get("text", ""), numbers=summary, tables=tables, charts=charts,
                    documents=documents, notes=tuple(provenance.get("notes", ())))


@dataclass
class AnalysisReport:
    """What one analysis found and where it wrote it."""

    invocation_id: str
    """The invocation analysed."""
    experiment: str
    """Its experiment."""
    instrument: str
    """Its instrument's registry name or import path."""
    analysis: Analysis
    """What the instrument's analysis produced (text, numbers, tables, charts)."""
    outputs: list = field(default_factory=list)
    """The files written (empty when nothing was written)."""


def analyze_invocation(target: str, *, store: str | None = None, catalog_dsn: str | None = None,
                       reannotate: bool = False, write: bool = True, waiting=None) -> AnalysisReport:
    """Compute (and with ``write`` store) the instrument's analysis of ``target`` (an invocation id or an
    experiment → its newest invocation), with its headline design plans (``with_design_plans``).
    ``waiting(line)`` is called once the invocation is found, before the computation (seconds for lens's nulls
    and bootstraps, with nothing else to show)."""
    from mirrorscan.results.invocations import load

    inv = load(target, store=store, dsn=catalog_dsn)
    if waiting is not None:
        waiting(f"analysing {inv.invocation_id} ({inv.instrument.name}, experiment {inv.experiment})")
    analysis = with_design_plans(analyze(inv, reannotate=reannotate), inv.invocation_id, catalog_dsn)
    report = AnalysisReport(inv.invocation_id, inv.experiment, inv.instrument.name, analysis)
    if write:
        report.outputs = write_analysis(inv, analysis, reannotate=reannotate)
    return report


def with_design_plans(analysis, invocation_id: str, catalog_dsn: str | None):
    """The analysis with, where its headline numbers carry intervals, the cheapest design reaching Eρ² 0.8 under
    each one's G-study (``analysis.headline_intervals.headline_plans``), costed by the engine seconds per row this
    invocation's inference log measured (rows where it has none): in the text after the intervals, and in
    ``numbers["intervals"]["plans"]``."""
    import dataclasses

    from mirrorscan.analysis.headline_intervals import format_plans, headline_plans

    result = analysis.numbers.get("intervals") if isinstance(analysis.numbers, dict) else None
    if not result or not result.get("headlines"):
        return analysis
    try:
        from mirrorscan.results.long_table import costs_from

        measured = costs_from(invocation_id, catalog_dsn)["labels"]
        cost_per_row = {label: v["engine_seconds_per_cell"] for label, v in measured.items()}
    except ConfigError:   # AnalysisError is one
        cost_per_row = None                       # nothing logged (an imported or older invocation): rows
    plans = headline_plans(result, cost_per_row)
    text = format_plans(plans, {k: h.get("title", k) for k, h in result["headlines"].items()})
    if not text:
        return analysis
    result["plans"] = plans
    return dataclasses.replace(analysis, text=f"{analysis.text}\n{text}")
