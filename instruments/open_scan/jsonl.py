"""open_scan's JSONL import/export format: one line per (run_label, query, sample).

Canonical form, which ``format_records`` writes and which reads back to itself byte for byte:

* UTF-8 without a byte-order mark; one JSON object per line, ``\\n`` after every line including the last;
* the keys of ``KEYS`` in that order, no other key;
* ``json.dumps`` with ``ensure_ascii=False`` and the standard separators ``", "`` and ``": "``: non-ASCII text
  is written as itself, quotes, backslashes and control characters as JSON escapes (``\\n``, ``\\u0000``). U+2028
  and U+2029 are written raw, which JSON allows; lines are split on ``\\n`` alone, never on them;
* ``created_at`` in UTC with microseconds and ``+00:00`` (``2025-01-02T03:04:05.000000+00:00``).

``read_records`` also accepts any other spelling of the same data (keys in another order, ``\\uXXXX`` escapes,
compact separators, ``Z`` or another offset, CRLF line ends, no final newline); such a file reads to the same
records and is written back in canonical form. Timestamps are held to the microsecond (``datetime``'s
precision): finer digits in an imported file are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from mirrorscan.grid.errors import ConfigError, file_error, unknown_key
from mirrorscan.grid.names import check_imported_text, check_name
from mirrorscan.instruments.open_scan.probes import check_query_id, decode_utf8

KEYS = ("run_label", "model", "query_id", "query_hash", "sample", "seed", "locale", "answer", "cold_raw",
        "cold_rating", "posthoc_raw", "posthoc_rating", "created_at")
"""The keys of every line, in the order they are written."""
TEXT_KEYS = ("run_label", "model", "query_id", "query_hash", "locale")
"""Keys whose value is a text, never null."""
NULLABLE_TEXT_KEYS = ("answer", "cold_raw", "posthoc_raw")
"""Keys whose value is a text, or null when there is none (the call failed or the stage did not run)."""
INT_KEYS = ("sample", "seed")
"""Keys whose value is a JSON integer ≥ 0."""
RATING_KEYS = ("cold_rating", "posthoc_rating")
"""Keys whose value is a JSON integer, or null when the reply held no rating (``parse_rating``)."""
HASH = re.compile(r"[0-9a-f]{64}")
"""Shape of a query_hash: hex SHA-256, lower case."""


@dataclass(frozen=True)
class Record:
    """One answer of one model to one probe, with its two self-reports."""

    run_label: str
    """The model's label in the run (a probe_id component)."""
    model: str
    """The model as the backend names it (e.g. a Hugging Face repo id or an API model name)."""
    query_id: str
    """The probe's id in its probe set."""
    query_hash: str
    """Hex SHA-256 of the query's UTF-8 bytes (the query text itself is not in the line)."""
    sample: int
    """Sample index within the cell, from 0."""
    seed: int
    """The cell's sampling seed (``grid.ids.cell_seed``)."""
    locale: str
    """The locale the user turn named."""
    answer: str | None
    """The model's answer, verbatim; None when the call failed."""
    cold_raw: str | None
    """The reply to the cold self-report, verbatim; None when it was not asked or failed."""
    cold_rating: int | None
    """The cold rating read from ``cold_raw``; None when not measured (never 0 for "none")."""
    posthoc_raw: str | None
    """The reply to the post-hoc self-report, verbatim; None when it was not asked or failed."""
    posthoc_rating: int | None
    """The post-hoc rating read from ``posthoc_raw``; None when not measured."""
    created_at: datetime
    """When the answer was produced, wall clock, timezone-aware (held in UTC)."""

    def __post_init__(self):
        if self.created_at.tzinfo is None or self.created_at.utcoffset() is None:
            raise ValueError("Record.created_at must be timezone-aware")
        object.__setattr__(self, "created_at", self.created_at.astimezone(timezone.utc))


def format_time(dt: datetime) -> str:
    """``dt`` in canonical form: ISO 8601 in UTC, microseconds, ``+00:00``."""
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds")


def format_line(record: Record) -> str:
    """One canonical line, ``\\n`` included."""
    line = {key: format_time(record.created_at) if key == "created_at" else getattr(record, key) for key in KEYS}
    return json.dumps(line, ensure_ascii=False) + "\n"


def format_records(records: Iterable[Record]) -> bytes:
    """The canonical file of ``records`` (empty for none)."""
    return "".join(format_line(r) for r in records).encode("utf-8")


class _Pairs(list):
    """A JSON object's (key, value) pairs in file order (kept so duplicate keys can be refused)."""


def _value(key: str, value: object, file: str, where: str) -> object:
    """``value`` checked against ``key``'s type (ConfigError naming ``where``), converted for created_at."""
    def wrong(expected: str) -> ConfigError:
        got = "null" if value is None else "an object" if isinstance(value, _Pairs) else type(value).__name__
        return ConfigError(file, where, f"is {got}, not {expected}", f"write {key} as {expected}")

    if key in TEXT_KEYS or key in NULLABLE_TEXT_KEYS:
        if not isinstance(value, str):
            if value is None and key in NULLABLE_TEXT_KEYS:
                return None
            raise wrong("a string" + (" or null" if key in NULLABLE_TEXT_KEYS else ""))
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError(file, where, f"holds a lone surrogate (\\u{ord(value[exc.start]):04x})",
                              "escape whole characters only (a surrogate pair, or the character itself)") from None
        check_imported_text(file, where, value, in_catalog=key == "model")   # the model reaches the settings
        return value
    if key in INT_KEYS or key in RATING_KEYS:
        if value is None and key in RATING_KEYS:
            return None
        if type(value) is not int:   # bool is a subclass of int, and not a count
            raise wrong("an integer" + (" or null" if key in RATING_KEYS else ""))
        if key in INT_KEYS and value < 0:
            raise ConfigError(file, where, f"is {value}", f"write {key} as an integer ≥ 0")
        return value
    if not isinstance(value, str):
        raise wrong("an ISO 8601 timestamp string")
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise file_error(file, where, "is not an ISO 8601 timestamp", "write it as 2025-01-02T03:04:05.000000+00:00",
                         offending=value) from None
    if stamp.utcoffset() is None:
        raise file_error(file, where, "has no UTC offset", "add +00:00 (or the offset it was taken in)", offending=value)
    return stamp


def json_object(line: str, file: str, at: str) -> _Pairs:
    """One JSONL line read as a JSON object's pairs in file order; ConfigError naming ``at``
    (``<file name>:<line number>``) when it is not JSON or not an object."""
    try:
        obj = json.loads(line, object_pairs_hook=_Pairs)
    except json.JSONDecodeError as exc:
        raise ConfigError(file, at, f"is not JSON ({exc.msg} at column {exc.colno})",
                          "write one JSON object per line") from None
    if not isinstance(obj, _Pairs):
        raise ConfigError(file, at, "is not a JSON object", "write one JSON object per line")
    return obj


def _record(line: str, file: str, at: str) -> Record:
    """The record of one line; ``at`` is ``<file name>:<line number>``, for errors."""
    obj = json_object(line, file, at)
    values: dict = {}
    for key, value in obj:
        where = f"{at}:{key}"
        if key not in KEYS:
            error = unknown_key(file, where, key, KEYS)
            raise ConfigError(file, where, error.problem, error.fix)
        if key in values:
            raise ConfigError(file, where, "appears twice in one line (the last would silently win)", "keep one")
        values[key] = _value(key, value, file, where)
    missing = [k for k in KEYS if k not in values]
    if missing:
        raise ConfigError(file, f"{at}:{missing[0]}", "is missing", f"give every line all of: {', '.join(KEYS)}")
    record = Record(**values)   # each key's type checked above (created_at: with a UTC offset)
    if not HASH.fullmatch(record.query_hash):
        raise file_error(file, f"{at}:query_hash", "is not a hex SHA-256",
                         "write the SHA-256 of the query's UTF-8 bytes as 64 lower-case hex digits",
                         offending=record.query_hash)
    check_name(record.run_label, file, f"{at}:run_label")
    check_query_id(record.query_id, file, f"{at}:query_id")
    return record


def read_records(data: bytes, file: str) -> list[Record]:
    """The records of a JSONL file's bytes, in file order; ``file`` names it in errors (``<name>:<line>:<key>``)."""
    name = Path(file).name
    text = decode_utf8(data, file, name)
    lines = text.split("\n")   # not splitlines(): U+2028, U+2029, \x85 and friends are legal inside JSON strings
    if lines[-1] == "":
        lines.pop()   # nothing after the final newline
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise ConfigError(file, f"{name}:{n}", "is blank", "remove blank lines (one record per line)")
        records.append(_record(line, file, f"{name}:{n}"))
    return records
