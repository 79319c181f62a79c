"""Tiny random Llama models with the demo model's tokenizer: plumbing models for demos and fast tests, built
on first use; their answers are noise by construction."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from mirrorscan.cluster.models.demo import prepare_demo_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
"""Files that make up a Hugging Face tokenizer; whichever exist are copied for the tiny model."""


def _tokenizer_facts(tokenizer_dir: Path) -> tuple[int, dict]:
    """(vocab size, special token ids) read from ``tokenizer.json`` without loading transformers."""
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    ids = {token: i for token, i in vocab.items()} if isinstance(vocab, dict) else \
        {entry[0]: i for i, entry in enumerate(vocab)}
    ids.update({added["content"]: added["id"] for added in data.get("added_tokens", [])})
    size = max(ids.values()) + 1
    specials = {}
    config_path = tokenizer_dir / "tokenizer_config.json"
    token_config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    for role in ("bos", "eos", "pad"):
        token = token_config.get(f"{role}_token")
        token = token.get("content") if isinstance(token, dict) else token
        if token in ids:
            specials[f"{role}_token_id"] = ids[token]
    return size, specials


def prepare_tiny_model(layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """``$MIRRORSCAN_HOME/models/tiny-random-llama/`` (``TINY_MODEL_ALIAS``; other sizes and seeds:
    ``tiny-random-llama-<layers>x<hidden>-s<seed>/``, ``TINY_SIZED_ALIAS``), built from the demo tokenizer the
    first time (about a second; the demo model is prepared first if needed). Written beside and renamed into
    place, so a folder that exists is complete; the same seed gives the same weights on every machine."""
    from mirrorscan.cluster.home import subdir

    name = "tiny-random-llama" if (layers, hidden, seed) == (2, 64, 0) else f"tiny-random-llama-{layers}x{hidden}-s{seed}"
    folder = subdir("models") / name
    if (folder / "model.safetensors").is_file():
        return folder
    scratch = folder.with_name(f".{folder.name}-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    build_tiny_random_model(scratch, prepare_demo_model(), seed=seed, layers=layers, hidden=hidden)
    try:
        scratch.rename(folder)
    except OSError:   # another process finished first: its folder is the same model
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def build_tiny_random_model(out_dir: Path, tokenizer_dir: Path, seed: int = 0, layers: int = 2,
                            hidden: int = 64) -> Path:
    """Write a tiny random LlamaForCausalLM (``layers`` blocks of width ``hidden``, 4 heads) plus a copy of a
    tokenizer to ``out_dir``.

    Weights come from a ``torch.Generator`` seeded with ``seed`` (normal, std 0.02; norms 1), filled in
    parameter-name order, so the same seed gives byte-identical ``model.safetensors`` and different seeds
    differ. Embeddings are untied: with tied ones a random model just repeats the last prompt token.
    The vocabulary size and bos/eos/pad ids come from ``tokenizer_dir`` (e.g. the demo model's folder).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir, tokenizer_dir = Path(out_dir), Path(tokenizer_dir)
    vocab_size, specials = _tokenizer_facts(tokenizer_dir)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=4, intermediate_size=2 * hidden, max_position_embeddings=2048,
                         tie_word_embeddings=False, **specials)
    try:  # every parameter is filled below, so transformers' own random init is skipped
        from transformers.initialization import no_init_weights
    except ImportError:
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out_dir / name)
    return out_dir
