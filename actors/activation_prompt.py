"""What an ``activations`` cell sends to the model: its text rendered into token ids, every choice explicit.

``chat_user`` renders, through the model's own chat template with the generation prompt::

    [system turn per `system`]  user turn (text + user_suffix)  generation prompt  assistant_prefix

and tokenizes the result without adding special tokens (the template holds its own). ``system`` is ``none``
(no system block at all: for templates that write a default one when given a lone user turn — SmolLM2's and
Qwen2.5's write about 21 tokens of "You are a helpful assistant…" — the block of a system turn is cut out
again, see ``without_system``), ``default`` (the template's choice for a lone user turn) or ``text``
(``system_prompt`` as the system turn). Templates that write a date (Llama 3.x reads ``date_string``, else
calls ``strftime_now``) get ``date_string`` for both, so the tokens do not change with the day a run happens.

``raw`` reads the text (+ ``user_suffix``) alone, with the tokenizer's ``add_special_tokens=True``.

A cell whose ``system`` is null (stored before it was recorded) renders as those rows did: ``default``, no date
frozen, no suffix or prefix.
"""

from __future__ import annotations

from datetime import datetime

from mirrorscan.grid.engine_kinds import DATE_FORMAT


class RenderingError(ValueError):
    """A text that cannot be rendered as asked (the cell's row records it as its error)."""


SENTINEL = "\u2063mirrorscan-system\u2063"
"""A system text no template writes on its own, to find where a system turn's block ends."""


def template_kwargs(date_string: str | None) -> dict:
    """Variables handed to the chat template: ``date_string`` and a ``strftime_now`` that formats that date
    (midnight), both overriding the template's clock; nothing when ``date_string`` is None."""
    if date_string is None:
        return {}
    try:
        when = datetime.strptime(date_string, DATE_FORMAT)
    except ValueError:
        raise RenderingError(f"date_string {date_string!r} is not a date like '26 Jul 2024'") from None
    return {"date_string": date_string, "strftime_now": lambda fmt: when.strftime(fmt)}


def without_system(tokenizer, user: dict, kwargs: dict) -> str:
    """The chat prompt of the lone ``user`` turn with no system block: the template rendered with a sentinel
    system turn, less the rendering of that system turn alone (a BOS the template writes first, as its ``bos_token``
variable, is kept). A
    template that drops or refuses system turns writes none, so its lone user turn is the answer."""
    from jinja2.exceptions import TemplateError

    def render(messages, generation):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kwargs)

    system = {"role": "system", "content": SENTINEL}
    try:
        both, alone = render([system, user], True), render([system], False)
    except TemplateError:          # e.g. Gemma: "System role not supported"
        return render([user], True)
    if SENTINEL not in both:       # the template ignores system turns
        return render([user], True)
    if SENTINEL not in alone or not both.startswith(alone):
        raise RenderingError("the chat template writes its system block differently alone and before a user turn, "
                             "so it cannot be cut out (use system default or text)")
    bos = tokenizer.bos_token or ""
    writes_bos = bool(bos) and "bos_token" in tokenizer.chat_template and alone.startswith(bos)
    return (bos if writes_bos else "") + both[len(alone):]


def chat_prompt(tokenizer, text: str, *, system: str | None = "none", system_prompt: str | None = None,
                user_suffix: str | None = "", assistant_prefix: str | None = "",
                date_string: str | None = None) -> str:
    """The prompt string ``chat_user`` sends for ``text`` (module docstring); raises RenderingError."""
    if not getattr(tokenizer, "chat_template", None):
        raise RenderingError("rendering chat_user needs a chat template, and the tokenizer has none "
                             "(use rendering raw, or an instruct model)")
    kwargs = template_kwargs(date_string)
    user = {"role": "user", "content": text + (user_suffix or "")}
    if system is None or system == "default":
        prompt = tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True, **kwargs)
    elif system == "text":
        if not system_prompt:
            raise RenderingError("system is text but system_prompt is empty")
        prompt = tokenizer.apply_chat_template([{"role": "system", "content": system_prompt}, user], tokenize=False,
                                               add_generation_prompt=True, **kwargs)
    elif system == "none":
        prompt = without_system(tokenizer, user, kwargs)
    else:
        raise RenderingError(f"unknown system {system!r} (use none, default or text)")
    return prompt + (assistant_prefix or "")


def rendered_ids(tokenizer, text: str, rendering: str, **options) -> list[int]:
    """Token ids the model reads for ``text`` in ``rendering`` (``chat_user`` or ``raw``) with the cell's rendering
    ``options`` (system, system_prompt, user_suffix, assistant_prefix, date_string); raises RenderingError."""
    if rendering == "raw":
        return list(tokenizer(text + (options.get("user_suffix") or ""), add_special_tokens=True)["input_ids"])
    if rendering == "chat_user":
        return list(tokenizer(chat_prompt(tokenizer, text, **options), add_special_tokens=False)["input_ids"])
    raise RenderingError(f"unknown rendering {rendering!r}")


RENDERING_OPTIONS = ("system", "system_prompt", "user_suffix", "assistant_prefix", "date_string")
"""A cell's columns that ``rendered_ids`` takes as options."""


def cell_options(cell: dict) -> dict:
    """The rendering options of ``cell``; a cell without ``system`` (stored before it was recorded) renders as
    those rows did: the template's default, nothing frozen, appended or prefixed."""
    if cell.get("system") is None:
        return {"system": "default", "date_string": None}
    return {k: cell.get(k) for k in RENDERING_OPTIONS}
