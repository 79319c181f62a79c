"""How every in-process Hugging Face engine sets transformers up in its actor, in one place.

* One torch thread per actor: two threads on two busy cores collapse throughput.
* transformers' logging at error level and no progress bars (per-actor "Loading weights" bars would flood
  the driver's stderr).
* scikit-learn is not imported: transformers imports ``sklearn.metrics`` when generation loads, only for
  assisted decoding's confidence threshold (which no engine here uses), and that import costs an actor
  about 2.5 s of start-up. scikit-learn is a dependency of mirrorscan (the lens surface baseline), so
  transformers is told it is absent before its generation module is first imported.
"""

from __future__ import annotations


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
