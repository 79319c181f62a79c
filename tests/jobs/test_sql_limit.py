"""``mirrorscan sql`` prints a bounded table: at most ``--limit`` rows (10,000 by default for the table format),
with a note on stderr saying how many were left out and how to get them all; csv and json print every row
unless ``--limit`` is given. A refused statement is named as it was written (``INSTALL``, not DuckDB's
``LOAD`` type). Real DuckDB and the session's embedded PostgreSQL."""

from __future__ import annotations

import pytest

from mirrorscan.jobs import sql


@pytest.fixture
def args(tmp_path, catalog_dsn) -> list[str]:
    """The flags naming an empty store and an empty catalog."""
    return ["--store", str(tmp_path), "--catalog-dsn", catalog_dsn]


def test_the_table_stops_at_the_default_limit_with_a_note(args, capsys):
    assert sql.main(["SELECT range AS n FROM range(10003)", *args]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2 + sql.TABLE_ROWS + 1 and lines[-1] == f"(10000 of 10003 rows)"
    assert lines[2].strip() == "0" and lines[-2].strip() == "9999"
    assert err == ("note: printed the first 10,000 of 10,003 rows (3 left out); --limit 0 prints every row, and "
                   "--format csv or json with > FILE writes them all\n")


def test_limit_chooses_the_rows_and_zero_prints_them_all(args, capsys):
    assert sql.main(["SELECT range AS n FROM range(25)", "--limit", "10", *args]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "(10 of 25 rows)" and "15 left out" in err
    for fmt, extra in (("table", 3), ("csv", 1), ("json", 0)):
        assert sql.main(["SELECT range AS n FROM range(10003)", "--limit", "0", "--format", fmt, *args]) == 0
        out, err = capsys.readouterr()
        assert len(out.splitlines()) == 10003 + extra and err == "", fmt


def test_csv_and_json_print_every_row_unless_limited(args, capsys):
    for fmt, extra in (("csv", 1), ("json", 0)):
        assert sql.main(["SELECT range AS n FROM range(10003)", "--format", fmt, *args]) == 0
        out, err = capsys.readouterr()
        assert len(out.splitlines()) == 10003 + extra and err == "", fmt
        assert sql.main(["SELECT range AS n FROM range(10003)", "--format", fmt, "--limit", "5", *args]) == 0
        out, err = capsys.readouterr()
        assert len(out.splitlines()) == 5 + extra and "10,003" in err, fmt


def test_a_negative_limit_is_refused_in_one_line(args, capsys):
    assert sql.main(["SELECT 1", "--limit", "-1", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --limit: is -1 — fix: ") and err.count("\n") == 1


@pytest.mark.parametrize("statement, named", [
    ("INSTALL httpfs", "an INSTALL statement is refused"),
    ("force install httpfs", "a FORCE INSTALL statement is refused"),
    ("LOAD httpfs", "a LOAD statement is refused"),
    ("-- a comment\nRESET threads", "a RESET statement is refused"),
    ("CHECKPOINT", "a CHECKPOINT statement is refused"),
    ("UPDATE EXTENSIONS", "an UPDATE statement is refused"),
])
def test_a_refused_statement_is_named_as_written(args, capsys, statement, named):
    assert sql.main([statement, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: query: ") and named in err, err
