"""The browser's read-side index: one small table per invocation listing where every trace row lives.

A scan writes one Parquet part per engine batch, so a large invocation is tens of thousands of small files.
Opening all of them per request cannot answer in under a second (each footer is a read of its own), so the
browser answers the matrix, the cell lists and the comparison from this index, and reads a trace's own part
only when a trace page is asked for.

Each row of the index is one trace row: ``probe_id``, ``sample``, ``attempt``, ``label``, ``item_key``,
``envelope``, ``ordering``, the instrument's matrix coordinates as text (``mrow``, ``mcol``, from
``Instrument.matrix_coordinates``), its answer (``answer_class`` text or ``score`` number, from the
instrument's ``cell_value``: a stored column, or one value derived from each row while its part is read, as
lens derives a number from the pooled vectors, which never enter the index), ``failed`` (the row's error is
set), ``ttft_ms`` and ``total_ms``, and where the row is stored (``part``: the part's file name in ``traces/``, ``row``: its 0-based position in that part).

The index is derived and append-only, and never replaces the parts of record: it lives outside the store
(``<index dir>/<store key>/<experiment>/<invocation>/``, by default under ``$MIRRORSCAN_HOME/cache/``, so a
read-only store or an S3 bucket is never written), each file covers a set of parts and is never rewritten,
and parts written after the newest file (a resume) are covered by one more file. A reader unions the files;
a part no file lists is indexed when the invocation is next refreshed. Each file records the definition of
its cells' value (``value_key``); files made under another one are passed over and their parts indexed again.
``check_writable`` refuses an index folder that cannot be written, before the browser serves anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.matrix import CellValue, cell_value

INDEX_SCHEMA = pa.schema([
    ("probe_id", pa.string()), ("sample", pa.int32()), ("attempt", pa.int32()), ("label", pa.string()),
    ("item_key", pa.string()), ("envelope", pa.string()), ("ordering", pa.string()),
    ("mrow", pa.string()), ("mcol", pa.string()), ("answer_class", pa.string()), ("score", pa.float64()),
    ("failed", pa.bool_()), ("ttft_ms", pa.float64()), ("total_ms", pa.float64()),
    ("part", pa.string()), ("row", pa.int32()),
])
"""One row per trace row; see the module docstring (``part`` is dictionary-encoded on disk)."""

FACETS = {"envelope": "envelope", "ordering": "ordering", "label": "label", "answer": "answer_class",
          "mrow": "mrow", "mcol": "mcol"}
"""Name → index column whose distinct values an index file lists in its metadata: the filters' choices, and the
matrix's rows and columns (the unfiltered matrix needs no scan to know them)."""
FACET_MAX = 50_000
"""Distinct values, at most, a facet lists in an index file's metadata (a column with more is left out)."""
ROW_GROUP_ROWS = 64 * 1024
"""Rows per row group of an index file: small enough that a trace lookup reads little of a large index."""
READ_THREADS = 8
"""Parts read at once while indexing (small files: the time goes to opening them, which overlaps well)."""


def check_writable(folder: str) -> None:
    """ConfigError naming ``folder`` (the index folder) and the fix unless a file can be written in it."""
    probe = os.path.join(folder, f".write-check-{uuid.uuid4().hex[:12]}")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(probe, "wb") as sink:
            sink.write(b"mirrorscan write check")
        os.remove(probe)
    except OSError as exc:
        raise ConfigError(folder, "--index-dir", f"cannot be written ({exc.strerror or exc})",
                          "pass --index-dir a writable folder, or make $MIRRORSCAN_HOME writable") from None


def value_key(value: CellValue) -> str:
    """What an index file's ``answer_class``/``score`` hold, as its metadata records it (``column|kind``, and
    ``|derived`` for a derived value): a file made under another definition is not this index's."""
    return f"{value.column}|{value.kind}" + ("|derived" if value.derive is not None else "")


def store_key(store_uri: str) -> str:
    """A short stable folder name for a store (16 hex digits of the sha256 of its URI)."""
    return hashlib.sha256(store_uri.encode()).hexdigest()[:16]


def index_folder(index_dir: str | Path, store_uri: str, experiment: str, invocation_id: str) -> Path:
    """Where one invocation's index files lie."""
    return Path(index_dir) / store_key(store_uri) / experiment / invocation_id


def index_files(folder: Path, value: CellValue | None = None) -> list[Path]:
    """The complete index files of one invocation, oldest first (temporaries are skipped). With ``value``, only
    those whose cells were made under that definition (``value_key``; a file from before the key was recorded
    counts for a stored column, never for a derived value): the parts the others cover are indexed again."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.iterdir() if p.suffix == ".parquet" and not p.name.startswith("."))
    if value is None:
        return files
    want = value_key(value)

    def made_under(f: Path) -> bool:
        key = (pq.read_schema(f).metadata or {}).get(b"mirrorscan.cell_value")
        return key.decode() == want if key is not None else value.derive is None

    return [f for f in files if made_under(f)]


def covered_parts(files: list[Path]) -> set[str]:
    """The part file names the index files list."""
    out: set[str] = set()
    for f in files:   # the column's dictionaries are its distinct values: no need to decode a million rows
        for chunk in pq.read_table(f, columns=["part"], read_dictionary=["part"]).column("part").chunks:
            out.update(chunk.dictionary.to_pylist())
    return out


def _rows_of_part(store, path: str, columns: list[str], coordinates: tuple[str, str], value: CellValue) -> pa.Table:
    """The index rows of one part (read: the identity, coordinate, answer and timing columns only)."""
    with store.fs.open_input_file(path) as src:
        present = set(pq.read_schema(src).names)
        wanted = [c for c in columns if c in present]
        table = pq.read_table(src, columns=wanted)
    n = table.num_rows

    def col(name: str, dtype: pa.DataType) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n, dtype)
        return table.column(name).combine_chunks().cast(dtype)

    dtype = pa.string() if value.kind == "class" else pa.float64()
    if value.derive is not None:   # one value per row, from the columns it reads (lens: the pooled vectors)
        got = value.derive(table.select([c for c in value.reads if c in table.column_names]))
        found = (got.combine_chunks() if isinstance(got, pa.ChunkedArray) else got).cast(dtype)
        if len(found) != n:
            raise ValueError(f"cell_value {value.column!r} gave {len(found)} values for {n} rows of {path}")
    else:
        found = col(value.column, dtype)
    answer = found if value.kind == "class" else pa.nulls(n, pa.string())
    score = found if value.kind == "score" else pa.nulls(n, pa.float64())
    arrays = {
        "probe_id": col("probe_id", pa.string()), "sample": col("sample", pa.int32()),
        "attempt": col("attempt", pa.int32()), "label": col("label", pa.string()),
        "item_key": col("item_key", pa.string()), "envelope": col("envelope", pa.string()),
        "ordering": col("ordering", pa.string()), "mrow": col(coordinates[0], pa.string()),
        "mcol": col(coordinates[1], pa.string()), "answer_class": answer, "score": score,
        "failed": pc.is_valid(col("error", pa.string())), "ttft_ms": col("ttft_ms", pa.float64()),
        "total_ms": col("total_ms", pa.float64()),
        "part": pa.array([path.rsplit("/", 1)[-1]] * n, pa.string()),
        "row": pa.array(range(n), pa.int32()),
    }
    return pa.table(arrays, schema=INDEX_SCHEMA)


def build(store, experiment: str, invocation_id: str, instrument, folder: Path, *, progress=None) -> Path | None:
    """Index the invocation's parts that no index file in ``folder`` lists yet, as one new index file;
    returns its path (None when every part is listed already). ``progress(done, total)`` is called as parts
    are read."""
    value = cell_value(instrument)
    files = index_files(folder, value)
    known = covered_parts(files)
    parts = [p for p in store.list_parts(experiment, invocation_id) if p.rsplit("/", 1)[-1] not in known]
    if not parts:
        return None
    coordinates = instrument.matrix_coordinates()
    value_columns = list(value.reads) if value.derive is not None else ([value.column] if value.column else [])
    columns = list(dict.fromkeys(["probe_id", "sample", "attempt", "label", "item_key", "envelope", "ordering",
                                  *coordinates, *value_columns, "error", "ttft_ms", "total_ms"]))
    tables: list[pa.Table] = []
    with ThreadPoolExecutor(READ_THREADS) as pool:
        for i, table in enumerate(pool.map(lambda p: _rows_of_part(store, p, columns, coordinates, value),
                                           parts)):
            tables.append(table)
            if progress is not None and (i % 500 == 0 or i == len(parts) - 1):
                progress(i + 1, len(parts))
    rows = pa.concat_tables(tables).combine_chunks()
    # sorted by the trace key, so a trace lookup reads one row group (its min/max statistics skip the rest)
    rows = rows.sort_by([("probe_id", "ascending"), ("sample", "ascending"), ("attempt", "ascending")])
    rows = rows.set_column(rows.schema.get_field_index("part"), "part", pc.dictionary_encode(rows.column("part")))
    return _write(folder, rows, len(parts), _facets_of(rows), value_key(value))


def _facets_of(rows: pa.Table) -> dict[str, list]:
    """Distinct values of each filter column (the browser's filter choices), kept in the file's metadata."""
    out = {}
    for name, column in FACETS.items():
        values = pc.unique(rows.column(column))
        if len(values) <= FACET_MAX:
            out[name] = sorted(v for v in values.to_pylist() if v is not None)
    return out


def facets(files: list[Path]) -> dict[str, list]:
    """The union of the distinct values the index files hold in their metadata (read from their footers only);
    a facet some file left out (too many values) is absent."""
    out: dict[str, set] = {name: set() for name in FACETS}
    missing: set[str] = set()
    for f in files:
        listed = json.loads((pq.read_schema(f).metadata or {}).get(b"mirrorscan.facets", b"{}"))
        missing |= set(FACETS) - set(listed)
        for name, values in listed.items():
            out.setdefault(name, set()).update(values)
    return {name: sorted(values) for name, values in out.items() if name not in missing}


def _write(folder: Path, rows: pa.Table, n_parts: int, facet_values: dict, value: str) -> Path:
    """Write one index file atomically (temporary name, then rename); never overwrites. ``value``: the
    ``value_key`` its cells were made under."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"index-{time.strftime('%Y%m%dT%H%M%S')}-{n_parts:08d}-{uuid.uuid4().hex[:12]}.parquet"
    final, temp = folder / name, folder / f".{name}.tmp"
    rows = rows.replace_schema_metadata({"mirrorscan.facets": json.dumps(facet_values),
                                         "mirrorscan.cell_value": value})
    pq.write_table(rows, temp, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    os.replace(temp, final)
    return final


def dataset(files: list[Path]) -> pads.Dataset:
    """One lazy dataset over an invocation's index files (``part`` read as text)."""
    schema = INDEX_SCHEMA
    return pads.dataset([str(f) for f in files], schema=schema, format="parquet")
