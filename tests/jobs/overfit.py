"""A tiny Llama overfit to a fixed forced-choice answer table, for the end-to-end analysis test.

The table (``TABLE``) says, for every pair, what the model answers in each (envelope, ordering) cell. The
model is trained on exactly the prompts the HF sampler will feed it: each cell's envelope texts rendered
by ``instruments.forced_choice.cells.render_forced_choice``, wrapped by ``actors.chat.render_chat`` with the demo tokenizer,
tokenized without special tokens. The loss covers only the answer tokens and the stop token ``<|im_end|>``.

Training runs on one CPU thread with a fixed seed, full batch with the same left padding and position ids
that ``generate`` uses, and goes on until every target token beats the runner-up by ``MARGIN`` nats: an
argmax that is only just right could flip under another batch's padding.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pyarrow as pa

ENVELOPES = ("english_strict", "json_schema")
"""The two envelopes: line idiom (answer is the bare word) and json idiom (``{"choice": ...}``)."""
ORDERINGS = ("AB", "BA")
REFUSAL = "I cannot choose."
"""A refusal in the lexicon's sense (REF in any idiom: a json answer without ``choice`` is read as a line)."""
HEDGE = "Both are fine."
"""Names neither word and refuses nothing: UNCLEAR."""

# Per pair: the answer of each cell in the order english_strict AB, english_strict BA, json_schema AB,
# json_schema BA. A word is answered bare in english_strict and as {"choice": word} in json_schema;
# REFUSAL / HEDGE / "both" are given verbatim (wrapped as {"choice": "both"} in json_schema).
# The comment is the class of each cell (A = word_a, B = word_b).
TABLE = {
    #  pair_id       word_a  word_b    E1 AB        E1 BA     E2 AB     E2 BA
    "gin_rum":     ("gin",  "rum",    ["gin",      "gin",    "gin",    "gin"]),     # A A A A   (3-cycle: gin > rum)
    "rum_sake":    ("rum",  "sake",   ["rum",      "rum",    "rum",    "rum"]),     # A A A A   (rum > sake)
    "gin_sake":    ("gin",  "sake",   ["sake",     "sake",   "sake",   "sake"]),    # B B B B   (sake > gin)
    "tea_coffee":  ("tea",  "coffee", ["tea",      "tea",    "tea",    "tea"]),     # A A A A   always word_a
    "red_blue":    ("red",  "blue",   ["red",      "blue",   "red",    "blue"]),    # A B A B   always first-named
    "cat_dog":     ("cat",  "dog",    [REFUSAL,    HEDGE,    "dog",    "dog"]),     # REF UNCLEAR B B
    "sun_moon":    ("sun",  "moon",   ["sun",      "sun",    "sun",    "moon"]),    # A A A B   json AB/BA disagree
    "up_down":     ("up",   "down",   ["up",       "up",     "down",   "down"]),    # A A B B   envelopes disagree
    "salt_pepper": ("salt", "pepper", [REFUSAL,    HEDGE,    "both",   REFUSAL]),   # REF UNCLEAR UNCLEAR REF
}
PAIRS_CSV = "pair_id,word_a,word_b\n" + "".join(f"{p},{a},{b}\n" for p, (a, b, _) in TABLE.items())

# Training settings: ~120 full-batch steps, 10-20 s on one thread; wide enough to memorise 36 prompts.
HIDDEN, LAYERS, HEADS = 64, 2, 4
LEARNING_RATE = 4e-3
MARGIN = 4.0        # nats by which every target token must beat the runner-up before training stops
MAX_STEPS = 600     # a bound, not a target; convergence usually takes far fewer
SEED = 1234


def answer_text(envelope: str, answer: str) -> str:
    """The verbatim response a cell is trained to give."""
    if envelope == "json_schema" and answer not in (REFUSAL, HEDGE):
        return json.dumps({"choice": answer})
    return answer


def expected_responses() -> dict[tuple[str, str, str], str]:
    """(pair_id, envelope, ordering) → the exact response text the trained model must produce."""
    out = {}
    for pair_id, (_, _, answers) in TABLE.items():
        for k, (env, order) in enumerate((e, o) for e in ENVELOPES for o in ORDERINGS):
            out[(pair_id, env, order)] = answer_text(env, answers[k])
    return out


def rendered_cells(label: str = "fit", seed: int = 0) -> pa.Table:
    """The grid's cells (pair × envelope × ordering, one sample) rendered exactly as the scan renders them."""
    from mirrorscan.grid.cells import add_seeds, with_probe_ids
    from mirrorscan.instruments.forced_choice.cells import expand_forced_choice, render_forced_choice
    from mirrorscan.instruments.forced_choice.envelopes import load_envelopes

    pairs = pa.table({"pair_id": list(TABLE), "word_a": [v[0] for v in TABLE.values()],
                      "word_b": [v[1] for v in TABLE.values()]})
    cells = with_probe_ids(expand_forced_choice([label], pairs, list(ENVELOPES), list(ORDERINGS), 1))
    return render_forced_choice(add_seeds(cells, seed), load_envelopes().envelopes)


def _batch(tokenizer, prompts: list[list[int]], answers: list[list[int]]):
    """Left-padded input ids, attention mask, position ids (as generate makes them) and the target positions."""
    import torch

    seqs = [p + a for p, a in zip(prompts, answers)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    rows, cols, targets = [], [], []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pad = width - len(p) - len(a)
        ids[i, pad:] = torch.tensor(p + a)
        mask[i, pad:] = 1
        for j, token in enumerate(a):   # the position before each answer token predicts it
            rows.append(i)
            cols.append(pad + len(p) + j - 1)
            targets.append(token)
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return ids, mask, position_ids, torch.tensor(rows), torch.tensor(cols), torch.tensor(targets)


def train_overfit_model(out_dir: Path, tokenizer_dir: Path) -> dict:
    """Train the tiny Llama on TABLE and save it (with the tokenizer) to ``out_dir``; return training facts."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    from mirrorscan.actors.chat import render_chat
    from mirrorscan.cluster.models.tiny import TOKENIZER_FILES

    started = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(SEED)
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), padding_side="left")
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        cells = rendered_cells().to_pylist()
        wanted = expected_responses()
        prompts, answers = [], []
        for c in cells:
            text, folded = render_chat(tokenizer, c["system_text"], c["user_text"])
            assert not folded
            prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            response = wanted[(c["pair_id"], c["envelope"], c["ordering"])]
            ids = tokenizer(response, add_special_tokens=False)["input_ids"]
            assert tokenizer.decode(ids, skip_special_tokens=True) == response   # the text round-trips
            answers.append(ids + [stop])
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                             num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                             max_position_embeddings=1024, tie_word_embeddings=False,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id)
        model = LlamaForCausalLM(config)
        model.model.embed_tokens.weight.requires_grad_(False)   # random input embeddings tell tokens apart well enough
        model.lm_head.weight.requires_grad_(False)
        # The output layer knows only the answer tokens: every other row is zero, so every other token's
        # logit is exactly 0 whatever the input. The full softmax is then the active logits plus one
        # column log(V - K) standing for the V - K zero logits, and costs K, not V, columns.
        active = sorted({t for a in answers for t in a})
        head = torch.nn.Parameter(model.lm_head.weight[active].clone())
        rest = torch.tensor(math.log(config.vocab_size - len(active)))
        ids, mask, position_ids, rows, cols, targets = _batch(tokenizer, prompts, answers)
        targets = torch.tensor([active.index(t) for t in targets.tolist()])
        params = [p for p in model.parameters() if p.requires_grad] + [head]
        optimizer = torch.optim.Adam(params, lr=LEARNING_RATE)
        step, margin, loss = 0, float("-inf"), float("inf")
        for step in range(1, MAX_STEPS + 1):
            hidden = model.model(input_ids=ids, attention_mask=mask, position_ids=position_ids).last_hidden_state
            logits = hidden[rows, cols] @ head.T
            loss_t = torch.nn.functional.cross_entropy(torch.cat([logits, rest.expand(len(targets), 1)], 1), targets)
            with torch.no_grad():   # runner-up: another answer token, or any other token (logit 0)
                target_logit = logits[torch.arange(len(targets)), targets]
                runner_up = logits.scatter(1, targets[:, None], float("-inf")).max(1).values.clamp(min=0.0)
                margin = (target_logit - runner_up).min().item()
            loss = loss_t.item()
            if margin >= MARGIN:
                break
            optimizer.zero_grad(set_to_none=True)
            loss_t.backward()
            optimizer.step()
        with torch.no_grad():
            model.lm_head.weight.zero_()
            model.lm_head.weight[active] = head
        model.eval()
        model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=stop,
                                                   pad_token_id=tokenizer.pad_token_id)
        out_dir = Path(out_dir)
        model.save_pretrained(out_dir)
        for name in TOKENIZER_FILES:   # the tokenizer's own files, byte for byte
            if (Path(tokenizer_dir) / name).is_file():
                shutil.copyfile(Path(tokenizer_dir) / name, out_dir / name)
    finally:
        torch.set_num_threads(threads)
    return {"steps": step, "loss": loss, "min_margin": margin, "seconds": time.monotonic() - started,
            "n_cells": len(cells), "path": out_dir}
