"""A scripted hostile run: every verb fed traversal and markup names, key-shaped secrets, NULs, huge values,
unreadable input, read-only paths and a name that is also the start of an invocation id. Each attempt must end with exit code 2 and one ``error:`` line that
echoes no secret, and leave the store and the catalog byte for byte as they were (the store's files hashed,
every catalog table dumped, before and after each attempt). Text that is stored rather than refused (terminal
control characters in answers, probes and file names) must reach the terminal escaped.

Every attempt is a real ``mirrorscan`` process against a real store and catalog (``tests/store_world.py``)
with a real tiny model, so an input that slipped through would run (and write) for real. Read-only paths
are read-only bind mounts in a private mount namespace (``unshare --mount``); root, who runs the tests
here, writes through chmod. The browser's pages are attacked in-process over HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from conftest import new_database

import store_world  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
UNSHARE = ["unshare", "--mount", "--propagation", "private"] + (["--map-root-user"] if os.geteuid() else [])
SECRETS = {
    "huggingface": "hf_" + "aB3dE5gH7jK9mN1pQ3rS5tU7vW9xY1zA2b",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "openai": "sk-proj-" + "Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7Ba6",
    "aws": "AKIA" + "Q7XW3RZ5TB2MNP4K",
}
"""Key-shaped values (made up) that must be refused wherever a config holds them, never echoed."""


def namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*UNSHARE, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True).returncode == 0


MOUNTS = namespaces_work()


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, hidden ones included (relative path → hex digest)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def catalog_dump(dsn: str) -> dict[str, list[str]]:
    """Every table of the catalog's public schema as its rows' JSON text, sorted."""
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name")]
        return {t: sorted(r[0] for r in conn.execute(f'SELECT row_to_json(x)::text FROM "{t}" AS x')) for t in tables}


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def world(tmp_path_factory, pg_dsn, tiny_dir):
    """The store and catalog under attack, a writable home, and a folder of hostile experiments."""
    root = tmp_path_factory.mktemp("hostile")
    dsn = new_database(pg_dsn)
    built = store_world.build(root, dsn)
    home = root / "home"
    home.mkdir()
    jsonl = root / "import.jsonl"
    jsonl.write_text(json.dumps({"model": "Org/M", "query_id": "q1", "sample": 0, "answer": "Tea.", "cold": "8",
                                 "posthoc": "9/10", "query": "Tea or coffee?"}) + "\n", encoding="utf-8")
    env = {"MIRRORSCAN_HOME": str(home), "MIRRORSCAN_CATALOG_DSN": dsn, "MIRRORSCAN_STORE": str(built["store_dir"]),
           "RAY_ADDRESS": "", "MIRRORSCAN_LIMITS": ""}
    valid = root / "valid" / "fc"   # a config that would run: the attempts below must fail for their own reason
    valid.mkdir(parents=True)
    (valid / "config.json").write_text(json.dumps(base(str(tiny_dir))), encoding="utf-8")
    (valid / "pairs.csv").write_text(PAIRS, encoding="utf-8")
    return {**built, "root": root, "dsn": dsn, "home": home, "tiny": str(tiny_dir), "env": env, "jsonl": jsonl,
            "valid": valid}


# ---- configs ---------------------------------------------------------------------------------------------

PAIRS = "pair_id,word_a,word_b\ncat_dog,cat,dog\n"


def base(tiny: str, **top) -> dict:
    """A valid forced_choice config on the tiny model (it would run), with ``top`` keys replaced."""
    config = {"instrument": "forced_choice", "models": [{"model": tiny, "label": "tiny"}], "max_tokens": 4,
              "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}
    config.update(top)
    return config


def model(tiny: str, **keys) -> list[dict]:
    return [{"model": tiny, "label": "tiny", **keys}]


CONFIGS = {
    # names: traversal and markup, wherever a config names something
    "label-traversal": lambda t: (base(t, models=model(t, label="../../escape")), PAIRS),
    "label-markup": lambda t: (base(t, models=model(t, label="<script>alert(1)</script>")), PAIRS),
    "pair-id-traversal": lambda t: (base(t), "pair_id,word_a,word_b\n../../x,cat,dog\n"),
    "pair-id-markup": lambda t: (base(t), "pair_id,word_a,word_b\n<b>x</b>,cat,dog\n"),
    # secrets in free text and in URLs
    **{f"secret-{kind}": (lambda t, v=value: (base(t, description=f"run with {v}"), PAIRS))
       for kind, value in SECRETS.items()},
    "secret-in-extra-body": lambda t: (base(t, models=[{"model": "gpt-x", "label": "api", "backend": "openai",
                                                       "endpoint": "http://127.0.0.1:9/v1",
                                                       "extra_body": {"note": SECRETS["openai"]}}]), PAIRS),
    "url-credentials": lambda t: (base(t, models=[{"model": "gpt-x", "label": "api", "backend": "openai",
                                                   "endpoint": "http://admin:hunter2hunter2@127.0.0.1:9/v1"}]), PAIRS),
    # NULs
    "nul-in-description": lambda t: (base(t, description="before\u0000after"), PAIRS),
    "nul-in-pairs": lambda t: (base(t), "pair_id,word_a,word_b\ncat_dog,c\u0000at,dog\n"),
    # huge values
    "samples-huge": lambda t: (base(t, samples=10 ** 9), PAIRS),
    "max-tokens-huge": lambda t: (base(t, max_tokens=10 ** 12), PAIRS),
    "batch-size-huge": lambda t: (base(t, batch_size=10 ** 7), PAIRS),
    "pool-huge": lambda t: (base(t, actor_pool_size=10 ** 6), PAIRS),
    "grid-huge": lambda t: (base(t, samples=100_000, models=[{"model": t, "label": f"m{i}"} for i in range(100)]),
                            PAIRS),
    "csv-field-huge": lambda t: (base(t), "pair_id,word_a,word_b\ncat_dog," + "c" * 200_000 + ",dog\n"),
    "json-number-huge": lambda t: ('{"instrument": "forced_choice", "samples": ' + "7" * 5000 + "}", PAIRS),
    "json-nesting-deep": lambda t: ("[" * 100_000 + "]" * 100_000, PAIRS),
    # resources no node has and no autoscaler can add (Ray would queue the engine forever)
    "gpus-impossible": lambda t: (base(t, models=model(t, device="cuda", num_gpus=4096)), PAIRS),
    "memory-impossible": lambda t: (base(t, models=model(t, memory_gb=10 ** 7)), PAIRS),
}
"""Hostile configs: name → (config as a dict or raw text, pairs.csv text), given the tiny model's path."""


def write_config(world, case: str, folder_name: str = "exp") -> Path:
    config, pairs = CONFIGS[case](world["tiny"])
    folder = world["root"] / "configs" / case / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
    (folder / "pairs.csv").write_text(pairs, encoding="utf-8")
    return folder


# ---- running one attempt ---------------------------------------------------------------------------------

def mirrorscan(world, argv: list[str], *, setup: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    command = shlex.join([sys.executable, "-m", "mirrorscan.jobs.cli", *argv])
    runner = [*UNSHARE, "sh", "-c", f"set -e; {setup}; exec {command}"] if setup else ["sh", "-c", f"exec {command}"]
    return subprocess.run(runner, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, **world["env"], **(env or {})})


def read_only(folder: Path) -> str:
    f = shlex.quote(str(folder))
    return f"mount --bind {f} {f} && mount -o remount,bind,ro {f} {f}"


def assert_refused(world, argv: list[str], **kwargs) -> str:
    """Run the attempt; it must exit 2 with one ``error:`` line quoting no secret, and change nothing."""
    store_before, catalog_before = tree(world["store_dir"]), catalog_dump(world["dsn"])
    proc = mirrorscan(world, argv, **kwargs)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        (argv, proc.returncode, proc.stderr[-3000:])
    for value in (*SECRETS.values(), "hunter2"):
        assert value not in proc.stderr + proc.stdout, (argv, "echoes a secret")
    assert "\x00" not in proc.stderr
    assert tree(world["store_dir"]) == store_before, (argv, "the store changed")
    assert catalog_dump(world["dsn"]) == catalog_before, (argv, "the catalog changed")
    return lines[0]


# ---- the run ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CONFIGS))
def test_scan_and_its_dry_run_refuse_every_hostile_config(world, case):
    folder = write_config(world, case)
    for extra in ([], ["--dry-run"]):
        line = assert_refused(world, ["scan", str(folder), "--catalog-dsn", world["dsn"], *extra])
        assert str(folder) in line, line   # the config or its pairs.csv is named


@pytest.mark.parametrize("case", ["label-traversal", "secret-huggingface", "url-credentials", "nul-in-description",
                                  "samples-huge", "csv-field-huge"])
def test_submit_refuses_them_before_any_cluster_is_contacted(world, case):
    folder = write_config(world, case)
    line = assert_refused(world, ["submit", str(folder), "--address", closed_address(),
                                  "--working-dir", str(folder.parent)])
    assert "cannot reach" not in line


def test_an_experiment_folder_named_as_markup_is_refused(world):
    folder = world["root"] / "configs" / "markup-folder" / "<script>"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(base(world["tiny"])), encoding="utf-8")
    (folder / "pairs.csv").write_text(PAIRS, encoding="utf-8")
    assert_refused(world, ["scan", str(folder), "--catalog-dsn", world["dsn"]])


NAMES = ["../../../etc/passwd", "<script>alert(1)</script>", "..", "a" * 5000]
"""Names and targets a user might type that name nothing in the store."""


@pytest.mark.parametrize("name", NAMES, ids=["traversal", "markup", "dotdot", "huge"])
def test_every_verb_that_takes_a_name_or_target_refuses_a_hostile_one(world, name):
    valid = str(world["valid"])
    attempts = [
        ["scan", valid, "--as", name, "--catalog-dsn", world["dsn"]],
        ["analyze", name], ["report", name], ["diff", name, world["invocation_id"]],
        ["compare", world["invocation_id"], name], ["reproduce", name], ["reproduce", name, "--dry-run"],
        ["matrix", name], ["remeasure", name],
        ["open_scan", "import", "--experiment", name, str(world["jsonl"])],
        ["open_scan", "export", name, "-o", str(world["root"] / "out.jsonl")],
        ["stats", "kendall", "--input", name, "--score", "s", "--object", "o", "--rater", "r"],
        ["tap", "--upstream", "http://127.0.0.1:9/v1", "--label", name],
    ]
    for argv in attempts:
        assert_refused(world, argv)
    assert not (world["root"] / "out.jsonl").exists()


def test_a_name_that_is_also_the_start_of_an_invocation_id_is_refused_naming_both(world):
    """``f16b00`` is a valid experiment name and may also start another experiment's invocation id: every verb
    that takes a target, and the browser's invocation page, refuse it naming both rather than open either."""
    from starlette.testclient import TestClient

    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.results.browse import Browser, build_app

    inv = world["invocation_id"]
    name = inv[:6]
    shadow = next(d * 8 for d in "0123456789" if d != inv[0]) + "-0000-4000-8000-0000000000ee"
    with Catalog(world["dsn"]) as catalog:
        catalog.create_invocation({"invocation_id": shadow, "experiment": name, "instrument": "forced_choice",
                                   "settings": {"format": 2, "experiment": name, "instrument": "forced_choice"},
                                   "settings_hash": "test", "status": "complete",
                                   "store_uri": str(world["store_dir"])})
    attempts = [["analyze", name], ["report", name], ["diff", name, inv], ["compare", inv, name],
                ["reproduce", name, "--dry-run"], ["matrix", name],
                ["stats", "kendall", "--input", name, "--score", "s", "--object", "o", "--rater", "r"]]
    for argv in attempts:
        line = assert_refused(world, argv)
        assert f"experiment '{name}'" in line and inv in line, (argv, line)
    browser = Browser(world["dsn"], world["root"] / "browse-index-both")
    try:
        page = TestClient(build_app(browser)).get(f"/invocations/{name}")
        assert page.status_code == 404 and inv in page.text and f"/experiments/{name}" in page.text
    finally:
        browser.close()


def test_hostile_files_and_queries_are_refused(world):
    attempts = [
        ["stats", "kendall", "--input", "/etc/passwd", "--score", "s", "--object", "o", "--rater", "r"],
        ["flinch", "compare", "/etc/passwd", "/etc/passwd"],
        ["sql", f"COPY (SELECT 1) TO '{world['root']}/../escape.csv'"],
        ["sql", "SELECT * FROM read_csv('/etc/passwd')"],
        ["sql", "ATTACH '/tmp/x.duckdb' AS x"],
        ["sql", "SELECT 1; SELECT 2"],
        ["sql", "SELECT count(*) FROM range(1000000000) a, range(1000000000) b", "--timeout", "1"],
        ["tap", "--upstream", "file:///etc/passwd"],
        ["tap", "--upstream", "http://admin:hunter2hunter2@127.0.0.1:9/v1"],
    ]
    for argv in attempts:
        line = assert_refused(world, argv)
        assert "root:" not in line and "hunter2" not in line   # nothing of /etc/passwd or the password is echoed
    assert not (world["root"].parent / "escape.csv").exists()


CONTROLS = "\x1b[31m\x1b]0;pwned\x07\roverwritten\x9b2J"
"""A colour, a window title (OSC … BEL), a carriage return and a C1 CSI: what a terminal acts on, printed raw."""


def test_control_characters_in_stored_text_are_printed_escaped(world):
    """An imported file whose answer, probe text and name hold terminal controls: import, matrix, analyze, diff
    and sql print them escaped (no raw control character on stdout or stderr), and sql's JSON still gives the
    stored answer back verbatim."""
    from mirrorscan.grid.formatting import CONTROL

    folder = world["root"] / "controls"
    folder.mkdir()
    path = folder / f"answers{CONTROLS[:5]}.jsonl"   # an ESC in the file name, which the matrix prints
    path.write_text(json.dumps({"model": "Org/M", "query_id": "q1", "sample": 0, "query": f"Tea{CONTROLS}?",
                                "answer": f"Tea.{CONTROLS}", "cold": "8", "posthoc": "9"}) + "\n", encoding="utf-8")
    store = ["--store", str(folder / "store")]
    imported = mirrorscan(world, ["open_scan", "import", "--experiment", "controls", *store, str(path)])
    inv = imported.stdout.split("as invocation ")[1].split()[0]
    query = f"SELECT response, user_text FROM traces WHERE invocation_id = '{inv}'"
    runs = [imported, *(mirrorscan(world, argv) for argv in (
        ["matrix", "controls", *store], ["analyze", inv, "--no-write"], ["diff", inv, inv], ["sql", query, *store],
        ["sql", f"SELECT '{CONTROLS}' AS x"], ["sql", query, *store, "--format", "json"]))]
    for proc in runs:
        raw = [c for c in CONTROL.findall(proc.stdout + proc.stderr) if c != "\n"]
        assert proc.returncode == 0 and not raw, (proc.args, raw, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "answers\\x1b[31m" in runs[1].stdout   # the matrix names the file, escaped
    assert f"Tea.{CONTROLS}" in [json.loads(line)["response"] for line in runs[-1].stdout.splitlines()]


@pytest.mark.skipif(not MOUNTS, reason="no mount namespace here (unshare --mount)")
def test_read_only_paths_are_refused(world):
    store, home = world["store_dir"], world["home"]
    inv = world["invocation_id"]
    attempts = [
        (["analyze", inv], read_only(store), {}),
        (["report", inv], read_only(store), {}),
        (["scan", str(world["valid"]), "--store", str(store)], read_only(store), {}),
        (["browse", "--port", "1"], read_only(home), {}),
        (["sql", "SELECT 1"], read_only(home), {"MIRRORSCAN_CATALOG_DSN": ""}),
        (["open_scan", "import", "--experiment", "imported", "--store", str(store), str(world["jsonl"])],
         read_only(store), {}),
    ]
    home_before = tree(home)
    for argv, setup, env in attempts:
        line = assert_refused(world, argv, setup=setup, env=env)
        assert "read-only" in line.lower() or "cannot be written" in line, (argv, line)
    assert tree(home) == home_before


def test_the_browser_refuses_hostile_paths_and_labels_and_writes_nothing(world):
    from starlette.testclient import TestClient

    from mirrorscan.results.browse import Browser, build_app

    store_before, catalog_before = tree(world["store_dir"]), catalog_dump(world["dsn"])
    browser = Browser(world["dsn"], world["root"] / "browse-index")
    client = TestClient(build_app(browser))
    inv = world["invocation_id"]
    try:
        for path in ("/experiments/..%2F..%2Fetc%2Fpasswd", "/invocations/..%2F..%2Fetc",
                     "/invocations/%3Cscript%3Ealert(1)%3C%2Fscript%3E", f"/invocations/{inv}/files/../../../etc/passwd",
                     f"/invocations/{inv}/files/%2e%2e/%2e%2e/invocation.json", f"/invocations/{inv}/files/traces",
                     f"/compare?a={inv}&b={inv}&label_b=%3Cscript%3E", f"/compare?a={inv}&b=..%2F..%2Fx",
                     f"/invocations/{inv}/trace?probe_id=%00&sample=0"):
            page = client.get(path)
            assert page.status_code == 404, path
            assert "<script>alert" not in page.text and "root:x:" not in page.text, path
        for method in ("POST", "PUT", "DELETE"):
            assert client.request(method, f"/invocations/{inv}").status_code == 405
    finally:
        browser.close()
    assert tree(world["store_dir"]) == store_before and catalog_dump(world["dsn"]) == catalog_before
