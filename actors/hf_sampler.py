"""HF sampler actor: a transformers causal LM answering batches of rendered cells.

Greedy cells (temperature 0) are generated in batches with left padding. Sampled cells are generated
one at a time after seeding torch with the cell's own seed, so a sampled cell's text depends only on
its seed — never on which other cells share its batch. Timing is honest about its scope: HF
``generate`` runs a batch in lock step, so ``timing_scope='batch'``: ``prefill_ms`` is batch start to
the batch's first generated token, ``ttft_ms`` equals it, and ``total_ms`` is batch start to the step
at which this row produced its stop token (monotonic clock). Per-request streaming timing comes with
the vLLM engine.

Overrides: ``effort`` and ``chat_template_kwargs`` reach the chat template through the mapping the vLLM
engine uses (``actors.chat.template_kwargs``) and ``generation_overrides`` records the kwargs applied.
``extra_body`` has no request to go into here: the spec refuses it for backend "hf", and so does this class.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pyarrow as pa

from actors.chat import render_chat, template_kwargs
from actors.hf_env import DTYPES, prepare_transformers
from actors.rows import generation_overrides, trace_row, where_am_i
from grid.errors import ConfigError
from grid.records import ModelVariant, RunContext
from grid.trace_schema import to_trace_table


class _StepClock:
    """Stopping criterion that never stops anything: it records when each row emitted a stop token."""

    def __init__(self, start: float, prompt_len: int, stop_ids: set[int], batch: int):
        self.start, self.prompt_len, self.stop_ids = start, prompt_len, stop_ids
        self.first_token: float | None = None
        self.row_end: list[float | None] = [None] * batch

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        now = time.monotonic()
        if self.first_token is None:
            self.first_token = now
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if self.row_end[row] is None and token in self.stop_ids:
                self.row_end[row] = now
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HFSampler:
    """One transformers model held for the whole run; ``__call__`` turns a batch of cells into trace rows."""

    def __init__(self, variant: ModelVariant, model_source: str, run: RunContext):
        """Load the model of ``variant``, whose rows belong to ``run``."""
        if variant.extra_body:
            raise ConfigError("", f"models[{variant.label}].extra_body", "the hf backend sends no request, so "
                              "extra_body would be dropped", "remove it; pass template options in chat_template_kwargs, "
                              'or use backend "vllm" for sampling parameters')
        prepare_transformers()   # before transformers loads its generation module
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.variant, self.run, self.source = variant, run, model_source
        self.template_kwargs = template_kwargs(variant)
        """Chat-template kwargs every prompt is rendered with (effort's, then chat_template_kwargs)."""
        self.overrides = generation_overrides(effort=variant.effort, chat_template_kwargs=self.template_kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model_source, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = DTYPES.get(variant.dtype, "auto")
        self.model = AutoModelForCausalLM.from_pretrained(model_source, dtype=dtype).to(variant.device)
        self.model.eval()
        stop = self.model.generation_config.eos_token_id
        stop = stop if isinstance(stop, list) else [stop] if stop is not None else []
        self.stop_ids = {i for i in [*stop, self.tokenizer.eos_token_id] if i is not None}
        self.context = getattr(self.model.config, "max_position_embeddings", None)
        """The model's context window (tokens, prompt and answer together), or None when it does not say."""
        self.where = where_am_i()

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer every cell of ``batch`` (rendered cells) and return one trace row per cell."""
        cells = batch.to_pylist()
        greedy = [c for c in cells if self.variant.temperature == 0]
        sampled = [c for c in cells if self.variant.temperature != 0]
        rows = self._generate_safely(greedy) if greedy else []
        for cell in sampled:
            rows += self._generate_safely([cell])
        order = {(c["probe_id"], c["sample"]): i for i, c in enumerate(cells)}
        rows.sort(key=lambda r: order[(r["probe_id"], r["sample"])])
        return to_trace_table(rows)

    def _generate_safely(self, cells: list[dict]) -> list[dict]:
        """Generate; if the batch fails, retry cell by cell so that only the failing cells become error rows."""
        try:
            return self._generate(cells)
        except Exception as exc:
            if len(cells) == 1:
                return [self._row(cells[0], error=f"{type(exc).__name__}: {exc}")]
            rows = []
            for cell in cells:
                rows += self._generate_safely([cell])
            return rows

    def _generate(self, cells: list[dict]) -> list[dict]:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        v = self.variant
        prompts, folded = [], []
        for c in cells:
            text, was_folded = render_chat(self.tokenizer, c["system_text"], c["user_text"], self.template_kwargs)
            prompts.append(text)
            folded.append(was_folded)
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        lengths = [int(n) for n in enc["attention_mask"].sum(dim=1)]
        too_long = [i for i, n in enumerate(lengths) if self.context and n + v.max_tokens > self.context]
        if too_long:   # the model cannot take them: an error row each, the rest of the batch goes on
            rows = [self._row(cells[i], prompt_tokens=lengths[i], batch_size=len(cells),
                              error=f"ContextExceeded: a prompt of {lengths[i]} tokens + max_tokens {v.max_tokens} "
                                    f"exceeds the model's context window of {self.context} tokens")
                    for i in too_long]
            rest = [c for i, c in enumerate(cells) if i not in too_long]
            return rows + (self._generate(rest) if rest else [])
        sampling = v.temperature != 0
        config = GenerationConfig(
            max_new_tokens=int(v.max_tokens), do_sample=sampling,
            temperature=float(v.temperature) if sampling else None,
            top_p=float(v.top_p) if sampling else None, top_k=0 if sampling else None,
            pad_token_id=self.tokenizer.pad_token_id, eos_token_id=sorted(self.stop_ids))
        prompt_len = enc["input_ids"].shape[1]
        params = json.dumps({"max_new_tokens": config.max_new_tokens, "do_sample": sampling,
                             "temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                             "seed": int(cells[0]["seed"]) if sampling else None}, sort_keys=True)
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        clock = _StepClock(start, prompt_len, self.stop_ids, len(cells))
        if sampling:
            torch.manual_seed(int(cells[0]["seed"]))
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=config, stopping_criteria=StoppingCriteriaList([clock]))
        end = time.monotonic()
        first = clock.first_token or end
        rows = []
        for i, cell in enumerate(cells):
            generated = out[i, prompt_len:].tolist()
            stop_at = next((k for k, t in enumerate(generated) if t in self.stop_ids), None)
            n_tokens = stop_at + 1 if stop_at is not None else len(generated)
            text = self.tokenizer.decode(generated[: stop_at if stop_at is not None else len(generated)],
                                         skip_special_tokens=True)
            row_end = clock.row_end[i] or end
            ttft, total = (first - start) * 1000, (row_end - start) * 1000
            rows.append(self._row(
                cell, response=text, system_folded=folded[i],
                prompt_tokens=int(enc["attention_mask"][i].sum()), completion_tokens=n_tokens,
                finish_reason="stop" if stop_at is not None else "length", batch_size=len(cells),
                prefill_ms=ttft, ttft_ms=ttft, ttft_answer_ms=ttft, total_ms=total, started_at=started_at,
                request_params=params,
                decode_tok_s=(n_tokens - 1) / ((total - ttft) / 1000) if n_tokens > 1 and total > ttft else None))
        return rows

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell`` carrying the run's identity, the coordinates and ``fields``."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, timing_scope="batch",
                         endpoint=f"engine://hf/{self.source}", generation_overrides=self.overrides, **fields)
