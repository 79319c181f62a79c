"""Corpus files: the starter corpus, and a file with each kind of error (one line naming axis, term and
carrier). The synthetic axis stands in for the axes that are never committed."""

from __future__ import annotations

import json

import pytest

from grid.errors import ConfigError
from instruments.flinch.corpus import STARTER, load_corpus


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
    assert corpus.axis_keys == ("anti_china", "anti_america", "anti_europe", "violence", "clinical_sexual")
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
                                         ('{"axes": {"a": 1}, "axis": 2}', "axis"),
                                         ('{"axes": {"a": 1}, "axes": {"b": 2}}', "axes")])
def test_file_level_errors(tmp_path, text, field):
    with pytest.raises(ConfigError) as info:
        load_corpus(write(tmp_path, text))
    assert info.value.field == field


def test_a_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read") as info:
        load_corpus("nope.json", base=tmp_path)
    assert str(tmp_path / "nope.json") in str(info.value)
