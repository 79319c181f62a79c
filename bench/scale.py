"""Benchmark: how the scan pipeline scales with engine actors, without a model.

The engine is a stand-in (``SleepEngine``): it sleeps ``--sleep-ms`` (50 ms) per batch of
``--batch-size`` (16) cells and returns real trace rows (``actors.rows.trace_row``), so the figures are
what the pipeline around an engine costs and how it scales, not what a model costs. Everything else
is the scan's own path: ``cluster.scan.journal.run_model_journaled`` → ``cluster.scan.pipeline.run_model``
(render tasks → an actor pool of N ``StoringEngine`` actors, each classifying, writing one Parquet part
and one in-flight marker per batch, and writing its inference_log rows to the catalog), with the
driver updating the catalog's progress at most every 5 s, as ``cluster/scan/run.py`` does.

Cluster: ``ray.cluster_utils.Cluster`` — a head with no CPUs (the driver) and ``--nodes`` (4) worker
nodes of 3 virtual CPUs and 2 ``fake_gpu`` each; an engine actor asks for 1 CPU and 1 fake_gpu, as a
GPU actor would, so N = 8 fills the four nodes and leaves one CPU per node for the render tasks.
Why several raylets rather than one ``ray.init(num_cpus=16)``: blocks then move between nodes' object
stores and the actors are spread by the scheduler as on a real cluster; the price is four raylets on
this machine (``--single-node`` runs the one-raylet variant for comparison).

Figures (``time.monotonic``, one clock for every process of the machine):

* steady rate = cells answered while all N actors were running ÷ that window (from the last actor's
  first batch start to the first actor's last batch end) — start-up and tail excluded;
* efficiency(N) = steady rate(N) ÷ (N × steady rate(1)); the target is ≥ 0.9 at N = 8;
* wall rate = cells ÷ (run_model_journaled called → iterator exhausted), start-up included;
* per-cell overheads, timed in this process on the same store and catalog: one part write
  (``TraceStore.write_part`` of a batch), one in-flight marker (put + delete), one batch of
  inference_log rows (``InferenceLogWriter.add`` + ``flush``), one catalog progress update.

Warm study (``--study warm``, issue 46): the sweep's two models and cells, run alternately through (a) each
model's actor pool, as above, and (b) a warm engine hosting the same ``SleepEngine`` (``--warm-runs`` rounds
of one each, the order swapped every round). The warm engine is started by the project's own API
(``cluster.runtime.warm_engines.start_engines``, what ``mirrorscan engines up`` calls): one Serve application,
``--sweep-actors`` replicas of one CPU and one fake GPU each (what an engine actor asks), which both models
share since they differ only in label. Both paths are the scan's (``run_grid`` → ``run_model``), switched as a
user switches them (``MIRRORSCAN_WARM_ENGINES``); on the warm path the pool's actors build a
``WarmEngineClient`` (half a CPU) and send each batch to the deployment's handle, and still render, store
parts, write the inference log and keep the journal. Why the stand-in rather than the tiny real model: the
figure is what hosting costs around an engine, and a real model's compute (seconds per batch on these two
cores, shared) would drown 0.2 ms per cell in noise; the stand-in's own CPU is taken out as in the sweep.
Hosting it needs two things a registry engine has: a class a replica imports by name (this file, imported as
the module ``scale``: Ray puts the driver script's folder on its workers' path), and a backend warm engines
accept (``warm_engines.allow_warm_backend``, the hook for stand-ins). The warm engine's replicas stay up for
the whole study, so the idle baseline taken off every run is measured with it up (its standing cost, idle,
is printed apart), and the pool runs beside them: nodes get 5 virtual CPUs and 4 fake GPUs here (room for
the replicas, the pool's actors and the render tasks; a warm path's actor holds half a CPU). The run checks that the warm engine answered every cell of each warm run and
none of a pool run (its registry's count). Figures: CPU per cell and busy fraction of each path (medians),
and warm − pool against the target (≤ +0.2 ms per cell). Everything started (Serve, Ray, the catalog
server) is stopped on any exit, SIGTERM included.

Nothing is written into the repository: store, catalog and timing files live in a temporary folder.
Run from the repository root: ``python bench/scale.py`` (``--help`` for options).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A pool thread still running when SIGTERM unwinds the driver must not connect to a Ray again (Ray's default
# connects to whatever cluster it finds) after the finally block's ray.shutdown; read when Ray is imported.
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402

from mirrorscan.actors.engine import Engine  # noqa: E402
from mirrorscan.actors.rows import trace_row, where_am_i  # noqa: E402
from mirrorscan.grid.instrument import InstrumentRef  # noqa: E402
from mirrorscan.grid.records import ModelVariant, InvocationContext  # noqa: E402
from mirrorscan.grid.trace_schema import to_trace_table  # noqa: E402

TARGET_EFFICIENCY = 0.9   # at N = 8
TARGET_CPU_MS = 2.0       # orchestration CPU per cell, every process of the run
TARGET_HEAD_MS = 0.3      # of which the head side (driver, GCS, head raylet and its workers)
TARGET_BUSY = 0.9         # engine busy fraction, 8 actors, two models at once, 0.5 s batches
TARGET_WARM_DELTA_MS = 0.2   # orchestration CPU per cell through a warm engine, above the actor pool's at most
EXPERIMENT = "bench_scale"
LABEL = "standin"
FAKE_GPU = "fake_gpu"


class SleepEngine(Engine):
    """Stand-in engine: sleeps per batch, answers "A", appends each batch's start, end and own CPU to a file.

    Built as the pipeline builds engines (``SleepEngine(variant, model_source, run)``, sleep and timing
    folder from ``variant.engine_args``) or with them given directly."""

    kind, backend = "generate", "standin"

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, sleep_s: float | None = None,
                 timing_dir: str | None = None):
        self.variant, self.source, self.run = variant, model_source, run
        self.sleep_s = sleep_s if sleep_s is not None else float(variant.engine_args["sleep_s"])
        timing_dir = timing_dir or variant.engine_args["timing_dir"]
        self.where = where_am_i()
        self.timing_path = f"{timing_dir}/actor-{os.getpid()}-{uuid.uuid4().hex[:6]}.jsonl"

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """One CPU and one ``fake_gpu`` per actor, as a GPU engine asks (the sweep builds its pools this way)."""
        return {"num_cpus": 1, "resources": {FAKE_GPU: 1}}

    def __call__(self, batch: pa.Table) -> pa.Table:
        start, cpu = time.monotonic(), time.thread_time()
        cells = batch.to_pylist()
        time.sleep(self.sleep_s)
        rows = to_trace_table([trace_row(self.variant, self.run, self.source, self.where, c, response="A",
                                         finish_reason="stop", timing_scope="batch", batch_size=len(cells),
                                         endpoint="engine://standin") for c in cells])
        with open(self.timing_path, "a") as fh:
            fh.write(json.dumps({"start": start, "end": time.monotonic(), "rows": len(cells),
                                 "cpu": time.thread_time() - cpu}) + "\n")
        return rows


def bench_cells(n: int) -> tuple[pa.Table, InstrumentRef]:
    """The first ``n`` bench cells and the instrument, built as every benchmark builds them
    (``bench/pipeline.py``'s ``bench_cells``: forced-choice starter pairs × load-bearing envelopes × AB/BA)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_pipeline", os.path.join(os.path.dirname(__file__),
                                                                                 "pipeline.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.bench_cells(n)


def steady_rate(events: list[dict]) -> tuple[float, float, int]:
    """(cells/s while every actor was running, that window in s, actors seen) from per-batch events
    grouped by actor (``file``)."""
    by_actor: dict[str, list[dict]] = {}
    for e in events:
        by_actor.setdefault(e["file"], []).append(e)
    firsts = [min(b["start"] for b in bs) for bs in by_actor.values()]
    lasts = [max(b["end"] for b in bs) for bs in by_actor.values()]
    lo, hi = max(firsts), min(lasts)
    if hi <= lo:   # no window with every actor running: fall back to the whole span
        lo, hi = min(firsts), max(lasts)
    cells = 0.0
    for e in events:   # cells of batches inside the window, pro rata for batches crossing its edges
        overlap = min(e["end"], hi) - max(e["start"], lo)
        if overlap > 0:
            cells += e["rows"] * overlap / (e["end"] - e["start"])
    return cells / (hi - lo), hi - lo, len(by_actor)


def bench_invocation(catalog, invocation_id: str, envelopes: InstrumentRef, dsn: str, store_uri: str, settings: dict,
                     n_cells: int) -> InvocationContext:
    """Record a benchmark run as an invocation in the catalog (so actors' inference_log rows have one); its run."""
    catalog.create_invocation({"invocation_id": invocation_id, "experiment": EXPERIMENT, "instrument": "forced_choice",
                               "settings": settings, "settings_hash": "bench", "status": "running",
                               "counts": {"cells": n_cells}, "store_uri": store_uri})
    return InvocationContext(invocation_id=invocation_id, experiment=EXPERIMENT, instrument="forced_choice",
                      envelope_version=envelopes.instrument.envelope_version(envelopes.spec), catalog_dsn=dsn,
                      store_uri=store_uri)


def run_once(n_actors: int, cells: pa.Table, envelopes: InstrumentRef, variant: ModelVariant, *, store_uri: str, catalog, dsn: str,
             work: Path, batch_size: int, sleep_s: float) -> dict:
    """One pipeline run with a pool of ``n_actors``; returns rates, timings and checks."""
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.pipeline import Pool
    from mirrorscan.cluster.scan.sweep import run_model_journaled

    invocation_id = str(uuid.uuid4())
    run = bench_invocation(catalog, invocation_id, envelopes, dsn, store_uri, {"bench": "scale", "actors": n_actors},
                           cells.num_rows)
    timing_dir = work / f"timing-{n_actors}-{invocation_id[:8]}"
    timing_dir.mkdir()
    kwargs = {"variant": variant, "model_source": "standin", "run": run, "sleep_s": sleep_s,
              "timing_dir": str(timing_dir)}
    done, updates, last = {"rows": 0, "errors": 0}, [], time.monotonic()
    summary: dict = {}
    t0 = time.monotonic()
    pool = Pool(SleepEngine, kwargs, envelopes, store_uri=store_uri, experiment=EXPERIMENT,
                invocation_id=invocation_id, batch_size=batch_size, pool_size=n_actors,
                engine_resources={"num_cpus": 1, "resources": {FAKE_GPU: 1}})
    for rows, errors in run_model_journaled(cells, pool, summary=summary):
        done["rows"] += rows
        done["errors"] += errors
        if time.monotonic() - last > 5:   # as a scan (cluster.scan.run): progress in the catalog at most every 5 s
            u0 = time.monotonic()
            catalog.update_progress(invocation_id, "running", {"cells_this_run": cells.num_rows, **done})
            last = time.monotonic()
            updates.append(last - u0)
    wall = time.monotonic() - t0
    catalog.update_progress(invocation_id, "complete", {"cells": cells.num_rows, **done}, finished=True)
    events = []
    for path in glob.glob(f"{timing_dir}/*.jsonl"):
        events += [{**json.loads(line), "file": path} for line in Path(path).read_text().splitlines()]
    rate, window, actors = steady_rate(events)
    stored = open_store(store_uri).read(EXPERIMENT, invocation_id, columns=["probe_id", "sample", "error", "actor_id"])
    keys = set(zip(stored["probe_id"].to_pylist(), stored["sample"].to_pylist()))
    problems = []
    if stored.num_rows != cells.num_rows or len(keys) != cells.num_rows:
        problems.append(f"{stored.num_rows} rows for {len(keys)} distinct cells, want {cells.num_rows}")
    if stored.num_rows - stored.column("error").null_count:
        problems.append(f"{stored.num_rows - stored.column('error').null_count} error rows")
    if actors != n_actors or len(set(stored["actor_id"].to_pylist())) != n_actors:
        problems.append(f"{actors} actors answered, want {n_actors}")
    if summary.get("rounds") != 1:
        problems.append(f"{summary.get('rounds')} journal rounds, want 1")
    return {"n": n_actors, "rate": rate, "window": window, "wall": wall, "wall_rate": cells.num_rows / wall,
            "batches": len(events), "updates": updates, "problems": problems,
            "first_batch": min(e["start"] for e in events) - t0}


def busy_fraction(events: list[dict]) -> float:
    """Mean over actors of the union of its engine-call intervals ÷ its wall time (first call's start → last
    call's end); events grouped by actor (``file``)."""
    by_actor: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        by_actor.setdefault(e["file"], []).append((e["start"], e["end"]))
    fractions = []
    for spans in by_actor.values():
        spans.sort()
        busy, (lo, hi) = 0.0, spans[0]
        for a, b in spans[1:]:
            if a > hi:
                busy, lo, hi = busy + hi - lo, a, b
            else:
                hi = max(hi, b)
        busy += hi - lo
        wall = max(b for _, b in spans) - min(a for a, _ in spans)
        fractions.append(busy / wall if wall > 0 else 1.0)
    return statistics.mean(fractions)


def standin_variants(labels: list[str], actors_per_model: int, sleep_s: float, timing_dir: Path) -> list[ModelVariant]:
    """The sweep's model variants: one per label, the stand-in engine with ``sleep_s`` per batch, its timing
    files in ``timing_dir``; alike but for the label (so one warm engine answers them all)."""
    return [ModelVariant(label=label, model="standin", backend="standin", temperature=0.0, top_p=1.0,
                         max_tokens=4, num_gpus=1, min_actors=actors_per_model, max_actors=actors_per_model,
                         engine_args={"sleep_s": sleep_s, "timing_dir": str(timing_dir)}) for label in labels]


def sweep_once(cells: pa.Table, envelopes: InstrumentRef, labels: list[str], actors_per_model: int, *, store_uri: str,
               catalog, dsn: str, work: Path, batch_size: int, sleep_s: float, meter, timing_dir: Path | None = None,
               engine_module: str = "__main__") -> dict:
    """One sweep as a scan runs it (``cluster.scan.sweep.run_grid``: every model's pool at once, journal, parts,
    inference_log in the catalog, progress in the catalog at most every 5 s); CPU seconds of every process of
    the cluster before and after (``meter``), the engines' own CPU and calls (timing files, this run's calls
    only: a warm engine's files hold earlier runs too). ``timing_dir``: where the engines write them (a new
    folder when None); ``engine_module``: the module ``SleepEngine`` is registered from (``__main__``: pickled
    by value to the actors; ``scale``: imported by name, as a warm engine's replica must)."""
    from mirrorscan.actors import registry
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    invocation_id = str(uuid.uuid4())
    if timing_dir is None:
        timing_dir = work / f"sweep-{invocation_id[:8]}"
        timing_dir.mkdir()
    registry.ENGINES[("generate", "standin")] = (engine_module, "SleepEngine")
    variants = standin_variants(labels, actors_per_model, sleep_s, timing_dir)
    per_model = cells.num_rows // len(labels)
    grid = pa.concat_tables([cells.slice(0, per_model).set_column(cells.schema.get_field_index("label"), "label",
                                                                   pa.array([label] * per_model, pa.string()))
                             for label in labels])
    grid = grid.set_column(grid.schema.get_field_index("probe_id"), "probe_id", pa.array(
        [f"{label}|{rest.split('|', 1)[1]}" for label, rest in zip(grid["label"].to_pylist(),
                                                                   grid["probe_id"].to_pylist())], pa.string()))
    run = bench_invocation(catalog, invocation_id, envelopes, dsn, store_uri, {"bench": "sweep", "models": labels},
                           grid.num_rows)
    done, last = {"rows": 0, "errors": 0}, [time.monotonic()]

    def on_part(rows: int, errors: int, label: str) -> None:
        done["rows"] += rows
        done["errors"] += errors
        if time.monotonic() - last[0] > 5:   # as a scan (cluster.scan.run)
            last[0] = time.monotonic()
            catalog.update_progress(invocation_id, "running", {"cells_this_run": grid.num_rows, **done})

    head0, nodes0 = meter.read()
    parts0 = meter.head_breakdown()
    t0 = time.monotonic()
    run_grid(grid, variants, {label: "standin" for label in labels},
             Sweep(run, envelopes, store_uri, batch_size=batch_size, pool_size=actors_per_model,
                   max_concurrent_models=len(labels)), on_part)
    wall = time.monotonic() - t0
    head1, nodes1 = meter.read()
    parts1 = meter.head_breakdown()
    head_parts = {k: v - parts0.get(k, 0.0) for k, v in parts1.items() if v - parts0.get(k, 0.0) > 0.05}
    catalog.update_progress(invocation_id, "complete", {"cells": grid.num_rows, **done}, finished=True)
    events = []
    for path in glob.glob(f"{timing_dir}/*.jsonl"):
        events += [e for e in ({**json.loads(line), "file": path} for line in Path(path).read_text().splitlines())
                   if e["start"] >= t0]
    stored = open_store(store_uri).read(EXPERIMENT, invocation_id, columns=["probe_id", "sample", "error"])
    keys = set(zip(stored["probe_id"].to_pylist(), stored["sample"].to_pylist()))
    problems = []
    if stored.num_rows != grid.num_rows or len(keys) != grid.num_rows or stored.column("error").null_count != grid.num_rows:
        problems.append(f"{stored.num_rows} rows for {len(keys)} distinct cells, want {grid.num_rows} without errors")
    # gap between an actor's calls: what the pipeline costs per batch while the engine waits
    gaps = []
    by_actor: dict[str, list[dict]] = {}
    for e in events:
        by_actor.setdefault(e["file"], []).append(e)
    for es in by_actor.values():
        es.sort(key=lambda e: e["start"])
        gaps += [b["start"] - a["end"] for a, b in zip(es, es[1:])]
    return {"cells": grid.num_rows, "wall": wall, "head_s": head1 - head0, "nodes_s": nodes1 - nodes0,
            "engine_cpu_s": sum(e["cpu"] for e in events), "busy": busy_fraction(events), "actors": len(by_actor),
            "gap_s": statistics.median(gaps) if gaps else float("nan"), "problems": problems,
            "head_parts": head_parts}


def idle_rates(meter, seconds: float) -> tuple[float, float]:
    """CPU seconds per wall second of the cluster's processes while nothing runs: (head side, node side)."""
    head0, nodes0 = meter.read()
    time.sleep(seconds)
    head1, nodes1 = meter.read()
    return (head1 - head0) / seconds, (nodes1 - nodes0) / seconds


def charge_idle(r: dict, idle_head: float, idle_nodes: float) -> None:
    """Orchestration CPU per cell of run ``r`` (ms, head and node side), its idle baseline (CPU-s per s of wall,
    ``idle_head``/``idle_nodes``) and the engines' own CPU taken off: sets ``head_ms`` and ``nodes_ms``."""
    r["head_ms"] = 1000 * max(0.0, r["head_s"] - idle_head * r["wall"]) / r["cells"]
    r["nodes_ms"] = 1000 * max(0.0, r["nodes_s"] - idle_nodes * r["wall"] - r["engine_cpu_s"]) / r["cells"]


def print_run(prefix: str, r: dict, engines: str) -> None:
    """Two lines for run ``r``: wall, busy fraction over its ``engines`` (actors or warm replicas), the median gap
    between calls, CPU per cell (ms) and the raw CPU-s it came from; then the head side by process."""
    print(f"{prefix} wall {r['wall']:6.1f} s  busy {r['busy']:.3f} over {r['actors']} {engines}  median gap between "
          f"calls {1000 * r['gap_s']:.0f} ms  CPU per cell: head {r['head_ms']:.3f} ms + nodes {r['nodes_ms']:.3f} ms = "
          f"{r['head_ms'] + r['nodes_ms']:.3f} ms  (raw: head {r['head_s']:.1f} s, nodes {r['nodes_s']:.1f} s, "
          f"engines' own {r['engine_cpu_s']:.1f} s)"
          f"{'   CHECK FAILED: ' + '; '.join(r['problems']) if r['problems'] else ''}", flush=True)
    print("       head side by process (CPU-s): " + ", ".join(
        f"{k} {v:.1f}" for k, v in sorted(r["head_parts"].items(), key=lambda kv: -kv[1])), flush=True)


def sweep_study(args, cells, envelopes, store_uri, dsn, work, cluster) -> list[str]:
    """The sweep figures (module docstring): orchestration CPU per cell, head and node side; the engines'
    busy fraction, median of ``args.sweep_runs`` runs; the head's ceiling; the batch time where busy < 0.9."""
    import sys as _sys

    from mirrorscan.cluster.catalog.client import Catalog

    from proc_cpu import ClusterCPU

    meter = ClusterCPU(cluster)
    labels = ["model-a", "model-b"]
    per = args.sweep_actors // len(labels)
    # A short warm-up sweep first: Ray Data's own actors (stats, usage, actor locations, autoscaling) start
    # with the first execution and stay, so the idle baseline is taken with them, as the definition asks.
    with Catalog(dsn) as catalog:
        sweep_once(cells.slice(0, 32 * args.batch_size), envelopes, labels, per, store_uri=store_uri,
                   catalog=catalog, dsn=dsn, work=work, batch_size=args.batch_size, sleep_s=0.01, meter=meter)
    time.sleep(5)   # the warm-up's engine actors exit
    idle_head, idle_nodes = idle_rates(meter, args.idle_s)
    print(f"\nsweep: {len(labels)} models at once × {per} actors ({args.sweep_actors} over {args.nodes} nodes), "
          f"{args.sweep_cells} cells, batch {args.batch_size}, stand-in {args.sweep_sleep_ms:.0f} ms/batch; idle "
          f"baseline {idle_head:.3f} (head) + {idle_nodes:.3f} (nodes) CPU-s per s over {args.idle_s:.0f} s", flush=True)
    runs, problems = [], []
    with Catalog(dsn) as catalog:
        for i in range(args.sweep_runs):
            r = sweep_once(cells.slice(0, args.sweep_cells), envelopes, labels, per, store_uri=store_uri,
                           catalog=catalog, dsn=dsn, work=work, batch_size=args.batch_size,
                           sleep_s=args.sweep_sleep_ms / 1000, meter=meter)
            charge_idle(r, idle_head, idle_nodes)
            runs.append(r)
            problems += [f"sweep {i + 1}: {x}" for x in r["problems"]]
            print_run(f"run {i + 1}:", r, "actors")
    med = lambda key: statistics.median(r[key] for r in runs)   # noqa: E731
    head_ms, nodes_ms, busy, gap = med("head_ms"), med("nodes_ms"), med("busy"), med("gap_s")
    total = statistics.median(r["head_ms"] + r["nodes_ms"] for r in runs)
    print(f"orchestration CPU per cell (median of {len(runs)}): {total:.3f} ms (target ≤ {TARGET_CPU_MS:g}: "
          f"{'met' if total <= TARGET_CPU_MS else 'MISSED'}), head side {head_ms:.3f} ms (target ≤ {TARGET_HEAD_MS:g}: "
          f"{'met' if head_ms <= TARGET_HEAD_MS else 'MISSED'}), node side {nodes_ms:.3f} ms")
    print(f"engine busy fraction (median of {len(runs)}): {busy:.3f} (target ≥ {TARGET_BUSY:g}: "
          f"{'met' if busy >= TARGET_BUSY else 'MISSED'})")
    ceiling = 1000 / head_ms if head_ms > 0 else float("inf")
    print(f"head's ceiling: one head core feeds {ceiling:,.0f} cells/s at {head_ms:.3f} ms of head CPU per cell")
    if gap == gap:   # not NaN
        print(f"busy = T / (T + gap): with the median gap of {1000 * gap:.0f} ms between an actor's calls, an engine "
              f"batch shorter than {9 * gap:.2f} s keeps it busy less than {TARGET_BUSY:g} of the time")
    meter.close()
    return problems


def warm_cells(registry_handle, name: str) -> int:
    """Cells warm engine ``name`` has answered so far (its registry record; counts arrive asynchronously, so read
    until two readings agree)."""
    import ray

    last = -1
    for _ in range(20):
        now = ray.get(registry_handle.snapshot.remote()).get(name, {}).get("cells", 0)
        if now == last:
            return now
        last = now
        time.sleep(0.25)
    return last


def warm_study(args, cells, envelopes, store_uri, dsn, work, cluster) -> list[str]:
    """The warm figures (module docstring): the sweep's cells through the actor pool and through a warm engine
    hosting the same stand-in, alternating, ``args.warm_runs`` rounds; CPU per cell and busy fraction of each,
    and warm − pool against ``TARGET_WARM_DELTA_MS``."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.models.resolve import engine_variant
    from mirrorscan.cluster.runtime import warm_engines as warm
    from mirrorscan.cluster.runtime.warm_replica import registry as engine_registry

    from proc_cpu import ClusterCPU

    standin = __import__("scale")   # this file by its module name: a replica imports the engine class by name
    warm.allow_warm_backend(SleepEngine.backend)
    meter = ClusterCPU(cluster)
    labels = ["model-a", "model-b"]
    per = args.sweep_actors // len(labels)
    sleep_s = args.sweep_sleep_ms / 1000
    timing_dir = work / "warm-timing"   # one folder for both paths: engine_args enter the warm engine's key
    timing_dir.mkdir()
    variants = standin_variants(labels, per, sleep_s, timing_dir)
    target = warm.EngineTarget(standin.SleepEngine, engine_variant(variants[0]), "standin", SleepEngine.kind)
    keys = {warm.engine_key(standin.SleepEngine, engine_variant(v), "standin") for v in variants}
    if keys != {target.key}:
        raise RuntimeError("the two stand-in models hash to different warm engines: the study needs one")
    sweep = dict(store_uri=store_uri, dsn=dsn, work=work, batch_size=args.batch_size, sleep_s=sleep_s, meter=meter,
                 timing_dir=timing_dir, engine_module="scale")

    def through(mode: str, catalog, n_cells: int) -> dict:
        """One sweep of ``n_cells`` cells, by the scan's own switch: ``pool`` with warm engines off, ``warm`` on."""
        os.environ[warm.SWITCH_ENV] = "1" if mode == "warm" else "0"
        books = engine_registry(create=False)
        before = warm_cells(books, target.name) if books is not None else 0
        r = sweep_once(cells.slice(0, n_cells), envelopes, labels, per, catalog=catalog, **sweep)
        served = (warm_cells(books, target.name) if books is not None else 0) - before
        want = r["cells"] if mode == "warm" else 0
        if served != want:
            r["problems"].append(f"the warm engine answered {served} cells, want {want}")
        return r

    problems, runs = [], {"pool": [], "warm": []}
    try:
        with Catalog(dsn) as catalog:   # warm-up, as the sweep study's: Ray Data's own actors start and stay
            through("pool", catalog, 32 * args.batch_size)
        time.sleep(5)
        idle_pool = idle_rates(meter, args.idle_s)
        t0 = time.monotonic()
        warm.start_engines([target], EXPERIMENT, warm.Scaling(min_replicas=args.sweep_actors,
                                                              max_replicas=args.sweep_actors,
                                                              initial_replicas=args.sweep_actors))
        started = time.monotonic() - t0
        with Catalog(dsn) as catalog:   # the handles' and Serve router's first use, kept out of the figures
            through("warm", catalog, 32 * args.batch_size)
        time.sleep(5)
        idle_head, idle_nodes = idle_rates(meter, args.idle_s)
        print(f"\nwarm: {len(labels)} models × {per} actors through (a) their actor pools and (b) warm engine "
              f"{target.name} ({args.sweep_actors} replicas, started in {started:.1f} s), alternating, "
              f"{args.warm_runs} round(s) of {args.sweep_cells} cells each, batch {args.batch_size}, stand-in "
              f"{args.sweep_sleep_ms:.0f} ms/batch; {args.nodes} nodes × {args.cpus_per_node} CPUs", flush=True)
        print(f"idle CPU-s per s: {idle_pool[0]:.3f} + {idle_pool[1]:.3f} (head + nodes) without Serve, "
              f"{idle_head:.3f} + {idle_nodes:.3f} with the warm engine up (its standing cost: "
              f"{idle_head + idle_nodes - sum(idle_pool):+.3f}); the latter is taken off both paths' runs", flush=True)
        with Catalog(dsn) as catalog:
            for i in range(args.warm_runs):
                for mode in (("pool", "warm") if i % 2 == 0 else ("warm", "pool")):
                    r = through(mode, catalog, args.sweep_cells)
                    charge_idle(r, idle_head, idle_nodes)
                    runs[mode].append(r)
                    problems += [f"warm study round {i + 1}, {mode}: {x}" for x in r["problems"]]
                    print_run(f"round {i + 1} {mode:4s}:", r, "engines")
    finally:
        os.environ.pop(warm.SWITCH_ENV, None)
        meter.close()
        try:
            warm.stop_engines([target.name])
        except Exception as e:   # not started, or Ray already gone: main's finally shuts the cluster down
            print(f"(warm engine not stopped here: {e})", file=sys.stderr)
    med = lambda mode, f: statistics.median(f(r) for r in runs[mode])   # noqa: E731
    total = {m: med(m, lambda r: r["head_ms"] + r["nodes_ms"]) for m in runs}
    head = {m: med(m, lambda r: r["head_ms"]) for m in runs}
    busy = {m: med(m, lambda r: r["busy"]) for m in runs}
    paired = statistics.median(w["head_ms"] + w["nodes_ms"] - p["head_ms"] - p["nodes_ms"]
                               for w, p in zip(runs["warm"], runs["pool"]))
    delta = total["warm"] - total["pool"]
    n = args.warm_runs
    print(f"orchestration CPU per cell (median of {n}): pool {total['pool']:.3f} ms (head {head['pool']:.3f}), warm "
          f"{total['warm']:.3f} ms (head {head['warm']:.3f}); warm − pool {delta:+.3f} ms per cell (paired rounds: "
          f"{paired:+.3f}); target ≤ +{TARGET_WARM_DELTA_MS:g}: {'met' if delta <= TARGET_WARM_DELTA_MS else 'MISSED'}")
    print(f"engine busy fraction (median of {n}): pool {busy['pool']:.3f}, warm {busy['warm']:.3f}")
    return problems


def overheads(store_uri: str, dsn: str, envelopes: InstrumentRef, variant: ModelVariant, batch_size: int, reps: int) -> dict:
    """Milliseconds per batch of: a part write, an in-flight marker, a batch of inference_log rows, a
    progress update; timed in this process against the benchmark's store and catalog (medians)."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.scan.journal import in_flight, round_folder
    from mirrorscan.cluster.catalog.inference_writer import InferenceLogWriter
    from mirrorscan.cluster.catalog.inference_rows import log_rows_from_traces
    from mirrorscan.cluster.scan.pipeline import instrument_rows, render_block
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.trace_schema import conform, trace_schema

    store = open_store(store_uri)
    invocation_id = str(uuid.uuid4())
    run = InvocationContext(invocation_id=invocation_id, experiment=EXPERIMENT, instrument="forced_choice",
                     envelope_version=envelopes.instrument.envelope_version(envelopes.spec))
    cells, _ = bench_cells(batch_size)
    schema = trace_schema(envelopes.instrument.columns)
    rendered = render_block(cells, envelopes)
    engine = SleepEngine(variant, "standin", run, 0.0, tempfile.mkdtemp(prefix="mirrorscan-scale-t-"))
    rows = conform(instrument_rows(engine(rendered), rendered, envelopes), schema)
    folder = round_folder(store, EXPERIMENT, invocation_id, "bench")
    out: dict[str, list[float]] = {"part": [], "marker": [], "log": [], "rows": [], "progress": []}
    writer = InferenceLogWriter(dsn, store_uri, EXPERIMENT, invocation_id, "bench")
    with Catalog(dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": EXPERIMENT,
                                   "instrument": "forced_choice", "settings": {"bench": "overheads"},
                                   "settings_hash": "bench", "status": "running", "store_uri": store_uri})
        for _ in range(reps):
            t = time.monotonic()
            fresh = engine(rendered)
            fresh = conform(instrument_rows(fresh, rendered, envelopes), schema)
            out["rows"].append(time.monotonic() - t)
            t = time.monotonic()
            store.write_part(rows, EXPERIMENT, invocation_id, "bench")
            out["part"].append(time.monotonic() - t)
            t = time.monotonic()
            with in_flight(store, folder, "bench", rendered):
                pass
            out["marker"].append(time.monotonic() - t)
            t = time.monotonic()
            writer.add(log_rows_from_traces(rows))
            writer.flush(5.0)
            out["log"].append(time.monotonic() - t)
            t = time.monotonic()
            catalog.update_progress(invocation_id, "running", {"rows": batch_size})
            out["progress"].append(time.monotonic() - t)
    writer.close(10.0)
    logged = writer.written_rows
    return {k: 1000 * statistics.median(v) for k, v in out.items()} | {"logged_rows": logged, "reps": reps}


def start_cluster(nodes: int, single_node: bool, cpus_per_node: int = 3, gpus_per_node: int = 2):
    """The simulated cluster (see the module docstring); returns the Cluster (None for --single-node)."""
    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    if single_node:
        import ray

        ensure_ray(num_cpus=cpus_per_node * nodes)
        return None, ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        c.add_node(num_cpus=cpus_per_node, resources={FAKE_GPU: gpus_per_node})
    c.wait_for_nodes(timeout=300)
    ensure_ray(address=c.address)
    return c, None


def stop_everything(cluster, pg_root: Path, work: Path, serve_up: bool) -> None:
    """Stop what the run started, each step whatever the others did: Serve (its controller and any replica left),
    the driver's Ray connection, the cluster's processes, the catalog server; then the work folder goes."""
    import ray

    steps = []
    if serve_up:
        from ray import serve

        steps.append(("serve.shutdown", lambda: serve.shutdown() if ray.is_initialized() else None))
    steps.append(("ray.shutdown", ray.shutdown))
    if cluster is not None:
        def cluster_down():
            try:
                cluster.shutdown()
            except ValueError:   # a thread still held the head's connection: remove_node dropped it; again
                cluster.shutdown()
        steps.append(("cluster.shutdown", cluster_down))
    if pg_root.exists():
        steps.append(("catalog server stop", lambda: embedded_pg_stop(pg_root)))
    for what, step in steps:
        try:
            step()
        except Exception as e:
            print(f"({what} failed: {e!r})", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


def embedded_pg_stop(root: Path) -> None:
    """Stop the catalog server in ``root`` (``cluster.catalog.embedded_pg.stop``)."""
    from mirrorscan.cluster.catalog import embedded_pg

    embedded_pg.stop(root)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=20000, help="cells per run (default 20000)")
    p.add_argument("--actors", default="1,2,4,8", help="pool sizes, comma-separated (default 1,2,4,8)")
    p.add_argument("--batch-size", type=int, default=16, help="cells per engine batch (default 16)")
    p.add_argument("--sleep-ms", type=float, default=50.0, help="stand-in engine time per batch (default 50)")
    p.add_argument("--nodes", type=int, default=4, help="worker nodes, 3 CPUs and 2 fake GPUs each (default 4)")
    p.add_argument("--single-node", action="store_true", help="one ray.init(num_cpus=3 × nodes) instead")
    p.add_argument("--overhead-reps", type=int, default=200, help="repetitions of each per-batch overhead (default 200)")
    p.add_argument("--study", choices=("all", "scaling", "sweep", "warm"), default="all",
                   help="scaling: one pool of N actors at a time; sweep: two models at once, CPU per cell and busy "
                        "fraction; warm: the sweep through the actor pool against a warm engine (default all: "
                        "scaling and sweep)")
    p.add_argument("--sweep-cells", type=int, default=20000, help="cells of each sweep run, both models (default 20000)")
    p.add_argument("--sweep-actors", type=int, default=8, help="actors of the sweep, half per model (default 8)")
    p.add_argument("--sweep-sleep-ms", type=float, default=500.0, help="stand-in time per batch in the sweep (default 500)")
    p.add_argument("--sweep-runs", type=int, default=3, help="sweep runs; the median is reported (default 3)")
    p.add_argument("--idle-s", type=float, default=10.0, help="seconds of the idle CPU baseline (default 10)")
    p.add_argument("--warm-runs", type=int, default=3,
                   help="warm study: rounds of one pool sweep and one warm sweep; medians reported (default 3)")
    args = p.parse_args(argv)
    # The warm study keeps the warm engine's replicas (one CPU and one fake GPU each) up while the pool runs
    # beside them, so its nodes have room for both: twice the fake GPUs, and two more CPUs for the replicas
    # (the warm path's actors take half a CPU each; the rest is left to the render tasks).
    args.cpus_per_node, gpus_per_node = (5, 4) if args.study == "warm" else (3, 2)
    ns = [int(x) for x in args.actors.split(",")]
    if min(ns) < 1 or max(ns) > 2 * args.nodes or args.cells < args.batch_size:
        p.error(f"--actors must be 1..{2 * args.nodes} (2 fake GPUs per node) and --cells ≥ --batch-size")
    os.environ.pop("RAY_ADDRESS", None)

    import ray.data

    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.catalog.client import Catalog

    cells, envelopes = bench_cells(max(args.cells, args.sweep_cells))
    variant = ModelVariant(label=LABEL, model="standin", backend="standin", temperature=0.0, top_p=1.0,
                           max_tokens=4)
    work = Path(tempfile.mkdtemp(prefix="mirrorscan-bench-scale-"))
    work.chmod(0o755)   # as root the catalog server runs as `postgres`, which must enter this folder
    pg_root, store_uri = work / "catalog", str(work / "store")
    cluster, results, problems = None, [], []
    try:
        dsn = embedded_pg.ensure_running(pg_root, durable=False)
        t0 = time.monotonic()
        cluster, _ = start_cluster(args.nodes, args.single_node, args.cpus_per_node, gpus_per_node)
        if threading.current_thread() is threading.main_thread():
            from on_term import exit_cleanly_on_sigterm

            exit_cleanly_on_sigterm()   # again: ray.init's core worker put in a SIGTERM handler that exits at once
        shape = (f"one raylet, {args.cpus_per_node * args.nodes} CPUs" if args.single_node else
                 f"Cluster: head 0 CPU + {args.nodes} nodes × ({args.cpus_per_node} CPUs, {gpus_per_node} {FAKE_GPU})")
        print(f"{cells.num_rows} cells, batch {args.batch_size}, stand-in {args.sleep_ms:.0f} ms/batch "
              f"(ideal {args.batch_size / args.sleep_ms * 1000:.0f} cells/s per actor); {shape}; "
              f"started in {time.monotonic() - t0:.1f} s; this machine: {os.cpu_count()} cores")
        ray.data.DataContext.get_current().wait_for_min_actors_s = 600   # every actor up before the clock runs
        if args.study == "warm":
            if args.single_node or args.sweep_actors > 2 * args.nodes or args.sweep_actors < 2:
                p.error("the warm study runs on a multi-node cluster with 2..2 × nodes --sweep-actors")
            problems += warm_study(args, cells, envelopes, store_uri, dsn, work, cluster)
            if problems:
                print("\nWRONG: " + "; ".join(problems), file=sys.stderr)
            return 1 if problems else 0
        if args.study in ("all", "sweep"):
            if args.single_node:
                p.error("the sweep study measures a multi-node cluster: leave out --single-node or use --study scaling")
            problems += sweep_study(args, cells, envelopes, store_uri, dsn, work, cluster)
        if args.study == "sweep":
            return 1 if problems else 0
        with Catalog(dsn) as catalog:
            for n in ns:
                r = run_once(n, cells.slice(0, args.cells), envelopes, variant, store_uri=store_uri, catalog=catalog, dsn=dsn, work=work,
                             batch_size=args.batch_size, sleep_s=args.sleep_ms / 1000)
                results.append(r)
                problems += [f"N={n}: {x}" for x in r["problems"]]
                upd = f"{1000 * statistics.median(r['updates']):.1f} ms" if r["updates"] else "none"
                print(f"N={n:2d}  steady {r['rate']:8.1f} cells/s over {r['window']:6.1f} s   wall {r['wall']:6.1f} s "
                      f"({r['wall_rate']:7.1f} cells/s, first batch at {r['first_batch']:.1f} s)   "
                      f"{r['batches']} batches, {len(r['updates'])} progress updates (median {upd})"
                      f"{'   CHECK FAILED: ' + '; '.join(r['problems']) if r['problems'] else ''}", flush=True)
        single = next((r["rate"] for r in results if r["n"] == 1), None)
        if single:
            print("\nN    steady cells/s   N × single   efficiency   vs ideal")
            ideal = args.batch_size / (args.sleep_ms / 1000)
            for r in results:
                eff = r["rate"] / (r["n"] * single)
                print(f"{r['n']:<4d} {r['rate']:14.1f} {r['n'] * single:12.1f} {eff:12.3f} {r['rate'] / (r['n'] * ideal):10.3f}")
            at8 = next((r for r in results if r["n"] == 8), None)
            if at8:
                eff8 = at8["rate"] / (8 * single)
                print(f"efficiency at N = 8: {eff8:.3f}   target ≥ {TARGET_EFFICIENCY}: "
                      f"{'met' if eff8 >= TARGET_EFFICIENCY else 'MISSED'}")
        o = overheads(store_uri, dsn, envelopes, variant, args.batch_size, args.overhead_reps)
        b = args.batch_size
        print(f"\nper-batch costs in the actor's path (median of {o['reps']}, batch of {b}; ms per batch / per cell):")
        for key, what in (("rows", "trace rows + classify + cast (stand-in answer)"), ("part", "part write (Parquet, zstd)"),
                          ("marker", "in-flight marker put + delete"),
                          ("log", "inference_log rows add + flush to the catalog"),
                          ("progress", "catalog progress update (driver, ≤ 1 per 5 s)")):
            print(f"  {what:48s} {o[key]:7.2f} ms   {o[key] / b:6.3f} ms/cell")
        total = o["rows"] + o["part"] + o["marker"] + o["log"]
        print(f"  actor-side total beside the engine: {total:.2f} ms per batch = "
              f"{100 * total / args.sleep_ms:.0f} % of the {args.sleep_ms:.0f} ms engine time "
              f"({o['logged_rows']} inference_log rows committed)")
    finally:
        stop_everything(cluster, pg_root, work, serve_up=args.study == "warm")
    if problems:
        print("\nWRONG: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from on_term import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()   # a time limit's SIGTERM still stops the catalog server this run started
    sys.exit(main())
