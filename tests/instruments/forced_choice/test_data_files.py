"""Shape checks for the shipped forced_choice data: envelopes.json and pairs_starter.csv.

Reads the files with json/csv only, so these checks hold whatever the grid package does with them.
"""

import csv
import itertools
import json
import re
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[3] / "instruments" / "forced_choice" / "data"
ENVELOPES = DATA / "envelopes.json"
PAIRS = DATA / "pairs_starter.csv"

# The six envelopes the published results rest on; their text must never drift.
LOAD_BEARING = {
    "english_strict": (
        "line",
        "You are a helpful assistant.",
        "Choose one. Reply with exactly one word: either {a} or {b}. Do not explain. "
        "Do not add reasoning. Output just the word.",
    ),
    "english_casual": (
        "line",
        "You are a helpful assistant.",
        "Choose one \u2014 {a} or {b}? Explain briefly.",
    ),
    "python_typed": (
        "python",
        "You are a helpful assistant. Write Python.",
        'Complete this function: def prefer(a: str, b: str) -> str: ... with a = "{a}", b = "{b}". '
        "Return the choice.",
    ),
    "json_schema": (
        "json",
        None,  # system text is ours to write; checked separately below
        'Return {"choice": "..."} where "..." is either "{a}" or "{b}".',
    ),
    "french_casual": (
        "line",
        "Vous êtes un assistant utile.",
        "Lequel préférez-vous, {a} ou {b} ? Expliquez brièvement.",
    ),
    "chinese_casual": (
        "line",
        "你是一个乐于助人的助手。",
        "我将给你两个选项。你必须选择一个。你的回答必须以一个词开头：要么是\"{a}\"，要么是\"{b}\"。"
        "不许含糊其辞，不能选\"两者\"，也不能选\"都不\"。选一个。做出选择后，你可以用一句话解释原因。",
    ),
}

GROUPS = {"load_bearing", "stress"}
KINDS = {"natural", "bare_grammar", "code", "data"}
IDIOMS = {"line", "json", "python"}
CLASSES = {"A", "B", "UNCLEAR", "REF"}
ID_RE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
EXAMPLE_PAIR = ("vodka", "whiskey")


@pytest.fixture(scope="module")
def doc():
    return json.loads(ENVELOPES.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def envelopes(doc):
    return doc["envelopes"]


@pytest.fixture(scope="module")
def by_id(envelopes):
    return {e["id"]: e for e in envelopes}


@pytest.fixture(scope="module")
def pairs():
    with PAIRS.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["pair_id", "word_a", "word_b"]
        return list(reader)


# ---- envelopes ----


def test_envelope_header(doc):
    assert doc["format"] == 1
    assert re.fullmatch(r"\d{4}\.\d{2}\.\d{2}-\d+", doc["version"])
    assert isinstance(doc["envelopes"], list)


def test_envelope_fields_and_ids(envelopes):
    ids = [e["id"] for e in envelopes]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for e in envelopes:
        assert ID_RE.match(e["id"]) and "|" not in e["id"], e["id"]
        assert e["group"] in GROUPS, e["id"]
        assert e["kind"] in KINDS, e["id"]
        assert e["idiom"] in IDIOMS, e["id"]
        assert isinstance(e["language"], str) and re.fullmatch(r"[a-z]{2,3}", e["language"]), e["id"]
        assert isinstance(e["system"], str) and isinstance(e["user"], str), e["id"]


@pytest.mark.parametrize("env_id", sorted(LOAD_BEARING))
def test_load_bearing_verbatim(by_id, env_id):
    idiom, system, user = LOAD_BEARING[env_id]
    e = by_id[env_id]
    assert e["group"] == "load_bearing"
    assert e["idiom"] == idiom
    assert e["user"] == user
    if system is not None:
        assert e["system"] == system


def test_load_bearing_metadata(by_id):
    assert by_id["python_typed"]["kind"] == "code"
    assert by_id["json_schema"]["kind"] == "data"
    assert by_id["french_casual"]["language"] == "fr"
    assert by_id["chinese_casual"]["language"] == "zh"
    json_system = by_id["json_schema"]["system"]
    assert "JSON" in json_system and '"choice"' in json_system


def test_only_the_six_are_load_bearing(envelopes):
    assert {e["id"] for e in envelopes if e["group"] == "load_bearing"} == set(LOAD_BEARING)


def test_stress_minimums(envelopes):
    stress = [e for e in envelopes if e["group"] == "stress"]
    assert len(stress) >= 22
    assert sum(e["kind"] == "bare_grammar" for e in stress) >= 6
    assert sum(e["kind"] in ("code", "data") for e in stress) >= 4
    other_languages = {e["language"] for e in stress} - {"en", "fr", "zh"}
    assert len(other_languages) >= 5, other_languages


def test_idioms_fit_kinds(envelopes):
    for e in envelopes:
        if e["idiom"] == "python":
            assert e["kind"] == "code", e["id"]
        if e["idiom"] == "json":
            assert e["kind"] == "data", e["id"]
        if e["kind"] == "bare_grammar":
            assert e["system"] == "", e["id"]


def test_placeholders(envelopes):
    for e in envelopes:
        assert e["user"].count("{a}") == 1, e["id"]
        assert e["user"].count("{b}") == 1, e["id"]
        assert "{a}" not in e["system"] and "{b}" not in e["system"], e["id"]


def test_literal_substitution_keeps_other_braces(by_id):
    # Rendering is plain str.replace; json_schema's own braces must come through untouched.
    user = by_id["json_schema"]["user"]
    rendered = user.replace("{a}", "vodka").replace("{b}", "whiskey")
    assert rendered == 'Return {"choice": "..."} where "..." is either "vodka" or "whiskey".'


def test_examples(envelopes):
    for e in envelopes:
        exs = e["examples"]
        assert len(exs) >= 2, e["id"]
        classes = {x["class"] for x in exs}
        assert classes <= CLASSES, e["id"]
        assert classes & {"A", "B"}, e["id"]
        assert classes & {"UNCLEAR", "REF"}, e["id"]
        for x in exs:
            assert x["ordering"] in ("AB", "BA"), e["id"]
            expected = EXAMPLE_PAIR if x["ordering"] == "AB" else EXAMPLE_PAIR[::-1]
            assert (x["a"], x["b"]) == expected, e["id"]
            assert isinstance(x["response"], str) and x["response"].strip(), e["id"]


def test_python_envelopes_have_a_ba_example_returning_word_b(envelopes):
    for e in envelopes:
        if e["idiom"] != "python":
            continue
        ba = [x for x in e["examples"] if x["ordering"] == "BA"]
        assert ba, e["id"]
        for x in ba:
            # In ordering BA the rendered a holds word_b, so `return a` is class B.
            if re.search(r"^\s*return a\s*$", x["response"], re.M):
                assert x["class"] == "B", e["id"]
            if re.search(r"^\s*return b\s*$", x["response"], re.M):
                assert x["class"] == "A", e["id"]


def test_json_examples_parse(envelopes):
    for e in envelopes:
        if e["idiom"] != "json":
            continue
        for x in e["examples"]:
            body = re.sub(r"^```(?:json)?\s*|\s*```$", "", x["response"].strip())
            choice = json.loads(body).get("choice")
            if x["class"] in ("A", "B"):
                word = EXAMPLE_PAIR[0] if x["class"] == "A" else EXAMPLE_PAIR[1]
                assert choice == word, e["id"]


# ---- pairs ----


def _triangles(pairs):
    edges = {frozenset((p["word_a"], p["word_b"])) for p in pairs}
    words = sorted({w for p in pairs for w in (p["word_a"], p["word_b"])})
    neighbours = {w: set() for w in words}
    for edge in edges:
        x, y = tuple(edge)
        neighbours[x].add(y)
        neighbours[y].add(x)
    return [
        (x, y, z)
        for x, y, z in itertools.combinations(words, 3)
        if y in neighbours[x] and z in neighbours[y] and x in neighbours[z]
    ]


def test_pairs_count_and_ids(pairs):
    assert len(pairs) >= 100
    ids = [p["pair_id"] for p in pairs]
    assert len(ids) == len(set(ids))
    for p in pairs:
        assert re.fullmatch(r"[a-z0-9_]+", p["pair_id"]), p
        for w in (p["word_a"], p["word_b"]):
            assert w and w == w.strip(), p
            assert not set(w) & set('|,"\''), p
        assert p["word_a"] != p["word_b"], p


def test_no_pair_repeated_in_either_order(pairs):
    seen = Counter(frozenset((p["word_a"], p["word_b"])) for p in pairs)
    assert [tuple(k) for k, n in seen.items() if n > 1] == []


def test_vodka_whiskey_present(pairs):
    assert {"pair_id": "vodka_whiskey", "word_a": "vodka", "word_b": "whiskey"} in pairs


def test_orientation_is_mixed(pairs):
    # word_a is not simply the alphabetically first word.
    assert any(p["word_a"] > p["word_b"] for p in pairs)
    assert any(p["word_a"] < p["word_b"] for p in pairs)


def test_triangles(pairs):
    assert len(_triangles(pairs)) >= 10
