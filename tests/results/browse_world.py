"""A small store and catalog for the browser's tests, written the way scans write them: forced_choice trace
rows in the real schema, one part per engine batch (``TraceStore.write_part``), an invocation row per run in a
real catalog, and inference_log rows from the real writer. One row's answer is a script tag."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.catalog.inference_writer import InferenceLogWriter
from mirrorscan.cluster.catalog.inference_rows import log_rows_from_traces
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.instrument import resolve
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema
from mirrorscan.instruments.forced_choice.envelopes import load_envelopes

EXPERIMENT = "browse-world"
SCRIPT_ANSWER = "<script>document.title='pwned'</script>"
"""The answer of one stored trace: a page that ran it would change its own title."""
PAIRS = [("cat", "dog"), ("tea", "coffee"), ("sea", "mountain"), ("red", "blue")]
ENVELOPES = ["english_strict", "json_schema"]
ORDERINGS = ["AB", "BA"]
LABELS = ["alpha", "beta"]


def answer_of(label: str, pair: int, envelope: str, ordering: str) -> tuple[str, str]:
    """(response, class) of one made-up cell: alpha prefers the first word, beta mostly the second; beta's
    answer of the first pair in english_strict AB is the script tag (classed UNCLEAR)."""
    a, b = PAIRS[pair]
    if label == "beta" and pair == 0 and envelope == "english_strict" and ordering == "AB":
        return SCRIPT_ANSWER, "UNCLEAR"
    first = (label == "alpha") or (pair == 3)
    word = a if first else b
    return f"I choose {word}.", "A" if first else "B"


def cell_rows(invocation_id: str, start: datetime) -> list[dict]:
    """Every cell of the world's grid, one row each (sample 0, attempt 1), plus one failed attempt of a cell
    that succeeded on its second attempt."""
    rows, k = [], 0
    for label in LABELS:
        for p, (a, b) in enumerate(PAIRS):
            for env in ENVELOPES:
                for order in ORDERINGS:
                    response, cls = answer_of(label, p, env, order)
                    item = f"{a}|{b}"
                    first, second = (a, b) if order == "AB" else (b, a)
                    t = start + timedelta(seconds=k)
                    attempt = 1
                    if label == "alpha" and p == 1 and env == "json_schema" and order == "BA":
                        rows.append(_row(invocation_id, label, item, a, b, env, order, 1, None, None, t,
                                         first, second, error="RuntimeError: engine died"))
                        attempt = 2
                    rows.append(_row(invocation_id, label, item, a, b, env, order, attempt, response, cls, t,
                                     first, second))
                    k += 1
    return rows


def _row(inv, label, item, a, b, env, order, attempt, response, cls, t, first, second, error=None) -> dict:
    return {"invocation_id": inv, "experiment": EXPERIMENT, "instrument": "forced_choice",
            "probe_id": f"{label}|{item}|{env}|{order}", "sample": 0, "attempt": attempt, "label": label,
            "model": f"org/{label}", "model_canonical": f"org/{label}", "backend": "hf", "item_key": item,
            "envelope": env, "ordering": order, "system_text": "Answer with one word.",
            "user_text": f"Which do you prefer, {first} or {second}?", "response": response,
            "temperature": 0.0, "max_tokens": 24, "seed": 7, "prompt_tokens": 20,
            "completion_tokens": None if response is None else 5, "timing_scope": "batch", "batch_size": 4,
            "started_at": t, "ttft_ms": 30.0 + (t.second * 17) % 40 + attempt, "total_ms": 160.0 + t.second,
            "decode_tok_s": 40.0 + (t.second * 13) % 25,
            "endpoint": f"engine://hf/org/{label}", "error": error, "created_at": t,
            "pair_id": f"{a}_{b}", "word_a": a, "word_b": b, "class": cls, "classifier_version": "fc-test"}


def build(root, catalog_dsn: str, part_rows: int = 4) -> dict:
    """Write the world: one complete invocation of the grid in parts of ``part_rows`` rows (one label per
    part), its catalog row and its inference_log rows. Returns the store URI, the invocation id and the rows."""
    store = open_store(str(root / "store"))
    schema = trace_schema(resolve("forced_choice").columns)
    invocation_id = str(uuid.uuid4())
    start = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
    rows = cell_rows(invocation_id, start)
    for label in LABELS:
        mine = [r for r in rows if r["label"] == label]
        for i in range(0, len(mine), part_rows):
            store.write_part(to_trace_table(mine[i:i + part_rows], schema), EXPERIMENT, invocation_id, f"w-{label}")
    envelope_set = load_envelopes()
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({
            "invocation_id": invocation_id, "experiment": EXPERIMENT, "instrument": "forced_choice",
            "settings": {"format": 2, "experiment": EXPERIMENT, "instrument": "forced_choice", "samples": 1,
                         "models": [{"label": x, "model": f"org/{x}"} for x in LABELS],
                         "instrument_settings": {"probe_set": "(test)", "probe_set_sha256": "(test)",
                                                 "envelopes": ENVELOPES, "orderings": ORDERINGS,
                                                 "envelope_set": {"texts": {i: envelope_set.envelopes[i].frozen()
                                                                            for i in ENVELOPES}}}},
            "settings_hash": "test", "status": "complete", "store_uri": store.uri, "started_at": start})
    writer = InferenceLogWriter(catalog_dsn, store.uri, EXPERIMENT, invocation_id, "browse-test")
    writer.add(log_rows_from_traces(pa.Table.from_pylist(rows, schema)))
    writer.close()
    return {"store": store.uri, "invocation_id": invocation_id, "rows": rows, "schema": schema}


@contextlib.contextmanager
def served(app):
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yields the port, stops on exit."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):   # bounded: 60 s
        if server.started:
            break
        time.sleep(0.1)
    assert server.started, "uvicorn did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
