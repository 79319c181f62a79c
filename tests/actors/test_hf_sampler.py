"""The HF sampler actor class, called in-process (no Ray): answers, seeds, folding, timing."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from mirrorscan.actors.chat import FOLD_SEPARATOR, render_chat
from mirrorscan.actors.hf_sampler import HFSampler
from fc_grid import fc_rendered
from mirrorscan.grid.ids import cell_seed
from mirrorscan.grid.records import ModelVariant, InvocationContext

PAIRS = pa.table({"pair_id": ["vw", "cd", "tc"], "word_a": ["vodka", "cat", "tea"], "word_b": ["whiskey", "dog", "coffee"]})
RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="forced_choice", envelope_version="t")
NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
EFFORT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if reasoning_effort is defined %}Reasoning effort: "
    "{{ reasoning_effort }}.{% if reasoning_effort == 'high' %} Think it through step by step before answering."
    "{% endif %}\n{% endif %}{% endif %}")
"""A chat template that reads ``reasoning_effort`` (and no other kwarg); 'high' adds a sentence."""


def cells(samples: int = 1, seed: int = 11) -> pa.Table:
    return fc_rendered(["tiny"], PAIRS, ["english_strict", "json_schema"], ["AB", "BA"], samples, seed)


def variant(**kw) -> ModelVariant:
    return ModelVariant(**{"label": "tiny", "model": "tiny", "temperature": 0.0, "top_p": 1.0, "max_tokens": 8,
                           "dtype": "float32", **kw})


@pytest.fixture(scope="module")
def greedy(tiny_dir):
    return HFSampler(variant(), str(tiny_dir), RUN)


@pytest.fixture(scope="module")
def sampled(tiny_dir):
    return HFSampler(variant(temperature=1.0, top_p=0.95), str(tiny_dir), RUN)


def test_greedy_rows_carry_coordinates_text_and_honest_timing(greedy):
    batch = cells()
    out = greedy(batch).to_pylist()
    assert [r["probe_id"] for r in out] == batch["probe_id"].to_pylist()
    for row, cell in zip(out, batch.to_pylist()):
        assert row["error"] is None and isinstance(row["response"], str)
        assert row["user_text"] == cell["user_text"] and row["system_text"] == cell["system_text"]
        assert row["seed"] == cell_seed(11, row["probe_id"], row["sample"])
        assert 1 <= row["completion_tokens"] <= 8 and row["prompt_tokens"] > 10
        assert row["finish_reason"] in ("stop", "length")
        assert row["timing_scope"] == "batch" and row["batch_size"] == batch.num_rows
        assert 0 < row["ttft_ms"] <= row["total_ms"] and row["prefill_ms"] == row["ttft_ms"]
        assert row["system_folded"] is False and row["backend"] == "hf" and row["attempt"] == 1
    # greedy is deterministic: the same batch again gives the same texts
    assert [r["response"] for r in greedy(batch).to_pylist()] == [r["response"] for r in out]


def test_sampled_cell_text_does_not_depend_on_its_batch(sampled):
    batch = cells(samples=2)
    first = {(r["probe_id"], r["sample"]): r["response"] for r in sampled(batch.slice(0, 6)).to_pylist()}
    mixed = batch.take([5, 11, 3, 0, 8])   # other neighbours, other order
    second = {(r["probe_id"], r["sample"]): r["response"] for r in sampled(mixed).to_pylist()}
    shared = set(first) & set(second)
    assert len(shared) == 3
    assert all(first[k] == second[k] for k in shared)
    # and the seed matters: two samples of one cell differ (random tiny model at temperature 1)
    texts = list(first.values())
    assert len(set(texts)) > len(texts) // 2


def test_system_text_is_folded_only_when_the_template_rejects_it(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    text, folded = render_chat(tok, "SYS", "USER")
    assert not folded and "SYS" in text and "USER" in text
    tok.chat_template = NO_SYSTEM_TEMPLATE
    text, folded = render_chat(tok, "SYS", "USER")
    assert folded and f"SYS{FOLD_SEPARATOR}USER" in text and "system" not in text


def test_folding_is_recorded_on_rows(tiny_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    model_dir = tmp_path / "nosys"
    shutil.copytree(tiny_dir, model_dir)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.chat_template = NO_SYSTEM_TEMPLATE
    tok.save_pretrained(str(model_dir))
    rows = HFSampler(variant(), str(model_dir), RUN)(cells().slice(0, 2)).to_pylist()
    assert all(r["system_folded"] is True and r["error"] is None for r in rows)
    assert rows[0]["system_text"] == "You are a helpful assistant."   # the row keeps the envelope's text verbatim


def test_a_failing_cell_becomes_an_error_row_and_the_rest_answer(greedy):
    batch = cells().slice(0, 4)
    poisoned = batch.set_column(batch.schema.get_field_index("user_text"), "user_text",
                                pa.array(["ok 1", None, "ok 3", "ok 4"], pa.string()))
    rows = greedy(poisoned).to_pylist()
    assert [r["error"] is None for r in rows] == [True, False, True, True]
    assert rows[1]["response"] is None and rows[1]["error"]


def with_template(tiny_dir, folder, template: str) -> str:
    """A copy of the tiny model whose tokenizer carries ``template``."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = template
    tok.save_pretrained(str(folder))
    return str(folder)


def test_effort_tiers_change_the_prompt_and_rows_record_the_kwargs_applied(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    from mirrorscan.actors.chat import template_kwargs

    source = with_template(tiny_dir, tmp_path / "effort", EFFORT_TEMPLATE)
    tok = AutoTokenizer.from_pretrained(source)
    texts = {e: render_chat(tok, "S", "U", template_kwargs(variant(effort=e)))[0] for e in (None, "low", "high")}
    assert len(set(texts.values())) == 3 and "Reasoning effort: high. Think" in texts["high"]
    batch = cells().slice(0, 2)
    rows = {e: HFSampler(variant(label=f"tiny@{e}", effort=e), source, RUN)(batch).to_pylist() for e in ("low", "high")}
    for low, high in zip(rows["low"], rows["high"]):
        assert low["error"] is None and high["error"] is None
        assert high["prompt_tokens"] > low["prompt_tokens"]   # two tiers, two different prompts
    for effort, tier in rows.items():
        for row in tier:
            assert json.loads(row["generation_overrides"]) == {
                "effort": effort, "extra_body": {},
                "chat_template_kwargs": {"reasoning_effort": effort, "enable_thinking": True}}


def test_rows_without_overrides_record_none_and_extra_body_is_refused(greedy, tiny_dir):
    from mirrorscan.grid.errors import ConfigError

    row = greedy(cells().slice(0, 1)).to_pylist()[0]
    assert json.loads(row["generation_overrides"]) == {"effort": None, "extra_body": {}, "chat_template_kwargs": {}}
    with pytest.raises(ConfigError, match=r"models\[tiny\]\.extra_body.*no request"):
        HFSampler(variant(extra_body={"top_k": 5}), str(tiny_dir), RUN)


def test_unapplied_overrides_are_those_that_leave_the_rendered_bytes_unchanged(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    from mirrorscan.actors.chat import unapplied_overrides

    plain = AutoTokenizer.from_pretrained(str(tiny_dir))   # SmolLM2's template reads no kwarg
    assert unapplied_overrides(plain, variant(effort="high")) == ["effort"]
    assert unapplied_overrides(plain, variant(chat_template_kwargs={"enable_thinking": False})) == [
        "chat_template_kwargs.enable_thinking"]
    reads = AutoTokenizer.from_pretrained(with_template(tiny_dir, tmp_path / "effort", EFFORT_TEMPLATE))
    assert unapplied_overrides(reads, variant(effort="low")) == []
    assert unapplied_overrides(reads, variant(chat_template_kwargs={"reasoning_effort": "high", "colour": "red"})) == [
        "chat_template_kwargs.colour"]
    # the effort is replaced by an explicit kwarg: it changes nothing any more
    assert unapplied_overrides(reads, variant(effort="low", chat_template_kwargs={"reasoning_effort": "high"})) == [
        "effort"]
    # a later source replaces an earlier key: the earlier one changes nothing
    shadowed = variant(chat_template_kwargs={"reasoning_effort": "low"},
                       extra_body={"chat_template_kwargs": {"reasoning_effort": "high"}})
    assert unapplied_overrides(reads, shadowed) == ["chat_template_kwargs.reasoning_effort"]


def test_a_prompt_longer_than_the_context_is_an_error_row_and_its_batch_goes_on(greedy):
    batch = cells().slice(0, 3)
    long_text = " ".join(["word"] * (greedy.context + 10))
    user = batch.column("user_text").to_pylist()
    batch = batch.set_column(batch.schema.get_field_index("user_text"), "user_text",
                             pa.array([user[0], long_text, user[2]], pa.string()))
    rows = greedy(batch).to_pylist()
    assert [r["probe_id"] for r in rows] == batch.column("probe_id").to_pylist()
    assert rows[1]["error"].startswith("ContextExceeded:") and f"{greedy.context} tokens" in rows[1]["error"]
    assert rows[1]["prompt_tokens"] > greedy.context
    assert rows[0]["error"] is None and rows[2]["error"] is None and rows[0]["response"] is not None


def test_max_tokens_that_leave_no_room_in_the_context_are_refused(tmp_path, tiny_dir):
    import json

    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.grid.spec import load_spec
    from mirrorscan.cluster.scan.preflight import check_context

    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\np1,cat,dog\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "probe_set": "pairs.csv", "max_tokens": 100_000,   # within the limit on answers, past the context
        "models": [{"model": str(tiny_dir), "label": "tiny"}]}))
    spec = load_spec(folder)
    with pytest.raises(ConfigError, match="context window holds 2048 tokens") as info:
        check_context(spec, {"tiny": str(tiny_dir)})
    assert info.value.field == "max_tokens" and info.value.fix == "use fewer than 2048"
    check_context(load_spec(folder), {"tiny": str(tmp_path)})   # a folder that does not say: not checked


def test_a_batch_of_sampled_cells_equals_the_cells_one_at_a_time(sampled):
    """The sampler draws each row from its own generator: sixteen sampled cells in one generate call give
    the texts each gives alone, and the batch really ran as one (batch_size 16)."""
    batch = cells(samples=3).slice(0, 16)
    together = sampled(batch).to_pylist()
    assert {r["batch_size"] for r in together} == {16}
    alone = [sampled(batch.slice(i, 1)).to_pylist()[0] for i in range(16)]
    assert [r["response"] for r in together] == [r["response"] for r in alone]
    assert [r["completion_tokens"] for r in together] == [r["completion_tokens"] for r in alone]
    assert all(json.loads(r["request_params"])["seed"] == r["seed"] for r in together)


def test_a_cells_own_sampling_columns_replace_the_variants(greedy, sampled):
    """A greedy variant given cells that carry temperature/top_p samples them exactly as a sampled variant
    would; a cell's max_tokens bounds its answer alone, and the rows record what each cell used."""
    batch = cells().slice(0, 6)
    n = batch.num_rows
    own = (batch.append_column("temperature", pa.array([1.0, None, 1.0, None, 1.0, None], pa.float64()))
                .append_column("top_p", pa.array([0.95] * n, pa.float64()))
                .append_column("max_tokens", pa.array([8, 2, 8, 2, 8, 2], pa.int64())))
    rows = greedy(own).to_pylist()
    reference_sampled = sampled(batch).to_pylist()
    reference_greedy = greedy(batch).to_pylist()
    for i, row in enumerate(rows):
        if i % 2 == 0:
            assert row["temperature"] == 1.0 and row["max_tokens"] == 8
            assert row["response"] == reference_sampled[i]["response"]
        else:
            assert row["temperature"] == 0.0 and row["max_tokens"] == 2 and row["completion_tokens"] <= 2
            assert reference_greedy[i]["response"].startswith(row["response"])


def test_row_sampler_keeps_to_the_nucleus_and_is_greedy_at_temperature_zero():
    import torch

    from mirrorscan.actors.hf_sampler import RowSampler

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    seen = {0: set(), 1: set(), 2: set()}
    for seed in range(200):
        picks = RowSampler([0.0, 1.0, 1.0], [1.0, 0.7, 1.0], [seed, seed, seed])(None, logits).argmax(dim=-1).tolist()
        for row, token in enumerate(picks):
            seen[row].add(token)
    assert seen[0] == {0}              # greedy: the argmax only
    assert seen[1] == {0, 1}           # top_p 0.7: 0.5 + 0.3 reaches it, the tail never drawn
    assert seen[2] == {0, 1, 2, 3}     # the full distribution (p = 0.05 is seen in 200 draws)


def test_the_nucleus_found_among_the_top_tokens_equals_the_full_sort():
    """The sampler sorts only the most likely tokens when the nucleus ends among them: on peaked, flat and
    tied distributions its mask equals the one a stable full sort gives (ties: lower token id first)."""
    import torch

    from mirrorscan.actors.hf_sampler import TOP_K, RowSampler

    torch.manual_seed(3)
    vocab = 4 * TOP_K
    peaked = torch.softmax(torch.randn(4, vocab) * 8, dim=-1)
    flat = torch.softmax(torch.randn(4, vocab) * 0.01, dim=-1)   # the nucleus needs most of the vocabulary
    tied = torch.full((2, vocab), 1.0 / vocab)
    for probs in (peaked, flat, tied):
        for top_p in (0.5, 0.9, 0.999):
            tops = torch.full((probs.shape[0], 1), top_p)
            ordered, ids = probs.sort(dim=-1, descending=True, stable=True)
            full = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, ids, (ordered.cumsum(-1) - ordered) < tops)
            assert torch.equal(RowSampler.nucleus(probs, tops), full)
    assert RowSampler.nucleus(flat, torch.ones(4, 1)).all()   # top_p 1: the whole vocabulary


def sampler_version_2(temperatures, top_ps, generators, scores):
    """The tokens SAMPLER_VERSION 2 defines, written as the race over the whole vocabulary it was first run as: the
    reference the sampler's shortcuts are held to, token for token."""
    import torch

    from mirrorscan.actors.hf_sampler import RowSampler

    temperatures, top_ps = torch.tensor(temperatures)[:, None], torch.tensor(top_ps)[:, None]
    greedy = temperatures[:, 0] == 0
    probs = torch.softmax(scores / torch.where(greedy[:, None], 1.0, temperatures), dim=-1)
    ordered, ids = probs.sort(dim=-1, descending=True, stable=True)
    nucleus = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, ids, (ordered.cumsum(-1) - ordered) < top_ps)
    nucleus[top_ps[:, 0] >= 1] = True
    race = torch.stack([torch.ones(scores.shape[-1]) if g is None else -torch.log(torch.rand(scores.shape[-1], generator=g))
                        for g in generators])
    sampled = torch.where(nucleus, probs / race, -1.0).argmax(dim=-1)
    return torch.where(greedy, scores.argmax(dim=-1), sampled)


def test_the_race_over_the_top_tokens_picks_the_tokens_of_the_race_over_the_whole_vocabulary():
    """The sampler races only the most likely tokens where the nucleus ends among them, takes the log of those
    draws only, and reuses one tensor of scores from step to step; the tokens must still be SAMPLER_VERSION 2's,
    bitwise: on peaked, flat, tied and nearly tied logits, over many steps of one generator per row, with greedy
    rows, top_p 1 and an odd vocabulary size among them."""
    import torch

    from mirrorscan.actors.hf_sampler import TOP_K, RowSampler

    temperatures = [0.7, 0.7, 1.0, 0.0, 1.5, 0.3, 0.7, 1.0]
    top_ps = [0.95, 0.5, 1.0, 1.0, 0.999, 0.95, 0.9, 0.8]
    seeds = [11, 12, 13, 14, 15, 16, 17, 11]   # two rows with one seed: the same draws, each its own generator
    for vocab in (4 * TOP_K, 4 * TOP_K + 3, 3 * TOP_K // 2):
        torch.manual_seed(vocab)
        sampler = RowSampler(temperatures, top_ps, seeds)
        generators = [None if t == 0 else torch.Generator().manual_seed(s) for t, s in zip(temperatures, seeds)]
        for step in range(24):
            scores = torch.randn(len(seeds), vocab) * [8.0, 0.01, 3.0, 1.0][step % 4]
            scores[1, : TOP_K // 2] = 2.0 if step % 3 == 0 else scores[1, : TOP_K // 2]   # ties across the top
            scores[6] = scores[6].round(decimals=1)                                    # many near ties
            expected = sampler_version_2(temperatures, top_ps, generators, scores)
            out = sampler(None, scores.clone())
            assert torch.equal(out.argmax(dim=-1), expected), (vocab, step)
            assert torch.equal((out == 0).sum(dim=-1), torch.ones(len(seeds), dtype=torch.long))
            assert bool(((out == 0) | (out == float("-inf"))).all())


def test_a_tie_in_the_race_goes_to_the_lower_token_id_as_over_the_whole_vocabulary():
    """Equal probabilities meeting equal draws tie the race; the argmax over the vocabulary gave the lower id,
    and so must the race over the top tokens, which it holds out of id order when it sorts them."""
    import torch

    from mirrorscan.actors.hf_sampler import TOP_K, RowSampler

    vocab = 4 * TOP_K
    probs = torch.full((2, vocab), 0.0)
    probs[:, [900, 7, 300, 40]] = torch.tensor([0.3, 0.3, 0.2, 0.2])
    draws = torch.full((vocab,), 0.5)
    draws[[900, 7]] = 0.75                        # 900 and 7 tie for the win
    chosen = RowSampler.race(probs, torch.tensor([[0.9], [1.0]]), [draws, draws.clone()])
    assert chosen.tolist() == [7, 7]


def test_the_log_of_some_draws_equals_those_of_the_log_of_all():
    """The race takes the log of the nucleus' draws only: torch's log must give each value the bits it gives it
    in a whole vocabulary's draws, whatever its position (vectorised body or tail)."""
    import torch

    generator = torch.Generator().manual_seed(5)
    for vocab in (49152, 50257, 151_936, 7):
        draws = torch.rand(vocab, generator=generator)
        whole = torch.log(draws)
        for n in (1, 7, 8, 17, 256, 1000):
            some = torch.randint(0, vocab, (n,), generator=generator)
            assert torch.equal(torch.log(draws[some]), whole[some])
            tail = torch.arange(max(0, vocab - n), vocab)
            assert torch.equal(torch.log(draws[tail]), whole[tail])


def test_a_padded_batch_on_cpu_copies_no_key_value_heads_and_gives_the_same_logits(monkeypatch):
    """transformers' SDPA copies grouped key/value heads out to one per query head whenever a padding mask is passed,
    so on CPU every step of a padded batch paid for copies a cell alone never made (batched ÷ one call each fell
    under 4 in bench/open_scan.py). The sampler's attention passes the groups to torch's kernel as they are: no
    copy, and logits bitwise equal to transformers' SDPA on a left-padded batch of a model with grouped heads."""
    import copy

    import torch
    import transformers.integrations.sdpa_attention as sdpa
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirrorscan.actors.hf_sampler import GQA_SDPA, use_gqa_sdpa

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, attn_implementation="sdpa")
    plain = LlamaForCausalLM(config).eval()
    ours = LlamaForCausalLM(copy.deepcopy(config)).eval()
    ours.load_state_dict(plain.state_dict())
    use_gqa_sdpa(ours)
    assert ours.config._attn_implementation == GQA_SDPA and plain.config._attn_implementation == "sdpa"
    ids = torch.tensor([[0, 0, 0, 5, 6, 7], [9, 8, 7, 6, 5, 4], [0, 3, 4, 5, 6, 7]])
    mask = (torch.arange(6) >= torch.tensor([[3], [0], [1]])).long()
    generate = {"max_new_tokens": 5, "do_sample": False, "output_logits": True, "return_dict_in_generate": True,
                "pad_token_id": 0}
    with torch.inference_mode():
        expected = plain.generate(input_ids=ids, attention_mask=mask, **generate)
        copies = []
        monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: copies.append(n) or x.repeat_interleave(n, dim=1))
        got = ours.generate(input_ids=ids, attention_mask=mask, **generate)
    assert copies == []
    assert torch.equal(got.sequences, expected.sequences)
    assert all(torch.equal(a, b) for a, b in zip(got.logits, expected.logits))
