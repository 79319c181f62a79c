"""Benchmark: open_scan (one run, two measures, targets stated).

1. plan      the path a new ``mirrorscan scan`` of an open_scan experiment runs before any work, on an experiment
             whose every cell is already held: ``load_spec`` of a config with ``--models`` labels (one hub id each,
             so the label → model_canonical rule holds), ``grid_cells(settings)``, then ``cluster.scan.inputs.check_append``
             (``earlier_rows``, the instrument's changed-probe check, ``stage_grids``: held cells, the post-hoc
             stage rebuilt from held answers, each stage's anti-join), which must find nothing left to run. The
             store is written as scans write it (``TraceStore.write_part``, one part per engine batch of
             ``--part-rows`` rows, per invocation, label and stage; rows conform to the instrument's trace
             schema, with rendered prompts and short made-up answers and ratings; each invocation ends with its
             row index, ``cluster.scan.outcome.index_rows``), spread over ``--invocations`` invocations that each appended a
             slice of the probes. Building it is setup (minutes), cached under
             ``$MIRRORSCAN_HOME/bench/`` keyed by every parameter, the series and the instrument's columns. Time:
             monotonic, median of ``--repeats`` (page cache warm: the parts were just written or read), with timers around the
             engine's functions for the breakdown (exclusive time: listing parts, reading, the source join,
             anti-joins, grid expansion, instrument hooks; a wrapper per call). Beside it, the floor any plan that
             opens every part pays: reading each part's Parquet footer alone. Target: under 5 s at 43 models ×
             863 probes × 5 samples.
2. sampling  ``actors.hf_sampler.HFSampler`` in-process (no Ray) on the demo model (SmolLM2-135M-Instruct, float32,
             ``torch.set_num_threads(1)`` as the actors run), ``--batch`` sampled answer cells of open_scan
             (the packaged demo probes, temperature 0.7, top_p 0.95, ``--max-tokens``), rendered as the engine
             renders them (``cells`` → ``with_probe_ids`` → ``add_seeds`` → ``render``): one call of the whole
             batch against one call per cell, after one warm-up of each, in ``--sampling-repeats`` interleaved
             rounds, the fastest of each reported (a 2-core machine is rarely quiet). Time: monotonic around the
             calls (model load apart); the share of it spent in ``RowSampler`` (per-row nucleus and Gumbel draws)
             is reported beside. Speed = generated tokens (``completion_tokens``) ÷ time, and cells ÷ time.
             Target: batched ÷ one at a time ≥ 4 at batch 16. Check: every batched text equals the cell's text
             alone (the sampler's batch independence), and every round gives the same texts.

Prints a small table per measure and writes the figures to ``$MIRRORSCAN_HOME/bench/open_scan.json``. Nothing
is written into the repository. Exit 1 when a check fails, 3 with ``--check-target`` when a target is missed.
One file over the usual length, as every bench is one script anyone can run: a third of it builds the store.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import csv  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from datetime import datetime, timedelta, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

TARGET_PLAN_S = 5.0
"""Seconds, at most, for the plan of a fully held 43 × 863 × 5 experiment."""
TARGET_RATIO = 4.0
"""Batched ÷ one-at-a-time sampling throughput, at least, at batch 16."""
BUILD_FORMAT = 2
"""Bump when the store builder changes what it writes (part of the cache key)."""
EXPERIMENT = "open-scan-bench"
SEED = 20261203
WORDS = ("the a of to and in that it is for on with as I you this be would but not are or have my an at by so "
         "reading hiking afternoon quiet view choose prefer because feel think people often city season time "
         "book walk nature honest answer question really quite much more some many both kind simple").split()
"""Vocabulary of the made-up answers (their length and spread, not their sense, is what is stored)."""


# ---- measure 1: the plan of a fully held experiment ---------------------------------------------------------


def write_probes(path: Path, n: int) -> None:
    """``n`` synthetic probes (``q0001``…), each a distinct question of 60–200 characters."""
    rng = np.random.default_rng(7)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["query_id", "query"])
    for i in range(n):
        words = " ".join(rng.choice(WORDS, size=int(rng.integers(10, 35))))
        writer.writerow([f"q{i + 1:04d}", f"Question {i + 1}: {words}, and why?"])
    path.write_text(out.getvalue(), encoding="utf-8")


def write_config(folder: Path, n_models: int, samples: int, probes: str) -> None:
    """An open_scan config with ``n_models`` labels, each its own hub id (never loaded: the plan reads none)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "models": [{"model": f"bench-org/model-{i:02d}", "label": f"m{i:02d}"}
                                              for i in range(n_models)],
        "open_scan": {"probes": probes}, "samples": samples, "seed": SEED, "batch_size": 16}, indent=2))


def sources_of(spec) -> dict[str, str]:
    """label → canonical source, as ``run_scan`` resolves it for hub ids (the id itself)."""
    return {m.label: m.model for m in spec.models}


def made_up_rows(rendered: pa.Table, *, invocation_id: str, labels_model: dict[str, str], envelope_version: str,
                 schema: pa.Schema, rng: np.random.Generator, clock: datetime) -> pa.Table:
    """Trace rows for rendered cells, as an HF engine would have written them: the prompt, a short answer (or a
    rating), token counts, batch timing, where it ran; conformed to ``schema``."""
    n = rendered.num_rows
    envelopes = rendered.column("envelope").to_pylist()
    is_answer = np.array([e == "answer" for e in envelopes])
    lengths = rng.integers(25, 90, size=n)
    responses, ratings = [], []
    for answer, length in zip(is_answer, lengths):
        if answer:
            responses.append(" ".join(rng.choice(WORDS, size=int(length))).capitalize() + ".")
            ratings.append(None)
        else:
            rating = int(rng.integers(1, 11))
            responses.append(str(rating))
            ratings.append(rating)
    completion = np.where(is_answer, lengths + 3, 2).astype(np.int32)
    user_chars = np.array([len(t) for t in rendered.column("user_text").to_pylist()])
    prefill = rng.uniform(40, 400, size=n)
    total = prefill + completion * rng.uniform(8, 30, size=n)
    created = [clock + timedelta(milliseconds=float(i) * 250) for i in range(n)]
    labels = rendered.column("label").to_pylist()
    seeds = rendered.column("seed").to_pylist()
    temps, tops, maxes = (rendered.column(c).to_pylist() for c in ("temperature", "top_p", "max_tokens"))
    params = [json.dumps({"do_sample": t != 0, "max_new_tokens": m, "sampler_version": 2,
                          "seed": s if t != 0 else None, "temperature": t if t != 0 else None,
                          "top_k": None, "top_p": p if t != 0 else None}, sort_keys=True)
              for t, p, m, s in zip(temps, tops, maxes, seeds)]
    columns = {
        "invocation_id": [invocation_id] * n, "experiment": [EXPERIMENT] * n, "instrument": ["open_scan"] * n,
        "probe_id": rendered.column("probe_id"), "sample": rendered.column("sample"), "attempt": [1] * n,
        "label": labels, "model": [labels_model[x] for x in labels],
        "model_canonical": [labels_model[x] for x in labels], "backend": ["hf"] * n,
        "item_key": rendered.column("item_key"), "envelope": envelopes, "envelope_version": [envelope_version] * n,
        "ordering": rendered.column("ordering"), "system_text": rendered.column("system_text"),
        "user_text": rendered.column("user_text"), "system_folded": [False] * n, "response": responses,
        "temperature": temps, "top_p": tops, "max_tokens": maxes, "seed": seeds,
        "generation_overrides": ['{"chat_template_kwargs": {}, "effort": null, "extra_body": {}}'] * n,
        "prompt_tokens": (user_chars // 4 + 30).astype(np.int32), "completion_tokens": completion,
        "finish_reason": ["stop"] * n, "timing_scope": ["batch"] * n, "batch_size": [16] * n,
        "prefill_ms": prefill, "started_at": created, "ttft_ms": prefill, "ttft_answer_ms": prefill,
        "total_ms": total, "decode_tok_s": (completion - 1) / ((total - prefill) / 1000),
        "endpoint": [f"engine://hf/{labels_model[x]}" for x in labels], "request_params": params,
        "node_id": ["a" * 56] * n, "actor_id": [uuid.uuid4().hex[:32]] * n, "hostname": ["bench-node"] * n,
        "error": pa.nulls(n, pa.string()), "created_at": created,
        "query_id": rendered.column("query_id"), "query_hash": rendered.column("query_hash"),
        "locale": rendered.column("locale"), "series": rendered.column("series"), "rating": ratings,
    }
    table = pa.table({k: v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v, schema.field(k).type)
                      for k, v in columns.items()})
    from mirrorscan.grid.trace_schema import conform

    return conform(table, schema)


def write_parts(store, rows: pa.Table, invocation_id: str, part_rows: int) -> int:
    """Write ``rows`` as parts of ``part_rows`` rows, one label per part (an engine batch holds one model's cells);
    returns the parts written."""
    import pyarrow.compute as pc

    parts = 0
    for label in rows.column("label").unique().to_pylist():
        mine = rows.filter(pc.equal(rows.column("label"), label))
        for start in range(0, mine.num_rows, part_rows):
            store.write_part(mine.slice(start, part_rows), EXPERIMENT, invocation_id, f"{label}-bench")
            parts += 1
    return parts


def build_store(store_uri: str, spec, settings, invocations: int, part_rows: int) -> dict:
    """Write the full store: every answer, cold and post-hoc cell of the grid once, the probes split into
    ``invocations`` consecutive slices, each appended by its own invocation (first stage, then post-hoc)."""
    import pyarrow.compute as pc

    from mirrorscan.cluster.scan.outcome import index_rows
    from mirrorscan.cluster.scan.stages import grid_cells, instrument_ref, later_stage_cells
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.cells import add_seeds
    from mirrorscan.grid.trace_schema import trace_schema

    ref = instrument_ref(settings)
    schema = trace_schema(ref.instrument.columns)
    store = open_store(store_uri)
    models = sources_of(spec)
    version = ref.instrument.envelope_version(ref.spec)
    cells = grid_cells(settings)
    probe_ids = [q for q, _ in ref.spec.probe_set.items]
    slice_of = {q: i * invocations // len(probe_ids) for i, q in enumerate(probe_ids)}
    which = pa.array([slice_of[q] for q in cells.column("query_id").to_pylist()], pa.int32())
    rng = np.random.default_rng(SEED)
    clock = datetime(2026, 11, 1, tzinfo=timezone.utc)
    out = {"parts": 0, "rows": 0, "by_stage": {"answer+cold": 0, "posthoc": 0}}
    for k in range(invocations):
        invocation_id = str(uuid.UUID(int=rng.integers(1 << 62).item() << 64 | k))
        mine = add_seeds(cells.filter(pc.equal(which, k)), settings.seed)
        first = made_up_rows(ref.instrument.render(mine, ref.spec), invocation_id=invocation_id, labels_model=models,
                             envelope_version=version, schema=schema, rng=rng, clock=clock + timedelta(days=7 * k))
        out["by_stage"]["answer+cold"] += write_parts(store, first, invocation_id, part_rows)
        post = add_seeds(later_stage_cells(ref, 1, first), settings.seed)
        second = made_up_rows(ref.instrument.render(post, ref.spec), invocation_id=invocation_id, labels_model=models,
                              envelope_version=version, schema=schema, rng=rng,
                              clock=clock + timedelta(days=7 * k, hours=12))
        out["by_stage"]["posthoc"] += write_parts(store, second, invocation_id, part_rows)
        index_rows(store, EXPERIMENT, invocation_id, settings)   # as a scan does when it ends
        out["rows"] += first.num_rows + second.num_rows
        print(f"   built invocation {k + 1}/{invocations}: {first.num_rows + second.num_rows:,} rows", file=sys.stderr,
              flush=True)
    out["parts"] = sum(out["by_stage"].values())
    return out


def prepared_experiment(args) -> tuple[Path, dict]:
    """The experiment folder, store and build figures for these parameters: from the cache, else built now."""
    from mirrorscan.cluster.home import subdir
    from mirrorscan.grid.spec import load_spec

    scratch = Path(subdir("bench")) / "open_scan-spec"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    write_probes(scratch / "probes.csv", args.probes)   # only for the series and the key: the real one is below
    write_config(scratch / EXPERIMENT, args.models, args.samples, str(scratch / "probes.csv"))
    spec = load_spec(scratch / EXPERIMENT)
    series, columns = spec.instrument_spec.series, [f.name for f in spec.instrument.columns]
    shutil.rmtree(scratch, ignore_errors=True)
    key = hashlib.sha256(json.dumps([BUILD_FORMAT, args.models, args.probes, args.samples, args.invocations,
                                     args.part_rows, series, columns]).encode()).hexdigest()[:12]
    work = Path(subdir("bench")) / f"open_scan-{key}"
    done = work / "built.json"
    if done.is_file() and not args.rebuild:
        return work, json.loads(done.read_text())
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_probes(work / "probes.csv", args.probes)
    write_config(work / EXPERIMENT, args.models, args.samples, str(work / "probes.csv"))
    spec = load_spec(work / EXPERIMENT)
    print(f"building the store under {work} (setup, not measured; cached for these parameters) …", file=sys.stderr,
          flush=True)
    t0 = time.monotonic()
    built = build_store(str(work / "store"), spec, spec.settings(), args.invocations, args.part_rows)
    built["build_s"] = time.monotonic() - t0
    built["bytes"] = sum(f.stat().st_size for f in (work / "store").rglob("*.parquet"))
    done.write_text(json.dumps(built))
    return work, built


def plan_once(work: Path) -> dict:
    """One plan, as ``run_scan`` runs it before any work: (seconds, what it found)."""
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.spec import load_spec
    from mirrorscan.cluster.scan.inputs import check_append

    t0 = time.monotonic()
    spec = load_spec(work / EXPERIMENT)
    settings = spec.settings()
    spec_s = time.monotonic() - t0
    notes, nothing_left = check_append(spec, settings, sources_of(spec), open_store(str(work / "store")), False)
    return {"s": time.monotonic() - t0, "spec_s": spec_s, "notes": notes, "nothing_left": nothing_left}


class Timers:
    """Exclusive and inclusive monotonic time per wrapped function (nested calls charged to the callee)."""

    def __init__(self):
        self.exclusive: dict[str, float] = {}
        self.inclusive: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._children = [0.0]

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*a, **kw):
            self._children.append(0.0)
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                took = time.monotonic() - t0
                inner = self._children.pop()
                self._children[-1] += took
                self.exclusive[name] = self.exclusive.get(name, 0.0) + took - inner
                self.inclusive[name] = self.inclusive.get(name, 0.0) + took
                self.calls[name] = self.calls.get(name, 0) + 1
        return timed


TIMED = {
    "listing parts": [("mirrorscan.cluster.store.traces", "TraceStore", "list_parts")],
    "reading row indexes": [("mirrorscan.cluster.store.row_index", None, "_best_index")],
    "reading earlier rows (identity columns)": [("mirrorscan.cluster.scan.stages", None, "earlier_rows")],
    "reading held answers (for post-hoc cells)": [("mirrorscan.cluster.scan.stages", None, "held_rows")],
    "reading this invocation's rows": [("mirrorscan.cluster.scan.stages", None, "successful_rows")],
    "source filter (of_model_sources join)": [("mirrorscan.cluster.scan.stages", None, "of_model_sources")],
    "anti-joins (remove_held)": [("mirrorscan.cluster.scan.stages", None, "remove_held")],
    "grid expansion (cells, probe ids)": [("mirrorscan.cluster.scan.stages", None, "grid_cells"), ("mirrorscan.cluster.scan.stages", None, "with_probe_ids")],
    "instrument: changed probes": [("mirrorscan.instruments.open_scan.instrument", "OpenScan", "check_append")],
    "instrument: held_cells, posthoc_cells": [("mirrorscan.instruments.open_scan.instrument", "OpenScan", "held_cells"),
                                              ("mirrorscan.instruments.open_scan.instrument", "OpenScan", "posthoc_cells")],
    "spec (load_spec, settings)": [("mirrorscan.grid.spec", None, "load_spec")],
}
"""Breakdown rows → the functions whose exclusive time they sum (patched around each timed plan; a function the
engine no longer has is skipped)."""


def timed_plan(work: Path) -> dict:
    """One plan (``plan_once``) with timers around the engine's functions (a wrapper per call: microseconds on a
    plan of seconds): its time, what it found, and the breakdown row → exclusive s."""
    import importlib

    timers, undo = Timers(), []
    for targets in TIMED.values():
        for module_name, class_name, attr in targets:
            owner = importlib.import_module(module_name)
            owner = getattr(owner, class_name) if class_name else owner
            original = getattr(owner, attr, None)
            if original is None:
                continue
            undo.append((owner, attr, original))
            setattr(owner, attr, timers.wrap(f"{module_name}.{class_name or ''}.{attr}", original))
    try:
        result = plan_once(work)
    finally:
        for owner, attr, original in reversed(undo):
            setattr(owner, attr, original)
    rows = {row: sum(timers.exclusive.get(f"{m}.{c or ''}.{a}", 0.0) for m, c, a in targets)
            for row, targets in TIMED.items()}
    rows["other (joins, filters, checks)"] = result["s"] - sum(rows.values())
    calls = {row: sum(timers.calls.get(f"{m}.{c or ''}.{a}", 0) for m, c, a in targets) for row, targets in TIMED.items()}
    return {**result, "exclusive_s": rows, "calls": calls}


def footer_floor(store_uri: str) -> dict:
    """Seconds to read only the Parquet footer of every part (``pq.read_metadata``, one after another): what
    any plan that opens every part pays before it reads a value; and the footer's size."""
    import pyarrow.parquet as pq

    from mirrorscan.cluster.store.traces import open_store

    store = open_store(store_uri, create=False)
    parts = store.list_parts(EXPERIMENT)
    t0 = time.monotonic()
    sizes = [pq.read_metadata(path).serialized_size for path in parts]
    return {"s": time.monotonic() - t0, "parts": len(parts), "footer_bytes": statistics.median(sizes)}


def profile_plan(work: Path, top: int) -> str:
    """cProfile of one plan: the ``top`` functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    plan_once(work)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_plan(args) -> dict:
    work, built = prepared_experiment(args)
    floor = footer_floor(str(work / "store"))
    rss0 = peak_rss_mib()
    runs = [timed_plan(work) for _ in range(args.repeats)]
    seconds = [r["s"] for r in runs]
    median = statistics.median(seconds)
    middle = sorted(runs, key=lambda r: r["s"])[(len(runs) - 1) // 2]
    out = {"models": args.models, "probes": args.probes, "samples": args.samples, "invocations": args.invocations,
           "part_rows": args.part_rows, "store": str(work / "store"), **built,
           "plan_s": median, "plan_runs_s": seconds, "spec_s": statistics.median(r["spec_s"] for r in runs),
           "nothing_left": all(r["nothing_left"] for r in runs), "notes": runs[-1]["notes"],
           "breakdown": {"of_run_s": middle["s"], "exclusive_s": middle["exclusive_s"], "calls": middle["calls"]},
           "footer_floor": floor, "peak_rss_mib": {"before_plans": rss0, "after_plans": peak_rss_mib()},
           "target_s": TARGET_PLAN_S, "target_met": median < TARGET_PLAN_S}
    if args.profile:
        out["profile"] = profile_plan(work, args.profile_top)
    return out


# ---- measure 2: batched sampling ------------------------------------------------------------------------------


def sampling_cells(n: int, max_tokens: int) -> pa.Table:
    """``n`` rendered open_scan answer cells (first ``n`` packaged demo probes, sample 0), as the engine renders
    them: the instrument's cells, probe ids, seeds, then its ``render`` (each cell's own sampling)."""
    import tempfile

    import pyarrow.compute as pc

    from mirrorscan.grid.cells import add_seeds, with_probe_ids
    from mirrorscan.grid.spec import load_spec

    with tempfile.TemporaryDirectory(prefix="mirrorscan-bench-open-scan-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps({
            "instrument": "open_scan", "models": [{"model": "packaged:smollm2-135m-instruct", "label": "smollm2"}],
            "open_scan": {"probes": "packaged:demo",
                          "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": max_tokens}},
            "samples": 1, "seed": SEED}))
        spec = load_spec(folder)
    instrument, section = spec.instrument, spec.instrument_spec
    cells = instrument.cells(section, ["smollm2"], 1)
    cells = cells.filter(pc.equal(cells.column("envelope"), "answer"))
    if cells.num_rows < n:
        raise SystemExit(f"--batch {n}: the packaged demo probe set has {cells.num_rows} probes")
    cells = add_seeds(with_probe_ids(cells.slice(0, n), instrument="open_scan"), SEED)
    return instrument.render(cells, section)


def measure_sampling(args) -> dict:
    import torch

    from mirrorscan.actors.hf_sampler import HFSampler, RowSampler
    from mirrorscan.cluster.models.demo import prepare_demo_model
    from mirrorscan.grid.records import ModelVariant, InvocationContext

    torch.set_num_threads(1)
    source = str(prepare_demo_model())
    cells = sampling_cells(args.batch, args.max_tokens)
    variant = ModelVariant(label="smollm2", model="packaged:smollm2-135m-instruct", dtype="float32", temperature=0.0,
                           top_p=1.0, max_tokens=args.max_tokens)   # each cell carries its own sampling
    run = InvocationContext(invocation_id=str(uuid.uuid4()), experiment="open-scan-bench", instrument="open_scan")
    t0 = time.monotonic()
    sampler = HFSampler(variant, source, run)
    load = time.monotonic() - t0
    original_call = RowSampler.__call__
    sampler(cells)                       # warm-up: one batched call and one single call
    sampler(cells.slice(0, 1))
    timers = Timers()   # the sampler's own share of each call: its per-row work grows with the batch
    RowSampler.__call__ = timers.wrap("sampler", RowSampler.__call__)
    batched_runs, single_runs, sampler_share, together, alone, unstable = [], [], [], None, None, []
    try:
        for _ in range(args.sampling_repeats):   # interleaved, so a busy spell of the machine hits both
            before = timers.inclusive.get("sampler", 0.0)
            t0 = time.monotonic()
            rows = sampler(cells).to_pylist()
            batched_runs.append(time.monotonic() - t0)
            middle = timers.inclusive["sampler"]
            singles = []
            t0 = time.monotonic()
            for i in range(cells.num_rows):
                singles += sampler(cells.slice(i, 1)).to_pylist()
            single_runs.append(time.monotonic() - t0)
            sampler_share.append(((middle - before) / batched_runs[-1],
                                  (timers.inclusive["sampler"] - middle) / single_runs[-1]))
            if together is None:
                together, alone = rows, singles
            unstable += [r["probe_id"] for r, a in zip(rows + singles, together + alone) if r["response"] != a["response"]]
    finally:
        RowSampler.__call__ = original_call
    batched_s, single_s = min(batched_runs), min(single_runs)
    tokens = sum(r["completion_tokens"] or 0 for r in together)
    tokens_alone = sum(r["completion_tokens"] or 0 for r in alone)
    differ = [r["probe_id"] for r, a in zip(together, alone) if r["response"] != a["response"]
              or r["completion_tokens"] != a["completion_tokens"]]
    errors = [r["error"] for r in together + alone if r["error"]]
    batched, single = tokens / batched_s, tokens_alone / single_s
    ratio = batched / single
    return {"model": source, "batch": args.batch, "max_tokens": args.max_tokens, "temperature": 0.7, "top_p": 0.95,
            "load_s": load, "repeats": args.sampling_repeats, "unstable": unstable,
            "row_sampler_share": {"batched": statistics.median(b for b, _ in sampler_share),
                                  "one_at_a_time": statistics.median(o for _, o in sampler_share)},
            "batched": {"s": batched_s, "runs_s": batched_runs, "tokens": tokens, "tokens_per_s": batched,
                        "cells_per_s": len(together) / batched_s,
                        "batch_sizes": sorted({r["batch_size"] for r in together})},
            "one_at_a_time": {"s": single_s, "runs_s": single_runs, "tokens": tokens_alone, "tokens_per_s": single,
                              "cells_per_s": len(alone) / single_s},
            "length_stops": sum(r["finish_reason"] == "length" for r in together),
            "ratio": ratio, "cells_ratio": (len(together) / batched_s) / (len(alone) / single_s),
            "target": TARGET_RATIO, "target_met": ratio >= TARGET_RATIO,
            "texts_differ": differ, "errors": errors}


# ---- the report ---------------------------------------------------------------------------------------------------


def print_plan(p: dict) -> None:
    cells = p["models"] * p["probes"] * (2 * p["samples"] + 1)
    print(f"1. plan of a fully held experiment: {p['models']} models × {p['probes']} probes × {p['samples']} samples "
          f"= {cells:,} cells (answers, cold, post-hoc), {p['invocations']} invocations")
    print(f"   store: {p['parts']:,} parts of ≤ {p['part_rows']} rows ({p['by_stage']['answer+cold']:,} answer+cold, "
          f"{p['by_stage']['posthoc']:,} post-hoc), {p['rows']:,} rows, {p['bytes'] / 2**20:,.0f} MiB "
          f"(built in {p['build_s']:.0f} s, not measured)")
    runs = ", ".join(f"{s:.2f}" for s in p["plan_runs_s"])
    print(f"   plan (load_spec → check_append): {p['plan_s']:.2f} s median of [{runs}] s; nothing left to run: "
          f"{p['nothing_left']}; target < {p['target_s']:g} s: {'met' if p['target_met'] else 'MISSED'}")
    b = p["breakdown"]
    print(f"   breakdown of the {b['of_run_s']:.2f} s run (exclusive time):")
    for row, sec in sorted(b["exclusive_s"].items(), key=lambda kv: -kv[1]):
        calls = b["calls"].get(row)
        print(f"     {row:42s} {sec:8.2f} s {100 * sec / b['of_run_s']:5.1f} %"
              + (f"   ({calls} call{'s' if calls != 1 else ''})" if calls is not None else ""))
    f = p["footer_floor"]
    print(f"   floor: reading only the footer of every part ({f['parts']:,} × {f['footer_bytes'] / 1024:.0f} KiB) takes "
          f"{f['s']:.2f} s; peak memory {p['peak_rss_mib']['after_plans']:,.0f} MiB "
          f"(before the plans {p['peak_rss_mib']['before_plans']:,.0f} MiB)")
    if "profile" in p:
        print("   cProfile of one plan, by own time:")
        lines = [x for x in p["profile"].splitlines() if x.strip()]
        start = next((i for i, x in enumerate(lines) if x.lstrip().startswith("ncalls")), 0)
        for line in lines[start:]:
            print(f"     {line.rstrip()[:150]}")


def print_sampling(s: dict) -> None:
    b, o = s["batched"], s["one_at_a_time"]
    print(f"2. sampling: {s['batch']} open_scan answer cells, demo model float32, one torch thread, temperature "
          f"{s['temperature']}, top_p {s['top_p']}, max_tokens {s['max_tokens']} (model load {s['load_s']:.1f} s)")
    share = s["row_sampler_share"]
    print(f"   fastest of {s['repeats']} rounds   s    tokens   tokens/s   cells/s   RowSampler   rounds (s)")
    for name, m, sh in (("batched", b, share["batched"]), ("one at a time", o, share["one_at_a_time"])):
        print(f"   {name:14s} {m['s']:8.2f} {m['tokens']:9d} {m['tokens_per_s']:10.1f} {m['cells_per_s']:9.2f} "
              f"{100 * sh:10.0f} %   {', '.join(f'{x:.1f}' for x in m['runs_s'])}")
    print(f"   batched ÷ one at a time: {s['ratio']:.2f} (tokens/s; cells/s {s['cells_ratio']:.2f}); "
          f"target ≥ {s['target']:g}: {'met' if s['target_met'] else 'MISSED'}; {s['length_stops']} of {s['batch']} "
          f"cells ran to max_tokens")
    print(f"   check: batched texts equal the one-at-a-time texts in {s['batch'] - len(s['texts_differ'])} of "
          f"{s['batch']} cells{'' if not s['texts_differ'] else ' — WRONG'}")


def main(argv: list[str] | None = None) -> int:
    """Run the measures, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("plan", "sampling"), help="run one measure")
    parser.add_argument("--models", type=int, default=43, help="model labels (default %(default)s)")
    parser.add_argument("--probes", type=int, default=863, help="synthetic probes (default %(default)s)")
    parser.add_argument("--samples", type=int, default=5, help="answer samples per probe (default %(default)s)")
    parser.add_argument("--invocations", type=int, default=3, help="invocations the store is spread over "
                        "(default %(default)s)")
    parser.add_argument("--part-rows", type=int, default=16, help="rows per part, one engine batch (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=1, help="timed plans, median reported (default %(default)s: a "
                        "plan of the full store runs minutes while the target is missed)")
    parser.add_argument("--rebuild", action="store_true", help="build the store again even if cached")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one more plan")
    parser.add_argument("--profile-top", type=int, default=15, help="functions in the profile (default %(default)s)")
    parser.add_argument("--batch", type=int, default=16, help="sampled cells per batch (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=48, help="answer max_tokens (default %(default)s)")
    parser.add_argument("--sampling-repeats", type=int, default=3, help="timed rounds of the sampling measure, "
                        "fastest reported (default %(default)s)")
    parser.add_argument("--check-target", action="store_true", help="exit 3 when a target is missed")
    parser.add_argument("--json", action="store_true", help="print the JSON summary instead of the tables")
    args = parser.parse_args(argv)
    if min(args.models, args.probes, args.samples, args.invocations, args.part_rows, args.repeats, args.batch,
           args.sampling_repeats) < 1 \
            or args.invocations > args.probes:
        parser.error("counts must be positive, and --invocations at most --probes")

    from mirrorscan.cluster.home import subdir

    summary, problems = {}, []
    if args.only in (None, "plan"):
        plan = summary["plan"] = measure_plan(args)
        if not plan["nothing_left"]:
            problems.append("the plan found cells left to run in a fully held store")
        if not args.json:
            print_plan(plan)
    if args.only in (None, "sampling"):
        sampling = summary["sampling"] = measure_sampling(args)
        if sampling["texts_differ"]:
            problems.append(f"{len(sampling['texts_differ'])} batched texts differ from the cell alone")
        if sampling["unstable"]:
            problems.append(f"{len(sampling['unstable'])} texts changed between rounds of the same cells")
        if sampling["errors"]:
            problems.append(f"{len(sampling['errors'])} error rows: {sampling['errors'][0]}")
        if not args.json:
            print_sampling(sampling)
    summary["problems"] = problems
    measured_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for measure in ("plan", "sampling"):
        if measure in summary:
            summary[measure]["measured_at"] = measured_at
    path = Path(subdir("bench")) / "open_scan.json"
    if args.only and path.is_file():   # one measure: keep the other's last figures (each carries its measured_at)
        try:
            kept = json.loads(path.read_text())
        except ValueError:
            kept = {}
        summary = {**{k: v for k, v in kept.items() if k in ("plan", "sampling")}, **summary}
    path.write_text(json.dumps(summary, indent=2, default=str))
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(f"figures: {path}")
    if problems:
        print(f"WRONG: {'; '.join(problems)}", file=sys.stderr)
        return 1
    missed = [m for m in summary.values() if isinstance(m, dict) and m.get("target_met") is False]
    return 3 if args.check_target and missed else 0


if __name__ == "__main__":
    from on_term import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()   # a time limit's SIGTERM still stops the catalog server this run started
    sys.exit(main())
