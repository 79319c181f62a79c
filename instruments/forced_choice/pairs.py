"""Probe sets: the items a grid asks about. For forced_choice, a CSV of word pairs.

A pair set is ``pair_id,word_a,word_b`` (UTF-8, header required). Pair ids and words become probe_id
components, so none may contain ``|``; a pair id or an unordered word pair may appear only once.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError, csv_rows, file_error
from mirrorscan.grid.ids import check_component
from mirrorscan.grid.names import check_name

STARTER = "packaged:starter_pairs"
"""Selects the starter pair set shipped with mirrorscan."""
PAIR_COLUMNS = ("pair_id", "word_a", "word_b")


@dataclass(frozen=True)
class PairSet:
    """A loaded, validated pair set."""

    path: str
    """Where it was read from, as given."""
    sha256: str
    """SHA-256 of the file's bytes: a changed file is a new probe-set version."""
    table: pa.Table
    """Columns pair_id, word_a, word_b (strings), in file order."""

    def __len__(self) -> int:
        return self.table.num_rows


def read_pair_bytes(path: str | Path) -> tuple[bytes, str]:
    """The raw bytes of a pair set and the name to show in messages."""
    if str(path) == STARTER:
        return resources.files("mirrorscan.instruments.forced_choice").joinpath("data/pairs_starter.csv").read_bytes(), "instruments/forced_choice/data/pairs_starter.csv"
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), "probe_set", "file not found",
                          f"create it or point probe_set at an existing CSV (or use {STARTER!r})")
    return p.read_bytes(), str(path)


def load_pairs(path: str | Path) -> PairSet:
    """Read and validate a pair CSV; every problem is a ConfigError naming the line and column."""
    raw, shown = read_pair_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(shown, "(file)", f"is not UTF-8 ({exc})", "save the CSV as UTF-8") from exc
    csv_rows(text, shown)   # a malformed row is one error naming its line, before the checks below
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise ConfigError(shown, "(file)", "is empty", "write the header pair_id,word_a,word_b, then one pair per line")
    if [h.strip() for h in header] != list(PAIR_COLUMNS):
        raise file_error(shown, "line 1", "is not the header pair_id,word_a,word_b",
                         "make the first line exactly: pair_id,word_a,word_b", offending=",".join(header))
    ids, words_a, words_b = [], [], []
    seen_ids: dict[str, int] = {}
    seen_pairs: dict[frozenset, int] = {}
    for line_no, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise ConfigError(shown, f"line {line_no}", f"has {len(row)} columns, expected 3",
                              "write pair_id,word_a,word_b (quote a field that holds a comma)")
        pair_id, word_a, word_b = row
        check_name(pair_id, shown, f"line {line_no}:pair_id")   # an id the user gives: the one name rule
        for name, value in zip(PAIR_COLUMNS[1:], row[1:]):
            check_component(value, shown, f"line {line_no}:{name}")
        if pair_id in seen_ids:
            raise file_error(shown, f"line {line_no}:pair_id", f"duplicate pair id (first on line {seen_ids[pair_id]})",
                             "give every pair a unique pair_id", offending=pair_id)
        if word_a == word_b:
            raise file_error(shown, f"line {line_no}:word_b", "equals word_a", "use two different words", offending=word_a)
        key = frozenset((word_a, word_b))
        if key in seen_pairs:
            raise file_error(shown, f"line {line_no}", f"the pair already appears on line {seen_pairs[key]}",
                             "keep each pair once (both orderings are asked anyway)", offending=f"{word_a}/{word_b}")
        seen_ids[pair_id], seen_pairs[key] = line_no, line_no
        ids.append(pair_id)
        words_a.append(word_a)
        words_b.append(word_b)
    if not ids:
        raise ConfigError(shown, "(file)", "holds no pairs", "add at least one pair_id,word_a,word_b line")
    table = pa.table({"pair_id": ids, "word_a": words_a, "word_b": words_b})
    return PairSet(path=str(path), sha256=hashlib.sha256(raw).hexdigest(), table=table)
