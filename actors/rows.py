"""The trace row every engine writes: run identity, cell coordinates, sampling parameters, where it ran.

Engines (HF, vLLM, HTTP) differ in how they answer; the row around the answer is the same, so it is
built here once. ``where_am_i`` works with and without Ray (a batch function must run without it).
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone

from mirrorscan.grid.records import ModelVariant, InvocationContext


def where_am_i() -> dict:
    """Ray node id, actor id and host name of the calling process (ids are None outside Ray)."""
    try:
        import ray
    except ImportError:   # the bare batch function on a machine without Ray
        ray = None
    if ray is None or not ray.is_initialized():   # never start Ray from here
        return {"node_id": None, "actor_id": None, "hostname": socket.gethostname()}
    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id(), "hostname": socket.gethostname()}


def generation_overrides(effort: str | None = None, chat_template_kwargs: dict | None = None,
                         extra_body: dict | None = None, engine_args: dict | None = None,
                         batch_invariant: dict | None = None) -> str:
    """JSON of what an engine actually sent beyond sampling: the effort (None unless it reached the model),
    the chat-template kwargs applied (effort's included), the extra_body keys sent, vLLM engine_args, and for a
    batch-invariant vLLM engine what it ran on (``actors.vllm_env.batch_invariance_record``).
    Each engine passes only what it sent; a dropped override is never recorded. Called without arguments:
    nothing was sent (the default of ``trace_row``)."""
    overrides = {"effort": effort, "extra_body": dict(extra_body or {}),
                 "chat_template_kwargs": dict(chat_template_kwargs or {})}
    if engine_args:
        overrides["engine_args"] = engine_args
    if batch_invariant:
        overrides["batch_invariant"] = batch_invariant
    return json.dumps(overrides, sort_keys=True)


SAMPLING_COLUMNS = ("temperature", "top_p", "max_tokens")
"""Optional request columns of a ``generate`` cell that replace the variant's sampling for that cell alone
(null or absent: the variant's value). open_scan samples answers and asks greedy self-reports in one grid."""


def cell_sampling(variant: ModelVariant, cell: dict) -> tuple[float, float, int]:
    """(temperature, top_p, max_tokens) for ``cell``: its own request columns where set, else the variant's."""
    def pick(name, default):
        value = cell.get(name)
        return default if value is None else value

    return (float(pick("temperature", variant.temperature)), float(pick("top_p", variant.top_p)),
            int(pick("max_tokens", variant.max_tokens)))


def trace_row(variant: ModelVariant, run: InvocationContext, source: str, where: dict, cell: dict, **fields) -> dict:
    """A trace row for ``cell`` carrying the run's identity, the coordinates, the cell's sampling parameters
    (``cell_sampling``) and ``fields`` (answer, tokens, timing, error …), which override the defaults. An engine passes
    ``generation_overrides`` (``generation_overrides(...)`` of what it sent); the default records none."""
    temperature, top_p, max_tokens = cell_sampling(variant, cell)
    row = {
        "invocation_id": run.invocation_id, "experiment": run.experiment,
        "instrument": run.instrument, "envelope_version": run.envelope_version,
        "probe_id": cell["probe_id"], "sample": cell["sample"], "attempt": cell.get("attempt", 1),
        "label": variant.label, "model": variant.model, "model_canonical": source,
        "backend": variant.backend,
        "item_key": cell.get("item_key"), "envelope": cell.get("envelope"), "ordering": cell.get("ordering"),
        "system_text": cell.get("system_text"), "user_text": cell.get("user_text"),   # a score engine sets its own
        "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": cell["seed"],
        "generation_overrides": generation_overrides(),
        "created_at": datetime.now(timezone.utc), **where,
    }
    row.update(fields)
    return row
