"""Benchmark: the vLLM engine paths, each against its own baseline in the same process (one run, ratios).

1. pipeline vs bare   the path a scan runs: ``cluster.scan.sweep.run_model_journaled`` (in-flight journal, Ray Data
                      → vLLM sampler actor → Parquet parts, inference_log rows into a real catalog: an
                      embedded PostgreSQL in a temp folder) against a bare ``vllm.LLM.generate`` over the
                      same cells in this process.
                      Rate = cells ÷ time; the pipeline's time is its wall minus the actor's engine start
                      (model load, reported apart), the bare one's is the generate call alone. Target ≥ 0.85.
2. streaming cost     the same in-process engine (``VLLMSampler``'s AsyncLLM), the same cells submitted
                      concurrently batch by batch: streamed with per-delta timing (``RequestOutputKind.DELTA``,
                      a StreamClock and a trace row per cell — what a scan does) against final-only outputs
                      (``FINAL_ONLY``, no per-token work). Interleaved S N S N …; cost = median S ÷ median N − 1.
                      Target ≤ 10 %.
3. tap vs direct      vLLM's OpenAI-compatible server on 127.0.0.1 and ``mirrorscan tap`` (Ray Serve) in front
                      of it; ≥ 50 streamed chat requests alternating direct / through the tap; TTFT measured by
                      this client (request sent → first SSE chunk carrying text, monotonic). Reports median and
                      p90 of both and of the difference; target: median difference ≤ 10 % of direct TTFT here.

All on the demo model (SmolLM2-135M-Instruct, float32), greedy, ``--max-tokens`` tokens, one thread per engine
(this machine has 2 cores). Cells: starter pairs × load-bearing envelopes × AB/BA, seeded as a scan does.
Engine starts, Ray start and server start are timed and printed apart from every rate. Nothing is written
into the repository (temporary store and catalog).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")   # the in-process engines get one thread, like an actor

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402

from mirrorscan.actors.vllm_env import apply_vllm_env  # noqa: E402
from mirrorscan.cluster.home import subdir  # noqa: E402

CACHE = str(subdir("cache"))
apply_vllm_env("cpu", CACHE)   # before vllm is imported anywhere in this process: CPU settings, in-process engine core

from mirrorscan.actors.vllm_sampler import VLLMSampler, engine_kwargs  # noqa: E402
from mirrorscan.grid.records import ModelVariant, InvocationContext  # noqa: E402
from mirrorscan.cluster.scan.pipeline import render_block  # noqa: E402

TARGET_PIPELINE = 0.85
TARGET_STREAM_COST = 0.10
TARGET_TAP = 0.10
RUN = InvocationContext(invocation_id=str(uuid.uuid4()), experiment="bench_engines", instrument="forced_choice",
                 envelope_version="bench", cache_dir=CACHE)


def _bench_pipeline_module():
    """bench/pipeline.py as a module (its ``bench_cells`` builds the cells the same way for every benchmark)."""
    spec = importlib.util.spec_from_file_location("bench_pipeline", os.path.join(_HERE, "pipeline.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_cells(n: int) -> tuple[pa.Table, dict]:
    """The first ``n`` bench cells, rendered (system and user text), and the instrument (an InstrumentRef)."""
    cells, envelopes = _bench_pipeline_module().bench_cells(n)
    return render_block(cells, envelopes), envelopes


def variant(max_tokens: int) -> ModelVariant:
    """The demo model as a vLLM variant on the CPU: float32, greedy."""
    return ModelVariant(label="smollm2-135m-instruct", model="packaged:smollm2-135m-instruct", backend="vllm",
                        dtype="float32", device="cpu", temperature=0.0, top_p=1.0, max_tokens=max_tokens)


class TimedVLLMSampler(VLLMSampler):
    """VLLMSampler that appends when its ``__init__`` ran (monotonic) to a file, to subtract the engine start."""

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, timing_path: str):
        start = time.monotonic()
        super().__init__(variant, model_source, run)
        with open(timing_path, "a") as fh:
            fh.write(json.dumps({"init_start": start, "init_end": time.monotonic()}) + "\n")


# ---- 1. pipeline vs bare ---------------------------------------------------------------------------------

def bare_generate(cells: pa.Table, v: dict, source: str) -> dict:
    """``vllm.LLM.generate`` over all cells at once (token-id prompts rendered as the sampler renders them)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from transformers import AutoTokenizer

    from mirrorscan.actors.chat import render_chat
    from mirrorscan.actors.vllm_sampler import _stop_ids

    tok = AutoTokenizer.from_pretrained(source)
    prompts = []
    for c in cells.to_pylist():
        text, _ = render_chat(tok, c["system_text"], c["user_text"], None)
        prompts.append(TokensPrompt(prompt_token_ids=tok(text, add_special_tokens=False)["input_ids"]))
    started = time.monotonic()
    llm = LLM(**engine_kwargs(v, source))
    load_s = time.monotonic() - started
    params = SamplingParams(temperature=0.0, max_tokens=v.max_tokens, stop_token_ids=sorted(_stop_ids(source, tok)))
    started = time.monotonic()
    outs = llm.generate(prompts, params, use_tqdm=False)
    gen_s = time.monotonic() - started
    texts = [o.outputs[0].text for o in outs]
    del llm   # free its KV cache before the next engine starts
    import gc

    gc.collect()
    return {"load_s": load_s, "gen_s": gen_s, "cells_s": cells.num_rows / gen_s, "texts": texts}


def pipeline_run(cells_raw: pa.Table, envelopes, v: ModelVariant, source: str, batch_size: int) -> dict:
    """``run_model_journaled`` with the timed vLLM sampler, one actor, inference_log rows into a temp
    catalog; rate = cells ÷ (wall − engine start). Also returns the catalog's inference_log row count."""
    import dataclasses
    import shutil

    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.pipeline import Pool
    from mirrorscan.cluster.scan.sweep import run_model_journaled

    work = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    work.chmod(0o755)   # as root the catalog server runs as `postgres`, which must enter this folder
    store_dir, timing = str(work / "store"), work / "timing.jsonl"
    try:
        catalog = Catalog(embedded_pg.ensure_running(work / "catalog"))
        run = dataclasses.replace(RUN, catalog_dsn=catalog.dsn, store_uri=store_dir)
        kwargs = {"variant": v, "model_source": source, "run": run, "timing_path": str(timing)}
        started = time.monotonic()
        pool = Pool(TimedVLLMSampler, kwargs, envelopes, store_uri=store_dir, experiment=run.experiment,
                    invocation_id=run.invocation_id, batch_size=batch_size)
        rows = sum(r for r, _ in run_model_journaled(cells_raw, pool))
        wall = time.monotonic() - started
        deadline, logged = time.monotonic() + 60, 0   # the actor's log writer may still be closing
        while logged < cells_raw.num_rows and time.monotonic() < deadline:
            logged = catalog.execute("SELECT count(*) FROM inference_log WHERE invocation_id = %s",
                                     [run.invocation_id])[0][0]
            time.sleep(0.5)
        catalog.close()
        init = json.loads(timing.read_text().splitlines()[0])
        load_s = init["init_end"] - init["init_start"]
        stored = open_store(store_dir).read(run.experiment, run.invocation_id, ["probe_id", "response", "error"])
    finally:
        if (work / "catalog").exists():
            embedded_pg.stop(work / "catalog")
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "wall_s": wall, "load_s": load_s, "cells_s": cells_raw.num_rows / (wall - load_s),
            "stored": stored, "logged": logged}


# ---- 2. streaming cost ---------------------------------------------------------------------------------

def final_only(sampler: VLLMSampler, batch: pa.Table) -> float:
    """Seconds to answer ``batch`` on the sampler's engine with final-only outputs (no per-token work)."""
    import asyncio

    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    requests = []
    for c in batch.to_pylist():
        ids, _, params, _ = sampler._request(c)
        params.output_kind = RequestOutputKind.FINAL_ONLY
        requests.append((ids, params))

    async def one(ids, params):
        async for out in sampler.host.engine.generate(TokensPrompt(prompt_token_ids=ids), params, uuid.uuid4().hex):
            last = out
        return last.outputs[0].text

    async def all_of_them():
        return await asyncio.gather(*(one(i, p) for i, p in requests))

    started = time.monotonic()
    sampler.host.run(all_of_them())
    return time.monotonic() - started


def streaming_cost(cells: pa.Table, v: dict, source: str, batch_size: int, repeats: int) -> dict:
    """Streamed (sampler call) vs final-only seconds over the same batches, interleaved ``repeats`` times."""
    sampler = VLLMSampler(v, source, RUN)
    batches = [cells.slice(i, batch_size) for i in range(0, cells.num_rows, batch_size)]
    final_only(sampler, batches[0])   # warm-up of both paths, not timed
    sampler(batches[0])
    streamed, final = [], []
    for _ in range(repeats):
        started = time.monotonic()
        for b in batches:
            sampler(b)
        streamed.append(time.monotonic() - started)
        final.append(sum(final_only(sampler, b) for b in batches))
    sampler.shutdown()
    return {"engine_start_s": sampler.engine_start_s, "streamed_s": streamed, "final_s": final,
            "cost": statistics.median(streamed) / statistics.median(final) - 1}


# ---- 3. tap vs direct ----------------------------------------------------------------------------------

def client_ttft_ms(base_url: str, cell: dict, max_tokens: int) -> float:
    """Milliseconds from sending one streamed chat request to the first SSE chunk carrying text (monotonic)."""
    import httpx

    body = {"model": "smollm2", "stream": True, "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": cell["system_text"]}, {"role": "user", "content": cell["user_text"]}]}
    started = time.monotonic()
    first = None
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=120,
                      headers={"X-Probe-Id": cell["probe_id"]}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:]).get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    first = time.monotonic()
    return (first - started) * 1000 if first is not None else float("nan")


def tap_vs_direct(cells: pa.Table, demo: Path, n: int, max_tokens: int) -> dict:
    """TTFT direct and through the tap, alternating, ``n`` requests each."""
    from mirrorscan.actors.vllm_server import start_openai_server, stop_server
    from mirrorscan.cluster.catalog.client import resolve_dsn
    from mirrorscan.cluster.runtime.tap import start_tap, stop_tap

    folder = Path(tempfile.mkdtemp(prefix="bench-tap-"))
    started = time.monotonic()
    proc, direct = start_openai_server(demo, _free_port(), folder / "server.log")
    server_s = time.monotonic() - started
    try:
        started = time.monotonic()
        tap = start_tap(direct, host="127.0.0.1", port=_free_port(), catalog_dsn=resolve_dsn(None))
        tap_s = time.monotonic() - started
        tapped = tap.rstrip("/") + "/v1" if not tap.rstrip("/").endswith("/v1") else tap.rstrip("/")
        rows = cells.to_pylist()
        for c in rows[:3]:   # warm-up of both paths, not timed
            client_ttft_ms(direct, c, max_tokens), client_ttft_ms(tapped, c, max_tokens)
        d, t = [], []
        for i in range(n):
            c = rows[i % len(rows)]
            first, second = (direct, tapped) if i % 2 == 0 else (tapped, direct)
            a, b = client_ttft_ms(first, c, max_tokens), client_ttft_ms(second, c, max_tokens)
            (d if first == direct else t).append(a)
            (t if first == direct else d).append(b)
        stop_tap()
    finally:
        stop_server(proc)
    diffs = [b - a for a, b in zip(d, t)]
    return {"server_start_s": server_s, "tap_start_s": tap_s, "direct_ms": d, "tap_ms": t, "diff_ms": diffs}


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0–1) of ``values`` (linear interpolation)."""
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1] if q < 1 else max(values)


def _free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=256, help="cells for parts 1 and 2 (default 256)")
    p.add_argument("--batch-size", type=int, default=64, help="cells per actor batch (default 64)")
    p.add_argument("--max-tokens", type=int, default=16, help="generated tokens per cell, at most (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats in part 2 (default 3)")
    p.add_argument("--tap-requests", type=int, default=60, help="requests per side in part 3 (default 60, ≥ 50)")
    p.add_argument("--parts", default="1,2,3", help="which parts to run (default 1,2,3)")
    args = p.parse_args(argv)
    from mirrorscan.cluster.models.demo import prepare_demo_model
    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    demo = prepare_demo_model()
    source = str(demo)
    v = variant(args.max_tokens)
    cells, envelopes = rendered_cells(args.cells)
    parts = {int(x) for x in args.parts.split(",")}
    failed = False
    print(f"bench/engines.py  cells {cells.num_rows}  max_tokens {args.max_tokens}  batch {args.batch_size}  cpus {os.cpu_count()}")
    if 1 in parts:
        bare = bare_generate(cells, v, source)
        print(f"[1] bare LLM.generate: load {bare['load_s']:.1f} s, generate {bare['gen_s']:.2f} s, {bare['cells_s']:.2f} cells/s")
        started = time.monotonic()
        ensure_ray(num_cpus=2)
        print(f"    Ray start {time.monotonic() - started:.1f} s (not in any rate)")
        raw, _ = _bench_pipeline_module().bench_cells(args.cells)
        pipe = pipeline_run(raw, envelopes, v, source, args.batch_size)
        ratio = pipe["cells_s"] / bare["cells_s"]
        same = sum(a == b for a, b in zip(sorted(zip(cells.column("probe_id").to_pylist(), bare["texts"])),
                                          sorted(zip(pipe["stored"].column("probe_id").to_pylist(),
                                                     pipe["stored"].column("response").to_pylist()))))
        print(f"    pipeline: wall {pipe['wall_s']:.1f} s, actor engine start {pipe['load_s']:.1f} s, "
              f"{pipe['cells_s']:.2f} cells/s; rows {pipe['rows']}; answers equal to bare: {same}/{cells.num_rows}; "
              f"inference_log rows in the catalog {pipe['logged']}/{cells.num_rows}")
        print(f"    ratio pipeline/bare = {ratio:.3f} (target ≥ {TARGET_PIPELINE})")
        failed |= pipe["rows"] != cells.num_rows or pipe["logged"] != cells.num_rows
    if 2 in parts:
        s = streaming_cost(cells, v, source, args.batch_size, args.repeats)
        print(f"[2] engine start {s['engine_start_s']:.1f} s; streamed {['%.2f' % x for x in s['streamed_s']]} s, "
              f"final-only {['%.2f' % x for x in s['final_s']]} s")
        print(f"    streaming cost = {100 * s['cost']:+.1f} % (target ≤ {100 * TARGET_STREAM_COST:.0f} %)")
    if 3 in parts:
        ensure_ray(num_cpus=2)
        t = tap_vs_direct(cells, demo, args.tap_requests, args.max_tokens)
        md, mt = statistics.median(t["direct_ms"]), statistics.median(t["tap_ms"])
        print(f"[3] server start {t['server_start_s']:.1f} s, tap start {t['tap_start_s']:.1f} s; {len(t['direct_ms'])} requests each")
        print(f"    TTFT direct median {md:.1f} ms p90 {pct(t['direct_ms'], 0.9):.1f}; tap median {mt:.1f} ms "
              f"p90 {pct(t['tap_ms'], 0.9):.1f}")
        print(f"    tap − direct (paired): median {statistics.median(t['diff_ms']):+.1f} ms, p90 {pct(t['diff_ms'], 0.9):+.1f} ms "
              f"= {100 * statistics.median(t['diff_ms']) / md:+.1f} % of direct TTFT (target ≤ {100 * TARGET_TAP:.0f} %)")
    return 1 if failed else 0


if __name__ == "__main__":
    from on_term import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()   # a time limit's SIGTERM still stops the catalog server this run started
    sys.exit(main())
