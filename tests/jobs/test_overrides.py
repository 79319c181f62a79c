"""Scan validation of template overrides: an effort or chat-template kwarg that leaves an in-process model's
rendered prompt byte-identical is refused before anything is written (only tokenizers are loaded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from mirrorscan.cluster.scan import preflight
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec
from mirrorscan.jobs import scan

PAIRS = "pair_id,word_a,word_b\ncat_dog,cat,dog\n"
EFFORT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if reasoning_effort is defined %}Reasoning effort: "
    "{{ reasoning_effort }}.\n{% endif %}{% endif %}")
"""A chat template that reads ``reasoning_effort`` and no other kwarg."""


def experiment(folder: Path, models: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(PAIRS)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "probe_set": "pairs.csv", "envelopes": ["english_strict"], "max_tokens": 4,
        "models": models}))
    return folder


@pytest.fixture(scope="module")
def effort_model(tiny_dir, tmp_path_factory) -> str:
    """The tiny model with a tokenizer whose template reads reasoning_effort."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("effort") / "tiny-effort"
    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = EFFORT_TEMPLATE
    tok.save_pretrained(str(folder))
    return str(folder)


def test_effort_on_a_template_that_ignores_it_is_refused_in_one_line_and_nothing_is_written(
        tmp_path, tiny_dir, catalog_dsn, capsys):
    exp = experiment(tmp_path / "exps" / "fx", [{"model": str(tiny_dir), "label": "tiny"},
                                                 {"model": str(tiny_dir), "effort": "high"}])
    store = tmp_path / "store"
    assert scan.main([str(exp), "--store", str(store), "--catalog-dsn", catalog_dsn, "--quiet"]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "models[1].effort" in lines[0] and f"changes nothing in {tiny_dir}'s chat template" in lines[0]
    assert "fix: remove it, or use a model whose chat template reads it" in lines[0]
    assert not store.exists()
    with psycopg.connect(catalog_dsn) as conn:   # the catalog was not even set up
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").fetchone()
    assert tables == (0,)


def test_an_ignored_template_kwarg_is_named_by_its_key_on_either_local_backend(tmp_path, tiny_dir, effort_model):
    cases = [({"model": str(tiny_dir), "backend": "vllm", "chat_template_kwargs": {"enable_thinking": False}},
              "models[0].chat_template_kwargs.enable_thinking"),
             ({"model": effort_model, "effort": "low", "chat_template_kwargs": {"enable_thinking": True}},
              "models[0].chat_template_kwargs.enable_thinking"),
             ({"model": effort_model, "backend": "vllm", "effort": "low",
               "extra_body": {"chat_template_kwargs": {"reasoning_effort": "high"}}}, "models[0].effort")]
    for n, (entry, field) in enumerate(cases):
        spec = load_spec(experiment(tmp_path / f"e{n}", [entry]))
        with pytest.raises(ConfigError) as info:
            preflight.check_template_overrides(spec)
        assert info.value.field == field and "changes nothing" in info.value.problem


def test_overrides_the_template_reads_pass_with_one_tokenizer_load_per_source(tmp_path, effort_model, monkeypatch):
    from transformers import AutoTokenizer

    loads = []
    real = AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda source, **kw: loads.append(source) or real(source, **kw))
    spec = load_spec(experiment(tmp_path / "ok", [
        {"model": effort_model, "effort": "low"}, {"model": effort_model, "effort": "high"},
        {"model": effort_model, "label": "kw", "backend": "vllm", "chat_template_kwargs": {"reasoning_effort": "x"}},
        {"model": "gpt-x", "backend": "openai", "chat_template_kwargs": {"enable_thinking": True}},   # not local
        {"model": effort_model, "label": "plain"}]))
    preflight.check_template_overrides(spec)
    assert loads == [effort_model]
