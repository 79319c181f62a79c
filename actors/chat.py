"""Chat-template rendering: the same bytes to every model, with the one tolerated change recorded.

The envelope's system text goes in a system turn. A template that rejects a system role (it raises
while rendering one) gets the system text folded into the first user turn as ``system + "\\n\\n" + user``,
and the caller records ``system_folded=True`` on the row. An empty system text sends no system turn. The
HTTP backends apply the same rule where the server renders the template (``actors.http_common``: a 4xx
refusing the system role → the cell resent with the same folded user text, recorded the same way).

Template kwargs (the in-process engines, hf and vllm, render the prompt themselves): a variant's
``effort`` reaches the template as vLLM's OpenAI server passes ``reasoning_effort`` (``effort_template_kwargs``),
then ``chat_template_kwargs``, then ``extra_body.chat_template_kwargs``, a later one replacing an earlier key
(``template_kwargs``: the one mapping both engines use). A kwarg counts as applied only when it changes the
rendered bytes; ``unapplied_overrides`` names those that do not, so a spec can refuse them before a run.
"""

from __future__ import annotations

from mirrorscan.grid.records import ModelVariant

FOLD_SEPARATOR = "\n\n"
PROBE_SYSTEM = "You are a helpful assistant."
"""System text of the probe conversation rendered to see whether an override changes a template's output."""
PROBE_USER = "Which do you prefer, tea or coffee?"
"""User text of that probe conversation."""


def render_chat(tokenizer, system: str, user: str, template_kwargs: dict | None = None) -> tuple[str, bool]:
    """(prompt text ready for generation, whether the system text was folded into the user turn)."""
    kwargs = dict(template_kwargs or {})
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; use an instruct/chat model or add a template")
    messages = [{"role": "user", "content": user}]
    if system:
        try:
            text = tokenizer.apply_chat_template([{"role": "system", "content": system}, *messages],
                                                 tokenize=False, add_generation_prompt=True, **kwargs)
            return text, False
        except Exception as exc:  # jinja raises TemplateError (or others) for an unsupported role
            if "system" not in str(exc).lower():
                raise
            messages = [{"role": "user", "content": system + FOLD_SEPARATOR + user}]
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs), True
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs), False


def effort_template_kwargs(effort: str | None) -> dict:
    """Template kwargs carrying ``effort``, as vLLM's OpenAI server builds them from ``reasoning_effort``:
    ``reasoning_effort`` = effort and ``enable_thinking`` = (effort != "none"); {} without an effort."""
    if effort is None:
        return {}
    return {"reasoning_effort": effort, "enable_thinking": effort != "none"}


def _template_sources(variant: ModelVariant) -> list[tuple[str, dict]]:
    """(config field, kwargs) of each place a variant sets template kwargs, in the order they are merged."""
    extra = variant.extra_body.get("chat_template_kwargs")
    return [("chat_template_kwargs", dict(variant.chat_template_kwargs)),
            ("extra_body.chat_template_kwargs", dict(extra) if isinstance(extra, dict) else {})]


def template_kwargs(variant: ModelVariant, *, with_effort: bool = True) -> dict:
    """Every template kwarg of ``variant``: the effort's, then chat_template_kwargs, then
    extra_body.chat_template_kwargs (a later key replaces an earlier one)."""
    merged = effort_template_kwargs(variant.effort) if with_effort else {}
    for _, kwargs in _template_sources(variant):
        merged.update(kwargs)
    return merged


def unapplied_overrides(tokenizer, variant: ModelVariant) -> list[str]:
    """Fields of ``variant`` (``effort``, ``chat_template_kwargs.<key>``, ``extra_body.chat_template_kwargs.<key>``)
    whose removal leaves the rendered probe conversation byte-identical: overrides the template ignores (or
    that a later one replaces). A render that fails without the override counts as a change."""
    def render(kwargs: dict) -> str | None:
        try:
            return render_chat(tokenizer, PROBE_SYSTEM, PROBE_USER, kwargs)[0]
        except Exception:   # the template needs this override to render at all: it reads it
            return None

    full = render_chat(tokenizer, PROBE_SYSTEM, PROBE_USER, template_kwargs(variant))[0]
    unapplied = []
    if variant.effort is not None and render(template_kwargs(variant, with_effort=False)) == full:
        unapplied.append("effort")
    sources = _template_sources(variant)
    for n, (field, kwargs) in enumerate(sources):
        for key in kwargs:
            without = effort_template_kwargs(variant.effort)
            for m, (_, other) in enumerate(sources):
                without.update({k: v for k, v in other.items() if not (m == n and k == key)})
            if render(without) == full:
                unapplied.append(f"{field}.{key}")
    return unapplied
