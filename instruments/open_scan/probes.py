"""open_scan probes: a CSV of (query_id, query) rows, read verbatim.

The query a model sees is the bytes of the file, decoded as UTF-8 and nothing else: no stripping, no Unicode
normalisation (an NFC and an NFD spelling of "café" are two different queries with two different hashes),
newlines inside a quoted query kept as written (CRLF stays CRLF). Every probe carries the SHA-256 of its
query, so a query edited under an unchanged id is a new item (``item_key`` = ``<query_id>@<hash[:8]>``) and
``changed_probes`` can say which ids changed since an earlier run.

Errors name the file's line as an editor shows it (the header is line 1; a row is named by the line it
starts on, a quoted multi-line query counting all its lines).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mirrorscan.grid.errors import ConfigError, csv_rows, excerpt, file_error
from mirrorscan.grid.files import packaged_path, sha256
from mirrorscan.grid.names import check_name

PACKAGED = {"packaged:demo": "probes/demo.csv"}
"""Shipped probe sets, by the name a config uses, relative to this package's ``data`` folder."""
DATA = Path(__file__).resolve().parent / "data"
"""This package's data folder, which the ``PACKAGED`` names of probes and templates point into
(``grid.files.packaged_path``)."""
KEY_SEPARATORS = ("@", "~")
"""Characters a query_id may not hold: ``@`` separates the id from the hash in an item_key, ``~`` a stage name."""
BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte-order mark, refused: it would become part of the first column's name."""


@dataclass(frozen=True)
class Probe:
    """One query of the probe set, exactly as the file holds it."""

    query_id: str
    """The id given in the file (a name under the one name rule, without ``@``)."""
    query: str
    """The query text, verbatim: the decoded bytes of the CSV field."""
    query_hash: str
    """Hex SHA-256 of the query's UTF-8 bytes."""

    @classmethod
    def of(cls, query_id: str, query: str) -> Probe:
        """The probe of ``query_id`` and ``query``, its hash computed."""
        return cls(query_id, query, sha256(query.encode("utf-8")))

    @property
    def item_key(self) -> str:
        """``<query_id>@<first 8 hex digits of query_hash>``: the probe's coordinate in a probe_id."""
        return f"{self.query_id}@{self.query_hash[:8]}"


def decode_utf8(data: bytes, file: str, field: str) -> str:
    """``data`` decoded as UTF-8; ConfigError for a byte-order mark or for bytes that are not UTF-8, naming
    the line and the byte offset of the first bad byte."""
    if data.startswith(BOM):
        raise ConfigError(file, field, "starts with a byte-order mark", "save it as UTF-8 without a BOM")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(file, f"{field}:{line}", f"is not UTF-8 (byte 0x{data[exc.start]:02x} at byte offset "
                          f"{exc.start}: {exc.reason})", "save it as UTF-8") from None


def check_query_id(value: str, file: str, field: str) -> str:
    """Return ``value`` if it can be a query_id, else ConfigError: a name the user gives, so the one name rule
    (``grid.names.check_name``, as for a pair id), without ``@`` or ``~``, which separate an item_key's parts."""
    bad = next((c for c in KEY_SEPARATORS if isinstance(value, str) and c in value), None)
    if bad:
        raise file_error(file, field, f"contains {bad!r}, which separates the parts of an item_key",
                         f"remove or replace the {bad!r}", offending=value)
    return check_name(value, file, field)


def probes_from_bytes(data: bytes, file: str, *, id_column: str = "query_id",
                      query_column: str = "query") -> tuple[Probe, ...]:
    """The probes of a CSV file's bytes, in file order; ``file`` names it in errors. Extra columns are ignored."""
    name = Path(file).name
    text = decode_utf8(data, file, name)
    csv_rows(text, file)   # a malformed row is one error naming its line, before the checks below
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header:
        raise ConfigError(file, name, "has no header row", f"put a header line '{id_column},{query_column}' first")
    for column in (id_column, query_column):
        if header.count(column) != 1:
            problem = "has no" if column not in header else "has more than one"
            raise file_error(file, f"{name}:1", f"{problem} column {column!r}; the header's columns are",
                             f"name exactly one column {column!r}, or set the column names in the config",
                             offending=header)
    id_at, query_at = header.index(id_column), header.index(query_column)
    probes: list[Probe] = []
    first_line: dict[str, int] = {}
    end = reader.line_num
    for row in reader:
        line, end = end + 1, reader.line_num   # the line the row starts on, as an editor numbers it
        if not row:
            continue   # a blank line
        if len(row) != len(header):
            raise ConfigError(file, f"{name}:{line}", f"has {len(row)} fields, the header {len(header)}",
                              "quote any field holding a comma (\"…\") and give every row every column")
        query_id, query = row[id_at], row[query_at]
        check_query_id(query_id, file, f"{name}:{line}:{id_column}")
        if query_id in first_line:
            raise file_error(file, f"{name}:{line}:{id_column}", f"appears on line {first_line[query_id]} and on "
                             f"line {line}", "give every query its own id", offending=query_id)
        if not query.strip():
            raise ConfigError(file, f"{name}:{line}:{query_column}", f"the query of {excerpt(query_id)} is empty"
                              + (" (whitespace only)" if query else ""), "write the query, or remove the row")
        first_line[query_id] = line
        probes.append(Probe.of(query_id, query))
    if not probes:
        raise ConfigError(file, name, "has a header but no probes", "add one row per query below the header")
    return tuple(probes)


def load_probes(path: str | Path, *, id_column: str = "query_id", query_column: str = "query") -> tuple[Probe, ...]:
    """The probes of the CSV file at ``path`` (a ``packaged:`` name or a path), in file order."""
    file = packaged_path(str(path), PACKAGED, DATA)
    if not file.is_file():
        raise ConfigError(str(file), "probes", "does not exist", "give a CSV file with columns "
                          f"{id_column},{query_column}, or {', '.join(PACKAGED)}")
    return probes_from_bytes(file.read_bytes(), str(file), id_column=id_column, query_column=query_column)


def changed_probes(current: Iterable[Probe], earlier: Mapping[str, set[str]]) -> list[str]:
    """The query_ids, sorted, that an earlier run held under another query text: ``earlier`` maps a query_id
    to the query_hashes stored for it, and an id is listed when its current hash is not among them. An id
    that no earlier run held is new, not changed, and is not listed."""
    return sorted(p.query_id for p in current if p.query_id in earlier and p.query_hash not in earlier[p.query_id])

