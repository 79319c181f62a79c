"""A compact index of an invocation's rows, for plans that read many invocations at once.

An appending scan (open_scan) reads, before it starts, the identity columns of every earlier invocation's
rows, and the answers a later stage is built from. Over a store written the way scans write it — one small
Parquet part per engine batch, 25,000 parts for 43 models × 863 probes × 5 samples — that time goes to
opening files (each footer is ~18 KiB), not to reading rows. So when an invocation of such an instrument
ends, its rows' identity and coordinate columns, with the part each row lives in, are written to one file
in ``<invocation>/index/`` (named like a part, ``part-<time>-rows-<parts>-…``).

The index is a cache, never the only copy: a reader takes the newest file (parts only ever accumulate, so
it lists the most) and reads raw
only the parts it does not list (written after it, e.g. by a resume that died before writing its own), so
it is never wrong about what it lists and never hides a row.
"""

from __future__ import annotations

import logging
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

INDEX_DIR = "index"
PART = "part"
"""Index column: the path of the part holding the row."""

log = logging.getLogger(__name__)


def _index_files(store, experiment: str, invocation_id: str) -> list[str]:
    folder = f"{store.invocation_dir(experiment, invocation_id)}/{INDEX_DIR}"
    return sorted(f.path for f in store._files(folder) if f.path.endswith(".parquet"))


def write_index(store, experiment: str, invocation_id: str, columns: list[str], schema: pa.Schema) -> str | None:
    """Write the index of the invocation's parts as they are now (``columns`` of every successful row, plus
    ``part``; ``columns`` must hold ``error``); returns its path (None when the invocation has no part)."""
    parts = store.list_parts(experiment, invocation_id)
    if not parts:
        return None
    tables = []
    for fragment in pads.dataset(parts, schema=schema, format="parquet", filesystem=store.fs).get_fragments():
        table = fragment.to_table(columns=columns, schema=schema, filter=pc.field("error").is_null())
        tables.append(table.append_column(PART, pa.array([fragment.path] * table.num_rows, pa.string())))
    rows = pa.concat_tables(tables).combine_chunks()
    rows = rows.set_column(rows.schema.get_field_index(PART), PART, pc.dictionary_encode(rows.column(PART)))
    folder = f"{store.invocation_dir(experiment, invocation_id)}/{INDEX_DIR}"
    return store.write_parquet_part(folder, rows, f"rows-{len(parts):08d}-{uuid.uuid4().hex[:8]}")


def read_successful_rows(store, experiment: str, columns: list[str], schema: pa.Schema, *, exclude: str) -> pa.Table:
    """``columns`` (plus ``part``) of every successful row of the experiment's invocations other than
    ``exclude`` and other than reproductions (``mirrorscan reproduce``: their manifest names the invocation they
    reproduce; a reproduction never holds cells): from their indexes where they have one, and their raw parts
    otherwise."""
    parts = [p for p in store.list_parts(experiment) if f"/{exclude}/" not in p]
    by_invocation: dict[str, list[str]] = {}
    for path in parts:
        by_invocation.setdefault(_invocation_of(store, experiment, path), []).append(path)
    for invocation_id in [i for i in by_invocation if is_reproduction(store, experiment, i)]:
        del by_invocation[invocation_id]
    tables, raw = [], []
    for invocation_id, paths in by_invocation.items():
        indexed = _best_index(store, experiment, invocation_id, columns)
        if indexed is None:
            raw += paths
            continue
        part = indexed.column(PART).cast(pa.string())
        tables.append(indexed.set_column(indexed.schema.get_field_index(PART), PART, part))
        covered = set(part.unique().to_pylist())   # (a part of error rows only is read raw: it finds nothing)
        raw += [p for p in paths if p not in covered]
    for fragment in (pads.dataset(raw, schema=schema, format="parquet", filesystem=store.fs).get_fragments()
                     if raw else []):
        table = fragment.to_table(columns=columns, schema=schema, filter=pc.field("error").is_null())
        tables.append(table.append_column(PART, pa.array([fragment.path] * table.num_rows, pa.string())))
    if not tables:
        return schema.empty_table().select(columns).append_column(PART, pa.array([], pa.string()))
    rows = pa.concat_tables(tables)
    return rows.combine_chunks() if rows.column(0).num_chunks > 64 else rows   # thousands of parts: one chunk


def is_reproduction(store, experiment: str, invocation_id: str) -> bool:
    """Whether the invocation was made by ``mirrorscan reproduce`` (its manifest's ``reproduces``)."""
    manifest = store.read_manifest(experiment, invocation_id) or {}
    return bool(manifest.get("reproduces"))


def _best_index(store, experiment: str, invocation_id: str, columns: list[str]) -> pa.Table | None:
    """The invocation's newest index, with ``columns`` and ``part`` (None: none, or one that lacks a column
    asked for)."""
    files = _index_files(store, experiment, invocation_id)
    if not files:
        return None
    best = max(files, key=lambda f: f.rsplit("/", 1)[-1])   # part-<time>-…: the newest lists the most parts
    with store.fs.open_input_file(best) as src:
        names = pq.read_schema(src).names
        if any(c not in names for c in columns):
            return None
        return pq.read_table(src, columns=[*columns, PART])


def _invocation_of(store, experiment: str, path: str) -> str:
    """The invocation folder a part path lies in."""
    base = f"{store.root}/{experiment}/" if store.root else f"{experiment}/"
    rest = path[len(base):] if path.startswith(base) else path.split(f"/{experiment}/", 1)[-1]
    return rest.split("/", 1)[0]
