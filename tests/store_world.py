"""A store and catalog holding one complete forced_choice invocation, written as a scan writes them: the
browse world's rows (``tests/results/browse_world.py``) in Parquet parts, and a catalog row carrying the
frozen settings of a real config of that grid (so ``analyze`` and ``report`` can read it)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import browse_world as world  # noqa: E402

EXPERIMENT = world.EXPERIMENT
LABELS = world.LABELS


def build(root: Path, dsn: str) -> dict:
    """Write the experiment folder (``root/experiments/<name>``), the store (``root/store``) and the catalog
    row; returns the invocation id, the store folder and the experiment folder."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.settings import settings_hash
    from mirrorscan.grid.spec import load_spec
    from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

    exp = root / "experiments" / EXPERIMENT
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\n" + "".join(f"{a}_{b},{a},{b}\n" for a, b in world.PAIRS))
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": f"/models/org/{x}", "label": x} for x in LABELS],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": world.ENVELOPES}, "max_tokens": 24, "seed": 7,
        "batch_size": 4}))
    store = open_store(str(root / "store"))
    settings = load_spec(exp).settings().to_json()
    settings["execution"]["store"] = store.uri
    invocation_id = str(uuid.uuid4())
    rows = world.cell_rows(invocation_id, datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc))
    schema = trace_schema(resolve("forced_choice").columns)
    for i in range(0, len(rows), 8):
        store.write_part(to_trace_table(rows[i:i + 8], schema), EXPERIMENT, invocation_id, "w")
    with Catalog(dsn) as catalog:
        catalog.create_invocation({
            "invocation_id": invocation_id, "experiment": EXPERIMENT, "instrument": "forced_choice",
            "settings": settings, "settings_hash": settings_hash(settings), "status": "complete",
            "store_uri": store.uri, "counts": {"cells": len(rows) - 1}})
    return {"invocation_id": invocation_id, "store_dir": root / "store", "experiment_dir": exp}
