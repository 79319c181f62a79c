"""vLLM sampler actor: one vLLM engine per actor, answering batches of rendered cells as streamed requests.

Design
------
- **One engine per actor, built once.** ``VLLMSampler.__init__`` builds a ``vllm.v1.engine.async_llm.AsyncLLM``
  and keeps it for the run. Within one process, samplers whose *engine* settings are equal (model, dtype,
  device, tensor parallel size, engine_args) share one engine (``_HOSTS``): a Ray actor holds one sampler, so
  this changes nothing there, and tests can try several sampling settings without paying the engine start
  (5–70 s on a busy CPU) again. Sampling settings (temperature, seed, extra_body, effort) are per request.
- **Why AsyncLLM on a background loop.** Ray Data calls ``__call__(batch)`` synchronously, but per-cell timing
  needs every cell to be its own streamed request (``RequestOutputKind.DELTA``), all in flight together so
  the engine batches them continuously. The actor owns an asyncio event loop in a daemon thread; the engine
  is created and driven on that loop, ``__call__`` submits every cell of the batch to it and waits for all
  of them (``asyncio.gather``). A failing cell (bad input, engine error, timeout) becomes an error row
  ("Type: message"); every cell of the batch comes back exactly once, in batch order.
- **Same bytes as the HF path.** Prompts are rendered with the model tokenizer's chat template exactly like
  ``HFSampler`` (``actors.chat.render_chat``) and tokenized the same way (no added special tokens); the
  engine receives those token ids, so both engines see identical prompts. Generation stops at the same
  end-of-sequence ids as HF (generation config + tokenizer); ``completion_tokens`` includes the stop token.
  Greedy at temperature 0; sampled cells carry ``SamplingParams.seed`` = the cell's seed, so a sampled
  answer depends on its seed only, never on its batch neighbours.
- **What reaches the engine is recorded.** ``extra_body`` keys that are vLLM sampling parameters
  (``structured_outputs`` for choice/regex/JSON/grammar constraints, ``top_k``, ``min_p``, …) go into
  ``SamplingParams``; ``chat_template_kwargs`` and ``effort`` (as ``reasoning_effort``/``enable_thinking``,
  like vLLM's OpenAI server: ``actors.chat.template_kwargs``, the mapping the HF engine uses too) go into the
  chat template; ``engine_args`` are merged last into the engine arguments. An unknown ``extra_body`` key is
  a ``ConfigError`` on every row of that model (the cells are kept as error rows, the run goes on).
  ``request_params`` = JSON of the SamplingParams values used; ``generation_overrides`` = what was sent: the
  template kwargs applied, the extra_body sampling parameters, engine_args (nothing but engine_args when
  the extra_body error kept every request from being sent). ``scan`` refuses, before a run, an effort or
  template kwarg that leaves the rendered prompt unchanged.

Timing (``actors.streaming.StreamClock``, the one definition): monotonic clock, request sent = 0 (just
before the request is handed to the engine, so ``ttft_ms`` includes queueing behind the batch's other
cells). A chunk is one ``RequestOutput`` delta as it reaches the actor, timed once at its arrival: a delta
counts when it carries at least one generated token, also when its text is '' (the stop token, a partial
UTF-8 byte). When the actor's loop falls behind the engine, vLLM merges the tokens that are ready into one
delta; that delta is one chunk and one interval, never split into 0 ms "tokens" the actor did not see
arrive. So ``n_chunks`` (deltas) ≤ ``completion_tokens``, equal only when no delta was merged;
``decode_tok_s`` is derived from ``completion_tokens`` and the first/last chunk times (see
``actors.streaming``); tokens per delta are kept by the clock (``StreamClock.chunk_tokens``) but are not a
trace column. A delta that straddles the end of reasoning counts as reasoning (its text goes there too).
``timing_scope='request'``.

One module past 400 lines on purpose: the engine arguments, sampling parameters and the rows they produce are
recorded from the same values, and keeping them in one module keeps what was sent and what is recorded equal.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import threading
import time
import uuid

import pyarrow as pa

from mirrorscan.actors.chat import render_chat, template_kwargs
from mirrorscan.actors.engine import VLLM, Engine
from mirrorscan.actors.placement import tensor_parallel_group
from mirrorscan.actors.rows import cell_sampling, generation_overrides, trace_row, where_am_i
from mirrorscan.actors.streaming import StreamClock
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.trace_schema import to_trace_table

ENGINE_SEED = 0
"""vLLM's engine seed (fixed, so unseeded randomness inside the engine is the same on every run)."""
PG_READY_TIMEOUT_S = 600.0
"""Longest wait (s) for a tensor-parallel placement group; an autoscaling cluster may need minutes for a node."""
OWNED_SAMPLING = ("temperature", "top_p", "max_tokens", "seed", "n", "output_kind", "stop_token_ids")
"""SamplingParams fields the sampler sets itself; extra_body may not override them."""
REMOVED_GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
                  "guided_whitespace_pattern")
"""Guided-decoding keys vLLM removed (it would silently ignore them); ``structured_outputs`` replaces them."""
_TOKEN = "\x00"
"""StreamClock counts a chunk when it carries text; a delta of generated tokens is content even when its text is ''."""

_HOSTS: dict[str, "_EngineHost"] = {}
_HOSTS_LOCK = threading.Lock()


class _EngineHost:
    """One AsyncLLM and the asyncio loop (a daemon thread) that creates and drives it."""

    def __init__(self, engine_kwargs: dict):
        """Start the loop thread and build the engine on it (blocks until the engine is ready)."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self.thread.start()

        async def build():
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs))

        started = time.monotonic()
        try:
            self.engine = self.run(build())
        except BaseException:
            self._stop_loop()
            raise
        self.start_s = time.monotonic() - started
        """Seconds the engine took to start (monotonic)."""

    def run(self, coro, timeout: float | None = None):
        """Run ``coro`` on the engine loop and wait for its result (``timeout`` seconds, None = no limit)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def shutdown(self) -> None:
        """Shut the engine down (its core process too) and stop the loop thread; a second call does nothing."""
        if self.engine is None:
            return

        async def stop():
            # AsyncLLM.shutdown stops the engine core first and cancels its output handler after: the
            # handler, still reading, then logs an EngineDeadError traceback for an engine that was asked to
            # stop. Cancelling the handler first ends it quietly.
            handler = getattr(self.engine, "output_handler", None)
            if handler is not None and not handler.done():
                handler.cancel()
                with contextlib.suppress(BaseException):
                    await handler
            self.engine.shutdown()
            self.engine = None   # collected now, not at interpreter exit (where its __del__ fails noisily)

        try:
            self.run(stop(), timeout=60)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def engine_host(engine_kwargs: dict) -> _EngineHost:
    """The process's engine for these engine arguments, built on first use."""
    key = json.dumps(engine_kwargs, sort_keys=True, default=str)
    with _HOSTS_LOCK:
        if key not in _HOSTS:
            _HOSTS[key] = _EngineHost(engine_kwargs)
            if len(_HOSTS) == 1:   # registered after vLLM's own exit finalizers, so it runs before them
                atexit.register(shutdown_engines)
        return _HOSTS[key]


def shutdown_engines() -> None:
    """Stop every engine this process still holds (at exit: an engine actor whose pool ended exits without
    the pipeline's teardown reaching its sampler, and vLLM's own finalizer would stop the engine core
    before its output handler, which then logs an EngineDeadError traceback)."""
    with _HOSTS_LOCK:
        hosts = list(_HOSTS.values())
        _HOSTS.clear()
    for host in hosts:
        with contextlib.suppress(Exception):
            host.shutdown()


def config_file(run: InvocationContext) -> str:
    return f"experiments/{run.experiment}/config.json"


class VLLMSampler(Engine):
    """One vLLM engine held for the whole run; ``__call__`` turns a batch of cells into trace rows."""

    kind, backend = "generate", "vllm"
    model_keys = frozenset({"tensor_parallel_size", "engine_args", "extra_body", "chat_template_kwargs"})
    requires = (VLLM,)

    CONCURRENT_BATCHES = 2
    """Batches the pipeline may hand this actor at once: the next batch's requests join the engine while
    the last one's tail still streams (continuous batching), so the engine never idles between batches."""

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Build (or reuse, in this process) the engine of ``variant``, whose rows belong to ``run``."""
        device = variant.device
        from mirrorscan.actors.vllm_env import apply_vllm_env, batch_invariance_record

        apply_vllm_env(device, run.cache_dir, batch_invariant=variant.batch_invariant)
        if not device.startswith("cuda"):
            os.environ.setdefault("OMP_NUM_THREADS", "1")   # the actor holds one CPU; more threads collapse
        from transformers import AutoTokenizer

        self.variant, self.run, self.source = variant, run, model_source
        self.tokenizer = AutoTokenizer.from_pretrained(model_source)
        self.stop_ids = _stop_ids(model_source, self.tokenizer)
        self.engine_kwargs = engine_kwargs(variant, model_source, config_file(run))
        """The engine arguments used, engine_args merged last."""
        self.extra, self.template_kwargs, self.extra_error = _split_extra_body(variant, config_file(run))
        sent = self.extra_error is None
        self.overrides = generation_overrides(
            effort=variant.effort if sent else None, chat_template_kwargs=self.template_kwargs if sent else {},
            extra_body=self.extra, engine_args=variant.engine_args,
            batch_invariant=batch_invariance_record() if variant.batch_invariant else None)
        """generation_overrides of every row: what reaches the template, the sampling parameters and the engine."""
        self.host = engine_host(self.engine_kwargs)
        self.engine_start_s = self.host.start_s
        """Seconds the engine took to start (monotonic; a shared engine reports its own first start)."""
        self.where = where_am_i()

    @staticmethod
    def ray_resources(variant: ModelVariant, timeout_s: float = PG_READY_TIMEOUT_S) -> dict:
        """Ray remote args for one engine actor of ``variant``.

        CPU: one CPU. CUDA, tensor parallel 1: one CPU and one GPU. Tensor parallel k > 1: the actor takes
        no GPU itself; it runs in a new placement group of k ``{GPU: 1}`` bundles (``actors.placement``), so
        vLLM's Ray executor finds the group (``ray.util.get_current_placement_group``) and puts one worker
        on each GPU bundle. Waits up to ``timeout_s`` seconds for the group; raises ConfigError when no node
        offers it. The sweep removes the group when the model's pool ends.
        """
        device = variant.device
        tp = variant.tensor_parallel_size
        if not device.startswith("cuda"):
            return {"num_cpus": 1}
        if tp == 1:
            return {"num_cpus": 1, "num_gpus": 1}
        return tensor_parallel_group(variant, "GPU", timeout_s)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer every cell of ``batch`` (rendered cells), all in flight at once; one trace row per cell."""
        cells = batch.to_pylist()

        async def answer_all():
            return await asyncio.gather(*(self._answer(c, len(cells)) for c in cells), return_exceptions=True)

        results = self.host.run(answer_all())
        rows = [r if isinstance(r, dict) else self._row(c, batch_size=len(cells), error=f"{type(r).__name__}: {r}")
                for c, r in zip(cells, results)]
        return to_trace_table(rows)

    def shutdown(self) -> None:
        """Stop this sampler's engine (shared: every sampler of this process using it loses it)."""
        with _HOSTS_LOCK:
            for key, host in list(_HOSTS.items()):
                if host is self.host:
                    del _HOSTS[key]
        self.host.shutdown()

    # ---- one request ------------------------------------------------------------------------------------

    def _request(self, cell: dict):
        """(prompt token ids, system folded, SamplingParams, their JSON) for ``cell``; raises for a bad cell
        or config. The JSON is taken before sending: vLLM rewrites some values in place (a choice
        constraint becomes a grammar)."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

        if self.extra_error is not None:
            raise self.extra_error
        v = self.variant
        text, folded = render_chat(self.tokenizer, cell["system_text"], cell["user_text"], self.template_kwargs)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        temperature, top_p, max_tokens = cell_sampling(v, cell)
        sampling = temperature != 0
        extra = dict(self.extra)
        if isinstance(extra.get("structured_outputs"), dict):
            extra["structured_outputs"] = StructuredOutputsParams(**extra["structured_outputs"])
        params = SamplingParams(
            temperature=temperature, top_p=top_p if sampling else 1.0,
            max_tokens=max_tokens, seed=int(cell["seed"]) if sampling else None,
            stop_token_ids=sorted(self.stop_ids), output_kind=RequestOutputKind.DELTA, **extra)
        return ids, folded, params, _params_json(params)

    async def _answer(self, cell: dict, batch_size: int) -> dict:
        """Stream one cell through the engine and build its row (errors: an error row, never a raise)."""
        clock = StreamClock()
        request = (None, None, None, None)
        timeout = float(self.variant.timeout_s) or None   # the variant's per-request limit (s)
        try:
            request = self._request(cell)
            return await asyncio.wait_for(self._stream(cell, *request, clock, batch_size), timeout)
        except Exception as exc:
            message = f"no answer within timeout_s = {timeout:g} s" if isinstance(exc, TimeoutError) else exc
            return self._row(cell, batch_size=batch_size, started_at=clock.started_at, request_params=request[3],
                             error=f"{type(exc).__name__}: {message}")

    async def _stream(self, cell: dict, ids: list[int], folded: bool, params, params_json: str, clock: StreamClock,
                      batch_size: int) -> dict:
        """Send one request and read its deltas; the row's timing has one chunk per delta that carried
        tokens (monotonic ms from just before ``generate``), its token count from the tokens received."""
        from vllm.inputs import TokensPrompt

        parser = self._reasoning_parser()
        answer, reasoning, out_ids, finish = [], [], [], None
        request_id = f"{cell['probe_id']}#{cell['sample']}#{uuid.uuid4().hex[:8]}"
        clock.start()
        async for out in self.host.engine.generate(TokensPrompt(prompt_token_ids=ids), params, request_id):
            delta = out.outputs[0]
            thinking = parser is not None and not parser.is_reasoning_end(out_ids)
            out_ids += delta.token_ids
            (reasoning if thinking else answer).append(delta.text)
            if delta.token_ids:   # one chunk per delta, timed now, however many tokens it merged
                if thinking:
                    clock.chunk(reasoning=_TOKEN, tokens=len(delta.token_ids))
                else:
                    clock.chunk(text=_TOKEN, tokens=len(delta.token_ids))
            finish = delta.finish_reason or finish
        n = len(out_ids)
        return self._row(
            cell, response="".join(answer), reasoning=_strip_markers("".join(reasoning), parser) if reasoning else None,
            system_folded=folded, prompt_tokens=len(ids), completion_tokens=n, finish_reason=finish,
            batch_size=batch_size, request_params=params_json, **clock.fields(n))

    def _reasoning_parser(self):
        """A fresh vLLM reasoning parser when engine_args name one (``reasoning_parser``), else None."""
        name = self.engine_kwargs.get("reasoning_parser")
        if not name:
            return None
        from vllm.reasoning import ReasoningParserManager

        return ReasoningParserManager.get_reasoning_parser(name)(self.tokenizer)

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell`` carrying the run's identity, the coordinates and ``fields``."""
        fields.setdefault("timing_scope", "request")
        return trace_row(self.variant, self.run, self.source, self.where, cell,
                         endpoint=f"engine://vllm/{self.source}", generation_overrides=self.overrides, **fields)


# ---- settings -------------------------------------------------------------------------------------------

def engine_kwargs(variant: ModelVariant, model_source: str, config_file: str = "") -> dict:
    """AsyncEngineArgs keyword arguments for ``variant``: dtype from the variant, a fixed seed, CPU-safe
    settings on the CPU, the Ray executor for tensor parallel > 1, then the variant's engine_args (last)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    device = variant.device
    tp = variant.tensor_parallel_size
    kwargs = {"model": model_source, "tokenizer": model_source, "dtype": variant.dtype,
              "seed": ENGINE_SEED, "tensor_parallel_size": tp, "disable_log_stats": True}
    if tp > 1:
        kwargs["distributed_executor_backend"] = "ray"
    if not device.startswith("cuda"):
        kwargs.update(enforce_eager=True, enable_prefix_caching=False)   # no 2-min compile; same answers
    overrides = dict(variant.engine_args)
    known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    for key in overrides:
        if key not in known:
            raise ConfigError(config_file, f"models[{variant.label}].engine_args.{key}",
                              "not an argument of vLLM's AsyncEngineArgs",
                              "use a vLLM engine argument name with underscores (e.g. max_model_len)")
    return {**kwargs, **overrides}


def _split_extra_body(variant: ModelVariant, config_file: str) -> tuple[dict, dict, ConfigError | None]:
    """(SamplingParams keyword arguments, chat-template kwargs, the config error or None) from the variant."""
    from vllm.sampling_params import SamplingParams

    label = variant.label
    template = template_kwargs(variant)   # effort's, chat_template_kwargs, extra_body.chat_template_kwargs
    body = dict(variant.extra_body)
    body.pop("chat_template_kwargs", None)
    allowed = sorted(f for f in SamplingParams.__struct_fields__ if not f.startswith("_") and f not in OWNED_SAMPLING)
    for key, value in body.items():
        problem = _extra_body_problem(key, value, allowed)
        if problem:
            return {}, template, ConfigError(config_file, f"models[{label}].extra_body.{key}", *problem)
    return body, template, None


def _extra_body_problem(key: str, value, allowed: list[str]) -> tuple[str, str] | None:
    """(problem, fix) when ``extra_body[key]`` cannot go to vLLM's SamplingParams, else None."""
    from vllm.sampling_params import StructuredOutputsParams

    if key in REMOVED_GUIDED:
        return ("vLLM removed the guided-decoding fields (it would silently ignore this one)",
                'use extra_body.structured_outputs, e.g. {"choice": ["A", "B"]} or {"regex": "..."}')
    if key in OWNED_SAMPLING:
        return "set by mirrorscan for every cell", f"set models[].{key} (or the experiment's value) instead"
    if key not in allowed:
        return "not a vLLM sampling parameter", f"remove it or use one of: chat_template_kwargs, {', '.join(allowed)}"
    if key == "structured_outputs":
        try:
            StructuredOutputsParams(**value)
        except Exception as exc:   # TypeError (unknown key) or vLLM's VLLMValidationError
            return (f"invalid structured output: {exc}",
                    "give exactly one of json, regex, choice, grammar, json_object, structural_tag")
    return None


def _stop_ids(model_source: str, tokenizer) -> set[int]:
    """End-of-sequence ids exactly as the HF sampler stops: the generation config's and the tokenizer's."""
    from transformers import AutoConfig, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_source).eos_token_id
    except OSError:   # no generation_config.json: transformers derives it from the model config
        eos = AutoConfig.from_pretrained(model_source).eos_token_id
    eos = eos if isinstance(eos, list) else [eos] if eos is not None else []
    return {i for i in [*eos, tokenizer.eos_token_id] if i is not None}


def _params_json(params) -> str:
    """JSON of the SamplingParams values sent: the core ones always, every other one that is not its default."""
    from vllm.sampling_params import SamplingParams

    default = SamplingParams()
    core = ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop_token_ids", "output_kind")
    out = {}
    for name in SamplingParams.__struct_fields__:
        if name.startswith("_"):
            continue
        value = getattr(params, name)
        if name in core or value != getattr(default, name):
            if dataclasses.is_dataclass(value):
                value = {k: v for k, v in dataclasses.asdict(value).items()
                         if v is not None and v is not False and not k.startswith("_")}
            out[name] = value.name if hasattr(value, "name") and not isinstance(value, (str, dict)) else value
    return json.dumps(out, sort_keys=True, default=str)


def _strip_markers(text: str, parser) -> str:
    """Reasoning text without the parser's start/end markers (when they are plain text)."""
    for marker in (getattr(parser, "reasoning_start_str", None), getattr(parser, "reasoning_end_str", None)):
        if marker:
            text = text.replace(marker, "")
    return text.strip() or None
