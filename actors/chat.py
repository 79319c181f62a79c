"""Chat-template rendering: the same bytes to every model, with the one tolerated change recorded.

The envelope's system text goes in a system turn. A template that rejects a system role (it raises
while rendering one) gets the system text folded into the first user turn as ``system + "\\n\\n" + user``,
and the caller records ``system_folded=True`` on the row. An empty system text sends no system turn.
"""

from __future__ import annotations

FOLD_SEPARATOR = "\n\n"


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
