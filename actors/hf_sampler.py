"""HF sampler actor: a transformers causal LM answering batches of rendered cells.

Cells are generated in batches with left padding, greedy and sampled together (cells of one batch with
different max_tokens go in one ``generate`` call per value). ``RowSampler`` picks every row's token from
that row's own generator, seeded with the cell's seed, so a sampled cell's text depends only on its seed
and prompt — never on which other cells share its batch. A cell's ``temperature``, ``top_p`` and
``max_tokens`` columns, where set, replace the variant's (``actors.rows.cell_sampling``). Timing is honest about its scope: HF
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

from mirrorscan.actors.chat import render_chat, template_kwargs
from mirrorscan.actors.engine import Engine
from mirrorscan.actors.hf_env import DTYPES, prepare_transformers
from mirrorscan.actors.rows import cell_sampling, generation_overrides, trace_row, where_am_i
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.settings import SAMPLER_VERSION
from mirrorscan.grid.trace_schema import to_trace_table


TOP_K = 256
"""Tokens sorted first when finding a nucleus (``RowSampler.nucleus``); a row needing more is sorted whole."""
GQA_SDPA = "mirrorscan_gqa_sdpa"
"""The attention a model on SDPA is switched to once loaded (``gqa_sdpa``): transformers' SDPA, except for a padded
batch on CPU."""


def gqa_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' ``sdpa_attention_forward``, except where a padding mask meets grouped key/value heads on CPU:
    there the heads go to torch's kernel as they are (``enable_gqa``) instead of being copied out to one per query
    head first. transformers copies them whenever a mask is passed (CUDA's fast kernels take no mask with GQA),
    which on CPU is every step of a padded batch: at batch 16 the copies cost about a tenth of a decode step
    (SmolLM2-135M: 3 key/value heads for 9 query heads), while one cell alone passes no mask and never copied. The
    same kernel does the same sums either way (bitwise equal outputs, ``tests/actors/test_hf_sampler.py``)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or query.device.type != "cpu" or query.shape[1] == key.shape[1]
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                                           scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_gqa_sdpa(model) -> None:
    """Switch ``model`` from transformers' SDPA to ``gqa_sdpa`` (its masks made as SDPA's are); any other attention
    implementation is left as loaded."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    AttentionInterface.register(GQA_SDPA, gqa_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_SDPA, sdpa_mask)
    model.set_attn_implementation(GQA_SDPA)


class RowSampler:
    """Logits processor that chooses every row's next token itself, each row from its own generator.

    HF ``generate`` then runs greedy and takes the one token left. A greedy row (temperature 0) takes the
    argmax. A sampled row keeps the nucleus (``nucleus``) of its probabilities at 1/temperature, and takes the
    exponential race over it — argmax of p / E with E = −log U, one uniform U per vocabulary entry per step
    from ``torch.Generator().manual_seed(cell seed)`` — which is the Gumbel-max trick: an exact draw from the
    nucleus distribution. Its n-th token uses the n-th block of draws of its own generator, whichever rows
    share its batch: a sampled cell's text depends on its seed and prompt only
    (``grid.settings.SAMPLER_VERSION`` 2). A race, not an inverse CDF, because a padded batch moves logits by
    ~1e-7: an inverse CDF over nearly equal probabilities turns that into another token, while an argmax of
    noisy values changes only if two of them lie within 1e-7.

    Only the nucleus can win the race, so where it ends among the ``TOP_K`` most likely tokens (nearly every
    step at top_p < 1) the race is run over those candidates alone: a row still draws its whole block of
    uniforms, but takes the log, the division and the argmax at the candidates only, in token-id order so that
    a tie goes to the lower id as the argmax over the vocabulary gives it (``race``; the same token as the race
    over the whole vocabulary, ``tests/actors/test_hf_sampler.py``). At batch 16 the full-vocabulary race,
    its mask and the greedy argmax were over a tenth of a decode step."""

    def __init__(self, temperatures: list[float], top_ps: list[float], seeds: list[int]):
        import torch

        self.temperatures = torch.tensor(temperatures, dtype=torch.float32)[:, None]
        self.top_ps = torch.tensor(top_ps, dtype=torch.float32)[:, None]
        self.greedy = self.temperatures[:, 0] == 0
        self.seeds = [None if t == 0 else int(s) for t, s in zip(temperatures, seeds)]
        self.generators = None   # made on the first step, on the logits' device
        self.out, self.picked = None, None   # the returned scores, kept from step to step (``__call__``)

    def __call__(self, input_ids, scores):
        import torch

        scores = scores.float()
        if bool(self.greedy.all()):
            chosen = scores.argmax(dim=-1)
        else:
            device, vocab = scores.device, scores.shape[-1]
            if self.generators is None:
                self.generators = [None if s is None else torch.Generator(device=device).manual_seed(s)
                                   for s in self.seeds]
            greedy = self.greedy.to(device)
            probs = torch.softmax(scores / torch.where(greedy[:, None], 1.0, self.temperatures.to(device)), dim=-1)
            draws = [None if g is None else torch.rand(vocab, generator=g, device=device) for g in self.generators]
            chosen = self.race(probs, self.top_ps.to(device), draws)
            if bool(greedy.any()):
                chosen[greedy] = scores[greedy].argmax(dim=-1)
        return self.one_hot(scores, chosen)

    def one_hot(self, scores, chosen):
        """Scores that leave ``generate``'s argmax only ``chosen``: 0 there, −inf elsewhere. One tensor serves
        every step, its last step's zeros put back to −inf, since filling 16 × 49k entries anew each step cost
        more than the race over the nucleus does now; so a caller must be done with one step's scores before
        the next (``generate`` is, when it stores no scores)."""
        import torch

        if self.out is None or self.out.shape != scores.shape or self.out.device != scores.device:
            self.out = torch.full_like(scores, float("-inf"))
        else:
            self.out.scatter_(1, self.picked[:, None], float("-inf"))
        self.picked = chosen
        return self.out.scatter_(1, chosen[:, None], 0.0)

    @staticmethod
    def race(probs, top_ps, draws):
        """Each sampled row's winner of the exponential race over its nucleus: argmax of p / (−log u) over the
        nucleus, u the row's uniforms (``draws``: a tensor of vocabulary length per row, None for a greedy row,
        whose entry is left 0), the lower token id on a tie. Where the nucleus ends among the ``TOP_K`` most
        likely tokens only they are raced, elsewhere the whole vocabulary masked by ``nucleus``."""
        import torch

        chosen = torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
        sampled = [r for r, d in enumerate(draws) if d is not None]
        near = []
        if bool((top_ps[sampled, 0] < 1).any()):
            candidates, p, keep, inside = RowSampler._top_nucleus(probs, top_ps)
            # an empty nucleus (top_p 0, which the spec refuses) is left to the full race, which gives it token 0
            inside &= keep.any(dim=-1)
            near = [r for r in sampled if inside[r]]
        if near:
            u = torch.stack([draws[r][candidates[r]] for r in near])
            values = torch.where(keep[near], p[near] / -torch.log(u), -1.0)   # log is elementwise: the same bits
            chosen[near] = candidates[near].gather(1, values.argmax(dim=-1, keepdim=True))[:, 0]
        far = [r for r in sampled if r not in near]
        if far:
            race = torch.stack([-torch.log(draws[r]) for r in far])
            mask = RowSampler.nucleus(probs[far], top_ps[far])
            chosen[far] = torch.where(mask, probs[far] / race, -1.0).argmax(dim=-1)
        return chosen

    @staticmethod
    def _top_nucleus(probs, top_ps):
        """The ``TOP_K`` most likely tokens of each row in token-id order (ties among them: the lower id
        first), their probabilities, which of them are in the nucleus, and whether the row's nucleus ends among
        them (False where top_p ≥ 1: the nucleus is then the whole vocabulary)."""
        import torch

        k = min(probs.shape[-1], TOP_K)
        candidates = probs.topk(k, dim=-1).indices.sort(dim=-1).values   # id order: stable ties below
        p = probs.gather(1, candidates)
        ordered, order = p.sort(dim=-1, descending=True, stable=True)
        mass = ordered.cumsum(dim=-1)
        inside = (mass[:, -1] >= top_ps[:, 0]) & (top_ps[:, 0] < 1)
        keep = torch.zeros_like(order, dtype=torch.bool).scatter_(1, order, (mass - ordered) < top_ps)
        return candidates, p, keep, inside

    @staticmethod
    def nucleus(probs, top_ps):
        """Mask of each row's nucleus: the most likely tokens (ties: the lower token id first) up to and
        including the one at which their probability reaches the row's top_p; every token where top_p ≥ 1.
        The ``TOP_K`` most likely tokens are sorted first, and a row whose nucleus does not end among them is
        sorted whole (the same order and sums either way: a full sort of 50k tokens per row costs ~5 ms)."""
        import torch

        mask = torch.zeros_like(probs, dtype=torch.bool)
        whole = top_ps[:, 0] >= 1
        mask[whole] = True
        if bool(whole.all()):
            return mask
        candidates, _, keep, inside = RowSampler._top_nucleus(probs, top_ps)
        mask[inside] = torch.zeros_like(mask[inside]).scatter_(1, candidates[inside], keep[inside])
        rest = ~inside & ~whole
        if bool(rest.any()):
            ordered, ids = probs[rest].sort(dim=-1, descending=True, stable=True)
            keep = (ordered.cumsum(dim=-1) - ordered) < top_ps[rest]
            mask[rest] = torch.zeros_like(keep).scatter_(1, ids, keep)
        return mask


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


class HFSampler(Engine):
    """One transformers model held for the whole run; ``__call__`` turns a batch of cells into trace rows."""

    kind, backend = "generate", "hf"
    model_keys = frozenset({"device_map", "chat_template_kwargs"})

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
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
        if variant.device_map is not None:   # placed by accelerate over the actor's GPUs (grid.device_map)
            self.model = AutoModelForCausalLM.from_pretrained(model_source, dtype=dtype, device_map=variant.device_map)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(model_source, dtype=dtype).to(variant.device)
        self.model.eval()
        use_gqa_sdpa(self.model)
        stop = self.model.generation_config.eos_token_id
        stop = stop if isinstance(stop, list) else [stop] if stop is not None else []
        self.stop_ids = {i for i in [*stop, self.tokenizer.eos_token_id] if i is not None}
        self.context = getattr(self.model.config, "max_position_embeddings", None)
        """The model's context window (tokens, prompt and answer together), or None when it does not say."""
        self.where = where_am_i()

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer every cell of ``batch`` (rendered cells) and return one trace row per cell, in order.
        Cells are generated together in groups of equal max_tokens, greedy and sampled alike."""
        cells = batch.to_pylist()
        groups: dict[int, list[dict]] = {}
        for cell in cells:
            groups.setdefault(cell_sampling(self.variant, cell)[2], []).append(cell)
        rows = [row for group in groups.values() for row in self._generate_safely(group)]
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
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        prompts, folded = [], []
        for c in cells:
            text, was_folded = render_chat(self.tokenizer, c["system_text"], c["user_text"], self.template_kwargs)
            prompts.append(text)
            folded.append(was_folded)
        sampling = [cell_sampling(self.variant, c) for c in cells]
        max_tokens = sampling[0][2]   # one value per call (``__call__`` groups by it)
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        lengths = [int(n) for n in enc["attention_mask"].sum(dim=1)]
        too_long = [i for i, n in enumerate(lengths) if self.context and n + max_tokens > self.context]
        if too_long:   # the model cannot take them: an error row each, the rest of the batch goes on
            rows = [self._row(cells[i], prompt_tokens=lengths[i], batch_size=len(cells),
                              error=f"ContextExceeded: a prompt of {lengths[i]} tokens + max_tokens {max_tokens} "
                                    f"exceeds the model's context window of {self.context} tokens")
                    for i in too_long]
            rest = [c for i, c in enumerate(cells) if i not in too_long]
            return rows + (self._generate(rest) if rest else [])
        config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False,
                                  pad_token_id=self.tokenizer.pad_token_id, eos_token_id=sorted(self.stop_ids))
        sampler = RowSampler([t for t, _, _ in sampling], [p for _, p, _ in sampling], [int(c["seed"]) for c in cells])
        prompt_len = enc["input_ids"].shape[1]
        started_at, start = datetime.now(timezone.utc), time.monotonic()
        clock = _StepClock(start, prompt_len, self.stop_ids, len(cells))
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=config, logits_processor=LogitsProcessorList([sampler]),
                                      stopping_criteria=StoppingCriteriaList([clock]))
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
                request_params=_request_params(max_tokens, *sampling[i][:2], int(cell["seed"])),
                decode_tok_s=(n_tokens - 1) / ((total - ttft) / 1000) if n_tokens > 1 and total > ttft else None))
        return rows

    def _row(self, cell: dict, **fields) -> dict:
        """A trace row for ``cell`` carrying the run's identity, the coordinates and ``fields``."""
        return trace_row(self.variant, self.run, self.source, self.where, cell, timing_scope="batch",
                         endpoint=f"engine://hf/{self.source}", generation_overrides=self.overrides, **fields)


def _request_params(max_tokens: int, temperature: float, top_p: float, seed: int) -> str:
    """JSON of what decided one row's tokens: its sampling, its seed (None when greedy), the sampler version."""
    sampled = temperature != 0
    return json.dumps({"max_new_tokens": max_tokens, "do_sample": sampled, "temperature": temperature if sampled else None,
                       "top_p": top_p if sampled else None, "top_k": None, "seed": seed if sampled else None,
                       "sampler_version": SAMPLER_VERSION}, sort_keys=True)
