"""open_scan templates: the shipped set, placeholder checks, verbatim substitution, frozen round trip, and the
rule that reads a rating out of a self-report reply."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import packaged_path
from mirrorscan.instruments.open_scan.probes import DATA
from mirrorscan.instruments.open_scan.templates import (BASE_SYSTEM_PROMPT, BASE_USER_TEMPLATE, FILES, PACKAGED, SelfReport,
                                                        Templates, load_templates, parse_rating)

V1 = packaged_path("packaged:v1", PACKAGED, DATA)


@pytest.fixture
def folder(tmp_path):
    """A copy of the shipped set that a test may break."""
    return shutil.copytree(V1, tmp_path / "set")


def write_report(path, template, scale=(1, 10), rates="how much"):
    path.write_text(json.dumps({"template": template, "scale": list(scale), "rates": rates}), encoding="utf-8")


def test_shipped_set_holds_the_base_texts_and_asks_for_one_integer_on_1_to_10():
    t = load_templates()
    assert t.version == "1" and (V1 / "VERSION").read_text(encoding="utf-8") == "1"
    assert t.system == t.system_prompt == BASE_SYSTEM_PROMPT and t.user == BASE_USER_TEMPLATE
    for name in ("system.txt", "user.txt"):
        assert not (V1 / name).read_bytes().endswith(b"\n")
    for report in (t.cold, t.posthoc):
        assert (report.low, report.high) == (1, 10) and report.rates
        assert "1 to 10" in report.template and "one integer" in report.template and "nothing else" in report.template
    assert "willing" in t.cold.rates and "honest view" in t.posthoc.rates
    assert dict(t.hashes) == {k: hashlib.sha256((V1 / name).read_bytes()).hexdigest() for k, name in FILES.items()}
    hash(t)   # frozen and hashable


def test_rendering_puts_locale_query_and_answer_in_their_slots():
    t = load_templates()
    assert t.render_user("fr-FR", "Où?") == "Locale: fr-FR\n\nOù?"
    cold = t.cold.render("Tea or coffee?")
    assert "<question>\nTea or coffee?\n</question>" in cold and "{" not in cold
    posthoc = t.posthoc.render("Tea or coffee?", answer="Tea.")
    assert "<answer>\nTea.\n</answer>" in posthoc and "Tea or coffee?" in posthoc


@pytest.mark.parametrize("value", ["{x}", "{{", "}}", "{query}", "{answer} {locale}", "{0}", "{query!r:>9}", "{"])
def test_query_and_answer_are_substituted_verbatim(value):
    t = load_templates()
    assert t.render_user(value, value) == f"Locale: {value}\n\n{value}"
    assert f"<question>\n{value}\n</question>" in t.cold.render(value)
    assert f"<answer>\n{value}\n</answer>" in t.posthoc.render(value, answer=value)


def test_literal_braces_in_a_template_are_written_doubled(folder):
    (folder / "system.txt").write_text("Answer in {{JSON}} if asked.", encoding="utf-8")
    write_report(folder / "cold.json", "Rate {{0-10}}: {query} ({locale})")
    t = load_templates(str(folder))
    assert t.system == "Answer in {{JSON}} if asked." and t.system_prompt == "Answer in {JSON} if asked."
    assert t.cold.render("q", locale="de") == "Rate {0-10}: q (de)"


def test_render_requires_answer_and_locale_exactly_where_the_template_has_slots():
    t = load_templates()
    with pytest.raises(ValueError):
        t.posthoc.render("q")
    with pytest.raises(ValueError):
        t.cold.render("q", answer="a")
    report = SelfReport("cold", "{query} in {locale}", 1, 5, "x")
    with pytest.raises(ValueError):
        report.render("q")
    assert report.render("q", locale="en") == "q in en"


@pytest.mark.parametrize("name, text, bad", [
    ("user.txt", "{query}", "lacks the placeholder {locale}"),
    ("user.txt", "{locale} {query} {answer}", "{answer}"),
    ("user.txt", "{locale} {query} {}", "{}"),
    ("user.txt", "{locale} {query:>10}", "{query:>10}"),
    ("user.txt", "{locale!r} {query}", "{locale!r}"),
    ("user.txt", "{locale} {query.upper}", "{query.upper}"),
    ("user.txt", "{locale} {query} {0}", "{0}"),
    ("user.txt", "{locale} {query} {JSON}", "{JSON}"),
    ("user.txt", "{locale} {query} }", "unmatched"),
    ("system.txt", "Be {nice}.", "{nice}"),
])
def test_a_bad_placeholder_names_the_file_and_the_placeholder(folder, name, text, bad):
    (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_templates(str(folder))
    assert info.value.file == str(folder / name) and bad in info.value.problem
    assert info.value.fix == "write literal braces as {{ and }}" or "lacks" in info.value.problem


@pytest.mark.parametrize("name, template, bad", [
    ("cold.json", "Rate it.", "lacks the placeholder {query}"),
    ("cold.json", "{query} {answer}", "{answer}"),
    ("posthoc.json", "{query}", "lacks the placeholder {answer}"),
    ("posthoc.json", "{answer}", "lacks the placeholder {query}"),
    ("posthoc.json", "{query} {answer} {model}", "{model}"),
])
def test_self_report_placeholders(folder, name, template, bad):
    write_report(folder / name, template)
    with pytest.raises(ConfigError) as info:
        load_templates(str(folder))
    assert info.value.file == str(folder / name) and info.value.field.endswith(".template")
    assert bad in info.value.problem


def test_optional_locale_in_self_reports(folder):
    write_report(folder / "posthoc.json", "{locale}: {query} / {answer}")
    assert load_templates(str(folder)).posthoc.render("q", answer="a", locale="ja") == "ja: q / a"


@pytest.mark.parametrize("scale", [[10, 1], [5, 5], [1.0, 10], [True, 10], [1], [1, 2, 3], [-1, 5], "1-10", None])
def test_a_bad_scale_is_refused(folder, scale):
    (folder / "cold.json").write_text(json.dumps({"template": "{query}", "scale": scale, "rates": "x"}),
                                      encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_templates(str(folder))
    assert info.value.field == "cold.json.scale"


def test_json_shape_errors(folder):
    (folder / "cold.json").write_text('{"template": "{query}", "scale": [1, 10], "rates": "x", "scal": 1}',
                                      encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key"):
        load_templates(str(folder))
    (folder / "cold.json").write_text('{"template": "{query}", "scale": [1, 10]}', encoding="utf-8")
    with pytest.raises(ConfigError, match="rates"):
        load_templates(str(folder))
    (folder / "cold.json").write_text('{"template": "{query}",', encoding="utf-8")
    with pytest.raises(ConfigError, match="not JSON"):
        load_templates(str(folder))
    (folder / "cold.json").write_bytes(b"\xef\xbb\xbf" + (V1 / "cold.json").read_bytes())
    with pytest.raises(ConfigError, match="byte-order mark"):
        load_templates(str(folder))


def test_a_text_file_that_is_not_utf8_names_its_line(folder):
    (folder / "user.txt").write_bytes(b"Locale: {locale}\n\n{query} \xff")
    with pytest.raises(ConfigError) as info:
        load_templates(str(folder))
    assert info.value.field == "user.txt:3" and "UTF-8" in info.value.fix


def test_overrides_replace_single_files_and_mark_the_version(tmp_path):
    cold = tmp_path / "my_cold.json"
    write_report(cold, "How curious are you about {query}? 0 to 4.", scale=(0, 4), rates="curiosity")
    t = load_templates("packaged:v1", overrides={"cold": cold})
    assert t.version == "1+cold" and (t.cold.low, t.cold.high, t.cold.rates) == (0, 4, "curiosity")
    assert dict(t.hashes)["cold"] == hashlib.sha256(cold.read_bytes()).hexdigest()
    assert t.posthoc == load_templates().posthoc
    with pytest.raises(ConfigError) as info:
        load_templates(overrides={"colt": str(cold)}, file="/e/config.json")
    assert info.value.file == "/e/config.json" and "did you mean cold" in info.value.fix
    with pytest.raises(ConfigError, match="does not exist"):
        load_templates(overrides={"user": str(tmp_path / "missing.txt")})


def test_a_missing_folder_or_file_is_a_config_error(folder, tmp_path):
    with pytest.raises(ConfigError) as info:
        load_templates(str(tmp_path / "nope"), file="/e/config.json")
    assert info.value.file == "/e/config.json" and info.value.field == "open_scan.templates"
    (folder / "posthoc.json").unlink()
    with pytest.raises(ConfigError, match="does not exist"):
        load_templates(str(folder))


def test_frozen_is_plain_json_and_reads_back_equal():
    t = load_templates()
    frozen = t.frozen()
    assert json.loads(json.dumps(frozen)) == frozen
    assert frozen["cold"]["scale"] == [1, 10] and frozen["system"]["sha256"] == dict(t.hashes)["system"]
    assert Templates.from_frozen(json.loads(json.dumps(frozen))) == t


@pytest.mark.parametrize("reply, rating", [
    ("8", 8), (" 8/10", 8), ("Rating: 7.", 7), ("I'd rate it 10 out of 10", 10), ("**6**", 6), ("1", 1),
    ("10", 10), ("07", 7), ("+3", 3), ("6\n\nBecause…", 6),
    ("7.5", None), ("7,5", None), ("8.0", None), (".5", None), ("-3", None), ("−3", None), ("0", None),
    ("11", None), ("eleven", None), ("", None), (None, None), ("１０", None), ("٧", None), ("no number", None),
    ("9" * 5000, None),
])
def test_parse_rating(reply, rating):
    assert parse_rating(reply, 1, 10) == rating


def test_parse_rating_reads_the_first_number_only():
    assert parse_rating("3, or maybe 9", 1, 10) == 3
    assert parse_rating("7.5, so 8", 1, 10) is None   # the first number is a decimal: not measured
    assert parse_rating("0", 0, 4) == 0 and parse_rating("5", 0, 4) is None
    assert load_templates().cold.rating("Rating: 9") == 9
