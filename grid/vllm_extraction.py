"""Which models the vLLM ``activations`` engine can read, checked when a config is loaded.

The vLLM engine (``actors.vllm_activations``) reads per-layer hidden states through vLLM's speculative method
``extract_hidden_states``, which only works for model classes with Eagle-3's auxiliary hidden states
(``SupportsEagle3`` in vLLM 0.32), and applies the final norm it finds at ``model.norm``. The architectures below
meet both and keep transformers' layer layout (id 0 the embedding output, id k the stream after k blocks), so
their vectors equal the transformers path's; any other is refused with one line that names it and the fix
(``backend: hf``). A test walks the list against vLLM's own classes.
"""

from __future__ import annotations

import json
from pathlib import Path

from mirrorscan.grid.errors import ConfigError

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Qwen3MoeForCausalLM")
"""``config.json`` architectures the vLLM activations engine reads (the packaged models are all Llamas)."""


def architecture_problem(architectures) -> str | None:
    """Why the vLLM activations engine cannot read a model of ``architectures`` (config.json's list), or None."""
    names = list(architectures or [])
    if any(name in ARCHITECTURES for name in names):
        return None
    family = ", ".join(names) or "a model without architectures in its config.json"
    return (f"vLLM cannot read per-layer hidden states of {family} (its extract_hidden_states needs Eagle-3 "
            f"auxiliary hidden states; the vLLM activations engine reads {', '.join(ARCHITECTURES)})")


def local_config(model: str, config_dir: str) -> dict | None:
    """The config.json of ``model`` as a config entry names it, where it can be read without loading anything: a
    local folder (absolute, or next to the config, or in the current directory) or a hub id in the local Hugging
    Face cache; None for a packaged model or one not found here (the engine checks again when it starts)."""
    if not isinstance(model, str) or not model.strip() or model.startswith("packaged:"):
        return None
    path = Path(model).expanduser()
    candidates = [path] if path.is_absolute() else [Path(config_dir) / path, Path.cwd() / path]
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return _read(candidate / "config.json")
    if model.count("/") == 1 and ".." not in model:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        cached = try_to_load_from_cache(model, "config.json")
        return _read(Path(cached)) if isinstance(cached, str) else None
    return None


def _read(path: Path) -> dict | None:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def check_vllm_extraction(file: str, field: str, model: str, config_dir: str) -> None:
    """ConfigError (naming ``file`` and ``field``) when ``model`` is a family the vLLM activations engine cannot
    read; nothing when it can, or when its config.json is not readable here."""
    config = local_config(model, config_dir)
    if config is None:
        return
    problem = architecture_problem(config.get("architectures"))
    if problem:
        raise ConfigError(file, field, problem, 'use "backend": "hf" for this model')
