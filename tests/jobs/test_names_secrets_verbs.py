"""Every verb that takes a name, a config or a file to record refuses a traversal or markup name, a secret-shaped
value and a NUL the same way: exit 2, one line naming the field, and nothing written — the files under the
test's folder (store, home, and where a traversal would land) and the catalog's tables are as they were.

Real parts: the verbs run through ``jobs.cli.main`` as a user's command would, against a real PostgreSQL
database (the session's embedded server) and a real store folder.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import psycopg
import pytest

from mirrorscan.jobs.cli import main

HF_TOKEN = "hf_" + "abcdefghijklmnopqrstuvwxyz12"
SECRETS = {"hf": HF_TOKEN, "github": "ghp_" + "abcdefghijklmnopqrstuvwxyz1234", "aws": "AKIA" + "IOSFODNN7EXAMPLE",
           "sk": "sk-" + "proj-A1b2C3d4E5f6G7h8J9k0", "url": "https://bob:" + "hunter22" + "@example.com/x"}
BAD_NAMES = {"traversal": "../../../x", "markup": "<script>"}


@pytest.fixture
def world(tmp_path, catalog_dsn, monkeypatch):
    """(root, store, dsn): a store four folders deep (so ../../../x lands inside ``root``), a home, a catalog."""
    root = tmp_path / "w"
    store = root / "a" / "b" / "c" / "store"
    monkeypatch.setenv("MIRRORSCAN_HOME", str(root / "home"))
    monkeypatch.setenv("MIRRORSCAN_STORE", str(store))
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", catalog_dsn)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    root.mkdir()
    return root, store, catalog_dsn


def snapshot(root: Path, dsn: str) -> tuple:
    """Every file under ``root`` with its bytes' hash, and every catalog table with its rows."""
    files = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
             for p in sorted(root.rglob("*"))}
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = 'public' ORDER BY 1")]
        rows = {t: sorted(map(str, conn.execute(f'SELECT * FROM "{t}"').fetchall())) for t in tables}
    return files, rows


def experiment(root: Path, name: str = "exp", **changes) -> Path:
    """An open_scan experiment folder (packaged probes, the packaged demo model), ``changes`` applied."""
    folder = root / "experiments" / name
    folder.mkdir(parents=True, exist_ok=True)
    config = {"instrument": "open_scan", "description": "plain",
              "models": [{"model": "packaged:smollm2-135m-instruct", "label": "m"}],
              "open_scan": {"probes": "packaged:demo"}}
    for key, value in changes.items():
        if key == "label":
            config["models"][0]["label"] = value
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def refused(capsys, argv: list[str], field: str) -> str:
    """Run ``argv``; assert exit 2 and one ``error:`` line naming ``field``; return the line."""
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, (argv, err)
    assert err.startswith("error: ") and "\n" not in err and field in err, (argv, err)
    return err


def jsonl_line(run_label: str = "m", answer: str = "an answer") -> str:
    query = "What is it?"
    return json.dumps({"run_label": run_label, "model": "some/model", "query_id": "q1",
                       "query_hash": hashlib.sha256(query.encode()).hexdigest(), "sample": 0, "seed": 1,
                       "locale": "en", "answer": answer, "cold_raw": None, "cold_rating": None, "posthoc_raw": None,
                       "posthoc_rating": None, "created_at": "2025-01-02T03:04:05.000000+00:00"}) + "\n"


@pytest.mark.parametrize("kind", sorted(BAD_NAMES))
def test_every_verb_refuses_a_bad_name_and_writes_nothing(world, capsys, kind):
    root, store, dsn = world
    bad = BAD_NAMES[kind]
    good = experiment(root)
    labelled = experiment(root, "labelled", label=bad)
    imported = root / "run.jsonl"
    imported.write_text(jsonl_line())
    bad_run_label = root / "bad.jsonl"
    bad_run_label.write_text(jsonl_line(run_label=bad))
    before = snapshot(root, dsn)
    refused(capsys, ["scan", str(good), "--as", bad, "--store", str(store)], "--as")
    refused(capsys, ["scan", str(labelled), "--store", str(store)], "models[0].label")
    refused(capsys, ["scan", str(labelled), "--dry-run", "--store", str(store)], "models[0].label")
    refused(capsys, ["submit", str(labelled), "--store", str(store)], "models[0].label")
    refused(capsys, ["open_scan", "import", str(imported), "--experiment", bad, "--store", str(store)], "--experiment")
    refused(capsys, ["open_scan", "import", str(bad_run_label), "--experiment", "imp", "--store", str(store)],
            "run_label")
    refused(capsys, ["tap", "--upstream", "http://127.0.0.1:9/v1", "--label", bad], "--label")
    if kind == "markup":   # a folder name cannot hold '/', but it can hold markup
        folder = experiment(root, bad)
        before = snapshot(root, dsn)
        refused(capsys, ["scan", str(folder), "--store", str(store)], "(experiment folder name)")
        refused(capsys, ["scan", str(folder), "--dry-run", "--store", str(store)], "(experiment folder name)")
    assert snapshot(root, dsn) == before
    assert not (root / "a" / "x").exists() and not (store / bad).exists()


@pytest.mark.parametrize("shape", sorted(SECRETS))
def test_every_verb_refuses_a_secret_in_free_text_the_same_way(world, capsys, shape):
    root, store, dsn = world
    secret = SECRETS[shape]
    exp = experiment(root, description=f"run notes: {secret}")
    imported = root / "run.jsonl"
    imported.write_text(jsonl_line(answer=f"my key is {secret}"))
    before = snapshot(root, dsn)
    lines = [refused(capsys, ["scan", str(exp), "--store", str(store)], "description"),
             refused(capsys, ["scan", str(exp), "--dry-run", "--store", str(store)], "description"),
             refused(capsys, ["submit", str(exp), "--store", str(store)], "description")]
    assert len({line.split("description: ", 1)[1] for line in lines}) == 1   # the same verdict, word for word
    refused(capsys, ["open_scan", "import", str(imported), "--experiment", "imp", "--store", str(store)], "answer")
    assert snapshot(root, dsn) == before
    for line in lines:
        assert secret not in line and secret[4:12] not in line


def test_reproduce_refuses_to_copy_a_secret_frozen_before_the_check(world, capsys):
    """An invocation recorded before the check (its description holds a token) is not copied into a new one."""
    from mirrorscan.cluster.catalog.client import Catalog

    root, store, dsn = world
    store.mkdir(parents=True)   # where the original's rows would be
    settings = {"format": 2, "experiment": "old", "instrument": "open_scan", "description": f"notes {HF_TOKEN}",
                "samples": 1, "models": [{"label": "m", "model": "packaged:smollm2-135m-instruct"}],
                "instrument_settings": {}, "execution": {"store": str(store)}}
    invocation_id = str(uuid.uuid4())
    with Catalog(dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "old", "instrument": "open_scan",
                                   "settings": settings, "settings_hash": "x", "store_uri": str(store),
                                   "status": "complete", "counts": {}})
    before = snapshot(root, dsn)
    line = refused(capsys, ["reproduce", invocation_id, "--store", str(store)], "description")
    assert HF_TOKEN not in line
    assert snapshot(root, dsn) == before


@pytest.mark.parametrize("field", ["description", "label"])
def test_a_nul_in_config_text_is_a_validation_error_for_every_verb(world, capsys, field):
    root, store, dsn = world
    exp = experiment(root, **{field: "a\u0000b"})
    before = snapshot(root, dsn)
    where = "description" if field == "description" else "models[0]."
    for argv in (["scan", str(exp)], ["scan", str(exp), "--dry-run"], ["submit", str(exp)]):
        refused(capsys, [*argv, "--store", str(store)], where)
    assert snapshot(root, dsn) == before


@pytest.mark.parametrize("name", ["_tap", "gstudy"])
def test_import_and_as_refuse_what_no_experiment_folder_may_be_called(world, capsys, name):
    """``--experiment`` and ``--as`` name an experiment as its folder would: not mirrorscan's own ``_``
    folders, not a subcommand of analyze."""
    root, store, dsn = world
    imported = root / "run.jsonl"
    imported.write_text(jsonl_line())
    exp = experiment(root)
    before = snapshot(root, dsn)
    refused(capsys, ["open_scan", "import", str(imported), "--experiment", name, "--store", str(store)], "--experiment")
    refused(capsys, ["scan", str(exp), "--as", name, "--store", str(store)], "--as")
    assert snapshot(root, dsn) == before


def test_submit_refuses_a_secret_in_any_field_of_the_runtime_env(tmp_path):
    """The runtime env is shown on the dashboard: a credential in a pip URL is refused like one in env_vars."""
    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.cluster.runtime.job_submission import load_runtime_env

    token = SECRETS["github"]
    for pip in ([f"git+https://x:{token}@github.com/org/pkg"], [f"pkg --extra-index-url https://u:pw@idx/simple"]):
        file = tmp_path / "runtime_env.yaml"
        file.write_text(json.dumps({"working_dir": ".", "pip": pip}))
        with pytest.raises(ConfigError) as info:
            load_runtime_env(file)
        assert info.value.field == "pip[0]" and token not in str(info.value) and "pw@" not in str(info.value)
