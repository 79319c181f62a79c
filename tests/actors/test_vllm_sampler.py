"""The vLLM sampler actor class on vLLM's CPU build (float32, demo model), called in-process: greedy answers
equal the HF sampler's, per-request streaming timing, seeded sampling, structured outputs and extra_body
errors; its reading loop fed merged deltas by a stand-in engine (one chunk per delta); and its Ray
resources for tensor parallelism, checked on a local Ray with logical GPUs. The sampler
inside a Ray actor of the real pipeline is covered by ``tests/jobs/test_backends_e2e.py`` (same answers as
the HF sampler and the OpenAI server, rows carrying actor and node, honest timing).

One engine serves the whole module (``engine`` fixture; samplers with other sampling settings share it
because their engine settings are equal) — an engine start costs 5–70 s on these machines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from mirrorscan.actors.streaming import timing_problems
from fc_grid import fc_rendered
from mirrorscan.cluster.home import subdir
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext

os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread per process on the shared 2-core machines

pytestmark = pytest.mark.own_ray   # the tensor-parallel tests start a Ray with logical GPUs

PAIRS = pa.table({"pair_id": ["vw", "cd", "tc"], "word_a": ["vodka", "cat", "tea"], "word_b": ["whiskey", "dog", "coffee"]})
ENVELOPES = ["english_strict", "json_schema", "english_casual", "bare_vs"]
RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="forced_choice", envelope_version="t",
                 cache_dir=str(subdir("cache")))


def cells(samples: int = 1, seed: int = 11, envelopes: list[str] = ENVELOPES) -> pa.Table:
    """Rendered forced-choice cells: 3 pairs × envelopes × 2 orderings × samples."""
    return fc_rendered(["demo"], PAIRS, envelopes, ["AB", "BA"], samples, seed)


def variant(**kw) -> ModelVariant:
    return ModelVariant(**{"label": "demo", "model": "demo", "backend": "vllm", "temperature": 0.0, "top_p": 1.0,
                           "max_tokens": 24, "dtype": "float32", "device": "cpu", "timeout_s": 300.0, **kw})


@pytest.fixture(scope="module")
def engine(demo_dir):
    from mirrorscan.actors.vllm_sampler import VLLMSampler

    sampler = VLLMSampler(variant(), str(demo_dir), RUN)
    print(f"\nvLLM engine start: {sampler.engine_start_s:.1f} s")
    yield sampler
    sampler.shutdown()


def sampler(demo_dir, **kw):
    """A sampler with other sampling settings on the module's engine (same engine settings → same engine)."""
    from mirrorscan.actors.vllm_sampler import VLLMSampler

    return VLLMSampler(variant(**kw), str(demo_dir), RUN)


def test_importing_the_module_imports_neither_vllm_nor_torch():
    code = "import sys, actors.vllm_sampler; print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


class MergingEngine:
    """Stands in for AsyncLLM.generate: yields DELTA outputs as vLLM does when it merges the tokens that were
    ready together, DELAY_S apart, then a last delta with no tokens carrying the finish reason."""

    DELAY_S = 0.03
    DELTAS = [([101], "I"), ([102, 103, 104], "'m not"), ([105], " sure"), ([106, 107], ".")]

    async def generate(self, prompt, params, request_id):
        import asyncio
        from types import SimpleNamespace

        for ids, text in self.DELTAS + [([], "")]:
            await asyncio.sleep(self.DELAY_S)
            yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text,
                                                           finish_reason=None if ids else "stop")])


def test_merged_deltas_are_timed_as_delivered_one_chunk_and_one_interval_each():
    """The sampler's own reading loop, fed 4 deltas carrying 1, 3, 1 and 2 tokens (no engine started): one
    chunk per delta that carried tokens, so n_chunks = 4 < completion_tokens = 7 and 3 intervals, each a
    real arrival gap; the old per-token counting gave n_chunks == completion_tokens with 0 ms intervals."""
    import asyncio
    from types import SimpleNamespace

    from mirrorscan.actors.rows import where_am_i
    from mirrorscan.actors.streaming import StreamClock
    from mirrorscan.actors.vllm_sampler import VLLMSampler

    reader = VLLMSampler.__new__(VLLMSampler)   # everything _stream uses, without building an engine
    reader.variant, reader.run, reader.source, reader.where = variant(), RUN, "/models/demo", where_am_i()
    reader.engine_kwargs, reader.host = {}, SimpleNamespace(engine=MergingEngine())
    reader.overrides = "{}"   # nothing beyond sampling was sent
    cell = {"probe_id": "demo|cat|dog|english_strict|AB", "sample": 0, "seed": 1, "system_text": "",
            "user_text": "cat or dog?", "item_key": "cat|dog", "envelope": "english_strict", "ordering": "AB"}
    clock = StreamClock()
    row = asyncio.run(reader._stream(cell, [1, 2, 3], False, None, "{}", clock, 1))
    assert row["response"] == "I'm not sure." and row["finish_reason"] == "stop" and row.get("error") is None
    assert row["completion_tokens"] == 7 and row["prompt_tokens"] == 3
    assert timing_problems(row) == [], timing_problems(row)
    assert row["n_chunks"] == len(MergingEngine.DELTAS) == 4 < row["completion_tokens"]   # old: == 7
    assert len(row["intervals_ms"]) == row["n_chunks"] - 1 == 3
    assert min(row["intervals_ms"]) >= MergingEngine.DELAY_S * 1000 * 0.9   # old: two 0 ms gaps per merge
    assert clock.chunk_tokens == [1, 3, 1, 2]
    assert row["decode_tok_s"] == pytest.approx(6 / ((row["total_ms"] - row["ttft_ms"]) / 1000))


def test_greedy_answers_equal_the_hf_sampler_and_every_row_streams_honestly(engine, demo_dir):
    from mirrorscan.actors.hf_sampler import HFSampler

    batch = cells()
    started = time.monotonic()
    rows = engine(batch).to_pylist()
    vllm_s = time.monotonic() - started
    hf = HFSampler(variant(backend="hf"), str(demo_dir), RUN)
    hf_rows = hf(batch).to_pylist()
    del hf
    assert [r["probe_id"] for r in rows] == batch["probe_id"].to_pylist()
    same = sum(r["response"] == h["response"] for r, h in zip(rows, hf_rows))
    print(f"\ngreedy vLLM == HF: {same}/{len(rows)}; batch of {len(rows)} in {vllm_s:.1f} s")
    for r in rows[:3]:
        print(f"  ttft {r['ttft_ms']:.0f} ms, total {r['total_ms']:.0f} ms, {r['completion_tokens']} tokens, "
              f"decode {r['decode_tok_s'] or 0:.1f} tok/s: {r['response']!r}")
    assert same == len(rows)
    for r, h in zip(rows, hf_rows):
        assert r["error"] is None and h["error"] is None
        assert (r["prompt_tokens"], r["completion_tokens"], r["finish_reason"]) == \
            (h["prompt_tokens"], h["completion_tokens"], h["finish_reason"])
        assert timing_problems(r) == [], timing_problems(r)
        assert 1 <= r["n_chunks"] <= r["completion_tokens"] and r["timing_scope"] == "request"
        assert r["started_at"] is not None and r["ttft_answer_ms"] == r["ttft_ms"] and r["reasoning"] is None
        assert r["endpoint"] == f"engine://vllm/{demo_dir}" and r["backend"] == "vllm"
        assert r["system_folded"] is False and r["batch_size"] == batch.num_rows
        params = json.loads(r["request_params"])
        assert params["temperature"] == 0.0 and params["seed"] is None and params["max_tokens"] == 24
        assert params["output_kind"] == "DELTA" and params["stop_token_ids"]
    assert {r["finish_reason"] for r in rows} <= {"stop", "length"}


def test_a_sampled_cell_depends_on_its_seed_only(engine, demo_dir):
    warm = sampler(demo_dir, temperature=1.0, top_p=1.0, max_tokens=16)
    assert warm.host is engine.host   # sampling settings do not build a second engine
    batch = cells(samples=2, envelopes=["english_strict", "json_schema"])   # 24 cells, each with its own seed
    first = {(r["probe_id"], r["sample"]): r for r in warm(batch.slice(0, 8)).to_pylist()}
    mixed = batch.take([7, 20, 3, 0, 15, 5])   # other neighbours, other order, other batch size
    second = {(r["probe_id"], r["sample"]): r for r in warm(mixed).to_pylist()}
    shared = set(first) & set(second)
    assert len(shared) == 4
    assert all(first[k]["response"] == second[k]["response"] for k in shared)
    assert all(json.loads(r["request_params"])["seed"] == r["seed"] for r in first.values())
    assert all(timing_problems(r) == [] and 1 <= r["n_chunks"] <= r["completion_tokens"] for r in second.values())
    # different seeds give different texts: the same cells under another root seed
    reseeded = {(r["probe_id"], r["sample"]): r["response"] for r in warm(cells(2, seed=12, envelopes=[
        "english_strict", "json_schema"]).slice(0, 8)).to_pylist()}
    differ = sum(reseeded[k] != first[k]["response"] for k in first)
    assert differ >= 6, (differ, [(first[k]["response"], reseeded[k]) for k in first])


def test_structured_output_constrains_the_answer_and_is_recorded(engine, demo_dir):
    choice = sampler(demo_dir, extra_body={"structured_outputs": {"choice": ["first", "second"]}})
    rows = choice(cells().slice(0, 6)).to_pylist()
    assert all(r["error"] is None and r["response"] in ("first", "second") for r in rows), rows
    for r in rows:
        assert json.loads(r["request_params"])["structured_outputs"] == {"choice": ["first", "second"]}
        assert json.loads(r["generation_overrides"])["extra_body"] == {"structured_outputs": {"choice": ["first", "second"]}}
        assert timing_problems(r) == [] and 1 <= r["n_chunks"] <= r["completion_tokens"]
    regex = sampler(demo_dir, temperature=1.0, extra_body={"structured_outputs": {"regex": "[AB]"}, "top_k": 5})
    rows = regex(cells().slice(0, 4)).to_pylist()
    assert all(r["response"] in ("A", "B") for r in rows), rows
    for r in rows:   # a sampling parameter from extra_body reaches the engine beside the cell's seed
        params = json.loads(r["request_params"])
        assert params["top_k"] == 5 and params["seed"] == r["seed"] and params["structured_outputs"] == {"regex": "[AB]"}


@pytest.mark.parametrize("extra_body, names", [
    ({"guided_choice": ["A", "B"]}, ["extra_body.guided_choice", "structured_outputs"]),
    ({"frobnicate": 1}, ["extra_body.frobnicate", "not a vLLM sampling parameter"]),
    ({"temperature": 0.5}, ["extra_body.temperature", "models[].temperature"]),
    ({"structured_outputs": {"choices": ["A"]}}, ["extra_body.structured_outputs", "exactly one of"]),
])
def test_a_bad_extra_body_key_becomes_error_rows_naming_field_and_fix(engine, demo_dir, extra_body, names):
    batch = cells().slice(0, 3)
    rows = sampler(demo_dir, extra_body=extra_body)(batch).to_pylist()
    assert [(r["probe_id"], r["sample"]) for r in rows] == list(zip(batch["probe_id"].to_pylist(),
                                                                     batch["sample"].to_pylist()))
    for r in rows:
        assert r["response"] is None and r["error"].startswith("ConfigError: experiments/exp/config.json: ")
        assert all(n in r["error"] for n in names), r["error"]
        assert "fix:" in r["error"]


def test_a_failing_cell_becomes_an_error_row_and_the_rest_answer(engine):
    batch = cells().slice(0, 4)
    poisoned = batch.set_column(batch.schema.get_field_index("user_text"), "user_text",
                                pa.array([batch["user_text"][0].as_py(), None, "ok 3", "ok 4"], pa.string()))
    rows = engine(poisoned).to_pylist()
    assert [r["error"] is None for r in rows] == [True, False, True, True]
    assert rows[1]["response"] is None and rows[1]["error"].split(":")[0].isidentifier()
    assert rows[0]["response"] == engine(batch.slice(0, 1)).to_pylist()[0]["response"]   # neighbours don't matter


def test_a_request_past_its_timeout_is_an_error_row_and_the_engine_goes_on(engine, demo_dir):
    batch = cells().slice(0, 3)
    rows = sampler(demo_dir, timeout_s=0.01)(batch).to_pylist()
    assert [r["probe_id"] for r in rows] == batch["probe_id"].to_pylist()
    assert all(r["response"] is None and r["error"] == "TimeoutError: no answer within timeout_s = 0.01 s"
               and r["started_at"] is not None for r in rows), rows
    assert all(r["error"] is None for r in engine(batch).to_pylist())   # aborted requests left nothing behind


def test_a_process_that_exits_with_its_engine_running_logs_no_engine_dead_error(demo_dir):
    """An engine actor whose pool ended exits without the pipeline's teardown reaching its sampler. vLLM's own
    exit finalizer then stopped the engine core before its output handler, which logged an EngineDeadError
    traceback after every successful run (on the terminal, after the scan's summary); the sampler now stops
    its engines at exit, handler first."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
    done = subprocess.run([sys.executable, str(here / "vllm_exit_child.py"), str(demo_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "answered 2" in out, out[-2000:]
    assert "EngineDeadError" not in out and "output_handler failed" not in out, out[-2000:]


def test_engine_args_are_merged_last_and_unknown_ones_refused():
    from mirrorscan.actors.vllm_sampler import engine_kwargs

    kw = engine_kwargs(variant(engine_args={"max_model_len": 1024, "enforce_eager": False}), "/m")
    assert kw["max_model_len"] == 1024 and kw["enforce_eager"] is False and kw["dtype"] == "float32"
    assert kw["enable_prefix_caching"] is False and kw["seed"] == 0 and "distributed_executor_backend" not in kw
    gpu = engine_kwargs(variant(device="cuda", tensor_parallel_size=2, dtype="bfloat16"), "/m")
    assert gpu["distributed_executor_backend"] == "ray" and gpu["tensor_parallel_size"] == 2
    assert "enforce_eager" not in gpu and gpu["dtype"] == "bfloat16"
    with pytest.raises(ConfigError, match=r"models\[demo\]\.engine_args\.max_len"):
        engine_kwargs(variant(engine_args={"max_len": 1}), "/m", "experiments/x/config.json")


# ---- Ray resources (no GPUs needed: a local Ray with logical GPUs) ------------------------------------

@pytest.fixture
def ray_two_gpus():
    """A local Ray of this test only, with 2 CPUs and 2 logical GPUs; shut down after it."""
    import ray

    from conftest import own_ray

    own_ray()
    for attempt in range(3):   # Ray waits a fixed 30 s for its raylet; on an overloaded machine that can fail
        try:
            ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray
    ray.shutdown()


def test_ray_resources_for_cpu_and_one_gpu():
    from mirrorscan.actors.vllm_sampler import VLLMSampler

    assert VLLMSampler.ray_resources(variant()) == {"num_cpus": 1}
    assert VLLMSampler.ray_resources(variant(device="cuda")) == {"num_cpus": 1, "num_gpus": 1}


def test_tensor_parallel_actor_runs_in_its_placement_group_and_captures_child_tasks(ray_two_gpus):
    from ray.util.placement_group import placement_group_table

    from mirrorscan.actors.vllm_sampler import VLLMSampler

    ray = ray_two_gpus
    args = VLLMSampler.ray_resources(variant(device="cuda", tensor_parallel_size=2, memory_gb=0.1), timeout_s=120)
    pg = args["scheduling_strategy"].placement_group
    assert args["num_cpus"] == 1 and args["num_gpus"] == 0
    assert pg.bundle_specs[1:] == [{"GPU": 1.0}, {"GPU": 1.0}] and pg.bundle_specs[0]["CPU"] == 1.0
    assert placement_group_table(pg)["strategy"] == "STRICT_PACK"

    @ray.remote(num_cpus=0, num_gpus=1)
    def worker():   # what vLLM's Ray executor starts: a GPU worker in the current placement group
        from ray.util import get_current_placement_group

        return get_current_placement_group().id.hex(), ray.get_gpu_ids()

    class Engine:
        def where(self):
            from ray.util import get_current_placement_group

            mine = get_current_placement_group()
            return mine.id.hex() if mine else None, ray.get([worker.remote(), worker.remote()], timeout=60)

    actor = ray.remote(**args)(Engine).remote()
    own, workers = ray.get(actor.where.remote(), timeout=120)
    assert own == pg.id.hex()
    assert [w[0] for w in workers] == [pg.id.hex()] * 2
    assert sorted(w[1][0] for w in workers) == [0, 1]   # one GPU bundle each: both GPUs of the group


def test_a_placement_group_that_cannot_be_placed_is_a_clear_error(ray_two_gpus):
    from ray.util.placement_group import placement_group_table

    from mirrorscan.actors.vllm_sampler import VLLMSampler

    with pytest.raises(ConfigError, match=r"models\[demo\]\.tensor_parallel_size.*4 × GPU.*fix: lower"):
        VLLMSampler.ray_resources(variant(device="cuda", tensor_parallel_size=4), timeout_s=3)
    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())   # nothing left pending
