"""open_scan's JSONL format: a canonical file reads back to itself byte for byte, any other spelling of the same
data reads to the same records, and every malformed line is a ConfigError naming the line and the key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import datetime, timedelta, timezone

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.open_scan.jsonl import KEYS, Record, format_line, format_records, read_records

HASH = hashlib.sha256(b"Tea or coffee?").hexdigest()
WHEN = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=timezone.utc)
HARD_ANSWERS = ["Café, naïve, 日本語 — and an emoji 🫖👩🏽‍🔬",
                'He said "yes" \\ then \\n (a literal backslash-n)',
                "line one\nline two\r\nline three\ttabbed", "U+2028 here:\u2028and U+2029:\u2029end", "\x00\x1f\x7f",
                "", "{query} {{ }}", "\x85 next-line and \ufeff zero-width no-break space"]


def record(**kw) -> Record:
    values = dict(run_label="small-model", model="org/Model-1B", query_id="pref-020", query_hash=HASH, sample=0,
                  seed=2**63 - 1, locale="en-GB", answer="Tea.", cold_raw="8", cold_rating=8, posthoc_raw="9/10",
                  posthoc_rating=9, created_at=WHEN)
    values.update(kw)
    return Record(**values)


def records() -> list[Record]:
    out = [record(sample=i, answer=a) for i, a in enumerate(HARD_ANSWERS)]
    out.append(record(sample=99, answer=None, cold_raw=None, cold_rating=None, posthoc_raw="seven",
                      posthoc_rating=None, locale="ja-JP", created_at=datetime(2024, 1, 1, tzinfo=timezone.utc)))
    return out


def line(**changes) -> str:
    obj = json.loads(format_line(record()))
    obj.update(changes)
    return json.dumps(obj, ensure_ascii=False)


def refused(data: bytes | str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_records(data.encode() if isinstance(data, str) else data, "/d/export.jsonl")
    assert "\n" not in str(info.value) and info.value.file == "/d/export.jsonl"
    return info.value


def test_keys_are_the_record_fields_in_order():
    assert tuple(f.name for f in dataclasses.fields(Record)) == KEYS
    assert list(json.loads(format_line(record()))) == list(KEYS)


def test_canonical_line_spelling():
    text = format_line(record(answer="café 🫖"))
    assert text.endswith("}\n") and text.count("\n") == 1
    assert text.startswith('{"run_label": "small-model", "model": "org/Model-1B", "query_id": "pref-020", ')
    assert '"answer": "café 🫖"' in text and '"created_at": "2025-03-04T05:06:07.890123+00:00"}' in text
    assert '"seed": 9223372036854775807' in text


def test_canonical_file_round_trips_byte_for_byte():
    data = format_records(records())
    assert data.endswith(b"\n") and data.count(b"\n") == len(records())
    assert "\u2028".encode() in data and "🫖".encode() in data   # raw, not escaped
    assert read_records(data, "x.jsonl") == records()
    assert format_records(read_records(data, "x.jsonl")) == data


def test_whole_seconds_keep_their_microseconds_in_canonical_form():
    text = format_line(record(created_at=datetime(2024, 1, 1, tzinfo=timezone.utc)))
    assert '"created_at": "2024-01-01T00:00:00.000000+00:00"' in text


def test_another_spelling_reads_to_equal_records_and_formats_canonically():
    canonical = format_records(records())
    lines = []
    for r in records():
        obj = json.loads(format_line(r))
        obj["created_at"] = obj["created_at"].replace("+00:00", "Z")
        reordered = dict(reversed(list(obj.items())))
        lines.append(json.dumps(reordered, ensure_ascii=True, separators=(",", ":")))
    other = "\r\n".join(lines).encode("ascii")   # CRLF line ends, no final newline
    assert other != canonical and b"\\ud83e\\uded6" in other
    assert read_records(other, "x.jsonl") == records()
    assert format_records(read_records(other, "x.jsonl")) == canonical


def test_other_offsets_are_converted_to_utc():
    (r,) = read_records((line(created_at="2025-03-04T07:06:07.890123+02:00") + "\n").encode(), "x.jsonl")
    assert r.created_at == WHEN and r.created_at.tzinfo is timezone.utc
    assert format_line(r) == format_line(record())
    shifted = record(created_at=WHEN.astimezone(timezone(timedelta(hours=-5))))
    assert shifted.created_at.tzinfo is timezone.utc and shifted == record()


def test_an_empty_file_holds_no_records():
    assert read_records(b"", "x.jsonl") == [] and format_records([]) == b""


def test_a_naive_record_time_is_refused():
    with pytest.raises(ValueError):
        record(created_at=datetime(2025, 1, 1))


@pytest.mark.parametrize("changes, key, says", [
    ({"sample": "0"}, "sample", "str"), ({"sample": 1.0}, "sample", "float"), ({"seed": True}, "seed", "bool"),
    ({"sample": -1}, "sample", "-1"), ({"cold_rating": 7.5}, "cold_rating", "float"),
    ({"posthoc_rating": False}, "posthoc_rating", "bool"), ({"answer": 5}, "answer", "int"),
    ({"model": None}, "model", "null"), ({"locale": ["en"]}, "locale", "list"), ({"answer": {}}, "answer", "object"),
    ({"query_hash": HASH.upper()}, "query_hash", "hex"), ({"query_hash": HASH[:63]}, "query_hash", "hex"),
    ({"query_id": "a@b"}, "query_id", "'@'"), ({"query_id": "a~b"}, "query_id", "'~'"),
    ({"run_label": "a|b"}, "run_label", "'|'"),
    ({"created_at": "2025-03-04T05:06:07"}, "created_at", "no UTC offset"),
    ({"created_at": "yesterday"}, "created_at", "not an ISO 8601"), ({"created_at": 1741064767}, "created_at", "int"),
])
def test_a_wrong_value_names_the_line_and_the_key(changes, key, says):
    error = refused(line() + "\n" + line(**changes) + "\n")
    assert error.field == f"export.jsonl:2:{key}" and says in error.problem
    if key == "created_at" and "offset" in says:
        assert "+00:00" in error.fix


def test_nulls_are_accepted_where_the_format_allows_them():
    (r,) = read_records((line(answer=None, cold_raw=None, cold_rating=None, posthoc_raw=None,
                              posthoc_rating=None) + "\n").encode(), "x.jsonl")
    assert (r.answer, r.cold_raw, r.cold_rating, r.posthoc_raw, r.posthoc_rating) == (None,) * 5


def test_missing_unknown_and_duplicate_keys():
    obj = json.loads(line())
    del obj["seed"]
    assert refused(json.dumps(obj) + "\n").field == "export.jsonl:1:seed"
    error = refused(line()[:-1] + ', "sead": 1}\n')
    assert error.field == "export.jsonl:1:sead" and "seed" in error.fix
    error = refused(line()[:-1] + ', "sample": 3}\n')
    assert error.field == "export.jsonl:1:sample" and "twice" in error.problem


@pytest.mark.parametrize("bad", ["not json", "[1, 2]", '"text"', "{", "null"])
def test_a_line_that_is_not_a_json_object(bad):
    error = refused(line() + "\n" + bad + "\n")
    assert error.field == "export.jsonl:2"


@pytest.mark.parametrize("data, at", [("\n", 1), ("{l}\n\n{l}\n", 2), ("{l}\n   \n", 2), ("{l}\n\n", 2)])
def test_blank_lines_are_refused_except_after_the_final_newline(data, at):
    error = refused(data.replace("{l}", line()))
    assert error.field == f"export.jsonl:{at}" and "blank" in error.problem


def test_a_byte_order_mark_and_non_utf8_bytes_are_refused():
    assert "byte-order mark" in refused(b"\xef\xbb\xbf" + (line() + "\n").encode()).problem
    data = (line() + "\n").encode() + line(answer="caf\udce9").encode("utf-8", "surrogateescape") + b"\n"
    offset = data.index(b"\xe9")
    error = refused(data)
    assert error.field == "export.jsonl:2" and f"byte offset {offset}" in error.problem


def test_a_lone_surrogate_escape_is_refused():
    error = refused(line().replace('"Tea."', '"Tea \\ud800"') + "\n")
    assert error.field == "export.jsonl:1:answer" and "surrogate" in error.problem
