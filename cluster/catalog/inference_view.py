"""Reading the inference log for ``mirrorscan sql``: the catalog's table as Arrow, the spilled Parquet parts as a
dataset, and the ``inference_log`` view (DuckDB) that joins them, each row once by ``row_uid``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs

from mirrorscan.cluster.catalog.inference_rows import SPILL_DIR, SPILL_SCHEMA

CATALOG_SCHEMA = pa.schema([pa.field("id", pa.int64())] + list(SPILL_SCHEMA))
"""inference_log read from the catalog: id, LOG_COLUMNS, row_uid, logged_at (uuid and jsonb as text)."""


def catalog_arrow(fetch) -> pa.Table:
    """The catalog's inference_log as Arrow in CATALOG_SCHEMA, ordered by id; ``fetch(sql)`` runs a query
    on a migrated catalog and returns its rows (e.g. ``Catalog.execute``)."""
    casts = {"invocation_id", "request_headers", "row_uid"}
    select = ", ".join(f"{c}::text" if c in casts else c for c in CATALOG_SCHEMA.names)
    rows = fetch(f"SELECT {select} FROM inference_log ORDER BY id")
    return pa.Table.from_pydict({name: [r[i] for r in rows] for i, name in enumerate(CATALOG_SCHEMA.names)},
                                schema=CATALOG_SCHEMA)


def spill_parts(store, experiment: str | None = None, invocation_id: str | None = None) -> list[str]:
    """Paths of complete spilled parts (``*/inference_log/part-*.parquet``) in ``store`` (a TraceStore), or
    only those of one invocation when ``experiment`` and ``invocation_id`` are given."""
    base = store.invocation_dir(experiment, invocation_id) if experiment and invocation_id else store.root
    if store.fs.get_file_info(base).type == pafs.FileType.NotFound:
        return []
    infos = store.fs.get_file_info(pafs.FileSelector(base, recursive=True))
    return sorted(f.path for f in infos if f.type == pafs.FileType.File and f.base_name.endswith(".parquet")
                  and not f.base_name.startswith(".") and f.path.rsplit("/", 2)[-2] == SPILL_DIR)


def spill_dataset(store, experiment: str | None = None, invocation_id: str | None = None):
    """A pyarrow dataset over the spilled parts of ``store`` (or of one invocation; SPILL_SCHEMA; empty when
    there is none)."""
    import pyarrow.dataset as pads

    return pads.dataset(spill_parts(store, experiment, invocation_id), schema=SPILL_SCHEMA, format="parquet",
                        filesystem=store.fs)


def view_sql(catalog_name: str, spill_name: str) -> str:
    """DuckDB SQL of the ``inference_log`` view over a registered catalog table and spill dataset.

    Catalog rows first (stored_in 'catalog'), then spilled rows (stored_in 'spill', id null) whose
    row_uid the catalog does not hold, one per row_uid; request_headers as JSON."""
    return (f"CREATE VIEW inference_log AS "
            f"SELECT * REPLACE (CAST(request_headers AS JSON) AS request_headers), 'catalog' AS stored_in "
            f"FROM {catalog_name} "
            f"UNION ALL BY NAME "
            f"SELECT CAST(NULL AS BIGINT) AS id, * REPLACE (CAST(request_headers AS JSON) AS request_headers), "
            f"'spill' AS stored_in FROM {spill_name} s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {catalog_name} c WHERE c.row_uid = s.row_uid) "
            f"QUALIFY row_number() OVER (PARTITION BY s.row_uid ORDER BY s.logged_at) = 1")
