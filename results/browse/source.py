"""Where the browser's pages get their data: the catalog, the stores and the read-side index, read only.

``Browser`` holds one read-only catalog connection, the stores it has opened, the index of every invocation
it was asked about, and one sandboxed DuckDB connection (external access off, configuration locked, as
``mirrorscan sql`` runs it) whose cursors query the index files through pyarrow with projection and filter
pushdown. Nothing is loaded whole per request: the matrix, a cell and a comparison are aggregates over the
index; a trace page reads the one part its row lives in.

Freshness: an invocation's parts are listed again (and new ones indexed) at most every ``refresh_s`` seconds
while it is running or unfinished; a finished (complete or failed) invocation is listed once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Instrument, resolve
from mirrorscan.grid.settings import Settings
from mirrorscan.results.browse import index as idx
from mirrorscan.results import vectors
from mirrorscan.results.browse.catalog_reader import ReadOnlyCatalog

SANDBOX = {"enable_external_access": False, "autoinstall_known_extensions": False,
           "autoload_known_extensions": False, "python_enable_replacements": False}
"""DuckDB settings of the browser's connection (as ``jobs.sql``); the configuration is locked after them."""
FINISHED = ("complete", "failed")
"""Statuses after which an invocation gets no new parts (incomplete and interrupted ones may be resumed)."""
FILTERS = ("envelope", "ordering", "label", "answer", "status")
"""Matrix filters (query parameters): envelope, ordering, model label, answer class, ok/failed."""


class NotFound(Exception):
    """What a page names does not exist (an unknown invocation, trace or file): the app answers 404."""


def instrument_of(row: dict) -> Instrument:
    """The instrument of an invocation's catalog ``row``, as its frozen settings name it (``analyze`` reads it
    so): a plug-in's import path (``package.module:Attr``), where the row's ``instrument`` column holds only
    the plug-in's short name."""
    try:
        name = Settings.from_json(row["settings"]).instrument if row.get("settings") else row["instrument"]
    except (TypeError, ValueError, ConfigError):   # settings this version cannot read: the column's name
        name = row["instrument"]
    return resolve(name or row["instrument"])


@dataclass
class Indexed:
    """One invocation as the browser knows it."""

    row: dict
    """Its catalog row (settings included)."""
    store: object
    """The TraceStore holding its parts."""
    instrument: object
    """Its instrument (resolved by name)."""
    folder: Path
    """Its index folder."""
    files: list[Path] = field(default_factory=list)
    """Its index files (the union is the index)."""
    checked_at: float = 0.0
    """Monotonic time of the last listing of its parts."""
    facets: dict | None = None
    """Distinct filter values, cached per index version."""

    @property
    def value(self) -> idx.CellValue:
        """What a cell's answer is, for this instrument."""
        return idx.cell_value(self.instrument)

    @property
    def coordinates(self) -> tuple[str, str]:
        """(row, column) names of the matrix."""
        return self.instrument.matrix_coordinates()


def where(filters: dict, alias: str = "") -> tuple[str, list]:
    """SQL conditions (joined by AND, "TRUE" when none) and parameters for the matrix filters."""
    p = f"{alias}." if alias else ""
    conds, params = [], []
    for name, column in (("envelope", "envelope"), ("ordering", "ordering"), ("label", "label"),
                         ("answer", "answer_class")):
        if filters.get(name):
            conds.append(f"{p}{column} = ?")
            params.append(filters[name])
    if filters.get("answer"):
        conds.append(f"NOT {p}failed")
    if filters.get("status") == "ok":
        conds.append(f"NOT {p}failed")
    elif filters.get("status") == "failed":
        conds.append(f"{p}failed")
    return (" AND ".join(conds) or "TRUE"), params


class Browser:
    """Read-only access to a catalog and the stores its invocations name, for the app's pages."""

    def __init__(self, catalog_dsn: str, index_dir: str | Path, *, store: str | None = None, refresh_s: float = 30.0,
                 progress=None):
        """``store``: read every invocation's parts from this store instead of the one its row names.
        ``progress(invocation_id, done, total)`` is told how indexing goes (the CLI prints it)."""
        import duckdb

        self.catalog = ReadOnlyCatalog(catalog_dsn)
        self.index_dir = Path(index_dir)
        self.store_override = store
        self.refresh_s = refresh_s
        self.progress = progress
        self._stores: dict[str, object] = {}
        self._known: dict[str, Indexed] = {}
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._duck = duckdb.connect(config=dict(SANDBOX))
        self._duck.execute("SET lock_configuration = true")

    # ---- stores and indexes ----------------------------------------------------------------------------

    def open_store(self, uri: str):
        """The store at ``uri``, opened once (never created: a missing one is a ConfigError)."""
        from mirrorscan.cluster.store.traces import open_store

        with self._lock:
            if uri not in self._stores:
                self._stores[uri] = open_store(uri, create=False)
            return self._stores[uri]

    def resolve_id(self, target: str) -> str:
        """The invocation id ``target`` names (a whole id or its unique start, as every verb reads it:
        ``cluster.catalog.client.match_invocation_id``); NotFound for an unknown one, an ambiguous start (naming the
        candidates), or a start that is also an experiment's name (naming both: ``cluster.catalog.client.TARGET_RULE``)."""
        from mirrorscan.cluster.catalog.client import UUID_PATTERN, match_invocation_id, named_both

        try:
            found = match_invocation_id(target, self.catalog.ids_starting)
            if found is not None and not UUID_PATTERN.match(target.strip().lower()) \
                    and self.catalog.invocations(target.strip()):   # a start that names an experiment too
                raise named_both(target, target.strip(), found, fix=f"open /experiments/{target.strip()} for the "
                                 f"experiment, or /invocations/{found} for the invocation")
        except ConfigError as exc:
            raise NotFound(f"{exc.problem}: {exc.fix}") from None
        if found is None:
            raise NotFound(f"no invocation {target} in the catalog (give an invocation id or its start, "
                           "6+ hex digits)")
        return found

    def indexed(self, invocation_id: str) -> Indexed:
        """The invocation ``invocation_id`` names (a whole id or its unique start) with an index covering its
        parts (built or extended now where needed)."""
        with self._lock:
            cached = invocation_id in self._known
        if not cached:
            invocation_id = self.resolve_id(invocation_id)
        with self._lock:
            known = self._known.get(invocation_id)
            lock = self._building.setdefault(invocation_id, threading.Lock())
        if known is None:
            row = self.catalog.invocation(invocation_id)
            if row is None:
                raise NotFound(f"no invocation {invocation_id} in the catalog")
            uri = self.store_override or row.get("store_uri")
            if not uri:
                raise ConfigError("", "store", f"invocation {invocation_id} names no store",
                                  "start mirrorscan browse with --store")
            store = self.open_store(uri)
            known = Indexed(row, store, instrument_of(row),
                            idx.index_folder(self.index_dir, store.uri, row["experiment"], invocation_id))
            known.files = idx.index_files(known.folder, known.value)
        stale = known.checked_at == 0.0 or (known.row.get("status") not in FINISHED
                                            and time.monotonic() - known.checked_at > self.refresh_s)
        if stale:
            with lock:
                if known.checked_at == 0.0 or time.monotonic() - known.checked_at > self.refresh_s:
                    if known.row.get("status") not in FINISHED:
                        known.row = self.catalog.invocation(invocation_id) or known.row
                    report = (lambda done, total: self.progress(invocation_id, done, total)) if self.progress else None
                    made = idx.build(known.store, known.row["experiment"], invocation_id, known.instrument,
                                     known.folder, progress=report)
                    if made is not None:
                        known.files = idx.index_files(known.folder, known.value)
                        known.facets = None
                    known.checked_at = time.monotonic()
        with self._lock:
            self._known[invocation_id] = known
        return known

    def query(self, inv: Indexed | list[Indexed], sql: str, params: list | None = None) -> pa.Table:
        """Run ``sql`` over the index of ``inv`` (as ``idx``; a list: ``idx_a``, ``idx_b``, …) on a fresh
        cursor of the sandboxed connection; the result as Arrow."""
        cursor = self._duck.cursor()
        try:
            for name, one in ([("idx", inv)] if not isinstance(inv, list) else
                              [(f"idx_{chr(97 + i)}", x) for i, x in enumerate(inv)]):
                cursor.register(name, idx.dataset(one.files) if one.files else idx.INDEX_SCHEMA.empty_table())
            return cursor.sql(sql, params=params or None).to_arrow_table()
        finally:
            cursor.close()

    # ---- pages' data -------------------------------------------------------------------------------------

    def facets(self, inv: Indexed) -> dict[str, list]:
        """Distinct values of each filter of the invocation (from its index files' metadata, cached until the
        index grows)."""
        if inv.facets is None:
            inv.facets = idx.facets(inv.files)
        return inv.facets

    def matrix(self, inv: Indexed, filters: dict, offset: int = 0, limit: int = 40) -> dict:
        """The page of the model × item matrix under ``filters``: columns ``offset``…``offset+limit`` (in order),
        every row, and per cell the answers of its successful rows (count per class, or mean score) and its
        failed attempts."""
        cond, params = where(filters)
        known = self.facets(inv)
        aggregate = ("count(*) AS n, count(*) FILTER (WHERE failed) AS failed, avg(score) AS score, "
                     "count(score) AS scored")
        if not filters and "mcol" in known and "mrow" in known:   # unfiltered: rows and columns are in the index's metadata
            names, total, row_names = known["mcol"][offset:offset + limit], len(known["mcol"]), known["mrow"]
            cells = self.query(inv, f"SELECT mrow, mcol, answer_class, {aggregate} FROM idx "
                                    f"WHERE mcol IN (SELECT unnest(?)) GROUP BY ALL", [names]).to_pylist()
        else:   # one pass over the filtered rows (materialised once): the page of columns, every row, the cells
            cells = self.query(inv, f"WITH f AS MATERIALIZED (SELECT mrow, mcol, answer_class, failed, score FROM idx "
                                    f"WHERE {cond}), page AS (SELECT mcol, count(*) OVER () AS total FROM (SELECT "
                                    f"DISTINCT mcol FROM f) ORDER BY mcol LIMIT ? OFFSET ?), "
                                    f"all_rows AS (SELECT list(DISTINCT mrow ORDER BY mrow) AS names FROM f) "
                                    f"SELECT mrow, mcol, answer_class, {aggregate}, any_value(page.total) AS total, "
                                    f"any_value((SELECT names FROM all_rows)) AS row_names FROM f JOIN page USING (mcol) "
                                    f"GROUP BY mrow, mcol, answer_class", [*params, limit, offset]).to_pylist()
            names = sorted({r["mcol"] for r in cells})
            if cells:
                total, row_names = cells[0]["total"], cells[0]["row_names"]
            else:   # a page past the last column (or nothing matches): count them apart
                total = self.query(inv, f"SELECT count(DISTINCT mcol) AS n FROM idx WHERE {cond}", params) \
                    .column("n")[0].as_py()
                row_names = []
        grid: dict[tuple, dict] = {}
        for r in cells:
            cell = grid.setdefault((r["mrow"], r["mcol"]), {"answers": {}, "ok": 0, "failed": 0, "score": None,
                                                             "scored": 0})
            cell["failed"] += r["failed"]
            ok = r["n"] - r["failed"]
            cell["ok"] += ok
            if r["answer_class"] is not None and ok:
                cell["answers"][r["answer_class"]] = cell["answers"].get(r["answer_class"], 0) + ok
            if r["scored"]:   # score rows of one cell are one group (their answer_class is null)
                cell["score"], cell["scored"] = r["score"], r["scored"]
        return {"rows": [r for r in row_names if r is not None], "cols": [c for c in names if c is not None],
                "total_cols": total, "offset": offset, "limit": limit, "cells": grid}

    def cell(self, inv: Indexed, mrow: str, mcol: str, filters: dict, limit: int = 500) -> list[dict]:
        """The trace rows of one matrix cell under ``filters`` (index columns), at most ``limit``."""
        cond, params = where(filters)
        return self.query(inv, f"SELECT * EXCLUDE (part, row) FROM idx WHERE mrow = ? AND mcol = ? AND {cond} "
                               f"ORDER BY envelope, ordering, probe_id, sample, attempt LIMIT ?",
                          [mrow, mcol, *params, limit]).to_pylist()

    def trace(self, inv: Indexed, probe_id: str, sample: int, attempt: int) -> dict:
        """The stored row of (probe_id, sample, attempt), read from the row group of its own part that holds
        it: every column, per-layer vectors summarised (``results.vectors.summary``: shape and a few norms), and
        a derived cell value (``grid.instrument.CellValue.derive``) under its name."""
        found = self.query(inv, "SELECT part, row FROM idx WHERE probe_id = ? AND sample = ? AND attempt = ? LIMIT 1",
                           [probe_id, sample, attempt])
        if found.num_rows == 0:
            raise NotFound(f"no trace {probe_id} sample {sample} attempt {attempt} in this invocation")
        part, row = found.column("part")[0].as_py(), found.column("row")[0].as_py()
        path = f"{inv.store.traces_dir(inv.row['experiment'], inv.row['invocation_id'])}/{part}"
        with inv.store.fs.open_input_file(path) as src:
            one = _one_row(pq.ParquetFile(src), row)
        if one is None:
            raise NotFound(f"the index points at {part} row {row}, which the part does not hold; restart browse")
        nested = [f.name for f in one.schema if vectors.is_nested_list(f.type)]
        record = one.drop_columns(nested).to_pylist()[0]
        if (record.get("probe_id"), record.get("sample"), record.get("attempt")) != (probe_id, sample, attempt):
            raise NotFound(f"the index points at {part} row {row}, which holds another trace; restart browse")
        for name in nested:   # per-layer vectors: their shape and a few norms, not a wall of floats
            record[name] = vectors.summary(one.column(name).combine_chunks())
        value = inv.value
        if value.derive is not None:   # the cell's value, as the index derived it
            got = value.derive(one.select([c for c in value.reads if c in one.column_names]))
            record[value.column] = got[0].as_py()
        record["_part"] = part
        return record

    def diff(self, a: Indexed, label_a: str, b: Indexed, label_b: str, limit: int = 200) -> dict:
        """Two models' answers cell by cell: successful rows matched on (item_key, envelope, ordering, sample).
        Returns counts (matched, only in A, only in B), agreement (class: same class; score: mean absolute
        difference and Pearson correlation), the class confusion table, and per item (matrix column) the share
        of matched cells that agree, lowest first."""
        side = ("SELECT item_key, envelope, ordering, sample, mcol, answer_class, score FROM {t} WHERE label = ? "
                "AND NOT failed QUALIFY row_number() OVER (PARTITION BY item_key, envelope, ordering, sample "
                "ORDER BY attempt DESC) = 1")
        pairs = (f"WITH a AS ({side.format(t='idx_a')}), b AS ({side.format(t='idx_b')}) ")
        keys = "item_key, envelope, ordering, sample"
        summary = self.query([a, b], pairs + (
            f"SELECT (SELECT count(*) FROM a JOIN b USING ({keys})) AS matched, "
            f"(SELECT count(*) FROM a ANTI JOIN b USING ({keys})) AS only_a, "
            f"(SELECT count(*) FROM b ANTI JOIN a USING ({keys})) AS only_b, "
            f"(SELECT count(*) FILTER (WHERE a.answer_class = b.answer_class) FROM a JOIN b USING ({keys})) AS same, "
            f"(SELECT avg(abs(a.score - b.score)) FROM a JOIN b USING ({keys})) AS mean_abs_diff, "
            f"(SELECT corr(a.score, b.score) FROM a JOIN b USING ({keys})) AS corr"),
            [label_a, label_b]).to_pylist()[0]
        confusion = self.query([a, b], pairs + f"SELECT a.answer_class AS ca, b.answer_class AS cb, count(*) AS n "
                               f"FROM a JOIN b USING ({keys}) GROUP BY ALL ORDER BY ca, cb", [label_a, label_b])
        items = self.query([a, b], pairs + (
            f"SELECT a.mcol AS item, count(*) AS n, count(*) FILTER (WHERE a.answer_class = b.answer_class) AS same, "
            f"avg(abs(a.score - b.score)) AS mean_abs_diff FROM a JOIN b USING ({keys}) GROUP BY a.mcol "
            f"ORDER BY same / n, mean_abs_diff DESC NULLS LAST, item LIMIT ?"), [label_a, label_b, limit])
        return {"summary": summary, "confusion": confusion.to_pylist(), "items": items.to_pylist()}

    def instrument_comparison(self, a: Indexed, label_a: str, b: Indexed, label_b: str, max_parts: int = 2000):
        """The instrument's own comparison (``Instrument.compare``, e.g. forced_choice's fingerprints) of the
        two sides, read from their traces; None when the instrument has none, or a note when either side
        holds more than ``max_parts`` parts (reading them would hold the page up)."""
        from mirrorscan.grid.settings import Settings
        from mirrorscan.grid.trace_schema import trace_schema

        if a.instrument is not b.instrument or not a.instrument.compares:
            return None
        sides = []
        for inv in (a, b):
            parts = inv.store.list_parts(inv.row["experiment"], inv.row["invocation_id"])
            if len(parts) > max_parts:
                return f"(the instrument's comparison reads every trace: {len(parts):,} parts; run mirrorscan compare)"
            traces = inv.store.read(inv.row["experiment"], inv.row["invocation_id"],
                                    schema=trace_schema(inv.instrument.columns))
            sides.append((traces, Settings.from_json(inv.row["settings"])))
        try:
            return a.instrument.compare(sides[0], sides[1], label_a=label_a, label_b=label_b).text
        except ConfigError as exc:
            return f"({exc.problem})"

    def labels(self, inv: Indexed) -> list[str]:
        """The model labels of an invocation."""
        return self.facets(inv)["label"]

    def files(self, inv: Indexed) -> list[tuple[str, int]]:
        """(path relative to the invocation folder, bytes) of its reports and analyses: every file outside
        traces/, the index and spilled logs."""
        base = inv.store.invocation_dir(inv.row["experiment"], inv.row["invocation_id"])
        skip = ("traces/", "index/", "inference_log/", "quarantine/")
        out = []
        for info in inv.store._files(base):
            rel = info.path[len(base) + 1:]
            if not rel.startswith(skip) and not any(part.startswith(".") for part in rel.split("/")):
                out.append((rel, info.size or 0))
        return sorted(out)

    def read_file(self, inv: Indexed, rel: str) -> bytes:
        """The bytes of one report file that ``files`` lists (anything else: NotFound)."""
        if rel not in {r for r, _ in self.files(inv)}:
            raise NotFound(f"no report file {rel!r} in this invocation")
        return inv.store.read_bytes(f"{inv.store.invocation_dir(inv.row['experiment'], inv.row['invocation_id'])}/{rel}")

    def close(self) -> None:
        """Close the catalog and DuckDB connections."""
        self.catalog.close()
        self._duck.close()


def _one_row(parquet: pq.ParquetFile, row: int) -> pa.Table | None:
    """Row ``row`` (0-based) of a part, reading only the row group that holds it (None past the end)."""
    start = 0
    for group in range(parquet.num_row_groups):
        n = parquet.metadata.row_group(group).num_rows
        if row < start + n:
            return parquet.read_row_group(group).slice(row - start, 1)
        start += n
    return None


def timing(browser: Browser, inv: Indexed | None) -> list:
    """Per-endpoint timing (``results.browse.timing.per_endpoint``) of one invocation's requests (catalog rows
    and the rows spilled beside its traces), or of every request in the catalog when ``inv`` is None."""
    from mirrorscan.cluster.catalog.inference_view import spill_dataset
    from mirrorscan.results.browse.timing import gather, per_endpoint

    invocation_id = inv.row["invocation_id"] if inv is not None else None
    rows = browser.catalog.timing_rows(invocation_id)
    spilled: list[tuple] = []
    if inv is not None:
        table = spill_dataset(inv.store, inv.row["experiment"], invocation_id).to_table(
            columns=["endpoint", "started_at", "ttft_ms", "decode_tok_s", "row_uid"])
        spilled = list(zip(*(table.column(c).to_pylist() for c in table.column_names)))
    return per_endpoint(gather(rows, spilled))
