"""The vLLM activations engine (``activations`` kind, backend vllm) on vLLM's CPU build, float32: every stored
vector equals the transformers path's within 1e-4 relative per layer, on the demo model (SmolLM2) and on a tiny
random Llama whose tokenizer puts a BOS first — every layer (the last after the final norm), both poolings, a
truncated item, BOS and whitespace tokens dropped. One vLLM engine per model, each built once for the tests of its
class (a process holds one vLLM activations engine at a time: vLLM keeps the connector in a module global)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from mirrorscan.actors.hf_activations import HFActivations
from mirrorscan.cluster.home import subdir
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from test_hf_activations import TEXTS, cells, vectors

os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread per process on the shared 2-core machines

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="lens", envelope_version="-",
                 cache_dir=str(subdir("cache")))
SAME = 1e-4
"""Largest |vLLM − HF| per layer, relative to the layer's largest |HF| entry."""


def variant(model_dir, backend: str, **extra) -> ModelVariant:
    return ModelVariant(label="m", model=str(model_dir), backend=backend, temperature=0.0, top_p=1.0, max_tokens=1,
                        dtype="float32", device="cpu", timeout_s=300.0, **extra)


def worst_relative(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per layer: max |got − want| / max |want| over the cells of a batch ((cells, layers, hidden) arrays)."""
    return np.array([np.abs(got[:, k] - want[:, k]).max() / np.abs(want[:, k]).max() for k in range(want.shape[1])])


def assert_same_rows(vllm_rows, hf_rows) -> float:
    """The rows agree on what was read and pooled, and every vector within SAME per layer; the worst ratio."""
    v, h = vllm_rows.to_pylist(), hf_rows.to_pylist()
    for a, b in zip(v, h):
        assert a["error"] is None and b["error"] is None, (a["error"], b["error"])
        for key in ("probe_id", "input_token_ids", "pooled_tokens", "truncated", "n_layers", "hidden_size",
                    "model_parameters", "prompt_tokens", "user_text", "system_text"):
            assert a[key] == b[key], key
        assert a["backend"] == "vllm" and a["endpoint"].startswith("engine://vllm/") and a["timing_scope"] == "batch"
    worst = worst_relative(vectors(vllm_rows), vectors(hf_rows))
    assert worst.max() <= SAME, worst
    return float(worst.max())


@pytest.fixture(scope="module")
def tiny_bos_dir(tmp_path_factory, demo_dir):
    """A tiny random Llama (2 blocks, width 128: 4 heads of 32, a size vLLM's CPU attention takes) whose tokenizer
    puts a BOS token (``<|endoftext|>``) first, as the demo tokenizer does not."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from mirrorscan.cluster.models.tiny import build_tiny_random_model

    folder = build_tiny_random_model(tmp_path_factory.mktemp("tiny128") / "tiny", demo_dir, seed=3, hidden=128)
    tok = AutoTokenizer.from_pretrained(folder)
    bos = "<|endoftext|>"
    tok.bos_token = bos
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                       special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    tok.save_pretrained(folder)
    return folder


def engine(model_dir):
    from mirrorscan.actors.vllm_activations import VLLMActivations

    extractor = VLLMActivations(variant(model_dir, "vllm"), str(model_dir), RUN)
    print(f"\nvLLM activations engine start: {extractor.engine_start_s:.1f} s")
    return extractor


@pytest.fixture(scope="class")
def demo_pair(demo_dir):
    """The demo model's vLLM engine (stopped when its class's tests end) and its HF engine."""
    extractor = engine(demo_dir)
    yield extractor, HFActivations(variant(demo_dir, "hf"), str(demo_dir), RUN)
    extractor.shutdown()


@pytest.fixture(scope="class")
def tiny_pair(tiny_bos_dir):
    """The tiny BOS model's vLLM engine (stopped when its class's tests end) and its HF engine."""
    extractor = engine(tiny_bos_dir)
    yield extractor, HFActivations(variant(tiny_bos_dir, "hf"), str(tiny_bos_dir), RUN)
    extractor.shutdown()


class TestDemoModel:
    """SmolLM2-135M-Instruct (30 blocks): the chat rendering the lens demo uses."""

    @pytest.fixture
    def pair(self, demo_pair):
        return demo_pair

    @pytest.mark.parametrize("pooling", ["mean", "last_token"])
    def test_every_layer_equals_the_transformers_path(self, pair, pooling):
        vllm, hf = pair
        batch = cells(TEXTS, pooling=pooling)
        got = vllm(batch)
        worst = assert_same_rows(got, hf(batch))
        assert got.column("n_layers")[0].as_py() == 31 and len({len(i) for i in got.column("input_token_ids").to_pylist()}) >= 3
        print(f"\n{pooling}: worst per-layer |vLLM − HF| / max|HF| = {worst:.2e}")

    def test_a_truncated_item_with_whitespace_dropped(self, pair):
        vllm, hf = pair
        batch = cells(["alpha\n\n\nbeta     gamma, and a tail that truncation cuts off " * 3, TEXTS[0]],
                      rendering="raw", drop_whitespace=True, max_input_tokens=9)
        got = vllm(batch)
        assert got.column("truncated").to_pylist() == [True, True]
        assert got.column("pooled_tokens")[0].as_py() < 9   # whitespace tokens really were dropped
        assert_same_rows(got, hf(batch))

    def test_a_cell_does_not_depend_on_its_batch_and_failures_are_rows(self, pair):
        vllm, _ = pair
        together = vectors(vllm(cells(TEXTS)))
        alone = vectors(vllm(cells([TEXTS[2]])))
        assert worst_relative(together[2:3], alone).max() <= SAME
        rows = vllm(cells(["   ", "word " * (vllm.context + 5), "Cats purr."], rendering="raw",
                          drop_whitespace=True)).to_pylist()
        assert rows[0]["error"].startswith("ExtractionError: no token is left")
        assert rows[1]["error"].startswith("ExtractionError: ContextExceeded")
        assert rows[2]["error"] is None and rows[2]["n_layers"] == 31


class TestTinyRandomLlama:
    """A tiny random Llama with a BOS-adding tokenizer: BOS kept and dropped, both poolings, truncation."""

    @pytest.fixture
    def pair(self, tiny_pair):
        return tiny_pair

    @pytest.mark.parametrize("pooling", ["mean", "last_token"])
    @pytest.mark.parametrize("drop_bos", [False, True])
    def test_every_layer_equals_the_transformers_path(self, pair, pooling, drop_bos):
        vllm, hf = pair
        batch = cells(TEXTS + ["one two three four five six seven"], rendering="raw", pooling=pooling,
                      drop_bos=drop_bos, max_input_tokens=6)
        got = vllm(batch)
        ids = got.column("input_token_ids").to_pylist()
        assert all(i[0] == vllm.tokenizer.bos_token_id for i in ids)
        assert got.column("truncated").to_pylist() == [True, True, True, False, True]
        assert got.column("pooled_tokens").to_pylist()[0] == (5 if drop_bos else 6)
        assert got.column("n_layers")[0].as_py() == 3
        assert_same_rows(got, hf(batch))

    def test_the_last_layer_is_after_the_final_norm(self, pair):
        """Entry L is transformers' last hidden_states entry (after the norm), not the stream vLLM hands over:
        with the norm's weights all 1 here, every token's state of layer L has unit root mean square."""
        vllm, _ = pair
        got = vectors(vllm(cells(["Cats purr."], rendering="raw", pooling="last_token")))[0]
        assert np.sqrt((got[-1] ** 2).mean()) == pytest.approx(1.0, rel=1e-3)
        assert abs(np.sqrt((got[-2] ** 2).mean()) - 1.0) > 1e-2


def test_a_family_vllm_cannot_read_is_refused_before_the_run(tmp_path, tiny_dir):
    """load_spec refuses a vLLM lens model whose architecture has no Eagle-3 hidden states, in one line naming
    the family and the fix; the engine refuses it again at start."""
    import json

    from mirrorscan.grid.spec import load_spec

    gpt2 = tmp_path / "gpt2ish"
    shutil.copytree(tiny_dir, gpt2)
    config = json.loads((gpt2 / "config.json").read_text())
    (gpt2 / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"instrument": "lens",
                                                    "models": [{"model": str(gpt2), "backend": "vllm"}]}))
    with pytest.raises(ConfigError) as err:
        load_spec(folder / "config.json")
    assert err.value.field == "models[0].model" and "GPT2LMHeadModel" in str(err.value)
    assert 'backend": "hf' in str(err.value) and "\n" not in str(err.value)
    (folder / "config.json").write_text(json.dumps({"instrument": "lens",
                                                    "models": [{"model": str(tiny_dir), "backend": "vllm"}]}))
    assert load_spec(folder / "config.json").models[0].backend == "vllm"
    from mirrorscan.actors.vllm_activations import VLLMActivations

    with pytest.raises(ConfigError, match="GPT2LMHeadModel"):
        VLLMActivations(variant(gpt2, "vllm"), str(gpt2), RUN)


def test_every_listed_architecture_has_eagle3_hidden_states_in_vllm():
    """grid.vllm_extraction's list holds only vLLM model classes that support Eagle-3's auxiliary hidden states."""
    import importlib

    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS

    from mirrorscan.grid.vllm_extraction import ARCHITECTURES

    for arch in ARCHITECTURES:
        module, name = _TEXT_GENERATION_MODELS[arch]
        cls = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), name)
        assert getattr(cls, "supports_eagle3", False), arch


CROSS_PROCESS = """
import json, os, sys
import numpy as np
from test_hf_activations import TEXTS, cells, vectors
from test_vllm_activations import RUN, variant, worst_relative
from mirrorscan.actors.hf_activations import HFActivations
from mirrorscan.actors.vllm_activations import VLLMActivations
if __name__ == "__main__":
    source = sys.argv[1]
    engine = VLLMActivations(variant(source, "vllm"), source, RUN)
    batch = cells(TEXTS[:2], rendering="raw")
    got = vectors(engine(batch))
    engine.shutdown()
    want = vectors(HFActivations(variant(source, "hf"), source, RUN)(batch))
    print(json.dumps({"worst": float(worst_relative(got, want).max())}))
"""


@pytest.mark.slow
def test_the_vectors_come_back_from_an_engine_core_in_its_own_process(tiny_bos_dir, tmp_path):
    """vLLM's default on a GPU: the engine core (and its worker, where the connector pools) in another process, so
    the pooled vectors cross a process boundary (``take_pooled``'s bytes); run here with that layout forced."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "cross_process.py"
    script.write_text(CROSS_PROCESS)
    here = str(Path(__file__).parent)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(script), str(tiny_bos_dir)], capture_output=True, text=True,
                          timeout=400, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[-1])["worst"] <= SAME
