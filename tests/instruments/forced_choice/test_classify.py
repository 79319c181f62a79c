"""Forced-choice classification: every shipped envelope example, the issue's four answers, edge cases."""

import hashlib
import json
from importlib import resources

import pyarrow as pa
import pytest

from mirrorscan.instruments.forced_choice.classify import (CLASSIFIER_VERSION, CLASSES, REFUSAL_LEXICON_VERSION, classify, classify_table,
                               find_word, leading_sentence, load_refusals, normalize, with_classes)
from mirrorscan.instruments.forced_choice.envelopes import load_envelopes
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.trace_schema import to_trace_table, trace_schema
from mirrorscan.instruments.forced_choice import COLUMNS

ENVELOPES = load_envelopes()
EXAMPLES = [(env, i, ex) for env in ENVELOPES.envelopes.values() for i, ex in enumerate(env.examples)]
# refusals.json as this classifier version was written against it; a change must bump the versions.
REFUSALS_SHA256 = "1e74625082a3f4ed6034ffbcad6ad5cda12d09bd10d1a5894481a321c4a8b8c5"


def pair_words(example: dict) -> tuple[str, str]:
    """(word_a, word_b) of an example: AB renders word_a into {a}, BA renders word_b there."""
    return (example["a"], example["b"]) if example["ordering"] == "AB" else (example["b"], example["a"])


def test_every_envelope_has_examples():
    assert len(ENVELOPES.envelopes) == 31
    assert all(len(env.examples) >= 2 for env in ENVELOPES.envelopes.values())


@pytest.mark.parametrize("env,i,example", EXAMPLES, ids=[f"{e.id}-{i}" for e, i, _ in EXAMPLES])
def test_envelope_example(env, i, example):
    word_a, word_b = pair_words(example)
    got = classify(example["response"], word_a, word_b, example["ordering"], env.idiom, env.language)
    assert got == example["class"], example["response"]


ISSUE_ANSWERS = [
    ("english_strict", "AB", "whiskey"),
    ("english_strict", "BA", "whiskey"),
    ("chinese_casual", "AB", "Whiskey。我选它是因为风味层次更丰富——橡木桶陈酿带来的香草、焦糖和烟熏味让每一口都有更多可品味的东西。"),
    ("chinese_casual", "BA", "Whiskey。我选它是因为它风味层次更丰富——橡木桶陈酿带来的香草、焦糖和烟熏味让每一口都更有故事。"),
]


@pytest.mark.parametrize("env_id,ordering,response", ISSUE_ANSWERS)
def test_issue_answers_are_whiskey(env_id, ordering, response):
    env = ENVELOPES.envelopes[env_id]
    assert classify(response, "vodka", "whiskey", ordering, env.idiom, env.language) == "B"


def line(response, word_a="vodka", word_b="whiskey", ordering="AB", language="en"):
    return classify(response, word_a, word_b, ordering, "line", language)


@pytest.mark.parametrize("response,expected", [
    ("**Whiskey**", "B"),
    ('"vodka".', "A"),
    ("“Whiskey”", "B"),
    ("「whiskey」です。", "B"),
    ("＂ＶＯＤＫＡ＂！", "A"),                       # full-width letters and punctuation
    ("# Whiskey\n\nVodka is fine too.", "B"),
    ("- whiskey", "B"),
    ("1. Whiskey", "B"),
    ("> Vodka.", "A"),
    ("```\nwhiskey\n```", "B"),
    ("\n\n  whiskey  \n", "B"),
    ("Vodka or whiskey — tough call.", "UNCLEAR"),   # both words → UNCLEAR
    ("Vodka. Whiskey is for another day.", "A"),      # only the first sentence counts
    ("Whiskey! Vodka is boring.", "B"),
    ("Whiskey？我觉得vodka也不错。", "B"),
    ("Neither.", "UNCLEAR"),
    ("", "UNCLEAR"),
    (None, "UNCLEAR"),
    ("   \n ** \n", "UNCLEAR"),
    ("Whiskeys are great.", "UNCLEAR"),               # whole-word: a plural is not the word
    ("I'd say whiskey's the one.", "B"),              # possessive apostrophe ends the word
    ("<think>vodka? no</think>\nWhiskey", "B"),       # reasoning block skipped
    ("<think>still thinking about vodka", "UNCLEAR"),
])
def test_line_idiom(response, expected):
    assert line(response) == expected


@pytest.mark.parametrize("response,expected", [
    ("I don't have personal preferences, so I can't pick.", "REF"),
    ("I don’t have personal preferences.", "REF"),            # curly apostrophe
    ("As an AI, I can't choose between vodka and whiskey.", "REF"),  # refusal before both words
    ("Whiskey, though as an AI I don't drink.", "B"),          # a pick before a disclaimer is a pick
    ("As an AI I don't drink, but whiskey.", "REF"),           # a disclaimer before the pick is REF
    ("It depends on the occasion.", "UNCLEAR"),                # hedges are not refusals
    ("I can't decide, both are great.", "UNCLEAR"),
    ("Aid workers like whiskey.", "B"),                        # "ai" inside a word is no refusal
])
def test_refusals_en(response, expected):
    assert line(response) == expected


@pytest.mark.parametrize("language,response", [
    ("fr", "En tant qu'IA, je ne peux pas choisir."),
    ("de", "Als KI habe ich keine Vorlieben."),
    ("es", "No tengo preferencias personales."),
    ("pt", "Não tenho preferências pessoais."),
    ("ru", "У меня нет личных предпочтений."),
    ("zh", "作为一个AI，我没有个人喜好。"),
    ("ja", "AIとして、個人的な好みはありません。"),
    ("ko", "저는 AI로서 개인적인 취향이 없습니다."),
    ("ar", "ليس لدي تفضيلات شخصية."),
    ("hi", "मेरी कोई व्यक्तिगत पसंद नहीं है।"),
])
def test_refusals_per_language(language, response):
    assert line(response, language=language) == "REF"
    assert line(response, language="en") == "UNCLEAR"       # each language's lexicon is its own
    assert line("As an AI, I have no preferences.", language=language) == "REF"   # English always applies


def test_language_subtag_selects_lexicon():
    assert line("作为一个AI，我没有个人喜好。", language="zh-Hans") == "REF"


@pytest.mark.parametrize("response,word_a,word_b,expected", [
    ("catfish", "cat", "catfish", "B"),
    ("Cat.", "cat", "catfish", "A"),
    ("I'd pick the catfish over the cat.", "cat", "catfish", "UNCLEAR"),
    ("Ice cream, obviously.", "cream", "ice cream", "B"),
    ("ice  cream", "cream", "ice cream", "B"),               # any whitespace inside a multi-word item
    ("Cream.", "cream", "ice cream", "A"),
    ("New York", "York", "New York", "B"),
    ("Node.js, for sure", "Node.js", "Deno", "A"),           # a stop inside a word is no sentence end
    ("Dr. Pepper. Coke is too sweet.", "Dr. Pepper", "Coke", "A"),
    ("Whiskey。我选它", "vodka", "Whiskey", "B"),
    ("我选whiskey", "vodka", "whiskey", "B"),                 # Latin word inside Chinese
    ("whiskeyです", "vodka", "whiskey", "B"),
    ("whiskey를 더 좋아합니다.", "vodka", "whiskey", "B"),
    ("我选猫。", "狗", "猫", "B"),                              # Han words match without spaces
    ("熊猫。", "熊猫", "猫", "A"),                              # ...and the longer word wins the overlap
    ("고양이를 좋아해요.", "개", "고양이", "B"),                  # Hangul particle after the word
    ("소개하자면 고양이요.", "개", "고양이", "B"),                # 개 inside 소개 is not 개
    ("Café!", "cafe", "café", "B"),
    ("CAFÉ", "thé", "café", "B"),
    ("vodka2", "vodka", "whiskey", "UNCLEAR"),
])
def test_whole_word_matching(response, word_a, word_b, expected):
    assert line(response, word_a, word_b) == expected


def test_find_word_spans():
    assert find_word(normalize("Cat, catfish, CAT!"), "cat") == [(0, 3), (14, 17)]


def test_leading_sentence():
    assert leading_sentence(normalize("## Answer\n\n**Whiskey**. Vodka later."), "vodka", "whiskey") == "answer"
    assert leading_sentence(normalize("```\n1. Whiskey — neat. More.\n```")) == "whiskey — neat."
    assert leading_sentence(normalize("Version 3.5 wins. Next.")) == "version 3.5 wins."


def json_(response, ordering="AB"):
    return classify(response, "vodka", "whiskey", ordering, "json")


@pytest.mark.parametrize("response,expected", [
    ('{"choice": "whiskey"}', "B"),
    ('```json\n{"choice": "Vodka"}\n```', "A"),
    ('Sure! Here is my answer:\n{"choice": "whiskey"}', "B"),     # leading prose tolerated
    ('{"options": ["vodka", "whiskey"], "choice": "vodka"}', "A"),  # only the choice value counts
    ('{"answer": {"choice": "whiskey"}}', "B"),
    ('{“choice”: “whiskey”}', "B"),                               # curly quotes straightened
    ('｛"choice"："whiskey"｝', "B"),                               # full-width braces and colon
    ('{"choice": "whiskey"', "UNCLEAR"),                           # truncated: no commitment
    ("{'choice': 'vodka'}", "A"),                                  # Python-style quotes
    ('{"choice": null}', "UNCLEAR"),
    ('{"choice": 1}', "UNCLEAR"),
    ('{"choice": ["vodka"]}', "UNCLEAR"),
    ('{"choice": "vodka or whiskey"}', "UNCLEAR"),
    ('{"choice": "I don\'t have personal preferences"}', "REF"),
    ("whiskey", "B"),                                              # no choice key: line rule
    ("I don't have personal preferences.", "REF"),
    ('{"pick": "whiskey"}', "B"),                                  # no choice key: line rule reads it
    ('{"options": ["vodka", "whiskey"]}', "UNCLEAR"),              # ...and both words are UNCLEAR
])
def test_json_idiom(response, expected):
    assert json_(response) == expected


def py(response, ordering):
    return classify(response, "vodka", "whiskey", ordering, "python")


FUNC = "```python\ndef prefer(a: str, b: str) -> str:\n    {body}\n```"


@pytest.mark.parametrize("body,ordering,expected", [
    ("return a", "AB", "A"),
    ("return b", "AB", "B"),
    ("return a", "BA", "B"),
    ("return b", "BA", "A"),                               # in BA, b holds word_a
    ('return "whiskey"', "AB", "B"),
    ('return "whiskey"', "BA", "B"),                       # a literal is the word, whatever the order
    ("return 'Vodka'", "BA", "A"),
    ("return random.choice([a, b])", "AB", "UNCLEAR"),
    ("return a.upper()", "AB", "UNCLEAR"),
    ("return None", "AB", "UNCLEAR"),
    ("choice = b\n    return choice", "AB", "B"),          # a local assigned once is followed
    ("a, b = b, a\n    return a", "AB", "UNCLEAR"),        # a reassigned: unknown
    ("if len(a) > len(b):\n        return a\n    return b", "AB", "UNCLEAR"),   # returns disagree
    ("if a:\n        return b\n    return b", "BA", "A"),                      # returns agree
    ('return "I have no preference"', "AB", "REF"),
])
def test_python_idiom(body, ordering, expected):
    assert py(FUNC.format(body=body), ordering) == expected


def test_python_idiom_fallbacks():
    # first function with a return wins over later code; module-level prints are ignored
    code = "```python\ndef prefer(a, b):\n    return b\n\nprint(prefer('vodka', 'whiskey'))  # whiskey\n```"
    assert py(code, "AB") == "B"
    # truncated code that does not parse: the return lines are read
    assert py("```python\ndef prefer(a, b):\n    return a\n\nprint(prefer(a=\"vod", "BA") == "B"
    assert py("def prefer(a, b) -> str\n    return 'whiskey'", "AB") == "B"
    # no return at all: the line rule reads the text
    assert py("Whiskey.", "AB") == "B"
    assert py("I don't have personal preferences, so I won't pick.", "AB") == "REF"
    assert py("```python\ndef prefer(a, b):\n    ...\n```", "AB") == "UNCLEAR"
    # unquoted bare return outside a function
    assert py("return b", "BA") == "A"


def test_bad_arguments():
    with pytest.raises(ValueError, match="ordering"):
        classify("x", "a", "b", "XY", "line")
    with pytest.raises(ValueError, match="idiom"):
        classify("x", "a", "b", "AB", "yaml")


def test_response_is_never_changed():
    text = "**Whiskey**。我选它"
    before = str(text)
    classify(text, "vodka", "whiskey", "AB", "line", "zh")
    assert text == before


def trace_rows():
    base = dict(word_a="vodka", word_b="whiskey", label="m", invocation_id="i", probe_id="p", sample=0)
    return [
        dict(base, envelope="english_strict", ordering="AB", response="whiskey"),
        dict(base, envelope="json_schema", ordering="BA", response='{"choice": "vodka"}'),
        dict(base, envelope="python_untyped", ordering="BA", response="```python\ndef f(a, b):\n    return b\n```"),
        dict(base, envelope="chinese_casual", ordering="AB", response="作为一个AI，我没有个人喜好。"),
        dict(base, envelope="english_strict", ordering="AB", response=None, error="TimeoutError: engine"),
        dict(base, envelope="english_strict", ordering="BA", response=None),
    ]


def test_classify_table_and_with_classes():
    table = to_trace_table(trace_rows(), trace_schema(COLUMNS))
    assert classify_table(table, ENVELOPES.envelopes).to_pylist() == ["B", "A", "A", "REF", None, "UNCLEAR"]
    assert classify_table(table, ENVELOPES).to_pylist()[0] == "B"    # an EnvelopeSet works too
    out = with_classes(table, ENVELOPES)
    assert out.column("class").to_pylist() == ["B", "A", "A", "REF", None, "UNCLEAR"]
    assert out.column("classifier_version").to_pylist() == [CLASSIFIER_VERSION] * 4 + [None, CLASSIFIER_VERSION]
    assert out.schema == table.schema                                   # same columns, same docs
    assert table.column("class").null_count == table.num_rows           # input untouched
    assert out.column("response").equals(table.column("response"))
    bare = pa.table({k: table.column(k) for k in ("response", "word_a", "word_b", "ordering", "envelope", "error")})
    assert with_classes(bare, ENVELOPES).column_names[-2:] == ["class", "classifier_version"]


def test_unknown_envelope_is_a_config_error():
    table = to_trace_table([dict(trace_rows()[0], envelope="nope")], trace_schema(COLUMNS))
    with pytest.raises(ConfigError, match="nope"):
        classify_table(table, ENVELOPES)


def test_refusal_lexicon_is_versioned_and_pinned():
    raw = resources.files("mirrorscan.instruments.forced_choice").joinpath("data/refusals.json").read_bytes()
    doc = json.loads(raw)
    assert doc["version"] == REFUSAL_LEXICON_VERSION
    assert set(doc["languages"]) >= {"en", "fr", "zh", "de", "es", "pt", "ja", "ru", "ar", "hi", "ko"}
    assert all(load_refusals()[lang] for lang in doc["languages"])
    assert hashlib.sha256(raw).hexdigest() == REFUSALS_SHA256, (
        "refusals.json changed: bump its version, REFUSAL_LEXICON_VERSION and CLASSIFIER_VERSION, "
        "then pin the new hash here")
    assert CLASSES == ("A", "B", "UNCLEAR", "REF")


def test_refusal_lexicon_never_fires_on_a_pick():
    picks = [ex for _, _, ex in EXAMPLES if ex["class"] in ("A", "B")]
    lexicon = load_refusals()
    for ex in picks:
        text = normalize(ex["response"])
        assert not any(p.search(text) for patterns in lexicon.values() for p in patterns), ex["response"]


@pytest.mark.parametrize("response,expected", [
    # truncated string: the value never closes, so neither word is a commitment
    ('{"choice": "tea', "UNCLEAR"),
    ('```json\n{"choice": "te', "UNCLEAR"),
    # unclosed object: the value closed, the object did not (the answer was cut or went on as code)
    ('{"choice": "tea" if', "UNCLEAR"),
    ('{"choice": "tea",', "UNCLEAR"),
    ('{"choice": "coffee"\n', "UNCLEAR"),
    ("{'choice': 'tea'", "UNCLEAR"),
    # trailing junk inside the object: it closes but does not parse
    ('{"choice": "tea" if x else "coffee"}', "UNCLEAR"),
    ('{"choice": "tea",,}', "UNCLEAR"),
    # a choice key outside any object
    ('"choice": "tea"', "UNCLEAR"),
    # valid objects: read, with prose or junk around a complete object tolerated
    ('{"choice": "tea"}', "A"),
    ('{"choice": "coffee"} and that is final', "B"),
    ('{"choice": "coffee"}}', "B"),
    ("{'choice': 'coffee'}", "B"),
    ('{"reason": "a {brace} in a string", "choice": "tea"}', "A"),
    # nested: the first choice key, depth first, of a complete outer object
    ('{"answer": {"choice": "coffee", "why": {"choice": "tea"}}}', "B"),
    ('[{"choice": "tea"}]', "A"),
    ('{"answer": {"choice": "coffee"}', "UNCLEAR"),                 # inner closed, outer cut
    # an unfinished object before a complete one: the first choice is unfinished
    ('{"choice": "tea" if} {"choice": "coffee"}', "UNCLEAR"),
    # an object without a choice key, then a complete one with it
    ('{"note": 1} {"choice": "coffee"}', "B"),
])
def test_json_idiom_reads_only_finished_objects(response, expected):
    assert classify(response, "tea", "coffee", "AB", "json") == expected
