"""Importing answer files into an open_scan experiment: two shapes of JSONL, one rule for labels, ratings
and probe versions.

Shapes, told apart line by line (a file holds one of them):

* **export** — this project's own 13 keys (``jsonl.KEYS``: ``run_label``, ``query_hash``, ``cold_raw``,
  ``cold_rating``…), read strictly by ``jsonl.read_records``;
* **seed** — the seed tool's lines, one per (model, query_id, sample): ``model`` (the hub id), ``query_id``,
  ``sample``, ``answer``, ``cold`` and ``posthoc`` (the raw self-report replies; null when not asked or
  failed). Optional keys stored in their own columns where they have one (``query``, ``locale``,
  ``temperature``, ``top_p``, ``seed``, ``created_at``, ``ttft_ms``, ``total_ms``), null when absent; any other
  key is kept verbatim in the row's ``import_extra`` (JSON).

Rules an import follows, whatever the shape (``plan_import``):

* **label** — a seed line's label is the method's rule, exactly ``model.split("/")[-1].lower()``. Where the
  experiment has scanned models, a line joins only a label equal to one of theirs; any other line is dropped,
  with one printed line naming it (never matched loosely, never averaged in).
* **probe version** — a line's query_hash is that of its own ``query`` text where it carries one (a changed
  probe is a new probe: a text that differs from the probe set's belongs to that text's version, never to the
  current one), else the export's ``query_hash``, else the current probe set's hash for its query_id.
* **ratings** — parsed from the raw reply by the scan's own parser (``templates.parse_rating``) on the
  experiment's scales: out of scale or unparsable is null (not measured), the raw text kept. An export line
  whose given rating disagrees with its raw text is reported line by line; the parsed value is stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.frozen_spec import read_record
from mirrorscan.grid.names import check_imported_text, name_problem
from mirrorscan.instruments.open_scan.jsonl import _Pairs, _record, _value, json_object
from mirrorscan.instruments.open_scan.probes import check_query_id, decode_utf8
from mirrorscan.instruments.open_scan.templates import parse_rating

IMPORTER_VERSION = "2"
"""Version of these rules, recorded with every imported invocation (``settings.instrument_settings.imported``)."""
@dataclass(frozen=True)
class SeedKeys:
    """The keys every seed line holds, as read (their types checked by ``_seed_line``)."""

    model: Any
    """The model that answered, as the file names it (a non-empty string)."""
    query_id: Any
    """The probe's id (a non-empty string)."""
    sample: Any
    """The answer's sample number (an integer ≥ 0)."""
    answer: Any
    """The answer's raw text, or null."""
    cold: Any
    """The cold self-report's raw reply, or null."""
    posthoc: Any
    """The post-hoc self-report's raw reply, or null."""


SEED_REQUIRED = tuple(f.name for f in fields(SeedKeys))
"""Keys every seed line holds (``SeedKeys``)."""
SEED_COLUMNS = {"query": "text", "locale": "text", "temperature": "number", "top_p": "number", "seed": "int",
                "created_at": "time", "ttft_ms": "number", "total_ms": "number"}
"""Optional seed keys stored in a trace column of the same name (their kind); null when absent."""


def method_label(model: str) -> str:
    """The method's join label of a model id: its last ``/`` segment, lower-cased (a ``:`` does not split)."""
    return model.split("/")[-1].lower()


@dataclass(frozen=True)
class ImportLine:
    """One line of an imported file, either shape, before it is joined to the experiment."""

    line: int
    """1-based line number in the file."""
    shape: str
    """``export`` (the 13 keys) or ``seed``."""
    label: str
    """``run_label`` (export) or ``method_label(model)`` (seed)."""
    model: str
    """The model as the file names it."""
    query_id: str
    """The probe's id."""
    sample: int
    """Sample index, from 0."""
    answer: str | None
    """The answer verbatim; None when there is none."""
    cold_raw: str | None
    """The cold self-report reply verbatim; None when not asked or failed."""
    posthoc_raw: str | None
    """The post-hoc self-report reply verbatim; None when not asked or failed."""
    query: str | None = None
    """The probe's text as the line gives it (seed ``query``); None when absent."""
    query_hash: str | None = None
    """The export's ``query_hash``; None for a seed line (derived by ``plan_import``)."""
    cold_given: int | None = None
    """The export's ``cold_rating`` as written (compared with the parsed one); None for a seed line."""
    posthoc_given: int | None = None
    """The export's ``posthoc_rating`` as written; None for a seed line."""
    columns: dict = field(default_factory=dict)
    """Optional values stored in their own trace columns (``SEED_COLUMNS``; the export's seed, locale,
    created_at)."""
    extra: dict | None = None
    """Any other key of a seed line, verbatim; None when there is none."""


def _seed_value(key: str, kind: str, value: Any, file: str, where: str) -> Any:
    """A seed line's optional ``value`` checked against its ``kind`` (ConfigError naming ``where``)."""
    if value is None:
        return None
    if kind == "time":
        return _value("created_at", value, file, where)
    ok = {"text": isinstance(value, str), "int": type(value) is int,
          "number": type(value) in (int, float) and math.isfinite(value)}[kind]
    if not ok:
        raise ConfigError(file, where, f"is {type(value).__name__}, not {'a ' + kind if kind != 'int' else 'an integer'}",
                          f"write {key} as {kind} or null, or leave it out")
    return float(value) if kind == "number" else value


def _seed_line(obj: _Pairs, file: str, at: str, n: int) -> ImportLine:
    """The ImportLine of one seed-shape object (``at``: ``<file name>:<line>`` for errors)."""
    values: dict = {}
    for key, value in obj:
        if key in values:
            raise ConfigError(file, f"{at}:{key}", "appears twice in one line (the last would silently win)", "keep one")
        values[key] = value
    for key, value in values.items():   # stored as it is: nothing shaped like a secret, no NUL in the catalog
        _check_texts(value, file, f"{at}:{key}", in_catalog=key == "model")
    missing = [k for k in SEED_REQUIRED if k not in values]
    if missing:
        raise ConfigError(file, f"{at}:{missing[0]}", "is missing",
                          f"give every line {', '.join(SEED_REQUIRED)} (or this project's own export keys)")
    seed = read_record(SeedKeys, values)
    for key, text in (("model", seed.model), ("query_id", seed.query_id)):
        if not isinstance(text, str) or not text:
            raise ConfigError(file, f"{at}:{key}", f"is {text!r}, not a non-empty string", f"write {key} as text")
    check_query_id(seed.query_id, file, f"{at}:query_id")
    if type(seed.sample) is not int or seed.sample < 0:
        raise ConfigError(file, f"{at}:sample", f"is {seed.sample!r}", "write sample as an integer ≥ 0")
    for key, reply in (("answer", seed.answer), ("cold", seed.cold), ("posthoc", seed.posthoc)):
        if reply is not None and not isinstance(reply, str):
            raise ConfigError(file, f"{at}:{key}", f"is {type(reply).__name__}, not a string or null",
                              f"write {key} as the raw reply text, or null")
    columns = {key: _seed_value(key, kind, values.get(key), file, f"{at}:{key}") for key, kind in SEED_COLUMNS.items()}
    extra = {k: v for k, v in values.items() if k not in SEED_REQUIRED and k not in SEED_COLUMNS}
    return ImportLine(n, "seed", method_label(seed.model), seed.model, seed.query_id, seed.sample,
                      seed.answer, seed.cold, seed.posthoc, query=columns.pop("query"),
                      columns=columns, extra=_plain(extra) or None)


def _check_texts(value, file: str, where: str, in_catalog: bool) -> None:
    """Every string in ``value`` (a JSON value as read) through ``grid.names.check_imported_text``."""
    if isinstance(value, str):
        check_imported_text(file, where, value, in_catalog=in_catalog)
    elif isinstance(value, _Pairs):
        for k, v in value:
            _check_texts(k, file, where, in_catalog)
            _check_texts(v, file, where, in_catalog)
    elif isinstance(value, list):
        for v in value:
            _check_texts(v, file, where, in_catalog)


def _plain(value):
    """``_Pairs`` (a JSON object as read) back to dicts, recursively."""
    if isinstance(value, _Pairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_import(data: bytes, file: str) -> list[ImportLine]:
    """The lines of an import file's bytes, in file order, either shape (module docstring); a file mixing the
    shapes, a blank line or a malformed value is a ConfigError naming ``<file name>:<line>[:<key>]``."""
    name = Path(file).name
    lines = decode_utf8(data, file, name).split("\n")   # not splitlines(): U+2028 etc. are legal inside strings
    if lines[-1] == "":
        lines.pop()
    out: list[ImportLine] = []
    for n, text in enumerate(lines, 1):
        at = f"{name}:{n}"
        if not text.strip():
            raise ConfigError(file, at, "is blank", "remove blank lines (one record per line)")
        obj = json_object(text, file, at)
        shape = "export" if any(k == "run_label" for k, _ in obj) else "seed"
        if out and out[0].shape != shape:
            raise ConfigError(file, at, f"is in the {shape} shape, line 1 in the {out[0].shape} shape",
                              "import one shape per file")
        if shape == "seed":
            out.append(_seed_line(obj, file, at, n))
            continue
        r = _record(text, file, at)
        out.append(ImportLine(n, "export", r.run_label, r.model, r.query_id, r.sample, r.answer, r.cold_raw,
                              r.posthoc_raw, query_hash=r.query_hash, cold_given=r.cold_rating,
                              posthoc_given=r.posthoc_rating,
                              columns={"seed": r.seed, "locale": r.locale, "created_at": r.created_at}))
    return out


@dataclass(frozen=True)
class ImportPlan:
    """What an import stores and what it says: the kept lines with their probe version and ratings."""

    kept: list[tuple[ImportLine, str, int | None, int | None]]
    """(line, query_hash, cold rating, post-hoc rating), ratings parsed from the raw replies."""
    dropped: list[str]
    """One printed line per dropped line: its number, label and why."""
    disagreements: list[str]
    """One printed line per export rating that disagrees with its own raw text."""
    other_versions: dict[str, int]
    """query_id → lines whose own query text differs from the probe set's (stored as that text's version)."""


def plan_import(lines: list[ImportLine], file: str, *, labels: list[str], current: dict[str, str],
                scales: dict[str, tuple[int, int]]) -> ImportPlan:
    """Join ``lines`` to an experiment: ``labels`` its scanned models' labels (empty: a new experiment, every
    well-formed label is kept), ``current`` its probe set (query_id → query_hash), ``scales`` the cold and
    post-hoc rating scales (low, high). Pure: returns what to store and what to print (module docstring)."""
    name = Path(file).name
    kept: list[tuple[ImportLine, str, int | None, int | None]] = []
    dropped: list[str] = []
    disagreements: list[str] = []
    other: dict[str, int] = {}
    for ln in lines:
        problem = name_problem(ln.label)
        if problem is not None or (labels and ln.label not in labels):
            why = (f"is not a label ({problem})" if problem is not None else
                   f"matches no model of the experiment (its labels: {', '.join(labels)})")
            dropped.append(f"dropped {name}:{ln.line}: label {ln.label!r} (model {ln.model!r}) {why}")
            continue
        if ln.query is not None:
            query_hash = hashlib.sha256(ln.query.encode("utf-8")).hexdigest()
        elif ln.query_hash is not None:
            query_hash = ln.query_hash
        elif ln.query_id in current:
            query_hash = current[ln.query_id]
        else:
            raise ConfigError(file, f"{name}:{ln.line}:query", f"query_id {ln.query_id!r} carries no query text and "
                              "the experiment's probe set has no such id", "add the line's query text (key \"query\"), "
                              "or scan a probe set holding that id first")
        if ln.query_id in current and current[ln.query_id] != query_hash:
            other[ln.query_id] = other.get(ln.query_id, 0) + 1
        ratings = []
        for kind, raw, given in (("cold", ln.cold_raw, ln.cold_given), ("posthoc", ln.posthoc_raw, ln.posthoc_given)):
            parsed = parse_rating(raw, *scales[kind])
            if ln.shape == "export" and given != parsed:
                disagreements.append(f"{name}:{ln.line}: {kind}_rating {json.dumps(given)} disagrees with its raw "
                                     f"text {json.dumps(raw, ensure_ascii=False)[:60]} (the scan's parser reads "
                                     f"{json.dumps(parsed)} on [{scales[kind][0]}, {scales[kind][1]}]); stored "
                                     f"{json.dumps(parsed)}")
            ratings.append(parsed)
        kept.append((ln, query_hash, ratings[0], ratings[1]))
    return ImportPlan(kept, dropped, disagreements, other)


def imported_created_at(ln: ImportLine, now: datetime) -> datetime:
    """When a line's rows were produced: the line's ``created_at``, else ``now`` (the import's time)."""
    return ln.columns.get("created_at") or now


def import_rows(plan: ImportPlan, experiment: str, invocation_id: str, series: str, now) -> pa.Table:
    """Trace rows (answer, cold, post-hoc) of an import's kept lines (``importing.plan_import``), in file order:
    ratings as parsed from the raw replies, a line's own query text and optional values in their columns, any
    other key in ``import_extra``. A cold reply is one per (label, probe version) at sample 0; where a file's
    lines give one probe version different cold replies, each is stored at its line's sample."""
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

    colds: dict[tuple, set] = {}
    for ln, query_hash, rating, _ in plan.kept:
        if ln.cold_raw is not None:
            colds.setdefault((ln.label, ln.query_id, query_hash), set()).add(ln.cold_raw)
    rows, cold_done = [], set()
    for ln, query_hash, cold_rating, posthoc_rating in plan.kept:
        item_key = f"{ln.query_id}@{query_hash[:8]}"
        c = ln.columns
        base = {"invocation_id": invocation_id, "experiment": experiment, "instrument": "open_scan",
                "envelope_version": "imported", "label": ln.label, "model": ln.model, "model_canonical": ln.model,
                "backend": "imported", "ordering": "-", "seed": c.get("seed"), "attempt": 1,
                "created_at": imported_created_at(ln, now), "query_id": ln.query_id, "query_hash": query_hash,
                "query": ln.query, "locale": c.get("locale"), "series": series,
                "import_extra": None if ln.extra is None else json.dumps(ln.extra, ensure_ascii=False, sort_keys=True)}
        rows.append({**base, "probe_id": f"{ln.label}|{item_key}|answer|-", "item_key": item_key,
                     "envelope": "answer", "sample": ln.sample, "response": ln.answer,
                     "temperature": c.get("temperature"), "top_p": c.get("top_p"), "ttft_ms": c.get("ttft_ms"),
                     "total_ms": c.get("total_ms"), "error": None if ln.answer is not None else "imported: no answer"})
        key = (ln.label, ln.query_id, query_hash)
        if ln.cold_raw is not None:
            per_sample = len(colds[key]) > 1
            cold_key = (*key, ln.sample if per_sample else 0)
            if cold_key not in cold_done:
                cold_done.add(cold_key)
                rows.append({**base, "probe_id": f"{ln.label}|{item_key}|cold|-", "item_key": item_key,
                             "envelope": "cold", "sample": cold_key[-1], "response": ln.cold_raw,
                             "rating": cold_rating})
        if ln.posthoc_raw is not None:
            rows.append({**base, "probe_id": f"{ln.label}|{item_key}~posthoc|posthoc|-",
                         "item_key": f"{item_key}~posthoc", "envelope": "posthoc", "sample": ln.sample,
                         "response": ln.posthoc_raw, "rating": posthoc_rating})
    return to_trace_table(rows, trace_schema(resolve("open_scan").columns))


__all__ = ["IMPORTER_VERSION", "ImportLine", "ImportPlan", "import_rows", "imported_created_at", "method_label",
           "plan_import", "read_import"]
