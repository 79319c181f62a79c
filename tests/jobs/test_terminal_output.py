"""What the verbs print to a terminal. Control characters in stored text never reach it raw: a description, a
model's answer or a probe text holding ESC, OSC, BEL or CR is printed escaped by ``analyze``, ``sql``, ``diff``
and ``matrix`` (and by ``open_scan import``'s summary), while the stored values stay verbatim. A reader that
closes the pipe early (``| head -1``) ends the output quietly, exit 141, no traceback.

Real verbs in-process (their ``main``) over a real local store and the session's embedded PostgreSQL; the
forced_choice world is written as a scan writes it (``store_world``), with a hostile description and answers."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime, timezone

import pytest

import browse_world  # noqa: E402
from mirrorscan.grid.formatting import CONTROL, printable
from mirrorscan.instruments.open_scan import cli as open_scan_cli
from mirrorscan.jobs import analyze, compare, diff, sql
from mirrorscan.results.reader import StoreReader

HOSTILE = "\x1b[31mred\x1b]0;pwned\x07\rover\x9b2J\x7f"
"""A colour, a window title (OSC … BEL), a carriage return, a C1 CSI and DEL: what a terminal acts on."""


def raw_controls(text: str) -> list[str]:
    """The control characters of ``text`` other than the line ends a printed text is made of."""
    return sorted({c for c in CONTROL.findall(text) if c != "\n"})


def test_printable_escapes_every_control_character_and_nothing_else():
    assert printable(HOSTILE) == "\\x1b[31mred\\x1b]0;pwned\\x07\\rover\\x9b2J\\x7f"
    assert printable("a\nb\tc") == "a\\nb\\tc" and printable("a\nb", "\n") == "a\nb"
    assert printable("naïve — 10% · ✓") == "naïve — 10% · ✓"   # printable text, non-ASCII included, untouched
    text = json.dumps({"answer": HOSTILE}, ensure_ascii=False)
    assert raw_controls(printable(text, json_text=True)) == []
    assert json.loads(printable(text, json_text=True)) == {"answer": HOSTILE}   # the JSON means the same


def write_invocation(store, catalog, settings: dict, rows_of) -> str:
    """One complete forced_choice invocation of browse_world's grid with ``settings``, its rows passed through
    ``rows_of``; returns its id."""
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.settings import settings_hash
    from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

    invocation_id = str(uuid.uuid4())
    rows = rows_of(browse_world.cell_rows(invocation_id, datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)))
    schema = trace_schema(resolve("forced_choice").columns)
    for i in range(0, len(rows), 8):
        store.write_part(to_trace_table(rows[i:i + 8], schema), browse_world.EXPERIMENT, invocation_id, "w")
    catalog.create_invocation({
        "invocation_id": invocation_id, "experiment": browse_world.EXPERIMENT, "instrument": "forced_choice",
        "settings": settings, "settings_hash": settings_hash(settings), "status": "complete",
        "store_uri": store.uri, "counts": {"cells": len(rows) - 1}})
    return invocation_id


@pytest.fixture
def world(tmp_path, catalog_dsn):
    """Two invocations of one forced_choice experiment whose config's description holds ``HOSTILE``; every
    answer of the first does too, and one of its envelopes is named by it (a stored coordinate)."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.spec import load_spec

    exp = tmp_path / "experiments" / browse_world.EXPERIMENT
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\n" + "".join(f"{a}_{b},{a},{b}\n"
                                                                       for a, b in browse_world.PAIRS))
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "description": f"colours {HOSTILE} here",
        "models": [{"model": f"/models/org/{x}", "label": x} for x in browse_world.LABELS],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": browse_world.ENVELOPES}, "max_tokens": 24,
        "seed": 7, "batch_size": 4}))
    store = open_store(str(tmp_path / "store"))
    settings = load_spec(exp).settings().to_json()
    settings["execution"]["store"] = store.uri

    def hostile(rows):
        for r in rows:
            if r["response"] is not None:
                r["response"] = f"I choose {r['word_a']}. {HOSTILE}"
            if r["envelope"] == "json_schema" and r["label"] == "beta":
                r["envelope"] = f"json{HOSTILE}"
        return rows

    with Catalog(catalog_dsn) as catalog:
        a = write_invocation(store, catalog, settings, hostile)
        b = write_invocation(store, catalog, settings, lambda rows: rows)
    return {"a": a, "b": b, "store": store.uri, "dsn": catalog_dsn, "root": tmp_path}


def test_analyze_prints_a_hostile_description_escaped(world, capsys):
    assert analyze.main([world["a"], "--no-write", "--catalog-dsn", world["dsn"]]) == 0
    out = capsys.readouterr().out
    assert printable(HOSTILE) in out and raw_controls(out) == []
    assert analyze.main([world["a"], "--no-write", "--json", "--catalog-dsn", world["dsn"]]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    json.loads(out)   # still JSON


def test_sql_prints_hostile_answers_escaped_in_every_format_and_stores_them_verbatim(world, capsys):
    args = [f"SELECT response FROM traces WHERE invocation_id = '{world['a']}' AND response IS NOT NULL LIMIT 3",
            "--store", world["store"], "--catalog-dsn", world["dsn"]]
    for fmt in ("table", "json", "csv"):   # csv is escaped on a terminal only; capsys is none, so: verbatim
        assert sql.main([*args, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert (raw_controls(out) == []) == (fmt != "csv"), fmt
        if fmt == "json":
            assert all(json.loads(line)["response"].endswith(HOSTILE) for line in out.splitlines())
    assert sql.main([f"SELECT 'a{HOSTILE}' AS \"col{HOSTILE}\"", "--store", world["store"],
                     "--catalog-dsn", world["dsn"]]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and out.count(printable(HOSTILE)) == 2   # a column name is escaped too


def test_sql_csv_on_a_terminal_is_escaped(world, capsys, monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        buffer = io.BytesIO()

        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    assert sql.main([f"SELECT 'a{HOSTILE}' AS x", "--format", "csv", "--store", world["store"],
                     "--catalog-dsn", world["dsn"]]) == 0
    assert screen.getvalue().splitlines() == ['"x"', f'"a{printable(HOSTILE)}"'] and Terminal.buffer.getvalue() == b""


def test_diff_and_compare_print_hostile_stored_values_escaped(world, capsys):
    assert diff.main([world["a"], world["b"], "--catalog-dsn", world["dsn"]]) == 0
    out = capsys.readouterr().out
    assert printable(f"json{HOSTILE}") in out and raw_controls(out) == []
    assert diff.main([world["a"], world["b"], "--json", "--catalog-dsn", world["dsn"]]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and f"json{HOSTILE}" in json.loads(out)["by"]["envelope"]
    for extra in ([], ["--json"]):
        assert compare.main([world["a"], world["b"], "--label-a", "beta", "--label-b", "beta", *extra,
                             "--catalog-dsn", world["dsn"]]) == 0
        assert raw_controls(capsys.readouterr().out) == []


def test_matrix_and_import_print_a_hostile_file_name_and_probe_text_escaped(tmp_path, catalog_dsn, capsys):
    path = tmp_path / f"answers{HOSTILE.replace(chr(0x9b), '')}.jsonl"
    path.write_text(json.dumps({"model": "org/Tiny", "query_id": "q1", "sample": 0, "query": f"Tea{HOSTILE}?",
                                "answer": f"Tea.{HOSTILE}", "cold": "7", "posthoc": "4"}) + "\n")
    store = str(tmp_path / "store")
    common = ["--store", store, "--catalog-dsn", catalog_dsn]
    assert open_scan_cli.main(["import", str(path), "--experiment", "imp", *common], "mirrorscan open_scan",
                              StoreReader()) == 0
    out = capsys.readouterr().out
    assert "answers\\x1b" in out and raw_controls(out) == []
    assert open_scan_cli.main(["matrix", "imp", *common], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    assert "answers\\x1b" in out and raw_controls(out) == []


def closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``mirrorscan ARGV`` with its stdout a pipe whose reader has already gone (as ``| head -1`` leaves it
    once head has its line): every write meets EPIPE."""
    proc = subprocess.Popen([sys.executable, "-m", "mirrorscan", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, "", err)


def test_a_closed_pipe_ends_sql_diff_and_matrix_quietly(world, tmp_path, catalog_dsn, capsys):
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"model": "org/Tiny", "query_id": "q1", "sample": 0, "query": "Tea?",
                                "answer": "Tea.", "cold": "7", "posthoc": "4"}) + "\n")
    assert open_scan_cli.main(["import", str(path), "--experiment", "imp", "--store", world["store"], "--catalog-dsn",
                               world["dsn"]], "mirrorscan open_scan", StoreReader()) == 0
    capsys.readouterr()
    common = ["--store", world["store"], "--catalog-dsn", world["dsn"]]
    for argv in (["sql", "SELECT range FROM range(100000)", "--format", "csv", *common],
                 ["sql", "SELECT range FROM range(100)", *common],
                 ["diff", world["a"], world["b"], "--catalog-dsn", world["dsn"]],
                 ["matrix", "imp", *common]):
        done = closed_pipe_run(argv)
        assert done.returncode == 141 and "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, \
            (argv, done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("verb", ["sql", "analyze", "diff", "compare", "matrix", "scan", "models"])
def test_no_help_text_holds_a_raw_control_character(verb, capsys):
    """A docstring that shows an escape (``\\x1b``) must write the backslash twice, or --help prints the ESC."""
    from mirrorscan.jobs import cli

    with pytest.raises(SystemExit):
        cli.main([verb, "--help"])
    out = capsys.readouterr().out
    assert "usage:" in out and raw_controls(out) == []
