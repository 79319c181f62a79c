"""GPU check: the HF sampler's batch function in-process, without Ray, against the bare batched loop.

For a lent GPU machine that has torch and transformers (and pyarrow) but neither Ray nor vLLM, and no
network. It builds a randomly initialised Llama of about 0.5 B parameters there (``--layers`` 24,
``--hidden`` 1024, ``--intermediate`` 3584, the demo tokenizer's 49,152-token vocabulary, untied
embeddings: ≈ 0.47 B), saves it to a temporary folder, then times on the same rendered cells, batch by
batch, interleaved A B A B:

A  the bare batched loop: tokenizer → ``model.generate`` (greedy, ``--max-tokens``) per batch;
B  ``actors.hf_sampler.HFSampler.__call__`` per batch (what a scan's actor runs), which also renders the
   chat, times each row and builds the trace rows.

Rate = generated tokens (up to and including the stop token, as the trace rows count them) ÷ the time
of the generate loop; reported per repeat, with medians and the ratio B/A. Ray is made unimportable
(``sys.modules["ray"] = None``), so the check proves the batch function needs no Ray even where Ray is
installed.

The tokenizer comes from a folder (``--tokenizer``; the demo model's tokenizer files, a few MB, e.g.
copied by ``python bench/gpu_check.py --export-tokenizer DIR`` on a machine that has the demo model).
``--device cpu --layers 2 --hidden 64 --intermediate 128 --cells 16`` runs it here as a dry run.

``--vllm`` (on a machine with vLLM) adds, on the same model and cells, the vLLM figures of
``bench/gpu_check_vllm.py``: lens activations through vLLM against transformers batched at the batch size that
fills the card, vLLM sampling tokens/s ÷ a bare ``LLM.generate`` (target ≥ 0.9), and answers and log-probs at
batch 1 against batch 64 under ``"batch_invariant": true``, bit for bit. The whole run is meant to finish within
8 minutes on one H100 (``--cells 512 --act-items 1024`` by default).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.modules["ray"] = None   # `import ray` raises ImportError here: the batch function must run without Ray

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt", "generation_config.json")


def export_tokenizer(dest: Path) -> None:
    """Copy the demo model's tokenizer files (not its weights) to ``dest``."""
    from mirrorscan.cluster.models.demo import prepare_demo_model

    demo = prepare_demo_model()
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (demo / name).is_file():
            shutil.copy2(demo / name, dest / name)
    print(f"tokenizer files of {demo} copied to {dest}")


def build_random_llama(tokenizer_dir: Path, out: Path, args, dtype) -> int:
    """Save a randomly initialised Llama (seed 0) with the tokenizer to ``out``; return its parameter count."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return n_params


def rendered_cells(n: int):
    """``n`` forced-choice cells (starter pairs × load-bearing envelopes × AB/BA), rendered, as a scan has them."""
    from mirrorscan.grid.cells import add_seeds, with_probe_ids
    from mirrorscan.instruments.forced_choice.cells import expand_forced_choice, render_forced_choice
    from mirrorscan.instruments.forced_choice.envelopes import load_bearing_ids, load_envelopes
    from mirrorscan.instruments.forced_choice.pairs import STARTER, load_pairs

    envelopes = load_envelopes()
    pairs = load_pairs(STARTER).table
    grid = with_probe_ids(expand_forced_choice(["random"], pairs, load_bearing_ids(envelopes), ["AB", "BA"], 1))
    return render_forced_choice(add_seeds(grid, 0).slice(0, n), envelopes.envelopes)


def bare_batches(model, tok, batches: list[list[dict]], max_tokens: int, stop_ids: set[int]) -> tuple[float, int]:
    """(seconds, generated tokens) of tokenizer → generate over ``batches``, counting tokens to the first stop."""
    import torch
    from transformers import GenerationConfig

    from mirrorscan.actors.chat import render_chat

    config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                              eos_token_id=sorted(stop_ids))
    tokens, start = 0, time.monotonic()
    for cells in batches:
        prompts = [render_chat(tok, c["system_text"], c["user_text"], None)[0] for c in cells]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.inference_mode():
            out = model.generate(**enc, generation_config=config)
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            stop = next((k for k, t in enumerate(row) if t in stop_ids), None)
            tokens += stop + 1 if stop is not None else len(row)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return time.monotonic() - start, tokens


def sampler_batches(sampler, batches) -> tuple[float, int]:
    """(seconds, generated tokens) of ``HFSampler.__call__`` over ``batches`` (pyarrow tables)."""
    import pyarrow.compute as pc

    tokens, start = 0, time.monotonic()
    for batch in batches:
        rows = sampler(batch)
        if pc.any(pc.is_valid(rows.column("error"))).as_py():
            raise RuntimeError(f"the sampler returned error rows: {rows.column('error').drop_null().to_pylist()[:3]}")
        tokens += pc.sum(rows.column("completion_tokens")).as_py()
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.monotonic() - start, tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", default=".mirrorscan/gpu-check/tokenizer", help="folder of tokenizer files")
    p.add_argument("--export-tokenizer", metavar="DIR", help="only copy the demo tokenizer's files to DIR, then exit")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=3584)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--cells", type=int, default=512, help="cells per repeat (default 512)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2, help="interleaved A B repeats (default 2)")
    p.add_argument("--vllm", action="store_true", help="also the vLLM figures (bench/gpu_check_vllm.py)")
    p.add_argument("--act-items", type=int, default=1024, help="texts for the activations figure (default 1024)")
    p.add_argument("--act-max-batch", type=int, default=1024, help="largest transformers batch tried (default 1024)")
    p.add_argument("--gpu-memory", type=float, default=0.4, help="vLLM gpu_memory_utilization (default 0.4)")
    p.add_argument("--invariance-child", nargs=2, metavar=("MODEL", "CELLS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.export_tokenizer:
        export_tokenizer(Path(args.export_tokenizer))
        return 0
    if args.invariance_child:
        import json

        from gpu_check_vllm import invariance_child

        print(json.dumps(invariance_child(*args.invariance_child, args)))
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mirrorscan.actors.hf_sampler import HFSampler
    from mirrorscan.grid.records import ModelVariant, InvocationContext

    dtype = getattr(torch, args.dtype)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        started = time.monotonic()
        n_params = build_random_llama(Path(args.tokenizer), work / "model", args, dtype)
        print(f"random Llama: {n_params / 1e9:.3f} B parameters, {args.dtype}, built in {time.monotonic() - started:.1f} s; "
              f"device {args.device} ({torch.cuda.get_device_name(0) if args.device.startswith('cuda') else 'cpu'})")
        cells = rendered_cells(args.cells)
        batches = [cells.slice(i, args.batch_size) for i in range(0, cells.num_rows, args.batch_size)]
        variant = ModelVariant(label="random", model="random", temperature=0.0, top_p=1.0,
                               max_tokens=args.max_tokens, dtype=args.dtype, device=args.device)
        run = InvocationContext(invocation_id="gpu-check", experiment="gpu_check", instrument="forced_choice",
                         envelope_version="bench")
        started = time.monotonic()
        sampler = HFSampler(variant, str(work / "model"), run)
        print(f"HFSampler built in {time.monotonic() - started:.1f} s (model load)")
        tok = AutoTokenizer.from_pretrained(work / "model", padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(work / "model", dtype=dtype).to(args.device).eval()
        stop_ids = sampler.stop_ids
        bare_batches(model, tok, [b.to_pylist() for b in batches[:1]], 4, stop_ids)   # warm-up, not timed
        sampler_batches(sampler, batches[:1])
        a_rates, b_rates = [], []
        for r in range(args.repeats):
            a_s, a_tok = bare_batches(model, tok, [b.to_pylist() for b in batches], args.max_tokens, stop_ids)
            b_s, b_tok = sampler_batches(sampler, batches)
            a_rates.append(a_tok / a_s)
            b_rates.append(b_tok / b_s)
            print(f"repeat {r + 1}: bare {a_tok} tokens in {a_s:.2f} s = {a_tok / a_s:.0f} tok/s; "
                  f"sampler {b_tok} tokens in {b_s:.2f} s = {b_tok / b_s:.0f} tok/s")
        a, b = statistics.median(a_rates), statistics.median(b_rates)
        print(f"median: bare {a:.0f} tok/s, HFSampler batch function {b:.0f} tok/s, ratio {b / a:.3f}")
        if args.vllm:
            import gpu_check_vllm

            del model, sampler
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            texts = [c["user_text"] for c in rendered_cells(args.act_items).to_pylist()]
            figures = {}
            for name, run in (("activations", lambda: gpu_check_vllm.activations(str(work / "model"), texts, args)),
                              ("sampling", lambda: gpu_check_vllm.sampling(str(work / "model"), cells, args)),
                              ("invariance", lambda: gpu_check_vllm.invariance(str(work / "model"), cells, args, work))):
                started = time.monotonic()
                figures[name] = run()
                print(f"{name}: {time.monotonic() - started:.0f} s")
            print(gpu_check_vllm.report(figures))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
