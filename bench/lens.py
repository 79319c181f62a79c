"""Benchmark: lens extraction (one run, ratios).

The shipped lens inputs (``packaged:v1`` framings, 6 + 6, around the 16 ``packaged:tasks`` texts and the empty
task; the 64 items of ``packaged:synthetic``: 268 items) on the demo model (SmolLM2-135M-Instruct, float32,
one torch thread), every layer mean-pooled (the lens section's defaults):

1. speed     our path is a real ``mirrorscan scan`` (Ray Data, crash journal, Parquet parts, inference_log into a
             catalog, an embedded PostgreSQL in a temp folder), batched; its extraction time is wall clock from
             the first batch's ``started_at`` to the last row's ``created_at`` of the stored rows, so Ray start,
             actor spawn and model load are reported apart. The baseline is one item at a time over the same
             texts: transformers' AutoModelForCausalLM (float32, ``torch.set_num_threads(1)``), each text
             rendered as the instrument does (``actors.hf_activations.input_ids``, chat template with the
             generation prompt, no system block), one forward pass of ``model.base_model`` with ``output_hidden_states``,
             mean-pooled per layer; its time is monotonic, rendering + forward + pooling of every item (model
             load apart). Speed = items ÷ time. Target: batched ÷ one-at-a-time ≥ 5.
   plain     the same texts through plain transformers in the same run: ``model.base_model`` with
             ``output_hidden_states``, batches of the same size in the same (grid) order, right-padded with an
             attention mask, mean-pooled per layer over the real positions; monotonic time of rendering +
             forward + pooling. Pipeline ÷ plain (items/s) is what the scan costs over the bare forward passes it
             wraps (Ray Data, journal, Parquet, catalog). Target ≥ 0.9. **Padding waste** = padded positions ÷
             all positions of the forward passes, for the scan's batches (from the stored rows: a batch is the
             rows of one ``started_at``) and the plain ones.
   check     the loop's token ids equal the stored ``input_token_ids``, and its pooled vectors equal the stored
             ``layer_vectors`` within relative 1e-4 per layer (max |Δ| ÷ max |stored| over the layer's
             width, as ``Lens.same_answer`` measures, at a looser bound), on every item.
   vllm      the same scan with the model on vLLM (``"backend": "vllm"``: vLLM's CPU build here, float32, its
             ``extract_hidden_states`` pooled in the worker, ``actors.vllm_activations``), timed the same way:
             items/s, ÷ one at a time, ÷ the transformers scan; its token ids and vectors checked against the loop
             at the same bound. ``--no-vllm`` leaves it out (an environment without vLLM).
2. storage   bytes stored per item: the invocation's trace Parquet parts ÷ rows, and the ``layer_vectors``
             column's compressed bytes ÷ rows (Parquet metadata), against the raw hidden states of an item
             (tokens × (L + 1) × hidden × 4 bytes, every token's state kept) and the pooled float32 size
             ((L + 1) × hidden × 4).

Nothing is written into the repository. Exit 1 when a check fails, 3 with ``--check-target`` when the speed
target is missed.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

SAME_RELATIVE = 1e-4
TARGET_RATIO = 5.0
"""Batched scan ÷ one item at a time: a GPU figure (on one CPU thread a forward pass costs about its tokens)."""
TARGET_PLAIN = 0.9
"""Scan ÷ plain transformers at the same batch size: what the pipeline may cost over the forward passes."""
LABEL = "smollm2"
QWEN7B = (28, 3584)
"""Qwen2.5-7B: blocks and hidden size, for the pooled size of a 7B model."""


def shipped_texts() -> dict[str, str]:
    """item_key → text of every item of the lens defaults, rendered as ``Lens.render`` renders them (framing
    around each task text and the empty task, scoring items alone, LF newlines), in grid order."""
    from mirrorscan.instruments.lens.items import EMPTY_TASK, SCORING, apply_newline, load_framings, load_items

    framings = load_framings("packaged:v1")
    tasks = [(t.id, t.text) for t in load_items("packaged:tasks", "tasks", False).items] + [(EMPTY_TASK, "")]
    scoring = load_items("packaged:synthetic", "scoring_set", True).items
    out = {f"base/{f.id}|{tid}": apply_newline(f.wrap(text), "lf") for f in framings.framings for tid, text in tasks}
    out.update({f"base/{SCORING}|{i.id}": apply_newline(i.text, "lf") for i in scoring})
    return out


def run_scan_batched(source: str, batch_size: int, work: Path, backend: str = "hf") -> dict:
    """A real lens scan with the section's defaults, the model on ``backend``; its rows, vectors, part files and
    timing."""
    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema
    from mirrorscan.jobs.scan import run_scan

    exp = work / f"lens-bench-{backend}"
    exp.mkdir()
    (exp / "config.json").write_text(json.dumps({
        "instrument": "lens", "models": [{"model": source, "label": LABEL, "dtype": "float32", "backend": backend}],
        "batch_size": batch_size, "lens": {}}))
    t0 = time.monotonic()
    dsn = embedded_pg.ensure_running(work / "catalog")
    pg_s = time.monotonic() - t0
    store_uri = str(work / "store")
    began, t0 = datetime.now(timezone.utc), time.monotonic()
    result = run_scan(str(exp), store=store_uri, catalog_dsn=dsn, quiet=True)
    wall, ended = time.monotonic() - t0, datetime.now(timezone.utc)
    store = open_store(store_uri)
    table = store.read(result.experiment, result.invocation_id, schema=trace_schema(resolve("lens").columns),
                       columns=["item_key", "user_text", "input_token_ids", "n_layers", "hidden_size", "started_at",
                                "created_at", "total_ms", "error", "layer_vectors"])
    meta = table.drop_columns(["layer_vectors"]).to_pylist()
    first, last = min(r["started_at"] for r in meta), max(r["created_at"] for r in meta)
    forward_ms = {r["started_at"]: r["total_ms"] for r in meta if r["total_ms"] is not None}   # one per batch
    return {"rows": meta, "vectors": table.column("layer_vectors"), "status": result.status,
            "parts": store.list_parts(result.experiment, result.invocation_id), "wall": wall,
            "extraction": (last - first).total_seconds(), "forward": sum(forward_ms.values()) / 1000,
            "batches": len(forward_ms), "before": (first - began).total_seconds(),
            "after": (ended - last).total_seconds(), "catalog_start": pg_s}


def stored_vectors(column, keys: list[str], rows: list[dict]) -> dict[str, np.ndarray]:
    """item_key → (layers, hidden) float32 of the rows without error."""
    values = column.combine_chunks()
    out = {}
    for i, (key, row) in enumerate(zip(keys, rows)):
        if row["error"] is None and values[i].is_valid:
            flat = values[i].values.flatten().to_numpy(zero_copy_only=False)
            out[key] = flat.reshape(row["n_layers"], row["hidden_size"])
    return out


def run_loop(source: str, texts: dict[str, str]) -> dict:
    """One item at a time: render, one forward pass of the base model with every hidden state, mean-pool."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mirrorscan.actors.hf_activations import input_ids

    torch.set_num_threads(1)
    t0 = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    body = model.base_model
    load = time.monotonic() - t0
    ids, vectors, forward = {}, {}, 0.0
    t0 = time.monotonic()
    with torch.inference_mode():
        for key, text in texts.items():
            ids[key] = input_ids(tokenizer, text, "chat_user", system="none", date_string="26 Jul 2024")
            f0 = time.monotonic()
            out = body(input_ids=torch.tensor([ids[key]], dtype=torch.long), output_hidden_states=True)
            forward += time.monotonic() - f0
            vectors[key] = torch.stack(out.hidden_states)[:, 0].float().mean(dim=1).numpy()
    return {"ids": ids, "vectors": vectors, "extraction": time.monotonic() - t0, "forward": forward, "load": load,
            "layers": model.config.num_hidden_layers + 1, "hidden": model.config.hidden_size}


def run_plain_batched(source: str, texts: dict[str, str], batch_size: int) -> dict:
    """Plain transformers, batched as the scan batches (same size, grid order): render, pad right, one forward
    pass with every hidden state, mean-pool each row over its real positions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mirrorscan.actors.hf_activations import input_ids

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    body, pad = model.base_model, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    keys, vectors, real, padded = list(texts), {}, 0, 0
    t0 = time.monotonic()
    with torch.inference_mode():
        for start in range(0, len(keys), batch_size):
            chunk = keys[start:start + batch_size]
            seqs = [input_ids(tokenizer, texts[k], "chat_user", system="none", date_string="26 Jul 2024")
                    for k in chunk]
            width = max(map(len, seqs))
            ids = torch.full((len(seqs), width), pad, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for r, seq in enumerate(seqs):
                ids[r, :len(seq)], mask[r, :len(seq)] = torch.tensor(seq), 1
            states = torch.stack(body(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states)
            for r, (key, seq) in enumerate(zip(chunk, seqs)):
                vectors[key] = states[:, r, :len(seq)].float().mean(dim=1).numpy()
            real, padded = real + sum(map(len, seqs)), padded + width * len(seqs)
    return {"vectors": vectors, "extraction": time.monotonic() - t0, "waste": 1 - real / padded}


def scan_padding_waste(rows: list[dict]) -> float:
    """Padded ÷ all positions of the scan's forward passes: a batch is the stored rows of one ``started_at``."""
    batches: dict = {}
    for r in rows:
        if r["error"] is None:
            batches.setdefault(r["started_at"], []).append(len(r["input_token_ids"]))
    real = sum(sum(b) for b in batches.values())
    return 1 - real / sum(max(b) * len(b) for b in batches.values())


def worst_relative(a: np.ndarray, b: np.ndarray) -> float:
    """Largest over layers of max |a − b| ÷ max |b| (b is the reference)."""
    scale = np.maximum(np.abs(b).max(axis=1), 1e-12)
    return float((np.abs(a.astype(np.float64) - b).max(axis=1) / scale).max())


def storage(parts: list[str], n_rows: int) -> dict:
    """Bytes of the trace parts and of their ``layer_vectors`` column chunks (compressed), per row."""
    import pyarrow.parquet as pq

    total, column = 0, 0
    for path in parts:
        total += os.path.getsize(path)
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            column += sum(group.column(j).total_compressed_size for j in range(group.num_columns)
                          if group.column(j).path_in_schema.split(".")[0] == "layer_vectors")
    return {"parts": len(parts), "total": total, "per_item": total / n_rows, "column_per_item": column / n_rows}


def vllm_figures(scan: dict, texts: dict[str, str], loop: dict, hf_speed: float, base: float,
                 problems: list[str]) -> dict:
    """Speed and check of the vLLM scan against the loop (token ids, vectors) and the transformers scan; a failed
    check is appended to ``problems``."""
    rows = scan["rows"]
    keys = [r["item_key"] for r in rows]
    stored = stored_vectors(scan["vectors"], keys, rows)
    by_key = dict(zip(keys, rows))
    if scan["status"] != "complete" or len(stored) != len(texts) or set(keys) != set(texts):
        problems.append(f"the vllm scan did not extract every item once (status {scan['status']}, {len(rows)} rows, "
                        f"{len(stored)} with vectors)")
    ids_differ = [k for k in texts if k in by_key and by_key[k]["input_token_ids"] != loop["ids"][k]]
    compared = [k for k in texts if k in stored and k not in ids_differ]
    worst = max((worst_relative(loop["vectors"][k], stored[k]) for k in compared), default=float("inf"))
    if ids_differ:
        problems.append(f"{len(ids_differ)} items read different token ids on vllm")
    if not worst <= SAME_RELATIVE:
        problems.append(f"vllm pooled vectors differ (relative {worst:.2e} > {SAME_RELATIVE:g})")
    speed = len(texts) / scan["extraction"]
    return {"items_per_s": speed, "extraction_s": scan["extraction"], "wall_s": scan["wall"],
            "before_first_batch_s": scan["before"], "batches": scan["batches"], "ratio_to_loop": speed / base,
            "ratio_to_hf_scan": speed / hf_speed, "compared": len(compared), "worst_relative": worst,
            "ids_differ": len(ids_differ)}


def main(argv: list[str] | None = None) -> int:
    """Run the scan and the loop, print the checks and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=16, help="the scan's batch size (default %(default)s)")
    parser.add_argument("--check-target", action="store_true", help="exit 3 when the speed target is missed")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of the text")
    parser.add_argument("--no-vllm", action="store_true", help="leave out the scan with the model on vLLM")
    args = parser.parse_args(argv)

    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.models.demo import prepare_demo_model

    source = str(prepare_demo_model())
    texts = shipped_texts()
    work = Path(tempfile.mkdtemp(prefix="mirrorscan-bench-lens-"))
    work.chmod(0o755)   # as root the catalog server runs as `postgres`, which must enter this folder
    problems = []
    try:
        ours = run_scan_batched(source, args.batch_size, work)
        on_vllm = None if args.no_vllm else run_scan_batched(source, args.batch_size, work, backend="vllm")
        import ray

        ray.shutdown()   # the loop gets the machine to itself
        store = storage(ours["parts"], len(ours["rows"]))
    finally:
        if (work / "catalog").exists():
            embedded_pg.stop(work / "catalog")
        import ray

        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    loop = run_loop(source, texts)
    plain = run_plain_batched(source, texts, args.batch_size)

    rows = ours["rows"]
    keys = [r["item_key"] for r in rows]
    by_key = dict(zip(keys, rows))
    stored = stored_vectors(ours["vectors"], keys, rows)
    if ours["status"] != "complete" or len(rows) != len(texts) or set(keys) != set(texts) or len(stored) != len(texts):
        problems.append(f"the scan did not extract every item once (status {ours['status']}, {len(rows)} rows, "
                        f"{len(stored)} with vectors, {len(texts)} items)")
    text_differ = [k for k in texts if k in by_key and by_key[k]["user_text"] != texts[k]]
    ids_differ = [k for k in texts if k in by_key and by_key[k]["input_token_ids"] != loop["ids"][k]]
    compared = [k for k in texts if k in stored and k not in ids_differ]
    worst = max((worst_relative(loop["vectors"][k], stored[k]) for k in compared), default=float("inf"))
    if text_differ:
        problems.append(f"{len(text_differ)} stored texts differ from the shipped renderings")
    if ids_differ:
        problems.append(f"{len(ids_differ)} items read different token ids")
    if not worst <= SAME_RELATIVE:
        problems.append(f"pooled vectors differ (relative {worst:.2e} > {SAME_RELATIVE:g})")
    worst_plain = max((worst_relative(plain["vectors"][k], stored[k]) for k in compared), default=float("inf"))
    if not worst_plain <= SAME_RELATIVE:
        problems.append(f"plain batched vectors differ (relative {worst_plain:.2e} > {SAME_RELATIVE:g})")

    n = len(texts)
    speed, base = n / ours["extraction"], n / loop["extraction"]
    vllm = None if on_vllm is None else vllm_figures(on_vllm, texts, loop, speed, base, problems)
    ratio = speed / base
    plain_speed = n / plain["extraction"]
    plain_ratio, scan_waste = speed / plain_speed, scan_padding_waste(rows)
    layers, hidden = loop["layers"], loop["hidden"]
    tokens = [len(loop["ids"][k]) for k in texts]
    pooled = layers * hidden * 4
    raw = float(np.mean(tokens)) * pooled
    q_layers, q_hidden = QWEN7B
    summary = {
        "items": n, "model": source, "batch_size": args.batch_size, "layers": layers, "hidden": hidden,
        "mean_tokens": float(np.mean(tokens)), "max_tokens": max(tokens),
        "scan": {"items_per_s": speed, "extraction_s": ours["extraction"], "forward_s": ours["forward"],
                 "batches": ours["batches"], "wall_s": ours["wall"], "before_first_batch_s": ours["before"],
                 "after_last_row_s": ours["after"], "catalog_start_s": ours["catalog_start"]},
        "loop": {"items_per_s": base, "extraction_s": loop["extraction"], "forward_s": loop["forward"],
                 "load_s": loop["load"]},
        "ratio": ratio, "target": TARGET_RATIO, "target_met": ratio >= TARGET_RATIO,
        "plain": {"items_per_s": plain_speed, "extraction_s": plain["extraction"], "padding_waste": plain["waste"],
                  "worst_relative": worst_plain},
        "scan_padding_waste": scan_waste, "ratio_to_plain": plain_ratio, "target_plain": TARGET_PLAIN,
        "target_plain_met": plain_ratio >= TARGET_PLAIN,
        "check": {"compared": len(compared), "worst_relative": worst, "bound": SAME_RELATIVE,
                  "texts_differ": len(text_differ), "ids_differ": len(ids_differ)},
        "storage": {**store, "raw_per_item": raw, "pooled_per_item": pooled,
                    "raw_over_stored": raw / store["per_item"], "column_over_pooled": store["column_per_item"] / pooled,
                    "qwen2_5_7b_pooled_float32": (q_layers + 1) * q_hidden * 4,
                    "qwen2_5_7b_pooled_float16": (q_layers + 1) * q_hidden * 2},
        "vllm": vllm,
        "problems": problems,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{n} items (12 framings × 17 tasks + 64 scoring), model {source}, float32, one torch thread; "
              f"{layers} layers × {hidden}, {np.mean(tokens):.1f} tokens per item (max {max(tokens)})")
        print(f"1. speed: scan {speed:.2f} items/s (batch {args.batch_size}, first batch → last row "
              f"{ours['extraction']:.1f} s, of which {ours['batches']} forward passes {ours['forward']:.1f} s)")
        print(f"   apart: whole scan {ours['wall']:.1f} s; before the first batch (Ray start, actor spawn, model "
              f"load) {ours['before']:.1f} s; after the last row (parts, catalog) {ours['after']:.1f} s; catalog "
              f"start {ours['catalog_start']:.1f} s")
        print(f"   one at a time: {base:.2f} items/s ({loop['extraction']:.1f} s, of which forward passes "
              f"{loop['forward']:.1f} s; model load {loop['load']:.1f} s)")
        print(f"   batched ÷ one at a time: {ratio:.2f} (target ≥ {TARGET_RATIO:g}: "
              f"{'met' if ratio >= TARGET_RATIO else 'MISSED'})")
        print(f"   plain transformers, batch {args.batch_size}, same texts and order: {plain_speed:.2f} items/s "
              f"({plain['extraction']:.1f} s); scan ÷ plain: {plain_ratio:.2f} (target ≥ {TARGET_PLAIN:g}: "
              f"{'met' if plain_ratio >= TARGET_PLAIN else 'MISSED'}); its vectors vs stored {worst_plain:.2e}")
        print(f"   padding waste (padded ÷ all positions): scan {scan_waste:.1%}, plain {plain['waste']:.1%}")
        print(f"   check: {len(compared)} items, same token ids in {n - len(ids_differ)}, largest relative "
              f"difference per layer {worst:.2e} (≤ {SAME_RELATIVE:g}: {'ok' if worst <= SAME_RELATIVE else 'WRONG'})")
        if vllm is not None:
            print(f"   vllm scan (backend vllm, batch {args.batch_size}): {vllm['items_per_s']:.2f} items/s "
                  f"({vllm['extraction_s']:.1f} s first batch → last row; before the first batch {vllm['before_first_batch_s']:.1f} s)")
            print(f"   vllm ÷ one at a time: {vllm['ratio_to_loop']:.2f}; vllm ÷ transformers scan: "
                  f"{vllm['ratio_to_hf_scan']:.2f}; check: same token ids in {n - vllm['ids_differ']}, largest "
                  f"relative difference per layer {vllm['worst_relative']:.2e}")
        print(f"2. storage: {store['per_item']:,.0f} B per item ({store['total']:,} B in {store['parts']} part(s)); "
              f"layer_vectors {store['column_per_item']:,.0f} B per item (compressed)")
        print(f"   raw hidden states {raw:,.0f} B per item (mean tokens × {layers} × {hidden} × 4): "
              f"{raw / store['per_item']:.1f}× the stored bytes")
        print(f"   pooled float32 {pooled:,} B per item ({layers} × {hidden} × 4): layer_vectors is "
              f"{store['column_per_item'] / pooled:.3f}× that")
        print(f"   a 7B model (Qwen2.5-7B, {q_layers} layers, hidden {q_hidden}) pooled: {q_layers + 1} × {q_hidden} × 4 "
              f"= {(q_layers + 1) * q_hidden * 4:,} B float32, {(q_layers + 1) * q_hidden * 2:,} B float16")
    if problems:
        print(f"WRONG: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 3 if args.check_target and ratio < TARGET_RATIO else 0


if __name__ == "__main__":
    from on_term import exit_cleanly_on_sigterm

    exit_cleanly_on_sigterm()   # a time limit's SIGTERM still stops the catalog server this run started
    sys.exit(main())
