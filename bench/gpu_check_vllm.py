"""The vLLM figures of the GPU check (``python bench/gpu_check.py --vllm``), on the random Llama that script builds.

1. activations  the lens engines on the same rendered texts (``--act-items``, chat_user, every layer mean-pooled):
                transformers batched (``actors.hf_activations.HFActivations``) at the batch size that fills the
                card — doubled from 16 while items/s grows by more than 5 % and memory holds, up to
                ``--act-max-batch`` — against the vLLM engine (``actors.vllm_activations.VLLMActivations``, the
                whole set in one call: vLLM batches it itself). Items/s each, the ratio vLLM ÷ transformers, and
                the largest per-layer relative difference of the vectors (in bfloat16 the two paths round apart).
2. sampling     generated tokens/s of ``actors.vllm_sampler.VLLMSampler.__call__`` (what a scan's actor runs:
                streamed requests, per-cell timing, trace rows) ÷ a bare ``LLM.generate`` over the same token ids,
                greedy, the same batches, same engine arguments, one engine at a time. Target ≥ 0.9.
3. invariance   in a child process (``VLLM_BATCH_INVARIANT`` is read per process): a model variant with
                ``"batch_invariant": true``; the sampler's answers and the scorer's target log-probs for 64 cells,
                asked one at a time and as one batch of 64, compared bit for bit. Refused on a CPU, as the config is.

Timing is monotonic wall clock around the calls, engine start apart. Engines run eagerly (no CUDA graph
capture) so that five engine starts fit the script's budget; the ratios compare like with like.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

TARGET_SAMPLING = 0.9
"""Sampler ÷ bare ``LLM.generate`` tokens/s."""


def variant(backend: str, args, **extra):
    """The random model as a model variant on ``backend`` (eager vLLM engines sharing the card)."""
    from mirrorscan.grid.records import ModelVariant

    engine_args = {"enforce_eager": True, "gpu_memory_utilization": args.gpu_memory} if backend == "vllm" else {}
    return ModelVariant(label="random", model="random", backend=backend, temperature=0.0, top_p=1.0,
                        max_tokens=args.max_tokens, dtype=args.dtype, device=args.device, engine_args=engine_args,
                        **extra)


def run_context(instrument: str):
    """A run context for rows nobody stores."""
    from mirrorscan.grid.records import InvocationContext

    return InvocationContext(invocation_id="gpu-check", experiment="gpu_check", instrument=instrument, envelope_version="bench",
                      cache_dir=str(Path(".mirrorscan/gpu-check/cache").resolve()))


def activation_cells(texts: list[str]) -> pa.Table:
    """Lens cells of ``texts``: chat_user without a system block, every layer mean-pooled, float32 vectors."""
    base = {"rendering": "chat_user", "system": "none", "system_prompt": None, "user_suffix": "",
            "assistant_prefix": "", "date_string": "26 Jul 2024", "pooling": "mean", "drop_bos": False,
            "drop_whitespace": False, "max_input_tokens": None, "vector_dtype": "float32", "text_withheld": False}
    return pa.Table.from_pylist([{"probe_id": f"random|r|{i}|-|-", "sample": 0, "seed": i, "text": t, **base}
                                 for i, t in enumerate(texts)])


def vectors(rows: pa.Table) -> np.ndarray:
    """(cells, layers, hidden) of a batch's rows."""
    column = rows.column("layer_vectors").combine_chunks()
    layers, hidden = column.type.list_size, column.type.value_type.list_size
    flat = column.flatten().flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(len(column), layers, hidden)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def activations(model_dir: str, texts: list[str], args) -> dict:
    """Figure 1: transformers batched at the batch that fills the card, against the vLLM engine."""
    import torch

    from mirrorscan.actors.hf_activations import HFActivations
    from mirrorscan.actors.vllm_activations import VLLMActivations

    cells = activation_cells(texts)
    hf = HFActivations(variant("hf", args), model_dir, run_context("lens"))
    hf(cells.slice(0, 8))   # warm-up
    best, batch, tried = None, 16, []
    while batch <= args.act_max_batch:
        try:
            _sync()
            start = time.monotonic()
            parts = [hf(cells.slice(i, batch)) for i in range(0, cells.num_rows, batch)]
            _sync()
            rate = cells.num_rows / (time.monotonic() - start)
        except torch.cuda.OutOfMemoryError:
            tried.append((batch, "out of memory"))
            break
        tried.append((batch, rate))
        if best is not None and rate < best[1] * 1.05:
            break
        if best is None or rate > best[1]:
            best = (batch, rate, pa.concat_tables(parts))
        batch *= 2
    del hf
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    started = time.monotonic()
    engine = VLLMActivations(variant("vllm", args), model_dir, run_context("lens"))
    start_s = time.monotonic() - started
    try:
        engine(cells.slice(0, 8))   # warm-up
        start = time.monotonic()
        rows = engine(cells)
        vllm_rate = cells.num_rows / (time.monotonic() - start)
    finally:
        engine.shutdown()
    got, want = vectors(rows), vectors(best[2])
    worst = float(max(np.abs(got[:, k] - want[:, k]).max() / np.abs(want[:, k]).max() for k in range(want.shape[1])))
    return {"items": cells.num_rows, "hf_batches_tried": tried, "hf_batch": best[0], "hf_items_per_s": best[1],
            "vllm_items_per_s": vllm_rate, "vllm_engine_start_s": start_s, "ratio_vllm_to_hf": vllm_rate / best[1],
            "worst_relative_per_layer": worst}


def sampling(model_dir: str, cells: pa.Table, args) -> dict:
    """Figure 2: the sampler's generated tokens/s ÷ a bare ``LLM.generate`` on the same token ids and batches."""
    import pyarrow.compute as pc
    from transformers import AutoTokenizer
    from vllm import LLM
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import SamplingParams

    from mirrorscan.actors.chat import render_chat
    from mirrorscan.actors.vllm_env import apply_vllm_env
    from mirrorscan.actors.vllm_sampler import VLLMSampler, _stop_ids, engine_kwargs, shutdown_engines

    v = variant("vllm", args)
    apply_vllm_env(v.device, run_context("forced_choice").cache_dir)
    batches = [cells.slice(i, args.batch_size) for i in range(0, cells.num_rows, args.batch_size)]
    tok = AutoTokenizer.from_pretrained(model_dir)
    stop = sorted(_stop_ids(model_dir, tok))
    prompts = [[TokensPrompt(prompt_token_ids=tok(render_chat(tok, c["system_text"], c["user_text"], None)[0],
                                                  add_special_tokens=False)["input_ids"]) for c in b.to_pylist()]
               for b in batches]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, stop_token_ids=stop, detokenize=True)
    llm = LLM(**engine_kwargs(v, model_dir))
    bare = []
    try:
        llm.generate(prompts[0], params, use_tqdm=False)   # warm-up
        for _ in range(args.repeats):
            start, tokens = time.monotonic(), 0
            for batch in prompts:
                tokens += sum(len(o.outputs[0].token_ids) for o in llm.generate(batch, params, use_tqdm=False))
            bare.append(tokens / (time.monotonic() - start))
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
    sampler = VLLMSampler(v, model_dir, run_context("forced_choice"))
    ours = []
    try:
        sampler(batches[0])   # warm-up
        for _ in range(args.repeats):
            start, tokens = time.monotonic(), 0
            for batch in batches:
                rows = sampler(batch)
                tokens += pc.sum(rows.column("completion_tokens")).as_py()
            ours.append(tokens / (time.monotonic() - start))
    finally:
        shutdown_engines()
    a, b = statistics.median(bare), statistics.median(ours)
    return {"bare_tok_s": bare, "sampler_tok_s": ours, "ratio": b / a, "target": TARGET_SAMPLING,
            "target_met": b / a >= TARGET_SAMPLING}


def invariance_child(model_dir: str, cells_path: str, args) -> dict:
    """Figure 3, in its own process: answers and log-probs at batch 1 and batch 64 with ``batch_invariant``."""
    import pyarrow.parquet as pq

    from mirrorscan.actors.vllm_sampler import VLLMSampler, shutdown_engines
    from mirrorscan.actors.vllm_scorer import VLLMScorer

    cells = pq.read_table(cells_path).slice(0, 64)
    v = variant("vllm", args, batch_invariant=True)
    sampler = VLLMSampler(v, model_dir, run_context("forced_choice"))
    try:
        alone = [sampler(cells.slice(i, 1)).column("response")[0].as_py() for i in range(cells.num_rows)]
        together = sampler(cells).column("response").to_pylist()
        record = json.loads(sampler.overrides).get("batch_invariant")
    finally:
        shutdown_engines()
    score = pa.table({"probe_id": cells.column("probe_id"), "sample": cells.column("sample"),
                      "seed": cells.column("seed"), "prefix": cells.column("user_text"),
                      "target": pa.array([" yes"] * cells.num_rows), "add_bos": pa.nulls(cells.num_rows, pa.bool_())})
    scorer = VLLMScorer(v, model_dir, run_context("flinch"))
    try:
        lp_alone = [scorer(score.slice(i, 1)).column("target_logprobs")[0].as_py() for i in range(score.num_rows)]
        lp_together = scorer(score).column("target_logprobs").to_pylist()
    finally:
        scorer.shutdown()
    return {"cells": cells.num_rows, "answers_identical": sum(a == b for a, b in zip(alone, together)),
            "logprobs_identical": sum(a == b for a, b in zip(lp_alone, lp_together)), "ran_on": record}


def invariance(model_dir: str, cells: pa.Table, args, work: Path) -> dict:
    """Figure 3: ``invariance_child`` in a child process with the same arguments (refused on a CPU)."""
    if not args.device.startswith("cuda"):
        return {"refused": "batch_invariant needs a GPU (vLLM's CPU build crashes under VLLM_BATCH_INVARIANT=1)"}
    import pyarrow.parquet as pq

    pq.write_table(cells, work / "cells.parquet")
    argv = [sys.executable, str(Path(__file__).with_name("gpu_check.py")), "--invariance-child", str(model_dir),
            str(work / "cells.parquet"), "--device", args.device, "--dtype", args.dtype,
            "--max-tokens", str(args.max_tokens), "--gpu-memory", str(args.gpu_memory)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=dict(os.environ))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"failed": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(lines[-1])


def report(figures: dict) -> str:
    """The vLLM figures in a few lines."""
    out = []
    act = figures.get("activations")
    if act:
        out.append(f"activations: {act['items']} items; transformers batched (batch {act['hf_batch']}, tried "
                   f"{act['hf_batches_tried']}) {act['hf_items_per_s']:.1f} items/s; vLLM {act['vllm_items_per_s']:.1f} "
                   f"items/s (engine start {act['vllm_engine_start_s']:.0f} s); vLLM ÷ transformers "
                   f"{act['ratio_vllm_to_hf']:.2f}; largest per-layer relative difference {act['worst_relative_per_layer']:.1e}")
    smp = figures.get("sampling")
    if smp:
        out.append(f"sampling: bare LLM.generate {[round(x) for x in smp['bare_tok_s']]} tok/s, VLLMSampler "
                   f"{[round(x) for x in smp['sampler_tok_s']]} tok/s; ratio {smp['ratio']:.3f} (target ≥ "
                   f"{smp['target']:g}: {'met' if smp['target_met'] else 'MISSED'})")
    inv = figures.get("invariance")
    if inv:
        if "answers_identical" in inv:
            out.append(f"batch invariance: answers identical at batch 1 and 64 in {inv['answers_identical']}/{inv['cells']}, "
                       f"log-probs bit for bit in {inv['logprobs_identical']}/{inv['cells']} (ran on {inv['ran_on']})")
        else:
            out.append(f"batch invariance: {inv}")
    return "\n".join(out)
