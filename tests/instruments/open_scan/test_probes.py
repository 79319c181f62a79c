"""open_scan probes: the CSV is read verbatim, and every way a probe file can be wrong is a one-line ConfigError
naming the file's line."""

from __future__ import annotations

import hashlib
import unicodedata

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import file_sha256, packaged_path
from mirrorscan.instruments.open_scan.probes import (DATA, PACKAGED, Probe, changed_probes, load_probes,
                                                     probes_from_bytes)


def read(data: bytes, **kw) -> tuple[Probe, ...]:
    return probes_from_bytes(data, "/x/probes.csv", **kw)


def refused(data: bytes, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read(data, **kw)
    assert "\n" not in str(info.value) and "fix:" in str(info.value)
    return info.value


def test_probe_hash_and_item_key():
    probe = Probe.of("pref-001", "café?")
    assert probe.query_hash == hashlib.sha256("café?".encode()).hexdigest()
    assert probe.item_key == f"pref-001@{probe.query_hash[:8]}"


def test_demo_set_loads_20_probes_with_a_comma_a_quote_and_non_ascii():
    probes = load_probes("packaged:demo")
    assert [p.query_id for p in probes] == [f"pref-{i:03d}" for i in range(1, 21)]
    assert any("," in p.query for p in probes) and any(not p.query.isascii() for p in probes)
    assert any('"' in p.query for p in probes)
    assert all(p.query == p.query.strip() and "{" not in p.query for p in probes)
    demo = packaged_path("packaged:demo", PACKAGED, DATA)
    raw = demo.read_bytes()
    assert raw.startswith(b"query_id,query\n") and raw.endswith(b"\n") and b"\r" not in raw
    assert file_sha256(demo) == hashlib.sha256(raw).hexdigest()
    assert set(PACKAGED) == {"packaged:demo"}


def test_whitespace_padding_is_kept_verbatim():
    (probe,) = read(b'query_id,query\na,"  padded query \t"\n')
    assert probe.query == "  padded query \t"
    assert probe.query_hash == hashlib.sha256(b"  padded query \t").hexdigest()


def test_crlf_and_lf_inside_a_quoted_query_are_kept_byte_for_byte():
    data = b'query_id,query\r\na,"line one\r\nline two\nline three"\r\nb,plain\r\n'
    a, b = read(data)
    assert a.query == "line one\r\nline two\nline three" and b.query == "plain"
    assert a.query_hash == hashlib.sha256(b"line one\r\nline two\nline three").hexdigest()


def test_nfc_and_nfd_spellings_are_two_queries_kept_as_given():
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    a, b = read(f"query_id,query\na,{nfc}\nb,{nfd}\n".encode())
    assert (a.query, b.query) == (nfc, nfd)
    assert a.query_hash != b.query_hash


def test_other_columns_any_order_and_custom_names():
    data = "note,question,id\nx,Où?,q1\n,Why?,q2\n".encode()
    probes = read(data, id_column="id", query_column="question")
    assert [(p.query_id, p.query) for p in probes] == [("q1", "Où?"), ("q2", "Why?")]


def test_blank_lines_between_rows_are_skipped():
    assert [p.query_id for p in read(b"query_id,query\na,x\n\nb,y\n\n")] == ["a", "b"]


def test_a_byte_order_mark_is_refused():
    error = refused(b"\xef\xbb\xbfquery_id,query\na,x\n")
    assert "byte-order mark" in error.problem and "without" in error.fix


def test_latin1_bytes_name_the_line_and_offset():
    data = "query_id,query\na,ok\nb,caf\xe9\n".encode("latin-1")
    offset = data.index(b"\xe9")
    error = refused(data)
    assert error.field == "probes.csv:3" and f"byte offset {offset}" in error.problem
    assert "UTF-8" in error.fix


@pytest.mark.parametrize("data", [b"", b"\n"])
def test_an_empty_file_has_no_header_row(data):
    error = refused(data)
    assert error.problem == "has no header row" and "None" not in str(error)


def test_a_header_without_rows_is_refused():
    assert "no probes" in refused(b"query_id,query\n").problem


@pytest.mark.parametrize("header, missing", [(b"id,query", "query_id"), (b"query_id,text", "query"),
                                             (b"query_id, query", "query")])
def test_a_missing_column_names_the_columns_present(header, missing):
    error = refused(header + b"\na,x\n")
    assert repr(missing) in error.problem
    for column in header.decode().split(","):
        assert repr(column) in error.problem


def test_a_duplicate_id_names_both_lines():
    error = refused(b'query_id,query\na,x\nb,"two\nlines"\na,z\n')
    assert error.field == "probes.csv:5:query_id" and "'a'" in error.problem
    assert "line 2" in error.problem and "line 5" in error.problem


def test_row_numbers_count_the_lines_of_a_multi_line_query():
    error = refused(b'query_id,query\na,"one\ntwo\nthree"\nb,\n')
    assert error.field == "probes.csv:5:query"


def test_a_row_is_named_by_the_line_it_starts_on():
    assert refused(b'query_id,query\na,x\nb,"\n\n"\n').field == "probes.csv:3:query"
    error = refused(b'query_id,query\na,"one\ntwo"\na,x\n')
    assert "line 2 and on line 4" in error.problem


@pytest.mark.parametrize("query", [b"", b'"   "'])
def test_an_empty_query_names_its_row(query):
    error = refused(b"query_id,query\na,x\nb," + query + b"\n")
    assert error.field == "probes.csv:3:query" and "'b'" in error.problem


@pytest.mark.parametrize("query_id, says", [("a@b", "'@'"), ("a~b", "'~'"), ("a|b", "'|'"), (" a", "' '"),
                                            ("", "empty"), ("x" * 65, "at most 64"), ("a\u200bb", "\\u200b"),
                                            ("q 1", "' '"), ("q:1", "':'"), ("_q", "starts with '_'"),
                                            ("<b>", "'<'")])
def test_a_bad_query_id_is_refused(query_id, says):
    """A query_id is a name the user gives: the one name rule (``grid.names``) applies, as to a pair id, and
    the refusal states it; ``@`` (allowed in names) separates the id from the hash in an item_key."""
    data = "query_id,query\n" + f'"{query_id}",x\n'
    error = refused(data.encode())
    assert error.field == "probes.csv:2:query_id" and says in error.problem
    if query_id not in ("", "a@b", "a~b"):
        assert "a name is 1 to 64 characters" in error.problem, error


def test_an_unquoted_comma_is_refused_rather_than_cutting_the_query():
    error = refused(b"query_id,query\na,Cats, or dogs?\n")
    assert error.field == "probes.csv:2" and "3 fields" in error.problem and "quote" in error.fix


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_probes(tmp_path / "nope.csv")
    (tmp_path / "p.csv").write_bytes(b"query_id,query\na,x\n")
    assert load_probes(tmp_path / "p.csv")[0].query == "x"


def test_changed_probes_lists_ids_whose_text_changed_sorted():
    current = [Probe.of("b", "new text"), Probe.of("a", "also new"), Probe.of("c", "same"), Probe.of("d", "fresh")]
    earlier = {"a": {Probe.of("a", "old").query_hash}, "b": {Probe.of("b", "older").query_hash},
               "c": {Probe.of("c", "other").query_hash, Probe.of("c", "same").query_hash}}
    assert changed_probes(current, earlier) == ["a", "b"]
    assert changed_probes(current, {}) == []
