"""The vLLM scorer (``score`` engine kind) on vLLM's CPU build, float32, demo model, called in-process: the
same target tokens and, within 1e-4 nats, the same log-probs as the HF scorer; a cell's numbers independent
of its batch-mates; error rows for what cannot be scored. One engine serves the module (a start costs
5–70 s here)."""

from __future__ import annotations

import os

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from mirrorscan.cluster.home import subdir
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.engine_kinds import SCORE_COLUMNS
from test_hf_scorer import TEXTS, cells

os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread per process on the shared 2-core machines

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-",
                 cache_dir=str(subdir("cache")))
SAME_NATS = 1e-4


def variant(model_dir, backend: str) -> ModelVariant:
    return ModelVariant(label="demo", model=str(model_dir), backend=backend, temperature=0.0, top_p=1.0,
                        max_tokens=1, dtype="float32", device="cpu", timeout_s=300.0)


@pytest.fixture(scope="module")
def vllm_scorer(demo_dir):
    from mirrorscan.actors.vllm_scorer import VLLMScorer

    scorer = VLLMScorer(variant(demo_dir, "vllm"), str(demo_dir), RUN)
    print(f"\nvLLM engine start: {scorer.engine_start_s:.1f} s")
    yield scorer
    scorer.shutdown()


def test_vllm_scores_the_same_tokens_as_hf_within_1e4_nats(vllm_scorer, demo_dir):
    hf = HFScorer(variant(demo_dir, "hf"), str(demo_dir), RUN)(cells(TEXTS)).to_pylist()
    rows = vllm_scorer(cells(TEXTS)).to_pylist()
    assert {f.name for f in SCORE_COLUMNS} <= set(rows[0])
    worst = 0.0
    for v, h in zip(rows, hf):
        assert v["error"] is None and v["probe_id"] == h["probe_id"]
        assert v["prefix_token_ids"] == h["prefix_token_ids"] and v["target_token_ids"] == h["target_token_ids"]
        assert v["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
        worst = max(worst, *(abs(a - b) for a, b in zip(v["target_logprobs"], h["target_logprobs"])))
        assert v["lp_mean"] == pytest.approx(sum(v["target_logprobs"]) / len(v["target_logprobs"]))
        assert v["timing_scope"] == "batch" and v["total_ms"] > 0 and v["batch_size"] == len(TEXTS)
        assert v["endpoint"].startswith("engine://vllm/") and v["backend"] == "vllm"
    print(f"\nlargest |vLLM − HF| over {sum(len(r['target_logprobs']) for r in rows)} target tokens: {worst:.2e} nats")
    assert rows[4]["lp_mean"] > -2.0   # "The capital of France is" → " Paris"


def test_a_cells_numbers_do_not_depend_on_its_batch(vllm_scorer):
    batched = vllm_scorer(cells(TEXTS)).to_pylist()
    for i in (0, 3):
        alone = vllm_scorer(cells([TEXTS[i]])).to_pylist()[0]
        assert alone["target_logprobs"] == pytest.approx(batched[i]["target_logprobs"], abs=SAME_NATS)


def test_what_cannot_be_scored_becomes_an_error_row_and_the_rest_score(vllm_scorer):
    window = vllm_scorer.context
    rows = vllm_scorer(cells([("word " * (window + 5), " end"), ("", " Cats"), ("Cats", " purr")])).to_pylist()
    assert rows[0]["error"].startswith("ContextExceeded") and rows[0]["prompt_tokens"] > window
    assert rows[1]["error"].startswith("ScoreTokenError: empty prefix")   # the demo tokenizer adds no BOS
    assert rows[2]["error"] is None and rows[2]["target_logprobs"]
