"""The HF scorer (``score`` engine kind): target-token log-probabilities after a prefix, batched with right
padding. A tiny random model for shapes, padding and the BOS rule; the demo model for values."""

from __future__ import annotations

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from mirrorscan.actors.score_tokens import adds_bos, score_ids
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.engine_kinds import SCORE_COLUMNS

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
TEXTS = [("The jury found that the victim had been", " murdered"),
         ("In June 1989 the army cleared protesters from", " Tiananmen"),
         ("Cats", " purr"),
         ("A much longer prefix, so that the batch needs padding on the right for the shorter ones, ends with", " a blank"),
         ("The capital of France is", " Paris"),
         ("The capital of France is", " banana bread"),
         ("The jury found that the victim had been", " murdered")]   # the first again: same length, one pass


def cells(texts, add_bos=None) -> "pa.Table":
    import pyarrow as pa

    return pa.Table.from_pylist([{"probe_id": f"m|t{i}|-|-", "sample": 0, "seed": i, "prefix": p, "target": t,
                                  "add_bos": add_bos} for i, (p, t) in enumerate(texts)])


def scorer(model_dir, **kw) -> HFScorer:
    variant = ModelVariant(label="m", model=str(model_dir), temperature=0.0, top_p=1.0, max_tokens=1, dtype="float32",
                           **kw)
    return HFScorer(variant, str(model_dir), RUN)


@pytest.fixture(scope="module")
def tiny_scorer(tiny_dir):
    return scorer(tiny_dir)


def test_rows_carry_ids_logprobs_and_their_summaries(tiny_scorer):
    rows = tiny_scorer(cells(TEXTS)).to_pylist()
    assert [r["probe_id"] for r in rows] == [f"m|t{i}|-|-" for i in range(len(TEXTS))]
    assert {f.name for f in SCORE_COLUMNS} <= set(rows[0])
    for r, (prefix, target) in zip(rows, TEXTS):
        assert r["error"] is None and r["user_text"] == prefix and r["target_text"] == target
        assert len(r["target_logprobs"]) == len(r["target_token_ids"]) >= 1
        assert all(lp < 0 for lp in r["target_logprobs"])
        assert r["lp_mean"] == pytest.approx(sum(r["target_logprobs"]) / len(r["target_logprobs"]))
        assert r["lp_min"] == min(r["target_logprobs"])
        assert r["prompt_tokens"] == len(r["prefix_token_ids"]) + len(r["target_token_ids"])
        assert r["timing_scope"] == "batch" and r["batch_size"] == len(TEXTS) and r["total_ms"] > 0   # one pass
    assert any(len(r["target_token_ids"]) > 1 for r in rows)   # multi-token targets are scored token by token
    assert rows[0]["target_logprobs"] == rows[-1]["target_logprobs"]   # the same cell twice in a batch: the same numbers


def test_values_equal_an_unpadded_forward_pass_of_each_sequence(tiny_scorer):
    import torch

    rows = tiny_scorer(cells(TEXTS)).to_pylist()
    model = tiny_scorer.model
    for r in rows:
        ids = r["prefix_token_ids"] + r["target_token_ids"]
        with torch.inference_mode():
            logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        first = len(r["prefix_token_ids"])
        expected = [float(logprobs[first - 1 + j, t]) for j, t in enumerate(r["target_token_ids"])]
        assert r["target_logprobs"] == pytest.approx(expected, abs=1e-5)


def test_the_prefix_and_target_are_tokenized_apart(tiny_scorer):
    tok = tiny_scorer.tokenizer
    prefix_ids, target_ids, bos, _ = score_ids(tok, "The capital of France is", " Paris")
    assert prefix_ids == tok("The capital of France is", add_special_tokens=False)["input_ids"]
    assert target_ids == tok(" Paris", add_special_tokens=False)["input_ids"] and bos is False


def test_demo_model_batched_equals_one_at_a_time_and_knows_its_capitals(demo_dir):
    demo = scorer(demo_dir)
    batched = demo(cells(TEXTS)).to_pylist()
    for i, text in enumerate(TEXTS):
        alone = demo(cells([text])).to_pylist()[0]
        assert alone["target_token_ids"] == batched[i]["target_token_ids"]
        # padding changes float32's order of summation: 1.25e-5 nats apart was seen in a full run, so 1e-5 failed by
        # chance; 1e-4 nats is the agreement the project holds scoring to elsewhere (docs/benchmarks.md, flinch)
        assert alone["target_logprobs"] == pytest.approx(batched[i]["target_logprobs"], abs=1e-4)
    paris, banana = batched[4], batched[5]
    assert paris["lp_mean"] > -2.0 and paris["lp_mean"] > banana["target_logprobs"][0] + 5


def test_bos_follows_the_tokenizer_can_be_forced_and_is_recorded(tiny_scorer, bos_tiny_dir):
    no_bos_tok = tiny_scorer.tokenizer
    assert not adds_bos(no_bos_tok)
    with_bos = scorer(bos_tiny_dir)
    assert adds_bos(with_bos.tokenizer)
    bos_id = with_bos.tokenizer.bos_token_id
    texts = [("Cats", " purr"), ("", " Cats")]
    rows = with_bos(cells(texts)).to_pylist()
    assert all(r["bos_added"] and r["prefix_token_ids"][0] == bos_id and r["error"] is None for r in rows)
    assert rows[1]["prefix_token_ids"] == [bos_id]   # an empty prefix is scored after BOS alone
    forced_off = with_bos(cells(texts[:1], add_bos=False)).to_pylist()[0]
    assert not forced_off["bos_added"] and bos_id not in forced_off["prefix_token_ids"]
    # without BOS an empty prefix has no position to score from; forcing ChatML's BOS is refused
    plain = tiny_scorer(cells(texts)).to_pylist()
    assert plain[0]["error"] is None and not plain[0]["bos_added"]
    assert plain[1]["error"].startswith("ScoreTokenError: empty prefix") and plain[1]["target_logprobs"] is None
    forced_on = tiny_scorer(cells(texts[:1], add_bos=True)).to_pylist()[0]
    assert "chat-template token" in forced_on["error"] and "<|im_start|>" in forced_on["error"]


def test_a_sequence_past_the_context_window_is_an_error_row_and_the_rest_score(tiny_scorer):
    window = tiny_scorer.context
    rows = tiny_scorer(cells([("word " * (window + 5), " end"), ("Cats", " purr")])).to_pylist()
    assert rows[0]["error"].startswith("ContextExceeded") and rows[1]["error"] is None


def test_a_models_bos_rule_applies_unless_the_cell_sets_its_own(bos_tiny_dir):
    never = scorer(bos_tiny_dir, add_bos=False)
    bos_id = never.tokenizer.bos_token_id
    rows = never(cells([("Cats", " purr")])).to_pylist()
    assert not rows[0]["bos_added"] and bos_id not in rows[0]["prefix_token_ids"]
    assert never(cells([("", " Cats")])).to_pylist()[0]["error"].startswith("ScoreTokenError: empty prefix")
    cell_says = never(cells([("Cats", " purr")], add_bos=True)).to_pylist()[0]
    assert cell_says["bos_added"] and cell_says["prefix_token_ids"][0] == bos_id


def test_a_failing_batch_is_scored_cell_by_cell_so_only_the_failing_cell_is_an_error_row():
    from mirrorscan.actors.score_tokens import score_safely

    prepared = [(i, {"name": n}, [1], [2], False, None) for i, n in enumerate(["a", "poison", "b"])]

    def score(items):
        if any(cell["name"] == "poison" for _, cell, *_ in items):
            raise RuntimeError("bad cell")
        return [{"cell": cell["name"], "error": None} for _, cell, *_ in items]

    rows = score_safely(prepared, score, lambda cell, message: {"cell": cell["name"], "error": message})
    assert rows == [{"cell": "a", "error": None}, {"cell": "poison", "error": "RuntimeError: bad cell"},
                    {"cell": "b", "error": None}]


def _brute_force_cost(lengths, pass_cost):
    """The least padded positions + pass_cost per pass over every split of the sorted lengths into runs."""
    ordered = sorted(lengths)
    best = float("inf")
    for mask in range(2 ** (len(ordered) - 1)):   # bit k set: a pass ends after the k-th length
        cost, start = 0, 0
        for end in range(1, len(ordered) + 1):
            if end == len(ordered) or mask >> (end - 1) & 1:
                cost += (end - start) * ordered[end - 1] + pass_cost
                start = end
        best = min(best, cost)
    return best


def test_length_groups_split_a_batch_only_where_padding_costs_more_than_a_pass():
    import random

    from mirrorscan.actors.hf_scorer import length_groups

    spread = [5] * 10 + [30]
    assert length_groups(spread, 48) == [list(range(10)), [10]]        # 10·5 + 30 + 2·48 < 11·30 + 48
    assert length_groups(spread, 1000) == [list(range(11))]            # a pass dearer than the padding
    assert length_groups(spread, None) == [list(range(11))]
    assert length_groups([7, 3, 7, 3], 0) == [[1, 3], [0, 2]]           # free passes: one per length
    rng = random.Random(5)
    for _ in range(40):
        lengths = [rng.randint(2, 40) for _ in range(rng.randint(1, 9))]
        cost = rng.choice([0, 10, 48, 200])
        groups = length_groups(lengths, cost)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        got = sum(len(g) * max(lengths[i] for i in g) + cost for g in groups)
        assert got == _brute_force_cost(lengths, cost)


def test_a_batch_split_into_passes_scores_as_one_pass_does(tiny_scorer, monkeypatch):
    import mirrorscan.actors.hf_scorer as hf_scorer

    monkeypatch.setitem(hf_scorer.PASS_COST_POSITIONS, "cpu", 0)     # every length its own pass
    split = tiny_scorer(cells(TEXTS)).to_pylist()
    monkeypatch.setitem(hf_scorer.PASS_COST_POSITIONS, "cpu", 10**9)  # the whole batch in one pass
    whole = tiny_scorer(cells(TEXTS)).to_pylist()
    assert [r["target_token_ids"] for r in split] == [r["target_token_ids"] for r in whole]
    for a, b in zip(split, whole):
        assert a["target_logprobs"] == pytest.approx(b["target_logprobs"], abs=1e-5)
        assert a["batch_size"] == b["batch_size"] == len(TEXTS)
