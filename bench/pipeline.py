"""Benchmark: the whole scan pipeline against the bare engine loop, on the same cells and model.

A (bare)      ``actors.hf_sampler.HFSampler`` constructed in this process and called directly on the
              rendered cells, ``--batch-size`` cells per call, one torch thread.
B (pipeline)  the path a scan runs for one model: ``cluster.scan.sweep.run_model_journaled`` (the in-flight
              journal around ``cluster.scan.pipeline.run_model``: Ray Data render tasks → an actor pool of
              size 1 holding the same HFSampler class → Parquet parts written through ``cluster.store.traces``
              into a temp store), the actor inserting each batch's inference_log rows into the catalog
              (an embedded PostgreSQL in a temp folder), and the driver updating the catalog invocation
              per landed part through ``cluster.catalog.client.Catalog.update_progress``.

Both sides: the demo model (``cluster.models.demo.prepare_demo_model()``, float32), greedy, the same
``--max-tokens``, left padding, the same batches (contiguous ``--batch-size`` slices of the same
cells), ``torch.set_num_threads(1)`` (A in this process; B's actor via HFSampler and Ray's
``OMP_NUM_THREADS=1``). Ray is started once with ``ensure_ray(num_cpus=2)`` and reused by every B run.
Cells: the starter pairs × the load-bearing envelopes × AB/BA, through ``plan_attempts`` and
``add_seeds`` as a scan does, first ``--cells`` of them. Runs are interleaved A B A B …
(``--repeats`` pairs), so slow drift of the machine falls on both sides.

How each run is measured (``time.monotonic``, which on Linux is one clock for every process of the
machine, so times taken in the actor and in this driver can be subtracted):

A   load     = HFSampler(...) construction, a fresh instance each run (not in the rate).
    cells/s  = cells ÷ (first call start → last call end); the first call of a fresh model is in it.
B   wall     = run_model_journaled called → its iterator exhausted (every part written, the journal
               settled, every catalog update done). The actor is a subclass of HFSampler (``TimedSampler``) that only appends its
               ``__init__`` and each ``__call__``'s start and end to a JSON-lines file.
    load     = the actor's ``__init__`` (imports of torch/transformers in the fresh worker + weights).
    cells/s  = cells ÷ (wall − load)             ← the figure compared with A (target B/A ≥ 0.8)
    It still contains what a pipeline costs per run besides the model load: starting the actor's
    worker process, Ray Data planning, the render and write tasks, the tail after the last batch.
    Those pieces are printed apart (spawn, head, tail), and so is the actor's own steady state,
    cells ÷ (first batch start → last batch end) inside the actor, which holds the per-batch cost of
    Ray Data (hand-off gaps between batches) but no start-up or tail.
    "first part → last part" (cells after the first part ÷ that interval, as seen by the driver) is
    printed too, when parts land spread over at least half of the batch time (not when they all land
    together at the end, as they do while run_model feeds the whole grid as one block).

Ray start (``ensure_ray``) and catalog server start are timed once and reported apart from all rates.
B's stored rows are checked (every cell once, no error rows, batch sizes, one inference_log row each in
the catalog) and compared with A's answers; the script exits 1 when a check fails (``--check-target`` also exits 3 when B/A < 0.8).

Run from the repository root: ``python bench/pipeline.py`` (``--help`` for options).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")        # before torch is imported anywhere
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # transformers' "Loading weights" bar (driver)

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from mirrorscan.actors.hf_sampler import HFSampler  # noqa: E402
from mirrorscan.cluster.scan.pipeline import Pool, render_block  # noqa: E402
from mirrorscan.cluster.store.traces import open_store  # noqa: E402
from mirrorscan.cluster.scan.sweep import run_model_journaled  # noqa: E402
from mirrorscan.grid.cells import add_seeds, plan_attempts, with_probe_ids  # noqa: E402
from mirrorscan.grid.instrument import InstrumentRef, ref_from_section  # noqa: E402
from mirrorscan.grid.records import ModelVariant, InvocationContext  # noqa: E402

TARGET_RATIO = 0.8       # pipeline cells/s ÷ bare cells/s, medians
EXPERIMENT = "bench_pipeline"
LABEL = "smollm2-135m-instruct"
ROOT_SEED = 20261129


class TimedSampler(HFSampler):
    """HFSampler that appends when its ``__init__`` and each ``__call__`` ran (monotonic) to a file."""

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, timing_path: str):
        start = time.monotonic()
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()   # the "Loading weights" bar, forwarded from every actor
        super().__init__(variant, model_source, run)
        self._timing_path = timing_path
        self._note({"event": "init", "start": start, "end": time.monotonic(), "pid": os.getpid()})

    def __call__(self, batch: pa.Table) -> pa.Table:
        start = time.monotonic()
        out = super().__call__(batch)
        self._note({"event": "batch", "start": start, "end": time.monotonic(), "rows": batch.num_rows})
        return out

    def _note(self, record: dict) -> None:
        with open(self._timing_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def bench_cells(n: int) -> tuple[pa.Table, InstrumentRef]:
    """The first ``n`` cells of starter pairs × load-bearing envelopes × AB/BA (more samples if needed),
    expanded by the forced-choice instrument, planned and seeded as a scan does; plus the instrument as
    the pipeline takes it."""
    ref = ref_from_section("forced_choice", {"envelopes": "load_bearing"})
    samples = -(-n // ref.instrument.n_items(ref.spec))
    cells = with_probe_ids(ref.instrument.cells(ref.spec, [LABEL], samples))
    nothing = pa.table({"probe_id": pa.array([], pa.string()), "sample": pa.array([], pa.int32()),
                        "error": pa.array([], pa.string())})
    todo, _ = plan_attempts(cells, nothing, max_attempts=3)
    return add_seeds(todo, ROOT_SEED).slice(0, n), ref


def run_bare(cells: pa.Table, envelopes: InstrumentRef, variant: ModelVariant, source: str, run: InvocationContext, batch_size: int) -> dict:
    """One A run: a fresh HFSampler in this process, then every batch through it."""
    import torch

    torch.set_num_threads(1)
    rendered = render_block(cells, envelopes)
    t0 = time.monotonic()
    sampler = HFSampler(variant, source, run)
    t1 = time.monotonic()
    outs = [sampler(rendered.slice(i, batch_size)) for i in range(0, rendered.num_rows, batch_size)]
    t2 = time.monotonic()
    rows = pa.concat_tables(outs)
    del sampler
    return {"load": t1 - t0, "loop": t2 - t1, "cells_s": cells.num_rows / (t2 - t1), "rows": rows}


def run_pipeline(cells: pa.Table, envelopes: InstrumentRef, variant: ModelVariant, source: str, store_uri: str, catalog,
                 batch_size: int, work: Path, settings: dict) -> dict:
    """One B run: a new invocation in the catalog, run_model_journaled through Ray Data (inference_log rows
    into the catalog), a catalog update per part."""
    invocation_id = str(uuid.uuid4())
    run = InvocationContext(invocation_id=invocation_id, experiment=EXPERIMENT, instrument="forced_choice",
                     envelope_version=settings["envelope_version"], catalog_dsn=catalog.dsn, store_uri=store_uri)
    catalog.create_invocation({"invocation_id": invocation_id, "experiment": EXPERIMENT,
                               "instrument": "forced_choice", "settings": settings, "settings_hash": "bench",
                               "status": "running", "counts": {"cells": cells.num_rows},
                               "store_uri": store_uri})
    timing = work / f"timing-{invocation_id}.jsonl"
    kwargs = {"variant": variant, "model_source": source, "run": run, "timing_path": str(timing)}
    parts, done, catalog_s = [], {"rows": 0, "errors": 0}, 0.0
    t_start = time.monotonic()
    pool = Pool(TimedSampler, kwargs, envelopes, store_uri=store_uri, experiment=EXPERIMENT,
                invocation_id=invocation_id, batch_size=batch_size)
    for rows, errors in run_model_journaled(cells, pool):
        landed = time.monotonic()
        parts.append((landed, rows))
        done["rows"] += rows
        done["errors"] += errors
        catalog.update_progress(invocation_id, "running", {"cells_this_run": cells.num_rows, **done})
        catalog_s += time.monotonic() - landed
    t_end = time.monotonic()
    catalog.update_progress(invocation_id, "complete" if done["rows"] == cells.num_rows and not done["errors"]
                            else "incomplete", {"cells": cells.num_rows, **done}, finished=True)

    events = [json.loads(line) for line in timing.read_text().splitlines()]
    inits = [e for e in events if e["event"] == "init"]
    batches = [e for e in events if e["event"] == "batch"]
    init = inits[0]
    first_batch, last_batch = min(b["start"] for b in batches), max(b["end"] for b in batches)
    wall, load = t_end - t_start, init["end"] - init["start"]
    out = {"invocation_id": invocation_id, "wall": wall, "load": load, "actors": len(inits),
           "spawn": init["start"] - t_start, "head": first_batch - init["end"],
           "steady": last_batch - first_batch, "tail": t_end - last_batch, "catalog": catalog_s,
           "batches": len(batches), "parts": len(parts), "done": done,
           "cells_s": cells.num_rows / (wall - load),
           "actor_cells_s": cells.num_rows / (last_batch - first_batch),
           "part_cells_s": None}
    # Only meaningful when parts land through the run; parts that land together at the end (one
    # block per run) would give a rate of nonsense, so it needs half the batch time between them.
    out["first_part_at"] = parts[0][0] - t_start if parts else None
    if len(parts) > 1 and parts[-1][0] - parts[0][0] >= 0.5 * (last_batch - first_batch):
        out["part_cells_s"] = (cells.num_rows - parts[0][1]) / (parts[-1][0] - parts[0][0])
    return out


def check_rows(problems: list[str], what: str, ok: bool, detail: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}: {detail}")
    if not ok:
        problems.append(what)


def verify(store_uri: str, catalog, b: dict, a_rows: pa.Table, n: int, batch_size: int) -> list[str]:
    """B's stored rows: every cell once, no errors, the same batches and answers as A, and one
    inference_log row per cell in the catalog (the actor's writer may still be closing: waits ≤ 60 s)."""
    problems: list[str] = []
    deadline, logged = time.monotonic() + 60, 0
    while time.monotonic() < deadline:
        logged = catalog.execute("SELECT count(*) FROM inference_log WHERE invocation_id = %s",
                                 [b["invocation_id"]])[0][0]
        if logged >= n:
            break
        time.sleep(0.5)
    check_rows(problems, "inference_log rows in the catalog", logged == n, f"{logged}/{n}")
    rows = open_store(store_uri).read(EXPERIMENT, b["invocation_id"])
    keys = {(p, s) for p, s in zip(rows["probe_id"].to_pylist(), rows["sample"].to_pylist())}
    check_rows(problems, "rows stored", rows.num_rows == n and len(keys) == n, f"{rows.num_rows} rows, {len(keys)} distinct cells")
    errors = rows.num_rows - rows.column("error").null_count
    check_rows(problems, "error rows", errors == 0, str(errors))
    sizes = sorted(pc.unique(rows.column("batch_size")).to_pylist())
    want = sorted({batch_size} | ({n % batch_size} if n % batch_size else set()))
    check_rows(problems, "engine batch sizes", sizes == want, str(sizes))
    check_rows(problems, "one actor per run", b["actors"] == 1, str(b["actors"]))
    ours = {(r["probe_id"], r["sample"]): r["response"] for r in a_rows.select(["probe_id", "sample", "response"]).to_pylist()}
    theirs = {(r["probe_id"], r["sample"]): r["response"] for r in rows.select(["probe_id", "sample", "response"]).to_pylist()}
    same = sum(ours.get(k) == v for k, v in theirs.items())
    check_rows(problems, "answers equal to A's", same == n, f"{same}/{n}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=256, help="cells per run (default 256)")
    p.add_argument("--max-tokens", type=int, default=16, help="generated tokens per answer, at most (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="A/B pairs, interleaved A B A B … (default 3)")
    p.add_argument("--batch-size", type=int, default=16, help="cells per engine batch (default 16)")
    p.add_argument("--model", metavar="PATH", help="a local HF model folder instead of the demo model "
                   "(e.g. a tiny random model, to smoke-test the script; figures then mean nothing)")
    p.add_argument("--check-target", action="store_true", help=f"also exit 3 when B/A < {TARGET_RATIO}")
    args = p.parse_args(argv)
    if args.cells < 1 or args.max_tokens < 1 or args.repeats < 1 or args.batch_size < 1:
        p.error("--cells, --max-tokens, --repeats and --batch-size must be positive")
    if os.environ.pop("RAY_ADDRESS", None):
        print("note: RAY_ADDRESS ignored; this benchmark starts its own local Ray", file=sys.stderr)

    import torch

    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.models.demo import prepare_demo_model
    from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS
    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    torch.set_num_threads(1)
    source = str(Path(args.model).resolve()) if args.model else str(prepare_demo_model())
    cells, envelopes = bench_cells(args.cells)
    variant = ModelVariant(label=LABEL, model=DEMO_MODEL_ALIAS, temperature=0.0, top_p=1.0,
                           max_tokens=args.max_tokens)
    env_version = envelopes.instrument.envelope_version(envelopes.spec)
    settings = {"bench": "pipeline", "cells": args.cells, "max_tokens": args.max_tokens,
                "batch_size": args.batch_size, "model": source, "envelope_version": env_version}
    bare_run = InvocationContext(invocation_id="bare", experiment=EXPERIMENT, instrument="forced_choice",
                          envelope_version=env_version)
    print(f"{cells.num_rows} cells, batch {args.batch_size}, max_tokens {args.max_tokens}, model {source}, "
          f"torch threads {torch.get_num_threads()}")

    work = Path(tempfile.mkdtemp(prefix="mirrorscan-bench-pipeline-"))
    work.chmod(0o755)   # as root the catalog server runs as `postgres`, which must enter this folder
    pg_root = work / "catalog"
    store_uri = str(work / "store")
    problems: list[str] = []
    try:
        t0 = time.monotonic()
        dsn = embedded_pg.ensure_running(pg_root)
        catalog = Catalog(dsn)
        pg_s = time.monotonic() - t0
        t0 = time.monotonic()
        ensure_ray(num_cpus=2)
        ray_s = time.monotonic() - t0
        print(f"catalog server start + connect: {pg_s:.2f} s   Ray start (ensure_ray, num_cpus=2): {ray_s:.2f} s\n")

        a_runs, b_runs = [], []
        for r in range(args.repeats):
            a = run_bare(cells, envelopes, variant, source, bare_run, args.batch_size)
            a_runs.append(a)
            print(f"A{r + 1} bare     {a['cells_s']:7.2f} cells/s   loop {a['loop']:6.2f} s   (model load {a['load']:.2f} s)")
            b = run_pipeline(cells, envelopes, variant, source, store_uri, catalog, args.batch_size, work, settings)
            b_runs.append(b)
            part = f"{b['part_cells_s']:.2f} cells/s" if b["part_cells_s"] else "n/a (parts landed together)"
            print(f"B{r + 1} pipeline {b['cells_s']:7.2f} cells/s   wall {b['wall']:6.2f} s − load {b['load']:.2f} s   "
                  f"[spawn {b['spawn']:.2f}, head {b['head']:.2f}, batches {b['steady']:.2f}, tail {b['tail']:.2f}; "
                  f"catalog {b['catalog'] * 1000:.0f} ms]   in-actor {b['actor_cells_s']:.2f} cells/s   "
                  f"{b['parts']} part(s), first at {b['first_part_at']:.1f} s, first→last part {part}")
            print("   checks:")
            problems += verify(store_uri, catalog, b, a["rows"], cells.num_rows, args.batch_size)
        catalog.close()

        med_a = statistics.median(a["cells_s"] for a in a_runs)
        med_b = statistics.median(b["cells_s"] for b in b_runs)
        med_actor = statistics.median(b["actor_cells_s"] for b in b_runs)
        ratio = med_b / med_a
        print(f"\nmedian A (bare)            {med_a:7.2f} cells/s")
        print(f"median B (pipeline)        {med_b:7.2f} cells/s   (wall − actor model load)")
        print(f"median B in-actor steady   {med_actor:7.2f} cells/s   (first batch start → last batch end)")
        print(f"model load: A median {statistics.median(a['load'] for a in a_runs):.2f} s in-process, "
              f"B median {statistics.median(b['load'] for b in b_runs):.2f} s in the actor "
              f"(+ actor spawn {statistics.median(b['spawn'] for b in b_runs):.2f} s)")
        print(f"Ray start {ray_s:.2f} s (once, reused by every B run); catalog server start {pg_s:.2f} s")
        print(f"ratio B/A = {ratio:.3f}   (in-actor B/A = {med_actor / med_a:.3f})   "
              f"target ≥ {TARGET_RATIO}: {'met' if ratio >= TARGET_RATIO else 'MISSED'}")
    finally:
        if pg_root.exists():
            embedded_pg.stop(pg_root)
        try:
            import ray

            ray.shutdown()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if problems:
        print(f"\nWRONG: {len(problems)} check(s) failed: {', '.join(sorted(set(problems)))}", file=sys.stderr)
        return 1
    if args.check_target and ratio < TARGET_RATIO:
        return 3
    return 0


if __name__ == "__main__":
    from on_term import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()   # a time limit's SIGTERM still stops the catalog server this run started
    sys.exit(main())
