"""The one rule for user-given names (grid/names.py), NUL in config text, and how errors quote file content
(grid/errors.py ``excerpt``/``file_error``)."""

from __future__ import annotations

import json
import re

import pytest

from mirrorscan.grid.errors import ConfigError, excerpt, file_error
from mirrorscan.grid.names import MAX_NAME_CHARS, NAME_RULE, check_experiment_name, check_name, name_problem
from mirrorscan.grid.secrets import reject_nul
from mirrorscan.grid.spec import load_spec

TRAVERSALS = ["../../../x", "..", ".", "a/b", "a\\b", "/etc", "x..y", "../x"]
MARKUP = ["<script>", "<em>m</em>", "a b", "a\"b", "a'b", "x;rm", "$(id)", "a|b", "a\x00b", "a\nb", "é", "-rf",
          "_tap", "x" * (MAX_NAME_CHARS + 1), "", "a:b", "a%2e"]
GOOD = ["smollm2-135m-instruct", "tiny@hot", "qwen2.5-0.5b-instruct@high", "english_strict", "v1", "A", "e01",
        "m+lora", "x" * MAX_NAME_CHARS]


@pytest.mark.parametrize("value", TRAVERSALS + MARKUP)
def test_bad_names_are_refused_naming_the_field_and_the_rule(value):
    with pytest.raises(ConfigError) as info:
        check_name(value, "exp/config.json", "models[0].label")
    err = info.value
    assert err.field == "models[0].label" and err.file == "exp/config.json"
    assert NAME_RULE in err.problem
    assert "\n" not in str(err) and "\x00" not in str(err)   # one line, control characters escaped


@pytest.mark.parametrize("value", GOOD)
def test_conservative_names_pass(value):
    assert check_name(value, "f", "x") == value and name_problem(value) is None


@pytest.mark.parametrize("value", ["_tap", "gstudy", "../x", "<b>"])
def test_experiment_names_also_refuse_underscore_and_reserved(value):
    with pytest.raises(ConfigError) as info:
        check_experiment_name(value, "", "--experiment")
    assert info.value.field == "--experiment"


def write_config(folder, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\nvw,vodka,whiskey\n")
    config = {"instrument": "forced_choice", "models": [{"model": "packaged:smollm2-135m-instruct", "label": "m"}],
              "forced_choice": {"probe_set": "pairs.csv"}, **extra}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_load_spec_refuses_a_markup_label_and_a_markup_folder(tmp_path):
    exp = write_config(tmp_path / "ok", models=[{"model": "packaged:smollm2-135m-instruct", "label": "<script>"}])
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == "models[0].label" and NAME_RULE in info.value.problem
    exp = write_config(tmp_path / "<script>")
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == "(experiment folder name)"


def test_load_spec_refuses_a_default_label_that_is_no_name(tmp_path):
    """A model folder with a space in its name gives a default label that breaks the rule: the error says so."""
    exp = write_config(tmp_path / "ok", models=[{"model": "/models/My Model"}])
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == "models[0].label"


@pytest.mark.parametrize("where", ["description", "models[0].model", "forced_choice.probe_set"])
def test_nul_in_any_config_string_is_a_validation_error(tmp_path, where):
    exp = write_config(tmp_path / "ok")
    config = json.loads((exp / "config.json").read_text())
    if where == "description":
        config["description"] = "before\u0000after"
    elif where == "models[0].model":
        config["models"][0]["model"] = "packaged:smollm2\u0000"
    else:
        config["forced_choice"]["probe_set"] = "pairs.csv\u0000"
    (exp / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == where and "NUL" in info.value.problem


def test_reject_nul_names_keys_and_nested_values():
    with pytest.raises(ConfigError) as info:
        reject_nul("f", {"a": [{"b": "x\x00"}]})
    assert info.value.field == "a[0].b"
    with pytest.raises(ConfigError) as info:
        reject_nul("f", {"a": {"k\x00": 1}})
    assert info.value.field == "a"
    reject_nul("f", {"a": ["fine", 1, None, {"b": "\u2028"}]})


FAKE_KEY = "sk-" + "FAKEabcdefghijklmnop1234"


def test_excerpt_is_short_escaped_marked_and_never_quotes_a_secret():
    line = "root:x:0:0:root:/root:/bin/bash<script>\x1b[31m"
    quoted = excerpt(line)
    assert quoted == "'root:x:0:0:root:/root:/b'… (first 24 characters)"
    assert "/bin/bash" not in quoted and "\x1b" not in quoted
    assert excerpt(f"root:x:0:0 {FAKE_KEY}:/root") == "(a value shaped like a secret, not quoted)"
    assert excerpt("a\nb") == "'a\\nb'" and excerpt(["id", "<q>"]) == "'id', '<q>'"
    err = file_error("/etc/passwd", "passwd:1", "has no column 'query_id'", "fix", offending=f"x {FAKE_KEY}")
    assert FAKE_KEY not in str(err) and "FAKEabcd" not in str(err) and str(err).startswith("/etc/passwd: passwd:1:")


def test_error_messages_never_hold_more_than_an_excerpt():
    """The name rule quotes at most an excerpt of what it refuses."""
    long = "<" + "a" * 300 + ">"
    problem = name_problem(long)
    assert problem is not None and len(re.sub(r"\s+", " ", problem)) < 80


@pytest.mark.parametrize("bad", ["../x", "<script>"])
def test_file_given_names_follow_the_rule(tmp_path, bad):
    """Ids an item file gives (a forced_choice envelope, a flinch axis) are names too."""
    from mirrorscan.instruments.flinch.corpus import load_corpus
    from mirrorscan.instruments.forced_choice.envelopes import load_envelopes

    envelopes = tmp_path / "envelopes.json"
    envelopes.write_text(json.dumps({"version": "t", "envelopes": [
        {"id": bad, "system": "", "user": "{a} or {b}?"}]}))
    with pytest.raises(ConfigError) as info:
        load_envelopes(envelopes)
    assert info.value.field == "envelopes[0].id" and NAME_RULE in info.value.problem
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"version": "t", "axes": {bad: {"label": "A", "terms": [
        {"word": "w", "carriers": ["a {w} b"]}]}}}))
    with pytest.raises(ConfigError) as info:
        load_corpus(str(corpus))
    assert NAME_RULE in info.value.problem


@pytest.mark.parametrize("bad", ["../../x", "<b>"])
def test_a_pair_id_follows_the_name_rule(tmp_path, bad):
    exp = write_config(tmp_path / "ok")
    (exp / "pairs.csv").write_text(f"pair_id,word_a,word_b\n{bad},cat,dog\n")
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == "line 2:pair_id" and NAME_RULE in info.value.problem
