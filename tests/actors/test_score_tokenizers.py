"""Tokenizer cases that would change a score silently: a SentencePiece tokenizer that writes the target's
space as a lone "▁" token (legacy Llama/Mistral), and a tokenizer that needs its BOS forced. Both tokenizers
are built here, offline; every expected log-prob comes from a plain transformers forward pass."""

from __future__ import annotations

import shutil

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from mirrorscan.actors.score_tokens import LONE_SPACE_DROPPED, score_ids
from mirrorscan.grid.records import ModelVariant, InvocationContext

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
LINES = ["The jury found that the victim had been murdered.", "The army cleared the square and the protesters were murdered.",
         "Cats purr when they are happy.", "The capital of France is Paris.", "He said the word murdered twice."]
PAIRS = [("The jury found that the victim had been", " murdered"), ("The capital of France is", " Paris"),
         ("Cats", " purr")]


def cells(pairs, add_bos=None):
    import pyarrow as pa

    return pa.Table.from_pylist([{"probe_id": f"m|t{i}|-|-", "sample": 0, "seed": i, "prefix": p, "target": t,
                                  "add_bos": add_bos} for i, (p, t) in enumerate(pairs)])


def scorer(model_dir, **kw) -> HFScorer:
    variant = ModelVariant(label="m", model=str(model_dir), temperature=0.0, top_p=1.0, max_tokens=1, dtype="float32",
                           **kw)
    return HFScorer(variant, str(model_dir), RUN)


def plain_logprobs(model_dir, ids: list[int], first: int) -> list[float]:
    """Log-probs (nats) of ``ids[first:]`` from one unpadded forward pass of a freshly loaded model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
    return [float(logprobs[j - 1, ids[j]]) for j in range(first, len(ids))]


@pytest.fixture(scope="module")
def sentencepiece_dir(tmp_path_factory):
    """A tiny random Llama with a legacy-Llama-style SentencePiece tokenizer trained here on five lines: a
    Unigram model whose normalizer puts "▁" before the text and writes every space as "▁" (no pre-tokenizer,
    as transformers' legacy Llama tokenizer), BOS ``<s>`` added first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    from mirrorscan.cluster.models.tiny import build_tiny_random_model

    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")   # word pieces
    raw.train_from_iterator(LINES * 3, trainers.UnigramTrainer(vocab_size=150, unk_token="<unk>",
                                                                special_tokens=["<unk>", "<s>", "</s>"]))
    raw.pre_tokenizer = None
    raw.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    raw.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    raw.post_processor = TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="</s>")
    tok_dir = tmp_path_factory.mktemp("sp") / "tokenizer"
    tok.save_pretrained(tok_dir)
    return build_tiny_random_model(tmp_path_factory.mktemp("sp") / "model", tok_dir, seed=3)


def test_a_lone_space_token_before_the_word_is_not_scored_and_the_row_says_so(sentencepiece_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(sentencepiece_dir)
    lone = tok(" murdered", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(lone) == ["\u2581", "\u2581murdered"]   # the tokenizer does split it
    rows = scorer(sentencepiece_dir)(cells(PAIRS)).to_pylist()
    space_id = tok.convert_tokens_to_ids("\u2581")
    for row, (prefix, target) in zip(rows, PAIRS):
        # the method's target: the word's tokens as the whole sentence is tokenized (its one space included)
        joint = tok(prefix + target)["input_ids"]
        alone = tok(prefix)["input_ids"]
        assert row["error"] is None and joint[:len(alone)] == alone == row["prefix_token_ids"]
        assert row["target_token_ids"] == joint[len(alone):]
        assert row["target_logprobs"] == pytest.approx(plain_logprobs(sentencepiece_dir, joint, len(alone)), abs=1e-5)
        assert row["target_space"] == LONE_SPACE_DROPPED and row["bos_added"]
    murdered = rows[0]
    assert space_id not in murdered["target_token_ids"]
    # scoring the lone "▁" as well would have given another number: its own log-prob (about −ln 150 nats under
    # this near-uniform random model) on top. (Their means differ by as little as 1e-3 here, by chance of the
    # trained vocabulary: the sum is the deterministic witness.)
    naive = murdered["prefix_token_ids"] + lone
    naive_lps = plain_logprobs(sentencepiece_dir, naive, len(murdered["prefix_token_ids"]))
    assert len(naive_lps) == len(murdered["target_logprobs"]) + 1
    assert sum(naive_lps) < sum(murdered["target_logprobs"]) - 1.0


def test_a_tokenizer_without_the_dummy_space_keeps_its_targets_as_they_are(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)   # byte-level BPE: " word" is one "Ġword" piece
    ids = score_ids(tok, "The capital of France is", " Paris")
    assert ids.target_ids == tok(" Paris", add_special_tokens=False)["input_ids"] and ids.target_space is None


@pytest.fixture(scope="module")
def needs_forced_bos_dir(bos_tiny_dir, tmp_path_factory):
    """The BOS tiny model with a tokenizer that has a BOS token but does not add it (as a model whose
    tokenizer files lost the rule, and that needs ``add_bos: true``)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("nobos") / "tiny-needs-bos"
    shutil.copytree(bos_tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok._tokenizer.post_processor = TemplateProcessing(single="$A", pair="$A $B")
    tok.save_pretrained(folder)
    return folder


def test_a_forced_bos_scores_as_the_tokenizer_that_adds_it_does(bos_tiny_dir, needs_forced_bos_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(needs_forced_bos_dir)
    bos = tok.bos_token_id
    assert bos is not None and tok("Cats")["input_ids"][0] != bos        # this tokenizer adds none
    pairs = PAIRS + [("", " Cats")]
    forced = scorer(needs_forced_bos_dir, add_bos=True)(cells(pairs)).to_pylist()
    adding = scorer(bos_tiny_dir)(cells(pairs)).to_pylist()                # the tokenizer adds BOS itself
    both = scorer(bos_tiny_dir, add_bos=True)(cells(pairs)).to_pylist()   # forced where it is added anyway
    for f, a, b, (prefix, target) in zip(forced, adding, both, pairs):
        assert f["error"] is None and f["bos_added"] and a["bos_added"] and b["bos_added"]
        assert f["prefix_token_ids"] == a["prefix_token_ids"] == b["prefix_token_ids"]
        assert f["prefix_token_ids"].count(bos) == 1 and f["prefix_token_ids"][0] == bos   # one BOS, first
        ids = [bos] + tok(prefix, add_special_tokens=False)["input_ids"] + tok(target, add_special_tokens=False)["input_ids"]
        expected = plain_logprobs(needs_forced_bos_dir, ids, len(ids) - len(f["target_token_ids"]))
        assert f["target_logprobs"] == pytest.approx(expected, abs=1e-5)
        assert a["target_logprobs"] == pytest.approx(f["target_logprobs"], abs=1e-6)
        assert b["target_logprobs"] == pytest.approx(f["target_logprobs"], abs=1e-6)
    unforced = scorer(needs_forced_bos_dir)(cells(pairs[:1])).to_pylist()[0]   # without it: another number
    assert not unforced["bos_added"] and abs(unforced["lp_mean"] - forced[0]["lp_mean"]) > 1e-4


def test_flinch_names_per_model_the_terms_whose_lone_space_was_not_scored():
    import pyarrow as pa

    from mirrorscan.instruments.flinch.instrument import lone_space_notes

    traces = pa.table({"label": ["llama", "llama", "llama", "gpt"], "term": ["murdered", "murdered", "Paris", "Paris"],
                       "target_space": ["lone_space_dropped", "lone_space_dropped", None, None]})
    (note,) = lone_space_notes(traces)
    assert note.startswith("llama: its tokenizer splits the leading space off 1 term(s)") and "(murdered)" in note
    assert lone_space_notes(traces.drop_columns(["target_space"])) == ()
