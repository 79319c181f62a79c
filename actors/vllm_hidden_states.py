"""Pooled hidden states out of a vLLM engine: a KV connector that pools in the worker, and a worker extension that
hands the pooled vectors back in memory.

vLLM 0.32's speculative method ``extract_hidden_states`` copies, after every forward pass, the residual stream of
the layers named in ``eagle_aux_hidden_state_layer_ids`` (id 0: the embedding output; id k: the stream after k
blocks, *before* the final norm for k = L) into a cache-only attention layer's KV cache: one slot per token, the
layers as heads, the hidden size as head size. vLLM's own connector for it (``ExampleHiddenStatesConnector``)
writes every token of every layer to a safetensors file once a request has finished, on CUDA streams. This one
writes nothing:

- **Scheduler side** (``PooledHiddenStatesConnector.build_connector_meta``). A request carries what to pool in
  ``SamplingParams.extra_args["kv_transfer_params"]["mirrorscan_pool"]``: a ``key``, the prompt ``positions`` to
  pool and the ``pooling`` (``mean`` or ``last_token``). Once a scheduled request's prompt is wholly computed
  (its ``num_computed_tokens`` at the start of a step reaches the prompt length), the step's metadata carries a
  pooling job with the request's block ids in the hidden-states cache group. The engine asks for two generated
  tokens per request (``actors.vllm_activations``), so that step happens before the request ends and its blocks
  are freed: the prompt's states were written by the previous step's ``extract_hidden_states`` pass.
- **Worker side** (``get_finished``, called after every step's forward pass, also when no token is scheduled).
  For each job: the prompt's states (tokens, layers, hidden) are read from the cache slots, the last layer goes
  through the model's own final norm (``PooledStatesWorker.attach_final_norm``), so that layer L equals
  transformers' last ``hidden_states`` entry (which is after the norm), and the kept positions are pooled in
  float32. The (layers, hidden) array waits in the worker until ``PooledStatesWorker.take_pooled`` collects it
  (``LLM.collective_rpc``: in memory, also across processes; tensor-parallel rank 0's answer is used — the residual
  stream is whole on every rank).

Prefix caching must be off (a cached prefix is never computed again, so its states would never be written); the
engine sets it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector, extract_from_kv_cache)

POOL_KEY = "mirrorscan_pool"
"""The key of ``kv_transfer_params`` that says what to pool for a request."""


@dataclass
class PoolJob:
    """One request's prompt, ready to pool in the worker."""

    key: str
    """The caller's name for the result (``take_pooled`` returns it under this key)."""
    block_ids: list[int]
    """The request's blocks in the hidden-states cache group, in order."""
    n_tokens: int
    """Prompt tokens held in those blocks (positions 0…n_tokens−1)."""
    positions: list[int]
    """Prompt positions that enter the pooling."""
    pooling: str
    """``mean`` over ``positions`` or ``last_token`` (the last of them)."""


@dataclass
class PoolingMetadata(KVConnectorMetadata):
    """What the scheduler tells the worker in one step: the prompts to pool now."""

    jobs: list[PoolJob] = field(default_factory=list)


class PooledHiddenStatesConnector(ExampleHiddenStatesConnector):
    """A store-only connector for ``extract_hidden_states`` that pools each prompt's states in the worker and keeps
    one (layers, hidden) float32 array per request in memory (module docstring)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        """The example connector's setup (cache group, block size, cache layer), plus the pooling state."""
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._waiting: dict[str, tuple[int, dict]] = {}
        """Scheduler side: request id → (prompt length, its pooling request) until its prompt is computed."""
        self.final_norm = None
        """Worker side: the model's final norm module (set by ``PooledStatesWorker.attach_final_norm``)."""
        self.pooled: dict[str, Any] = {}
        """Worker side: key → pooled (layers, hidden) float32 array, until ``take_pooled`` collects it."""

    # ---- scheduler side ----

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        """The pooling jobs of this step: every waiting request whose prompt is computed by now."""
        meta = PoolingMetadata()
        ready = []
        for new in scheduler_output.scheduled_new_reqs:
            extra = (new.sampling_params.extra_args or {}) if new.sampling_params else {}
            ask = (extra.get("kv_transfer_params") or {}).get(POOL_KEY)
            if ask is not None:
                self._waiting[new.req_id] = (len(new.prompt_token_ids or ()), ask)
                ready.append((new.req_id, new.num_computed_tokens))
        cached = scheduler_output.scheduled_cached_reqs
        ready += list(zip(cached.req_ids, cached.num_computed_tokens))
        for req_id, computed in ready:
            if req_id in self._waiting and computed >= self._waiting[req_id][0] > 0:
                n_tokens, ask = self._waiting.pop(req_id)
                blocks = self._kv_cache_manager.get_block_ids(req_id)[self._cache_kv_group_id]
                meta.jobs.append(PoolJob(key=str(ask["key"]), block_ids=list(blocks), n_tokens=n_tokens,
                                         positions=[int(p) for p in ask["positions"]], pooling=str(ask["pooling"])))
        return meta

    def request_finished(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        """Nothing to keep: a pooled request was pooled before it ended; an aborted one is forgotten."""
        self._waiting.pop(request.request_id, None)
        return False, None

    def request_finished_all_groups(self, request, block_ids) -> tuple[bool, dict[str, Any] | None]:
        """As ``request_finished`` (the blocks are freed at once)."""
        return self.request_finished(request, None)

    # ---- worker side ----

    def wait_for_save(self) -> None:
        """Nothing is saved."""

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """Pool this step's jobs (after the forward pass; the states were written by the previous step); no
        request is ever held back."""
        if self.has_connector_metadata():
            meta = self._get_connector_metadata()
            if isinstance(meta, PoolingMetadata):
                for job in meta.jobs:
                    self.pooled[job.key] = self._pool(job)
        return None, None

    @torch.inference_mode()
    def _pool(self, job: PoolJob):
        """(layers, hidden) float32 array of one job: the prompt's states read from the cache, the last layer
        through the final norm, pooled over the job's positions."""
        assert self._kv_cache is not None and self.final_norm is not None, "attach_final_norm was not called"
        blocks = torch.tensor(job.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (blocks.reshape(-1, 1) * self._block_size + offsets.reshape(1, -1)).flatten()
        slots = slots.to(self._kv_cache.device)
        states = extract_from_kv_cache(self._kv_cache, slots, job.n_tokens)   # (tokens, layers, hidden)
        index = torch.tensor(job.positions, dtype=torch.long, device=states.device)
        kept = states.index_select(0, index)                                  # (kept, layers, hidden)
        last = self.final_norm(kept[:, -1, :].contiguous())
        last = last[0] if isinstance(last, tuple) else last
        kept = torch.cat([kept[:, :-1, :].float(), last.float().unsqueeze(1)], dim=1)
        if job.pooling == "mean":
            pooled = kept.mean(dim=0)
        elif job.pooling == "last_token":
            pooled = kept[-1]
        else:
            raise ValueError(f"unknown pooling {job.pooling!r}")
        return pooled.cpu().numpy()


class PooledStatesWorker:
    """vLLM worker extension (``worker_extension_cls``): the calls ``LLM.collective_rpc`` makes to the connector of
    each worker."""

    def attach_final_norm(self) -> str:
        """Give the connector the model's final norm module (the one vLLM applies after the last block); returns
        the module's class name."""
        from vllm.distributed.kv_transfer import get_kv_transfer_group

        model = self.model_runner.get_model()
        language = model.get_language_model() if hasattr(model, "get_language_model") else model
        norm = getattr(getattr(language, "model", None), "norm", None)
        if norm is None:
            raise RuntimeError(f"{type(model).__name__} has no model.norm: its final norm cannot be applied")
        get_kv_transfer_group().final_norm = norm
        return type(norm).__name__

    def take_pooled(self, keys: list[str]) -> dict[str, tuple[bytes, tuple[int, int]]]:
        """The pooled arrays of ``keys`` that are ready, removed from the worker (a missing key is left out), each
        as (float32 bytes, shape): plain values that cross vLLM's process boundary as they are (``as_arrays``)."""
        from vllm.distributed.kv_transfer import get_kv_transfer_group

        pooled = get_kv_transfer_group().pooled
        return {k: (pooled[k].tobytes(), tuple(pooled.pop(k).shape)) for k in keys if k in pooled}


def as_arrays(taken: dict) -> dict:
    """``take_pooled``'s answer as key → (layers, hidden) float32 arrays."""
    import numpy as np

    return {k: np.frombuffer(data, dtype=np.float32).reshape(shape) for k, (data, shape) in taken.items()}
