"""What an activations cell sends: the ``system`` choice, the user suffix and assistant prefix, and a frozen date,
each checked against the prompt string written out by hand for the demo tokenizer (SmolLM2's ChatML template, which
writes a default system turn for a lone user message) and for templates built here that read the date."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest

from mirrorscan.actors.activation_prompt import RenderingError, chat_prompt, rendered_ids

SMOL_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
LLAMA_LIKE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
    "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}{%- set date_string = '01 Jan 1999' %}{%- endif %}"
    "{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}"
    "<|im_start|>system\nToday Date: {{ date_string }}\n\n{{ system }}<|im_end|>\n"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A Llama-3.2-style template: a BOS, then a system block that always holds a date (``date_string`` if given,
else ``strftime_now``), then the turns."""
STRFTIME_ONLY = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "<|im_start|>assistant\nKnowledge as of {{ strftime_now('%Y-%m-%d') }}\n")
"""A template that calls ``strftime_now`` directly and never reads ``date_string``."""


@pytest.fixture(scope="module")
def smol(demo_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(demo_dir))


@pytest.fixture()
def templated(demo_dir):
    """A fresh copy of the demo tokenizer, whose chat template a test replaces."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(demo_dir))


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_none_sends_no_system_block_where_the_template_writes_a_default_one(smol):
    text = "What is 2 + 2?"
    assert SMOL_DEFAULT in chat_prompt(smol, text, system="default")       # what a lone user turn gets
    none = chat_prompt(smol, text, system="none")
    assert none == f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    assert "system" not in none
    assert rendered_ids(smol, text, "chat_user", system="none") == ids(smol, none)
    assert len(rendered_ids(smol, text, "chat_user", system="default")) - len(ids(smol, none)) >= 15


def test_a_given_system_text_suffix_and_prefix_are_sent_verbatim(smol):
    got = chat_prompt(smol, "Hi", system="text", system_prompt="Be brief.", user_suffix="\n\nAnswer:",
                      assistant_prefix="(")
    assert got == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\n\nAnswer:<|im_end|>\n"
                   "<|im_start|>assistant\n(")
    assert rendered_ids(smol, "Hi", "raw", user_suffix=" ok") == smol("Hi ok", add_special_tokens=True)["input_ids"]
    with pytest.raises(RenderingError, match="system_prompt"):
        chat_prompt(smol, "Hi", system="text", system_prompt="")


def test_a_template_that_reads_date_string_gets_the_frozen_date_not_today(templated):
    templated.chat_template = LLAMA_LIKE
    today = date.today().strftime("%d %b %Y")
    frozen = chat_prompt(templated, "Hi", system="default", date_string="26 Jul 2024")
    assert "Today Date: 26 Jul 2024\n" in frozen and (today == "26 Jul 2024" or today not in frozen)
    assert f"Today Date: {today}\n" in chat_prompt(templated, "Hi", system="default", date_string=None)  # the clock
    other = chat_prompt(templated, "Hi", system="default", date_string="03 Feb 2031")
    assert "Today Date: 03 Feb 2031\n" in other


def test_a_template_that_calls_strftime_now_gets_the_frozen_date(templated):
    templated.chat_template = STRFTIME_ONLY
    got = chat_prompt(templated, "Hi", system="default", date_string="26 Jul 2024")
    assert got.endswith("<|im_start|>assistant\nKnowledge as of 2024-07-26")   # jinja drops the final newline
    with pytest.raises(RenderingError, match="date_string"):
        chat_prompt(templated, "Hi", date_string="2024-07-26")


def test_none_cuts_a_dated_system_block_and_keeps_the_templates_bos(templated):
    templated.chat_template = LLAMA_LIKE
    bos = templated.bos_token
    got = chat_prompt(templated, "Hi", system="none", date_string="26 Jul 2024")
    assert got == f"{bos}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_the_engine_records_what_it_sent(tiny_dir):
    from mirrorscan.actors.hf_activations import HFActivations
    from mirrorscan.grid.records import ModelVariant, InvocationContext

    extractor = HFActivations(ModelVariant(label="m", model=str(tiny_dir), dtype="float32"), str(tiny_dir),
                              InvocationContext("inv", "exp", "lens", "-"))
    base = {"probe_id": "m|x", "sample": 0, "seed": 0, "text": "Hi", "rendering": "chat_user", "pooling": "mean",
            "drop_bos": False, "drop_whitespace": False, "max_input_tokens": None, "vector_dtype": "float32",
            "system_prompt": None, "user_suffix": "", "assistant_prefix": "", "date_string": "26 Jul 2024"}
    rows = extractor(pa.Table.from_pylist([{**base, "system": "none"}, {**base, "system": "text",
                                                                         "system_prompt": "Be brief."}]))
    sent = rows.column("input_token_ids").to_pylist()
    assert sent[0] == ids(extractor.tokenizer, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert sent[1] == ids(extractor.tokenizer, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                               "<|im_end|>\n<|im_start|>assistant\n")
    assert rows.column("system_text").to_pylist() == ["", "Be brief."]


def test_the_lens_readme_shows_what_each_manek_preset_sends(smol):
    """The README's example (prompt and token ids per preset) is what the presets render on the demo model."""
    from pathlib import Path

    from mirrorscan.instruments.lens.extraction import PRESETS

    readme = (Path(__file__).parents[2] / "instruments/lens/README.md").read_text(encoding="utf-8")
    shown = {}
    for line in readme.splitlines():
        name, _, rest = line.partition(" ")
        if name in PRESETS:
            rest = rest.strip()
            key = "ids" if rest.startswith("ids ") else "prompt"
            shown.setdefault(name, {})[key] = rest.removeprefix("ids ") if key == "ids" else rest
    assert set(shown) == set(PRESETS)
    for name, options in PRESETS.items():
        system = options["system"]
        kw = ({"system": "text", "system_prompt": system["text"]} if isinstance(system, dict) else {"system": system})
        kw.update(user_suffix=options["user_suffix"], assistant_prefix=options["assistant_prefix"],
                  date_string="26 Jul 2024")
        prompt = chat_prompt(smol, "Is this a test?", **kw)
        assert shown[name]["prompt"] == prompt.replace("\n", "\\n")
        assert shown[name]["ids"] == " ".join(map(str, rendered_ids(smol, "Is this a test?", "chat_user", **kw)))


def test_a_withheld_text_is_read_but_neither_it_nor_its_tokens_are_stored(tiny_dir):
    from mirrorscan.actors.hf_activations import HFActivations
    from mirrorscan.grid.records import ModelVariant, InvocationContext

    extractor = HFActivations(ModelVariant(label="m", model=str(tiny_dir), dtype="float32"), str(tiny_dir),
                              InvocationContext("inv", "exp", "lens", "-"))
    cell = {"probe_id": "m|x", "sample": 0, "seed": 0, "text": "a private item text", "rendering": "raw",
            "pooling": "mean", "drop_bos": False, "drop_whitespace": False, "max_input_tokens": None,
            "vector_dtype": "float32", "system": "none"}
    rows = extractor(pa.Table.from_pylist([{**cell, "text_withheld": True}, {**cell, "text_withheld": False}]))
    hidden, shown = rows.to_pylist()
    assert hidden["user_text"] is None and hidden["input_token_ids"] is None
    assert hidden["prompt_tokens"] == len(shown["input_token_ids"]) and shown["user_text"] == "a private item text"
    assert hidden["layer_vectors"] == shown["layer_vectors"]          # the same measurement, only the text withheld
