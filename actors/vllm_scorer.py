"""vLLM scorer actor: the log-probability a vLLM engine gives each target token after a prefix.

A batch of ``score`` cells is tokenized by the rule every score engine shares (``actors.score_tokens``:
prefix and target apart, BOS by the tokenizer or the model's ``add_bos``), and each cell goes to the engine
as its token ids with ``prompt_logprobs=0``, which returns the log-probability of every prompt token given
the tokens before it; the target's are read at their positions. vLLM computes them from the raw logits
(``logprobs_mode`` ``raw_logprobs``, the default) with log-softmax in float32 — in float32 they equal the
HF scorer's within 1e-4 nats. One token is generated and discarded (vLLM's minimum).

Scoring needs no streaming, so the engine is vLLM's synchronous ``LLM``: with the CPU settings
(``actors.vllm_env``) its engine core runs in the actor's own process and starts in seconds, where the
sampler's streaming ``AsyncLLM`` always starts a separate engine-core process (about 20 s here). Engine
arguments are the sampler's (``actors.vllm_sampler.engine_kwargs``: dtype, CPU settings, the variant's
``engine_args``). A batch is one ``generate`` call, so the engine batches its cells; a cell's numbers do not
depend on its batch-mates (its prompt log-probs are its own rows of the logits). Timing is the batch's
(``timing_scope='batch'``, monotonic clock). Should a batch fail, its cells are scored one by one so that
only the failing ones become error rows.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

from mirrorscan.actors.engine import VLLM, Engine
from mirrorscan.actors.rows import generation_overrides, trace_row, where_am_i
from mirrorscan.actors.score_tokens import LocalScorer, score_fields
from mirrorscan.grid.records import ModelVariant, InvocationContext


class VLLMScorer(LocalScorer, Engine):
    """One vLLM engine held for the run; ``__call__`` scores a batch of cells, one row per cell."""

    kind, backend = "score", "vllm"
    model_keys = frozenset({"tensor_parallel_size", "engine_args", "add_bos"})
    requires = (VLLM,)

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Build the engine of ``variant`` in this process; its rows belong to ``run``."""
        from mirrorscan.actors.vllm_env import apply_vllm_env

        apply_vllm_env(variant.device, run.cache_dir, batch_invariant=variant.batch_invariant)
        if not variant.device.startswith("cuda"):
            os.environ.setdefault("OMP_NUM_THREADS", "1")   # the actor holds one CPU; more threads collapse
        from vllm import LLM

        from mirrorscan.actors.vllm_env import batch_invariance_record
        from mirrorscan.actors.vllm_sampler import config_file, engine_kwargs

        self.variant, self.run, self.source = variant, run, model_source
        self.engine_kwargs = engine_kwargs(variant, model_source, config_file(run))
        """The engine arguments used, engine_args merged last."""
        started = time.monotonic()
        self.llm = LLM(**self.engine_kwargs)
        self.engine_start_s = time.monotonic() - started
        """Seconds the engine took to start (monotonic)."""
        self.tokenizer = self.llm.get_tokenizer()
        self.context = self.llm.llm_engine.model_config.max_model_len
        """The engine's context window (tokens): longer sequences are error rows, never sent."""
        self.overrides = generation_overrides(engine_args=variant.engine_args,
                                              batch_invariant=batch_invariance_record() if variant.batch_invariant else None)
        self.where = where_am_i()

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """Ray remote args for one engine actor of ``variant``: the sampler's (one CPU; GPUs and a placement
        group on CUDA)."""
        from mirrorscan.actors.vllm_sampler import VLLMSampler

        return VLLMSampler.ray_resources(variant)

    def shutdown(self) -> None:
        """Release the engine (its memory goes with the object)."""
        self.llm = None

    def _score(self, prepared: list) -> list[dict]:
        """One engine call for ``prepared``: each cell's target tokens' prompt log-probs (nats) and its row."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        prompts = [TokensPrompt(prompt_token_ids=p + t) for _, _, p, t, *_ in prepared]
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        total_ms = (time.monotonic() - start) * 1000
        request = json.dumps({"prompt_logprobs": 0, "max_tokens": 1, "dtype": self.variant.dtype,
                              "logprobs_mode": "raw_logprobs"}, sort_keys=True)
        rows = []
        for (_, cell, prefix_ids, target_ids, bos, space), out in zip(prepared, outputs):
            first = len(prefix_ids)
            lps = [float(out.prompt_logprobs[first + j][t].logprob) for j, t in enumerate(target_ids)]
            rows.append(self._row(cell, target_text=cell["target"], **score_fields(prefix_ids, target_ids, bos, lps, space),
                                  batch_size=len(prepared), total_ms=total_ms, started_at=started_at,
                                  request_params=request))
        return rows

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell``: the run's identity, the coordinates, the prefix as the text read, ``fields``."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text="",
                         user_text=cell["prefix"], timing_scope="batch", endpoint=f"engine://vllm/{self.source}",
                         generation_overrides=self.overrides, **fields)
