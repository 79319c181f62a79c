"""``mirrorscan sql`` is read-only over its views, and prints every result column faithfully.

Real DuckDB, a real local store and the session's embedded PostgreSQL; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.jobs import sql
from mirrorscan.results import sql as results_sql
from mirrorscan.results import sql_output

EXPERIMENT = "exp"


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path → hex digest)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def world(tmp_path, catalog_dsn):
    """A store holding one trace part (two rows), an unrelated readable file beside it, a migrated catalog."""
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    inv = str(uuid.uuid4())
    created = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    part = store.write_part(to_trace_table([
        {"invocation_id": inv, "experiment": EXPERIMENT, "probe_id": "m|a|b|e|AB", "sample": s, "attempt": 1,
         "response": f"original {s}", "created_at": created} for s in range(2)]), EXPERIMENT, inv, "w1")
    secret = tmp_path / "secret.csv"
    secret.write_text("name,password\nroot,hunter2\n")
    with Catalog(catalog_dsn):
        pass   # migrated, empty
    return {"root": tmp_path, "store": str(store_dir), "dsn": catalog_dsn, "part": part, "secret": str(secret),
            "inv": inv}


def refused_queries(w) -> dict[str, str]:
    """Statements that would write, open a file or run twice; each must be refused."""
    root = w["root"]
    return {
        "copy over a stored part": f"COPY (SELECT 'forged' AS response) TO '{w['part']}' (FORMAT parquet)",
        "copy to a new file": f"COPY (SELECT * FROM traces) TO '{root}/out.csv'",
        "attach a database": f"ATTACH '{root}/new.duckdb' AS db",
        "install an extension": "INSTALL httpfs",
        "load an extension": "LOAD httpfs",
        "read_csv of a file": f"SELECT * FROM read_csv('{w['secret']}')",
        "a file in FROM": f"SELECT * FROM '{w['part']}'",
        "glob the disk": f"SELECT * FROM glob('{root}/*')",
        "turn access back on": "SET enable_external_access = true",
        "a second statement": f"SELECT 1; COPY (SELECT 1) TO '{root}/second.csv'",
        "two selects": "SELECT 1; SELECT 2",
        "no statement": " ; ",
        "create a table": "CREATE TABLE t AS SELECT 1",
    }


def test_query_refuses_writes_file_access_and_second_statements(world):
    before = snapshot(world["root"])
    not_refused = {}
    for what, statement in refused_queries(world).items():
        try:
            results_sql.query(statement, world["store"], world["dsn"])
            not_refused[what] = "ran"
        except ConfigError as exc:
            message = str(exc)
            if exc.field != "query" or "\n" in message or "— fix: " not in message:
                not_refused[what] = f"not one line naming the field and the fix: {message!r}"
        except Exception as exc:   # noqa: BLE001 — any other outcome is a finding, collected with the rest
            not_refused[what] = f"{type(exc).__name__}: {exc}"
    after = snapshot(world["root"])
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == [], "the sql verb wrote (changed or created files)"
    assert not_refused == {}
    assert results_sql.query("SELECT response FROM traces ORDER BY sample", world["store"], world["dsn"]).column(
        "response").to_pylist() == ["original 0", "original 1"]


def test_refusals_say_why_in_one_line(world, capsys):
    cases = {
        "SELECT 1; SELECT 2": "2 SQL statements given, exactly one is run",
        ";": "0 SQL statements given",
        f"COPY (SELECT 1) TO '{world['root']}/x.csv'": "a COPY statement is refused",
        f"SELECT * FROM read_csv('{world['secret']}')": "file system operations are disabled",
        "SELECT nosuch FROM traces": "nosuch",
    }
    for statement, expected in cases.items():
        assert sql.main([statement, "--store", world["store"], "--catalog-dsn", world["dsn"]]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("error: query: ") and expected in err, err
        assert "— fix: " in err
    assert not (world["root"] / "x.csv").exists()


def test_the_connection_itself_is_sandboxed(world):
    """Below the statement check, DuckDB opens no file and its configuration cannot be unlocked."""
    before = snapshot(world["root"])
    con = results_sql.connect(world["store"], world["dsn"])
    try:
        for what, statement in refused_queries(world).items():
            if what in ("two selects", "no statement", "create a table"):
                continue   # harmless to an in-memory connection; the verb refuses them above
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        for setting in ("SET lock_configuration = false", "SET enable_external_access = true",
                        "SET python_enable_replacements = true"):
            with pytest.raises(duckdb.Error, match="locked"):
                con.execute(setting)
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
        # the traces still reach DuckDB in full, through pyarrow, with every view usable
        assert con.execute("SELECT count(*), min(experiment_version) FROM traces").fetchone() == (2, world["inv"])
        assert con.execute("SELECT count(*) FROM scan_invocations").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM inference_log").fetchone() == (0,)
    finally:
        con.close()
    assert snapshot(world["root"]) == before


def test_read_only_queries_still_run(world):
    for statement in ("DESCRIBE traces", "SUMMARIZE SELECT sample FROM traces", "SHOW TABLES",
                      "EXPLAIN SELECT * FROM traces", "FROM traces SELECT probe_id",
                      "WITH x AS (SELECT sample FROM traces) SELECT sum(sample) AS s FROM x; "):
        assert results_sql.query(statement, world["store"], world["dsn"]).num_rows >= 1, statement


# ---- output ------------------------------------------------------------------------------------------

def result(statement: str):
    """A real DuckDB result as Arrow (the same conversion ``sql.query`` uses)."""
    con = duckdb.connect()
    try:
        return con.sql(statement).to_arrow_table()
    finally:
        con.close()


def test_repeated_column_names_are_kept_in_every_format(world, capsys):
    table = result("SELECT 1 AS a, 2 AS a, 3 AS a_2, 4 AS a")
    assert table.column_names == ["a", "a", "a_2", "a"]   # DuckDB keeps the repeats
    header, _, row, count = sql.format_table(table).splitlines()
    assert header.split() == ["a", "a_3", "a_2", "a_4"] and row.split() == ["1", "2", "3", "4"]
    assert count == "(1 row)"

    args = ["SELECT 1 AS a, 2 AS a", "--store", world["store"], "--catalog-dsn", world["dsn"]]
    assert sql.main(args + ["--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"a": 1, "a_2": 2} and list(json.loads(out)) == ["a", "a_2"]
    assert err == "note: repeated column names renamed: a → a_2 (name the columns with AS to choose)\n"
    assert sql.main(args + ["--format", "csv"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == ['"a","a_2"', "1,2"]
    assert sql.main(args) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[0].split() == ["a", "a_2"] and out.splitlines()[2].split() == ["1", "2"]
    assert "name_2" in sql.build_parser().format_help()


def test_unique_names_skips_a_suffix_already_taken():
    assert sql_output.unique_names(["a", "a", "a_2"]) == ["a", "a_3", "a_2"]
    assert sql_output.unique_names(["x", "y"]) == ["x", "y"]


def test_timestamps_print_as_iso_text_without_quotes():
    table = result("SELECT TIMESTAMPTZ '2025-01-02 03:04:05.5+00' AS tz, TIMESTAMP '2025-01-02 03:04:05' AS ts, "
                   "DATE '2025-01-02' AS d, TIME '03:04:05' AS t, 1.5 AS dec")
    expected = [table.column(i)[0].as_py().isoformat() for i in range(4)]
    assert expected[1:] == ["2025-01-02T03:04:05", "2025-01-02", "03:04:05"]
    cells = sql.format_table(table).splitlines()[2].split()
    assert cells == expected + ["1.5"]
    assert not any('"' in c for c in cells)
    assert json.loads(sql.json_lines(table)[0]) == dict(zip(["tz", "ts", "d", "t"], expected)) | {"dec": "1.5"}


INTERVALS = ["1 day 3 hours", "14 months 3 days 4 hours 5 minutes 6.5 seconds", "-1 day -90 minutes", "0 seconds",
             "-1 month 2 days 3 hours", "36 hours", "1 year", "0.000001 seconds", "1 day -5 seconds", "-14 months",
             "125 hours 1 minute"]


def test_intervals_print_as_duckdb_worded_durations(world, capsys):
    values = ", ".join(f"(INTERVAL '{i}')" for i in INTERVALS)
    table = result(f"SELECT i, i::VARCHAR AS words FROM (VALUES {values}) v(i)")
    words = table.column("words").to_pylist()   # DuckDB's own wording of each interval
    assert words[:2] == ["1 day 03:00:00", "1 year 2 months 3 days 04:05:06.5"]
    rendered = sql.format_table(table.select(["i"])).splitlines()[2:-1]
    assert [line.rstrip() for line in rendered] == words
    assert [json.loads(line)["i"] for line in sql.json_lines(table)] == words

    assert sql.main(["SELECT INTERVAL 90 MINUTE AS i, [1, 2] AS l", "--store", world["store"],
                     "--catalog-dsn", world["dsn"], "--format", "csv"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == ['"i","l"', '"01:30:00","[1, 2]"']


def test_sql_reads_every_store_the_invocations_name_and_refuses_a_missing_one(world, tmp_path, capsys):
    """An experiment whose config named its own store: the query sql runs without --store finds its rows
    (the catalog names that store) beside the default store's; an explicit store that does not exist is an
    error, not an empty result."""
    other_dir, inv = tmp_path / "elsewhere", str(uuid.uuid4())
    open_store(str(other_dir)).write_part(to_trace_table([
        {"invocation_id": inv, "experiment": "own", "probe_id": "m|x|y|e|AB", "sample": 0, "attempt": 1,
         "created_at": datetime(2025, 1, 2, tzinfo=timezone.utc)}]), "own", inv, "w1")
    with Catalog(world["dsn"]) as catalog:
        catalog.create_invocation({"invocation_id": inv, "experiment": "own", "instrument": "forced_choice",
                                   "settings": {}, "settings_hash": "h", "status": "complete",
                                   "store_uri": str(other_dir)})
    counts = results_sql.query("SELECT invocation_id, count(*) AS n FROM traces GROUP BY 1 ORDER BY 1", None, world["dsn"],
                       default_store=world["store"])
    assert dict(zip(*counts.to_pydict().values())) == {world["inv"]: 2, inv: 1}
    assert f"traces read from {world['store']}, {other_dir}" in capsys.readouterr().err
    only = results_sql.query("SELECT count(*) AS n FROM traces", world["store"], world["dsn"])
    assert only["n"].to_pylist() == [2]
    with pytest.raises(ConfigError, match="does not exist") as info:
        results_sql.query("SELECT 1", str(tmp_path / "nonexistent"), world["dsn"])
    assert info.value.field == "store" and not (tmp_path / "nonexistent").exists()


def test_a_scan_refuses_a_store_it_cannot_write_before_recording_anything(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot be created") as info:
        open_store(str(blocker / "store"))
    assert info.value.field == "store"
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        store = open_store(str(readonly))
        if not os.access(readonly, os.W_OK):   # root writes anywhere: the permission case needs a user
            with pytest.raises(ConfigError, match="cannot be written"):
                store.check_writable()
        with pytest.raises(ConfigError, match="cannot be created|cannot be written"):
            open_store("/proc/mirrorscan-store").check_writable()
    finally:
        readonly.chmod(0o755)
