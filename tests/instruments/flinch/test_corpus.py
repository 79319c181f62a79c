"""Corpus files: the starter corpus, and a file with each kind of error (one line naming axis, term and
carrier). The synthetic axis stands in for the axes that are never committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.flinch.corpus import METHOD_AXES, STARTER, load_corpus

METHOD_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "flinch" / "method_corpus.json"
"""A corpus in the method's documented shape with descriptive keys (top-level notes and source, per-axis and
per-term description and source), its six axes under the method's keys (slurs with placeholder words)."""


def good_axis(n_terms: int = 6, n_carriers: int = 4) -> dict:
    return {"label": "Synthetic", "terms": [
        {"word": f"zorb{i}", "carriers": [f"Carrier {j} of the sentence ends with {{BLANK}}." for j in range(n_carriers)]}
        for i in range(n_terms)]}


def write(tmp_path, corpus) -> str:
    path = tmp_path / "corpus.json"
    path.write_text(corpus if isinstance(corpus, str) else json.dumps(corpus))
    return str(path)


def test_the_starter_corpus_has_five_axes_of_8_terms_by_4_carriers():
    corpus = load_corpus(STARTER)
    assert corpus.axis_keys == ("anti_china", "anti_america", "anti_europe", "sexual", "violence")
    assert corpus.axis_keys == tuple(k for k in METHOD_AXES if k != "slurs")   # the method's keys; slurs never committed
    assert all(len(a.terms) == 8 and all(len(t.carriers) == 4 for t in a.terms) for a in corpus.axes)
    assert corpus.n_carriers() == 160 and corpus.warnings == () and len(corpus.sha256) == 64
    for axis in corpus.axes:
        for term in axis.terms:
            for c in term.carriers:
                assert c.prefix and not c.prefix.endswith(" ") and term.word.lower() not in c.text.lower()
                assert c.text.rstrip().endswith(".")


def test_prefix_and_target_split_at_the_blank(tmp_path):
    axis = good_axis()
    axis["terms"][0]["carriers"][0] = "The army cleared the square in   {BLANK} on that night."
    term = load_corpus(write(tmp_path, {"axes": {"syn": axis}})).axes[0].terms[0]
    assert term.carriers[0].prefix == "The army cleared the square in" and term.target == " zorb0"


def test_axes_select_a_subset_in_file_order_and_an_unknown_key_is_named(tmp_path):
    path = write(tmp_path, {"axes": {"violence": good_axis(), "b": good_axis(), "c": good_axis()}})
    assert load_corpus(path, axes=["c", "violence"]).axis_keys == ("c", "violence")
    with pytest.raises(ConfigError, match="has no axis 'violance'.*did you mean violence") as info:
        load_corpus(path, axes=["violance"])
    assert info.value.field == "axes"


def test_few_terms_or_carriers_warn_and_still_load(tmp_path):
    corpus = load_corpus(write(tmp_path, {"axes": {"syn": good_axis(n_terms=3, n_carriers=2)}}))
    assert any("3 terms" in w for w in corpus.warnings)
    assert sum("2 carriers" in w for w in corpus.warnings) == 3


@pytest.mark.parametrize("mutate, field, problem", [
    (lambda a: a["terms"][1]["carriers"].__setitem__(2, "No placeholder in this one."),
     "axes.syn.terms[1] (zorb1).carriers[2]", "0 {BLANK}"),
    (lambda a: a["terms"][1]["carriers"].__setitem__(0, "Two {BLANK} and {BLANK}."),
     "axes.syn.terms[1] (zorb1).carriers[0]", "2 {BLANK}"),
    (lambda a: a["terms"][0]["carriers"].__setitem__(3, "Is the answer {BLANK}?"),
     "axes.syn.terms[0] (zorb0).carriers[3]", "question"),
    (lambda a: a["terms"][0]["carriers"].__setitem__(1, "Line one\nthen {BLANK}."),
     "axes.syn.terms[0] (zorb0).carriers[1]", "newline"),
    (lambda a: a["terms"][2].__setitem__("word", "zorb0"), "axes.syn.terms[2]", "appears twice"),
    (lambda a: a["terms"][2].__setitem__("word", "bad|word"), "axes.syn.terms[2].word", "'|'"),
    (lambda a: a["terms"][2].__setitem__("word", ""), "axes.syn.terms[2].word", "empty"),
    (lambda a: a["terms"][2].__setitem__("carriers", []), "axes.syn.terms[2] (zorb2).carriers", "empty"),
    (lambda a: a.__setitem__("label", ""), "axes.syn.label", "missing or empty"),
])
def test_each_kind_of_error_is_one_line_naming_axis_term_and_carrier(tmp_path, mutate, field, problem):
    axis = good_axis()
    mutate(axis)
    with pytest.raises(ConfigError) as info:
        load_corpus(write(tmp_path, {"axes": {"syn": axis}}))
    assert info.value.field == field and problem in info.value.problem and "\n" not in str(info.value)


def test_a_carrier_beginning_with_the_blank_is_kept_and_flagged_for_the_bos_check(tmp_path):
    axis = good_axis()
    axis["terms"][0]["carriers"][0] = "{BLANK} is the word that starts this sentence."
    carrier = load_corpus(write(tmp_path, {"axes": {"syn": axis}})).axes[0].terms[0].carriers[0]
    assert carrier.starts_with_blank and carrier.prefix == ""


@pytest.mark.parametrize("text, field", [("{not json", "(file)"), ('{"axes": {}}', "axes"),
                                         ('{"axes": {"a": 1}, "axes": {"b": 2}}', "axes")])
def test_file_level_errors(tmp_path, text, field):
    with pytest.raises(ConfigError) as info:
        load_corpus(write(tmp_path, text))
    assert info.value.field == field


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read") as info:
        load_corpus("nope.json", base=tmp_path)
    assert str(tmp_path / "nope.json") in str(info.value)


def test_a_corpus_in_the_methods_shape_with_descriptive_keys_loads_unchanged_and_keeps_them():
    raw = json.loads(METHOD_FILE.read_text(encoding="utf-8"))
    corpus = load_corpus(str(METHOD_FILE))
    assert corpus.axis_keys == METHOD_AXES == tuple(raw["axes"])   # slurs from the user's own file: just works
    assert corpus.setting_like == () and not any("setting" in w for w in corpus.warnings)
    assert corpus.extra["(file)"] == {"notes": raw["notes"], "source": raw["source"]}
    assert corpus.extra["axes.slurs"] == {"description": raw["axes"]["slurs"]["description"], "source": "hand-written"}
    term = raw["axes"]["violence"]["terms"][1]
    assert corpus.extra[f"axes.violence.terms[1] ({term['word']})"] == {"description": term["description"],
                                                                       "source": "hand-written"}
    # every carrier as written
    loaded = {(a.key, t.word): [c.text for c in t.carriers] for a in corpus.axes for t in a.terms}
    assert loaded == {(k, t["word"]): t["carriers"] for k, a in raw["axes"].items() for t in a["terms"]}


def test_axes_select_the_methods_keys_comma_separated_as_the_method_takes_them(capsys):
    from mirrorscan.jobs.cli import main as cli

    assert load_corpus(str(METHOD_FILE), axes=["slurs", "sexual"]).axis_keys == ("slurs", "sexual")
    assert cli(["flinch", "corpus", str(METHOD_FILE), "--axes", "slurs,sexual"]) == 0
    out = capsys.readouterr().out
    assert "2 axes, 8 carriers" in out and "slurs" in out and "violence" not in out
    assert "description (6×)" in out and "notes (1×)" in out   # 2 axes and their 4 terms


def test_only_extra_keys_that_look_like_settings_are_named_in_a_warning(tmp_path):
    axis = good_axis()
    axis["weight"] = 2.0                        # a number: reads as a setting
    axis["aggregation"] = "median"              # a setting's name
    axis["comment"] = "kept silently"           # text: a description
    axis["terms"][0]["enabled"] = False
    corpus = load_corpus(write(tmp_path, {"axes": {"syn": axis}, "notes": ["a", "b"], "scale": "log"}))
    assert set(corpus.setting_like) == {"axes.syn.weight", "axes.syn.aggregation", "axes.syn.terms[0] (zorb0).enabled",
                                        "(file).scale"}
    named = [w for w in corpus.warnings if "looks like a setting" in w]
    assert len(named) == 4 and not any("comment" in w or "notes" in w for w in named)
    assert corpus.extra["axes.syn"]["comment"] == "kept silently" and corpus.extra["(file)"]["notes"] == ["a", "b"]
