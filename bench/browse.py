"""Benchmark: ``mirrorscan browse`` on a large store (the matrix and a trace page, over HTTP).

Store: ``--rows`` forced_choice trace rows (default 10^6: ``--labels`` 20 models × 5,000 pairs × 5 envelopes ×
AB/BA, one sample) in the real trace schema, written as scans write them: ``TraceStore.write_part``, one part per
engine batch of ``--part-rows`` rows (default 16, one model per part: 62,500 parts), with short made-up answers,
their class, batch timing and one invocation row in a real catalog (the embedded PostgreSQL of
``$MIRRORSCAN_HOME``). Building it is setup, cached under ``$MIRRORSCAN_HOME/bench/`` keyed by the parameters.

Then:
1. index   the browser's read-side index of the invocation (``results.browse.index.build``, one pass over every
           part's identity, coordinate, class and timing columns), once, timed apart: it is paid once per
           invocation (and per new part after a resume), never per request.
2. pages   ``mirrorscan browse`` started as its own process on 127.0.0.1 (uvicorn, the index above), and over
           HTTP (httpx, one connection): the first matrix page, the matrix filtered by envelope and class, a later
           page of columns, a cell's trace list and a trace page (each trace request a different random trace,
           so each reads another part), ``--repeats`` requests each after one warm-up; median and p90 wall time
           (monotonic, request sent → body read). Target: median under 1 s for the matrix and for a trace page.
3. naive   the baseline measured in the same run: the same matrix aggregate and the same trace lookup as one
           DuckDB query over a pyarrow dataset of every part (as ``mirrorscan sql`` reads traces), once each.

Prints a table and writes the figures to ``$MIRRORSCAN_HOME/bench/browse.json``; nothing is written into the
repository. Exit 3 with ``--check-target`` when a target is missed.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from datetime import datetime, timedelta, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

TARGET_S = 1.0
"""Median seconds, at most, for the matrix page and for a trace page."""
BUILD_FORMAT = 1
"""Bump when the store builder changes what it writes (part of the cache key)."""
EXPERIMENT = "browse-bench"
ENVELOPES = ("english_strict", "json_schema", "python_typed", "yaml_form", "xml_tag")
ORDERINGS = ("AB", "BA")
WORDS = ("cat dog tea coffee sea mountain red blue city village book film winter summer river desert train plane "
         "violin piano apple pear stone wood silver gold north south morning evening salt sugar").split()


def label_rows(label: str, n_pairs: int, invocation_id: str, schema: pa.Schema, rng: np.random.Generator,
               clock: datetime) -> pa.Table:
    """Every cell of one model (pairs × envelopes × orderings), as an HF engine writes its rows: rendered
    prompts, a short answer and its class, batch timing, where it ran."""
    from mirrorscan.grid.trace_schema import conform

    pair = np.repeat(np.arange(n_pairs), len(ENVELOPES) * len(ORDERINGS))
    env = np.tile(np.repeat(np.arange(len(ENVELOPES)), len(ORDERINGS)), n_pairs)
    order = np.tile(np.arange(len(ORDERINGS)), n_pairs * len(ENVELOPES))
    n = pair.size
    word_a = [f"{WORDS[p % len(WORDS)]}{p}" for p in range(n_pairs)]
    word_b = [f"{WORDS[(p * 7 + 3) % len(WORDS)]}{p}b" for p in range(n_pairs)]
    a = [word_a[p] for p in pair]
    b = [word_b[p] for p in pair]
    envs = [ENVELOPES[i] for i in env]
    orders = [ORDERINGS[i] for i in order]
    classes = rng.choice(["A", "B", "UNCLEAR", "REF"], size=n, p=[0.35, 0.35, 0.25, 0.05])
    responses = [f"I would choose {x}." if c == "A" else f"I would choose {y}." if c == "B" else
                 "I'm not sure what to say." if c == "UNCLEAR" else "I can't choose." for x, y, c in zip(a, b, classes)]
    items = [f"{x}|{y}" for x, y in zip(a, b)]
    first = [x if o == "AB" else y for x, y, o in zip(a, b, orders)]
    second = [y if o == "AB" else x for x, y, o in zip(a, b, orders)]
    ttft = rng.uniform(30, 300, size=n)
    total = ttft + rng.uniform(100, 600, size=n)
    created = [clock + timedelta(milliseconds=float(i) * 40) for i in range(n)]
    columns = {
        "invocation_id": [invocation_id] * n, "experiment": [EXPERIMENT] * n, "instrument": ["forced_choice"] * n,
        "probe_id": [f"{label}|{i}|{e}|{o}" for i, e, o in zip(items, envs, orders)], "sample": np.zeros(n, np.int32),
        "attempt": np.ones(n, np.int32), "label": [label] * n, "model": [f"bench-org/{label}"] * n,
        "model_canonical": [f"bench-org/{label}"] * n, "backend": ["hf"] * n, "item_key": items, "envelope": envs,
        "envelope_version": ["bench"] * n, "ordering": orders, "system_text": ["Answer with one word."] * n,
        "user_text": [f"Which do you prefer, {x} or {y}? Answer in the {e} form." for x, y, e in zip(first, second, envs)],
        "system_folded": [False] * n, "response": responses, "temperature": np.zeros(n), "top_p": np.ones(n),
        "max_tokens": np.full(n, 24, np.int32), "seed": rng.integers(0, 2**62, size=n),
        "prompt_tokens": np.full(n, 40, np.int32), "completion_tokens": np.full(n, 8, np.int32),
        "finish_reason": ["stop"] * n, "timing_scope": ["batch"] * n, "batch_size": np.full(n, 16, np.int32),
        "prefill_ms": ttft, "started_at": created, "ttft_ms": ttft, "ttft_answer_ms": ttft, "total_ms": total,
        "decode_tok_s": 7 / ((total - ttft) / 1000), "endpoint": [f"engine://hf/bench-org/{label}"] * n,
        "node_id": ["a" * 56] * n, "hostname": ["bench-node"] * n, "error": pa.nulls(n, pa.string()),
        "created_at": created, "pair_id": [f"p{p}" for p in pair], "word_a": a, "word_b": b,
        "class": classes.tolist(), "classifier_version": ["fc-bench"] * n,
    }
    table = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v, schema.field(k).type) for k, v in columns.items()})
    return conform(table, schema)


def build_store(work: Path, rows: int, labels: int, part_rows: int, dsn: str) -> dict:
    """Write the store and the invocation's catalog row; returns what was built."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema

    per_label = len(ENVELOPES) * len(ORDERINGS)
    n_pairs = rows // (labels * per_label)
    store = open_store(str(work / "store"))
    schema = trace_schema(resolve("forced_choice").columns)
    invocation_id = str(uuid.uuid4())
    rng = np.random.default_rng(20261207)
    clock = datetime(2026, 12, 1, tzinfo=timezone.utc)
    parts = 0
    t0 = time.monotonic()
    for k in range(labels):
        label = f"model-{k:02d}"
        table = label_rows(label, n_pairs, invocation_id, schema, rng, clock + timedelta(hours=k))
        for start in range(0, table.num_rows, part_rows):
            store.write_part(table.slice(start, part_rows), EXPERIMENT, invocation_id, f"{label}-bench")
            parts += 1
        print(f"   {label}: {table.num_rows:,} rows, {parts:,} parts so far, {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
    with Catalog(dsn) as catalog:
        catalog.create_invocation({
            "invocation_id": invocation_id, "experiment": EXPERIMENT, "instrument": "forced_choice",
            "settings": {"format": 2, "experiment": EXPERIMENT, "instrument": "forced_choice", "samples": 1,
                         "models": [{"label": f"model-{k:02d}"} for k in range(labels)],
                         "instrument_settings": {"probe_set": "(bench)", "envelopes": list(ENVELOPES),
                                                 "orderings": list(ORDERINGS)}},
            "settings_hash": "bench", "status": "complete", "store_uri": store.uri})
    return {"invocation_id": invocation_id, "rows": n_pairs * per_label * labels, "parts": parts,
            "pairs": n_pairs, "labels": labels, "build_s": time.monotonic() - t0,
            "bytes": sum(f.stat().st_size for f in (work / "store").rglob("*.parquet"))}


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_gets(client, urls: list[str]) -> list[float]:
    """Wall seconds (monotonic) of each GET, request sent → body read; every answer must be 200."""
    out = []
    for url in urls:
        t0 = time.monotonic()
        response = client.get(url)
        took = time.monotonic() - t0
        if response.status_code != 200:
            raise SystemExit(f"GET {url} answered {response.status_code}: {response.text[:300]}")
        out.append(took)
    return out


def naive(store_uri: str, invocation_id: str, probe_id: str) -> dict:
    """The baseline: the matrix aggregate and one trace lookup as DuckDB queries over a dataset of every part."""
    import duckdb

    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema

    store = open_store(store_uri, create=False)
    con = duckdb.connect()
    out = {}
    t0 = time.monotonic()
    con.register("traces", store.dataset(EXPERIMENT, invocation_id, schema=trace_schema(resolve("forced_choice").columns)))
    out["list_and_open_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    con.sql("SELECT label, item_key, class, count(*) FROM traces WHERE error IS NULL GROUP BY ALL").fetchall()
    out["matrix_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    con.sql("SELECT * FROM traces WHERE probe_id = ?", params=[probe_id]).fetchall()
    out["trace_s"] = time.monotonic() - t0
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--labels", type=int, default=20)
    p.add_argument("--part-rows", type=int, default=16)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--rebuild", action="store_true", help="rebuild the store even when cached")
    p.add_argument("--skip-naive", action="store_true", help="leave out the full-scan baseline (minutes)")
    p.add_argument("--check-target", action="store_true")
    args = p.parse_args()

    import httpx

    from mirrorscan.cluster.catalog.client import resolve_dsn
    from mirrorscan.cluster.home import subdir
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.results.browse.source import Browser

    dsn = resolve_dsn(None)
    key = hashlib.sha256(json.dumps([BUILD_FORMAT, args.rows, args.labels, args.part_rows, dsn]).encode()).hexdigest()[:12]
    work = Path(subdir("bench")) / f"browse-{key}"
    done = work / "built.json"
    if done.is_file() and not args.rebuild:
        built = json.loads(done.read_text())
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"building the store under {work} (setup; cached for these parameters) …", file=sys.stderr, flush=True)
        built = build_store(work, args.rows, args.labels, args.part_rows, dsn)
        done.write_text(json.dumps(built))
    inv = built["invocation_id"]
    index_dir = work / "index"
    shutil.rmtree(index_dir, ignore_errors=True)

    t0 = time.monotonic()
    browser = Browser(dsn, index_dir)
    indexed = browser.indexed(inv)
    index_s = time.monotonic() - t0
    index_bytes = sum(f.stat().st_size for f in indexed.files)
    browser.close()

    port = free_port()
    env = dict(os.environ)
    server = subprocess.Popen([sys.executable, "-m", "mirrorscan.jobs.cli", "browse", "--port", str(port), "--catalog-dsn", dsn,
                               "--index-dir", str(index_dir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    base = f"http://127.0.0.1:{port}"
    figures: dict = {}
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            for _ in range(600):
                try:
                    client.get("/")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            first = timed_gets(client, [f"/invocations/{inv}/matrix"])[0]   # warm-up: connection, caches
            rng = random.Random(7)
            store = open_store(str(work / "store"), create=False)
            labels = [f"model-{k:02d}" for k in range(built["labels"])]
            pairs = sorted({f"{WORDS[p % len(WORDS)]}{p}|{WORDS[(p * 7 + 3) % len(WORDS)]}{p}b"
                            for p in range(built["pairs"])})
            traces = [f"/invocations/{inv}/trace?probe_id={rng.choice(labels)}|{rng.choice(pairs)}|"
                      f"{rng.choice(ENVELOPES)}|{rng.choice(ORDERINGS)}&sample=0&attempt=1"
                      for _ in range(args.repeats + 1)]
            pages = {
                "matrix (first page)": [f"/invocations/{inv}/matrix"] * (args.repeats + 1),
                "matrix (envelope + class filter)": [f"/invocations/{inv}/matrix?envelope=json_schema&answer=A"]
                * (args.repeats + 1),
                "matrix (page at column 2,400)": [f"/invocations/{inv}/matrix?offset=2400"] * (args.repeats + 1),
                "cell (its trace list)": [f"/invocations/{inv}/cell?r={labels[3]}&c={pairs[11]}"] * (args.repeats + 1),
                "trace page (random trace)": traces,
            }
            for name, urls in pages.items():
                times = timed_gets(client, urls)[1:]
                figures[name] = {"median_s": statistics.median(times),
                                 "p90_s": sorted(times)[int(0.9 * (len(times) - 1))], "n": len(times)}
    finally:
        server.terminate()
        server.wait(timeout=30)
    baseline = None if args.skip_naive else naive(str(work / "store"), inv, traces[0].split("probe_id=")[1].split("&")[0])

    print(f"\nstore: {built['rows']:,} rows in {built['parts']:,} parts of {args.part_rows} rows "
          f"({built['bytes'] / 2**20:.0f} MiB; built in {built['build_s']:.0f} s, cached)")
    print(f"index (once per invocation): {index_s:.1f} s for {built['parts']:,} parts, "
          f"{index_bytes / 2**20:.1f} MiB; first matrix request after start {first:.3f} s\n")
    print(f"{'page (over HTTP, ' + str(args.repeats) + ' requests)':<40} {'median':>8} {'p90':>8} {'target/median':>14}")
    for name, f in figures.items():
        print(f"{name:<40} {f['median_s']:>7.3f}s {f['p90_s']:>7.3f}s {TARGET_S / f['median_s']:>13.1f}×")
    if baseline:
        print(f"\nnaive full scan (DuckDB over every part, once): listing+opening {baseline['list_and_open_s']:.1f} s, "
              f"matrix aggregate {baseline['matrix_s']:.1f} s, one trace lookup {baseline['trace_s']:.1f} s")
        print(f"speed-up over the naive scan: matrix {baseline['matrix_s'] / figures['matrix (first page)']['median_s']:.0f}×, "
              f"trace {baseline['trace_s'] / figures['trace page (random trace)']['median_s']:.0f}×")
    result = {"built": built, "index_s": index_s, "index_bytes": index_bytes, "first_matrix_s": first,
              "pages": figures, "naive": baseline, "target_s": TARGET_S}
    (Path(subdir("bench")) / "browse.json").write_text(json.dumps(result, indent=2))
    missed = [n for n in ("matrix (first page)", "trace page (random trace)") if figures[n]["median_s"] >= TARGET_S]
    if missed:
        print(f"target missed: {', '.join(missed)}")
    return 3 if missed and args.check_target else 0


if __name__ == "__main__":
    sys.exit(main())
