"""vLLM activations actor: every layer's residual stream of a vLLM engine, pooled in the engine's worker to one
vector per layer, the same vectors the transformers path stores (``actors.hf_activations``).

Cells are prepared exactly as the HF engine prepares them (the same class does it: rendering, truncation to
``max_input_tokens``, the positions kept after dropping a BOS at position 0 and whitespace-only tokens), and each
goes to the engine as its token ids. The engine runs vLLM's speculative method ``extract_hidden_states`` over
every layer id 0…L with this project's connector (``actors.vllm_hidden_states``), which pools each prompt's states
inside the worker (float32, ``mean`` or ``last_token`` over the kept positions) and hands back one (L+1, hidden)
array per cell in memory; no token's states are written anywhere.

**Layer convention.** vLLM's id 0 is the embedding output and id k the residual stream after k blocks, which are
transformers' ``hidden_states[k]``, except the last: vLLM's id L is taken before the final norm, transformers' last
entry after it. The connector puts layer L's token states through the model's own final norm before pooling, so
entry L of a row is transformers' ``hidden_states[L]`` and entries 0…L mean the same on both backends.

**Engine.** vLLM's synchronous ``LLM`` (as the vLLM scorer; engine arguments from
``actors.vllm_sampler.engine_kwargs``, then the extraction's own: the speculative config, the connector, the
worker extension, prefix caching off, since a cached prefix is never computed and its states never written).
Each cell asks for two generated tokens (``min_tokens`` 2, EOS ignored) and discards them: the prompt's states
are written after its last prefill step, and the connector pools them in the next step, which a request of two
tokens always has. So a cell needs its prompt + 2 tokens in the context window. Only the families whose vLLM
model exposes Eagle-3's auxiliary hidden states can be read this way (``grid.vllm_extraction``); another is a
ConfigError before the run (``load_spec``) and again here. The connector is one per process (vLLM keeps it in
a module global), so a process holds one vLLM activations engine at a time.

Timing is the batch's ``generate`` call (``timing_scope='batch'``, monotonic clock).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from mirrorscan.actors.engine import VLLM
from mirrorscan.actors.hf_activations import HFActivations
from mirrorscan.actors.activation_prompt import cell_options
from mirrorscan.actors.rows import generation_overrides, trace_row, where_am_i
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.vllm_extraction import architecture_problem

GENERATED_TOKENS = 2
"""Tokens each cell generates and discards: the step after the prompt's last prefill step is where it is pooled."""
CONNECTOR = {"kv_connector": "PooledHiddenStatesConnector",
             "kv_connector_module_path": "mirrorscan.actors.vllm_hidden_states", "kv_role": "kv_producer"}
"""vLLM's ``kv_transfer_config`` of the pooling connector."""
WORKER_EXTENSION = "mirrorscan.actors.vllm_hidden_states.PooledStatesWorker"
"""vLLM's ``worker_extension_cls``: the calls that attach the final norm and collect the pooled vectors."""
OWNED_ENGINE_ARGS = ("speculative_config", "kv_transfer_config", "worker_extension_cls", "enable_prefix_caching")
"""Engine arguments the extraction sets itself; a model's ``engine_args`` may not override them."""


def extraction_kwargs(n_layers: int) -> dict:
    """The engine arguments that make vLLM hand every layer 0…``n_layers`` to the pooling connector."""
    return {"speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                   "draft_model_config": {"hf_config": {
                                       "eagle_aux_hidden_state_layer_ids": list(range(n_layers + 1))}}},
            "kv_transfer_config": dict(CONNECTOR), "worker_extension_cls": WORKER_EXTENSION,
            "enable_prefix_caching": False}


def checkpoint_parameters(source: str) -> int | None:
    """Parameters stored in a local folder's safetensors files (read from their headers; tied weights are stored
    once, as transformers counts them); None when ``source`` is no such folder."""
    from safetensors import safe_open

    files = sorted(Path(source).glob("*.safetensors")) if Path(source).is_dir() else []
    total = 0
    for file in files:
        with safe_open(str(file), "pt") as f:
            for name in f.keys():
                size = 1
                for dim in f.get_slice(name).get_shape():
                    size *= dim
                total += size
    return total or None


class VLLMActivations(HFActivations):
    """One vLLM engine held for the run; ``__call__`` extracts a batch of cells, one row per cell (the HF engine's
    cell preparation and rows, vLLM's forward pass)."""

    kind, backend = "activations", "vllm"
    model_keys = frozenset({"tensor_parallel_size", "engine_args"})
    requires = (VLLM,)

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Build the engine of ``variant`` in this process; its rows belong to ``run``. ConfigError for a model family
        vLLM cannot extract from, or engine_args that set what the extraction owns."""
        from mirrorscan.actors.vllm_env import apply_vllm_env, batch_invariance_record

        apply_vllm_env(variant.device, run.cache_dir, batch_invariant=variant.batch_invariant)
        if not variant.device.startswith("cuda"):
            os.environ.setdefault("OMP_NUM_THREADS", "1")   # the actor holds one CPU; more threads collapse
        from transformers import AutoConfig

        from mirrorscan.actors.vllm_sampler import config_file, engine_kwargs

        self.variant, self.run, self.source = variant, run, model_source
        file = config_file(run)
        config = AutoConfig.from_pretrained(model_source)
        problem = architecture_problem(getattr(config, "architectures", None))
        if problem:
            raise ConfigError(file, f"models[{variant.label}].backend", problem, 'use "backend": "hf" for this model')
        owned = sorted(set(variant.engine_args) & set(OWNED_ENGINE_ARGS))
        if owned:
            raise ConfigError(file, f"models[{variant.label}].engine_args.{owned[0]}",
                              "is set by the vLLM activations engine itself", "remove it")
        from vllm.distributed.kv_transfer import has_kv_transfer_group

        if has_kv_transfer_group():
            raise RuntimeError("this process already holds a vLLM engine with a KV connector; shut it down first "
                               "(one vLLM activations engine per process)")
        n_layers = config.get_text_config().num_hidden_layers
        self.engine_kwargs = {**engine_kwargs(variant, model_source, file), **extraction_kwargs(n_layers)}
        """The engine arguments used: the sampler's, engine_args, then the extraction's."""
        from vllm import LLM

        started = time.monotonic()
        self.llm = LLM(**self.engine_kwargs)
        self.engine_start_s = time.monotonic() - started
        """Seconds the engine took to start (monotonic)."""
        self.final_norm = self.llm.collective_rpc("attach_final_norm")[0]
        """Class name of the final norm the connector applies to layer L."""
        self.tokenizer = self.llm.get_tokenizer()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.context = self.llm.llm_engine.model_config.max_model_len - GENERATED_TOKENS
        """Longest input (tokens): the engine's context window less the tokens each cell generates."""
        self.parameters = checkpoint_parameters(model_source)
        """The checkpoint's parameter count, recorded on every row (None for a source that is no local folder)."""
        self.overrides = generation_overrides(engine_args=variant.engine_args,
                                              batch_invariant=batch_invariance_record() if variant.batch_invariant else None)
        self._whitespace: dict[int, bool] = {}
        self.where = where_am_i()

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """Ray remote args for one engine actor of ``variant``: the vLLM sampler's (one CPU; GPUs and a placement
        group on CUDA)."""
        from mirrorscan.actors.vllm_sampler import VLLMSampler

        return VLLMSampler.ray_resources(variant)

    def shutdown(self) -> None:
        """Stop the engine and release the process's KV connector (so another engine may start here)."""
        if self.llm is None:
            return
        from vllm.distributed.kv_transfer.kv_transfer_state import ensure_kv_transfer_shutdown

        try:
            self.llm.llm_engine.engine_core.shutdown()
        finally:
            self.llm = None
            ensure_kv_transfer_shutdown()

    def _extract(self, prepared: list, rows: dict, vectors: dict) -> None:
        """One ``generate`` call for ``prepared`` (index, cell, ids, positions, truncated); rows and vectors by index."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import SamplingParams

        from mirrorscan.actors.vllm_hidden_states import as_arrays

        keys = [uuid.uuid4().hex for _ in prepared]
        prompts, params = [], []
        for key, (_, cell, seq, positions, _) in zip(keys, prepared):
            prompts.append(TokensPrompt(prompt_token_ids=list(seq)))
            ask = {"key": key, "positions": list(positions), "pooling": cell["pooling"]}
            params.append(SamplingParams(temperature=0.0, max_tokens=GENERATED_TOKENS, min_tokens=GENERATED_TOKENS,
                                         ignore_eos=True, detokenize=False,
                                         extra_args={"kv_transfer_params": {"mirrorscan_pool": ask}}))
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        try:
            self.llm.generate(prompts, params, use_tqdm=False)
        except Exception:
            self.llm.collective_rpc("take_pooled", args=(keys,))   # nothing of a failed batch stays behind
            raise
        pooled = as_arrays(self.llm.collective_rpc("take_pooled", args=(keys,))[0])
        total_ms = (time.monotonic() - start) * 1000
        request = json.dumps({"forward": "extract_hidden_states", "dtype": self.variant.dtype,
                              "final_norm": f"layer L through {self.final_norm}",
                              "generated_tokens_discarded": GENERATED_TOKENS}, sort_keys=True)
        for key, (i, cell, seq, positions, truncated) in zip(keys, prepared):
            if key not in pooled:
                rows[i] = self._row(cell, error="ExtractionError: the engine returned no pooled states for this cell")
                continue
            vectors[i] = pooled[key]
            rows[i] = self._row(cell, input_token_ids=seq, pooled_tokens=len(positions), truncated=truncated,
                                n_layers=pooled[key].shape[0], hidden_size=pooled[key].shape[1],
                                model_parameters=self.parameters, prompt_tokens=len(seq),
                                completion_tokens=0, batch_size=len(prepared), total_ms=total_ms,
                                started_at=started_at, request_params=request)

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell`` as the HF engine writes it (the text as read, withheld texts kept out), with this
        engine's endpoint and the engine_args it was built with."""
        system = cell_options(cell)["system"]
        system_text = cell.get("system_prompt") if system == "text" else ("" if system == "none" else None)
        if cell.get("text_withheld"):
            fields["input_token_ids"] = None
        return trace_row(self.variant, self.run, self.source, self.where, cell, system_text=system_text,
                         user_text=None if cell.get("text_withheld") else cell["text"], timing_scope="batch",
                         endpoint=f"engine://vllm/{self.source}", generation_overrides=self.overrides, **fields)
