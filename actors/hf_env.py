"""How every in-process Hugging Face engine sets transformers up in its actor, in one place.

* One torch thread per actor: two threads on two busy cores collapse throughput.
* transformers' logging at error level and no progress bars (per-actor "Loading weights" bars would flood
  the driver's stderr).
* scikit-learn is not imported: transformers imports ``sklearn.metrics`` when generation loads, only for
  assisted decoding's confidence threshold (which no engine here uses), and that import costs an actor
  about 2.5 s of start-up. scikit-learn is a dependency of mirrorscan (the lens surface baseline), so
  transformers is told it is absent before its generation module is first imported.
* scipy is not imported either: transformers' loss module imports ``scipy.optimize`` only for the
  object-detection losses (about 0.6 s per actor); transformers is told scipy is absent before that module
  is first imported.
"""

from __future__ import annotations

from typing import Any, NamedTuple

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
"""Weights' dtypes an HF engine loads as asked; anything else loads as the checkpoint says ("auto")."""


class LoadedModel(NamedTuple):
    """A causal LM and its tokenizer as every forward-pass engine (scorer, activations) holds them."""

    tokenizer: Any
    model: Any
    """In eval mode, on the variant's device."""
    pad_id: int
    """The tokenizer's pad id, else 0 (padded positions are masked, so any id will do)."""
    context: int | None
    """The model's context window in tokens, or None when its config does not say."""


def prepare_transformers() -> None:
    """Set this process up for an HF engine (see the module docstring); call before importing a model class."""
    import sys

    import torch
    import transformers.utils as hf_utils
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if "transformers.generation.candidate_generator" not in sys.modules:
        hf_utils.is_sklearn_available = lambda: False
    if "transformers.loss.loss_utils" not in sys.modules:   # scipy serves only object-detection losses there
        hf_utils.is_scipy_available = lambda: False


def load_causal_lm(variant, source: str) -> LoadedModel:
    """Load ``source`` for ``variant`` (dtype, device) in a process set up by ``prepare_transformers``. With a
    ``device_map`` (``grid.device_map``) accelerate places the layers as it says and the model stays there;
    else the whole model goes to ``device``."""
    prepare_transformers()   # before transformers loads its generation module
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    device_map = variant.device_map
    placed = {"device_map": device_map} if device_map is not None else {}
    model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES.get(variant.dtype, "auto"), **placed)
    model = (model if device_map is not None else model.to(variant.device)).eval()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return LoadedModel(tokenizer, model, pad_id, getattr(model.config, "max_position_embeddings", None))
