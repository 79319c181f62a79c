"""An HF model placed by accelerate (``models[].device_map``) scores what the same model on one device
scores, and its actor reserves the model's ``num_gpus`` from Ray. On this CPU-only machine "auto" has no GPU
to use and places every layer on the CPU: the path through accelerate is the one a multi-GPU node takes."""

from __future__ import annotations

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from mirrorscan.grid.records import ModelVariant, InvocationContext

pytestmark = pytest.mark.own_ray

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
TEXTS = [("The jury found that the victim had been", " murdered"), ("The capital of France is", " Paris"),
         ("Cats", " purr")]


def cells():
    import pyarrow as pa

    return pa.Table.from_pylist([{"probe_id": f"m|t{i}|-|-", "sample": 0, "seed": i, "prefix": p, "target": t,
                                  "add_bos": None} for i, (p, t) in enumerate(TEXTS)])


def variant(model_dir, **kw) -> ModelVariant:
    return ModelVariant(label="m", model=str(model_dir), temperature=0.0, top_p=1.0, max_tokens=1, dtype="float32", **kw)


@pytest.mark.parametrize("device_map", ["cpu", "auto", {"model.embed_tokens": "cpu", "model.layers": "cpu",
                                                        "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}])
def test_a_placed_model_scores_as_the_model_on_one_device(tiny_dir, device_map):
    plain = HFScorer(variant(tiny_dir), str(tiny_dir), RUN)
    placed = HFScorer(variant(tiny_dir, device_map=device_map), str(tiny_dir), RUN)
    assert {p.device.type for p in placed.model.parameters()} == {"cpu"}
    for a, b in zip(plain(cells()).to_pylist(), placed(cells()).to_pylist()):
        assert b["error"] is None and a["target_token_ids"] == b["target_token_ids"]
        assert b["target_logprobs"] == pytest.approx(a["target_logprobs"], abs=1e-6)


def test_the_pool_reserves_the_models_gpus(tiny_dir):
    """What the model's actor pool asks Ray for (``cluster.scan.pipeline.engine_resources``) carries num_gpus, and an
    actor started with it holds that many GPUs, loads the placed model and scores."""
    import ray

    from mirrorscan.cluster.scan.pipeline import engine_resources
    from conftest import own_ray

    big = variant(tiny_dir, device="cuda", device_map="auto", num_gpus=2, memory_gb=0.5)
    resources = engine_resources(HFScorer, big)
    assert resources == {"num_cpus": 1, "num_gpus": 2, "memory": int(0.5 * 2**30)}
    assert engine_resources(HFScorer, variant(tiny_dir, num_gpus=0.0)) == {"num_cpus": 1}
    own_ray()
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        @ray.remote
        class Probe:
            def __init__(self):
                self.scorer = HFScorer(big, str(tiny_dir), RUN)

            def run(self, table):
                return ray.get_gpu_ids(), self.scorer(table).to_pylist()

        gpus, rows = ray.get(Probe.options(**resources).remote().run.remote(cells()), timeout=300)
        assert len(gpus) == 2 and all(r["error"] is None for r in rows)
        expected = HFScorer(variant(tiny_dir), str(tiny_dir), RUN)(cells()).to_pylist()
        for a, b in zip(expected, rows):
            assert b["target_logprobs"] == pytest.approx(a["target_logprobs"], abs=1e-6)
    finally:
        ray.shutdown()


def test_the_hf_sampler_places_a_model_by_its_device_map_and_answers_alike(tiny_dir):
    from dataclasses import replace

    import pyarrow as pa

    from mirrorscan.actors.hf_sampler import HFSampler
    from fc_grid import fc_rendered

    pairs = pa.table({"pair_id": ["cd"], "word_a": ["cat"], "word_b": ["dog"]})
    batch = fc_rendered(["m"], pairs, ["english_strict"], ["AB", "BA"], 1, 11)
    plain = HFSampler(replace(variant(tiny_dir), max_tokens=8), str(tiny_dir), RUN)(batch).to_pylist()
    placed_engine = HFSampler(replace(variant(tiny_dir, device_map="auto"), max_tokens=8), str(tiny_dir), RUN)
    placed = placed_engine(batch).to_pylist()
    assert {p.device.type for p in placed_engine.model.parameters()} == {"cpu"}
    assert [r["response"] for r in placed] == [r["response"] for r in plain] and all(r["error"] is None for r in placed)
