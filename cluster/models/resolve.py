"""What a model entry of an experiment config points at: the packaged models by name (the demo model, tiny
random models), local folders and cached hub ids, resolved to something ``from_pretrained`` takes.

The packaged models are made on first use: the demo model by ``demo_model`` (converted once from its GGUF),
the tiny random ones by ``tiny_model``. No torch or transformers import happens when this module is imported.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

from mirrorscan.cluster.models.demo import demo_model_dir, is_demo_prepared, prepare_demo_model
from mirrorscan.cluster.home import subdir
from mirrorscan.cluster.models.folders import progress_line
from mirrorscan.cluster.models.tiny import prepare_tiny_model
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant

DEMO_MODEL_ALIAS = "packaged:smollm2-135m-instruct"
TINY_MODEL_ALIAS = "packaged:tiny-random-llama"
"""A tiny random Llama (2 blocks of width 64, seed 0) with the demo model's tokenizer: a second model for
demos and plumbing, built on first use. Its answers are noise by construction."""
TINY_SIZED_ALIAS = re.compile(r"packaged:tiny-random-llama-(\d{1,2})x(\d{2,3})-s(\d{1,4})")
"""``packaged:tiny-random-llama-<blocks>x<width>-s<seed>`` (e.g. ``-4x96-s1``): a tiny random Llama of that size and
seed with the demo tokenizer, built on first use (1–16 blocks, width 32–512 and a multiple of 4). Plumbing
models: they run the design path (several models, different sizes) and their numbers mean nothing."""
# `org/name` as the Hugging Face hub spells repository ids.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
PACKAGED = ("packaged:smollm2-135m-instruct", "packaged:tiny-random-llama",
            "packaged:tiny-random-llama-2x64-s1", "packaged:tiny-random-llama-4x96-s2")
"""The packaged models ``mirrorscan models list`` always shows: the demo model, the tiny random Llama, and the two
sized ones experiments/lens-design-demo scans (every model a shipped experiment names; other sizes are named by the
pattern in the help, and listed once built)."""


def packaged_aliases() -> list[str]:
    """The packaged models to list: ``PACKAGED``, then every sized tiny model built earlier under
    ``$MIRRORSCAN_HOME/models/``, by folder name."""
    names = list(PACKAGED)
    for folder in sorted(subdir("models").glob("tiny-random-llama-*")):   # sized ones built earlier
        alias = f"packaged:{folder.name}"
        if TINY_SIZED_ALIAS.fullmatch(alias) and alias not in names:
            names.append(alias)
    return names


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
    if packaged_size(alias) is None:
        return is_demo_prepared()
    return (packaged_folder(alias) / "model.safetensors").is_file()


def prepare_packaged(alias: str, force: bool = False) -> Path:
    """Packaged model ``alias`` as a folder, converted or built now if it is not ready (``force``: again)."""
    size = packaged_size(alias)
    if size is None:
        return prepare_demo_model(force=force)
    if force:
        shutil.rmtree(packaged_folder(alias), ignore_errors=True)
    return prepare_tiny_model(*size)


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
                progress_line(f"preparing model {text} once before its first use "
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
