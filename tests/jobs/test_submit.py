"""``mirrorscan submit`` / ``status`` / ``logs`` against a real Ray head (``ray start --head``, dashboard on
127.0.0.1), a real PostgreSQL catalog and the real S3 server (SeaweedFS on 127.0.0.1; the head's
processes hold its credentials, as cluster nodes hold an instance profile): a scan job writes its traces
to S3, then ``submit analyze`` runs a statistics job on the cluster that reads them back from S3. Plus
the checks that run before any cluster is contacted (bad config, experiment outside the working_dir,
secrets, unreachable head).

The head is this test module's own: started in a new session with its own ports and temp dir, and
stopped by killing exactly that session's processes (and a job driver that joined it) — never
``ray stop``, which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.compute as pc
import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs import cli
from mirrorscan.cluster.runtime.job_submission import find_invocation, load_runtime_env, scan_entrypoint, secret_problem
from mirrorscan.cluster.runtime.job_submission import analysis_entrypoint
from conftest import free_port

PAIRS = "pair_id,word_a,word_b\ncat_dog,cat,dog\ntea_coffee,tea,coffee\n"


def write_experiment(folder: Path, model_dir: Path, **overrides) -> Path:
    """2 pairs × 1 envelope × AB × 1 sample = 2 cells of the tiny random model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(PAIRS)
    config = {"instrument": "forced_choice", "models": [{"model": str(model_dir), "label": "tiny"}],
              "probe_set": "pairs.csv", "envelopes": ["english_strict"], "orderings": ["AB"], "samples": 1,
              "temperature": 0.0, "max_tokens": 4, "seed": 3, "batch_size": 8, "actor_pool_size": 1, **overrides}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---- a real Ray head of our own ---------------------------------------------------------------------

def _session_of(pid: int) -> int | None:
    """The session id of a live process (None when it is gone or a zombie, which no signal can end)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[3])


def _joined(pid: int, gcs_port: int) -> bool:
    """Whether a process was pointed at our head by Ray's job supervisor (RAY_ADDRESS=…:gcs_port)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(e.startswith(b"RAY_ADDRESS=") and e.endswith(f":{gcs_port}".encode()) for e in env)


def _our_processes(session: int, gcs_port: int) -> list[int]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    return [p for p in pids if _session_of(p) == session or _joined(p, gcs_port)]


def _stop_head(proc: subprocess.Popen, gcs_port: int) -> None:
    """SIGTERM, then SIGKILL after 5 s, every process of the head's session and any job driver it ran."""
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        for pid in _our_processes(proc.pid, gcs_port):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while _our_processes(proc.pid, gcs_port) and time.monotonic() < deadline:
            time.sleep(0.5)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


BUCKET = "submit-test"


@pytest.fixture(scope="module")
def ray_head(s3_server):
    """A single-node Ray head on 127.0.0.1 with the dashboard (job server) whose processes carry the S3
    server's AWS environment; yields its http address, GCS port and that environment."""
    s3_server.create_bucket(BUCKET)
    ports = {name: free_port() for name in ("port", "dashboard-port", "ray-client-server-port",
                                            "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                            "runtime-env-agent-port", "metrics-export-port",
                                            "node-manager-port", "object-manager-port")}
    temp_dir = tempfile.mkdtemp(prefix="msray-", dir="/tmp")   # short: Ray's socket paths must fit 107 bytes
    log_path = Path(temp_dir) / "ray-start.log"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1",
           # single-node mode: Ray keeps the node on 127.0.0.1 instead of the machine's outward address
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           # the job's entrypoint is `python -m mirrorscan.jobs.scan …`: `python` must be this interpreter
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    env.update(s3_server.env())
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "2", "--num-gpus", "0",
           "--temp-dir", temp_dir, "--disable-usage-stats"]
    cmd += [a for name, port in ports.items() for a in (f"--{name}", str(port))]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited ({proc.returncode}):\n{log_path.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray head not ready in 240 s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1)
        yield {"address": address, "gcs_port": ports["port"], "aws_env": s3_server.env()}
    finally:
        _stop_head(proc, ports["port"])
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_submit_runs_the_scan_as_a_ray_job_and_status_and_logs_show_it(ray_head, tmp_path, tiny_dir, catalog_dsn,
                                                                      capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name, value in ray_head["aws_env"].items():   # this process reads the S3 store to check the job
        monkeypatch.setenv(name, value)
    working_dir = tmp_path / "wd"
    exp = write_experiment(working_dir / "fc", tiny_dir, envelopes=["english_strict", "json_schema"])
    (working_dir / ".venv").mkdir()
    (working_dir / ".venv" / "big.bin").write_bytes(b"\0" * 1024)   # must not travel: excluded
    store = f"s3://{BUCKET}/{tmp_path.name}"
    address = ray_head["address"]

    rc = cli.main(["submit", str(exp), "--address", address, "--working-dir", str(working_dir),
                   "--store", str(store), "--catalog-dsn", catalog_dsn])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "listens beyond loopback" not in out + err   # neither submit nor the job's scan warns on loopback
    # the job's own output streamed through: Ray's entrypoint line, scan's early id line and its summary
    assert "Running entrypoint for job" in out and "jobs.scan fc" in out
    assert "cells: 4 total · 4 ok · 0 error · 0 missing" in out
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"invocation (\S+)  job (mirrorscan-fc-[0-9a-f]{8})  status SUCCEEDED", last)
    assert m, last
    invocation_id, job_id = m.groups()
    assert f"mirrorscan-invocation: {invocation_id}" in out   # the line jobs.scan prints before any work

    with Catalog(catalog_dsn) as catalog:
        inv = catalog.get_invocation(invocation_id)
    assert inv["status"] == "complete" and inv["counts"]["ok"] == 4 and inv["experiment"] == "fc"
    assert inv["store_uri"] == store
    with Catalog(catalog_dsn) as catalog:   # the job ran from an uploaded copy; it records where it came from
        assert catalog.config_files("fc") == [str((exp / "config.json").resolve())]
    rows = open_store(store).read("fc", invocation_id)
    assert rows.num_rows == 4 and pc.all(pc.is_null(rows.column("error"))).as_py()
    assert set(rows.column("invocation_id").to_pylist()) == {invocation_id}
    assert sorted(p.split("|")[1:3] for p in rows.column("probe_id").to_pylist()) == [["cat", "dog"]] * 2 + [["tea", "coffee"]] * 2

    assert cli.main(["status", "--address", address]) == 0
    listing = capsys.readouterr().out
    assert re.search(rf"^{job_id}\s+SUCCEEDED\s+.*\sfc\s*$", listing, re.M), listing
    assert cli.main(["status", job_id, "--address", address]) == 0
    detail = capsys.readouterr().out
    assert f"invocation: {invocation_id}" in detail and "exit code:  0" in detail
    assert "python -m mirrorscan.jobs.scan fc --max-attempts 3" in detail
    assert cli.main(["logs", job_id, "--address", address]) == 0
    logs = capsys.readouterr().out
    assert find_invocation(logs) == invocation_id and "cells: 4 total · 4 ok" in logs
    # the job ran from the uploaded working_dir (a copy under Ray's session folder), not from tmp_path
    assert str(working_dir) not in logs

    assert cli.main(["logs", "no-such-job", "--address", address]) == 2
    assert "no job 'no-such-job'" in capsys.readouterr().err

    # an analysis job on the cluster reads the sweep's Parquet back from S3 and runs its shards as Ray tasks
    stats_args = ["null", "--input", invocation_id, "--score", "prompt_tokens", "--label", "pair_id", "--positive",
                  "cat_dog", "--layer", "envelope", "--item", "pair_id", "--permutations", "300", "--shard-size", "100",
                  "--seed", "5"]
    rc = cli.main(["submit", "analyze", "--address", address, "--working-dir", str(working_dir),
                   "--catalog-dsn", catalog_dsn, *stats_args])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "python -m mirrorscan.jobs.stats null" in err and "--ray" in err   # the entrypoint, --ray implied
    job_result = json_object_in(out)
    assert job_result["driver"] == "ray" and job_result["invocation_id"] == invocation_id
    assert job_result["n_items"] == 2 and job_result["n_permutations"] == 300
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(rf"invocation {invocation_id}  job mirrorscan-analyze-null-[0-9a-f]{{8}}  status SUCCEEDED", last), last
    stored = re.search(r"wrote (s3://\S+/analysis/null/\S+/result\.json)", out)
    assert stored, out   # the job stored its result beside the traces, in S3
    assert json.loads(open_store(store).read_bytes(stored.group(1)[len("s3://"):])) == job_result
    # the same statistic computed here, without Ray, from the same S3 traces: identical but for the driver
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", catalog_dsn)
    from mirrorscan.jobs import stats

    assert stats.main([*stats_args, "--out", str(tmp_path / "local.json")]) == 0
    local = json.loads((tmp_path / "local.json").read_text())
    assert {k: v for k, v in job_result.items() if k not in ("driver", "invocation_id")} == \
        {k: v for k, v in local.items() if k != "driver"}


def json_object_in(text: str) -> dict:
    """The JSON object a job printed (its lines from a lone ``{`` to the next lone ``}``) among log lines."""
    lines = text.splitlines()
    start = lines.index("{")
    return json.loads("\n".join(lines[start:lines.index("}", start) + 1]))


def test_the_loopback_head_is_read_as_loopback_with_auth_off_and_draws_no_warning(ray_head):
    """The module's head runs with auth off on 127.0.0.1: what its job server reports is read (its mode and
    its node's address), and since every address is loopback, submit and scan stay silent about it."""
    from mirrorscan.cluster.runtime.ray_session import exposure_warning, job_server_facts, job_server_warning

    deadline = time.monotonic() + 180
    while True:   # the dashboard lists the head's node some seconds after it answers /api/version
        facts = job_server_facts(ray_head["address"])
        if facts is None or len(facts[1]) > 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert facts is not None
    auth_on, addresses = facts
    assert auth_on is False and addresses[0] == ray_head["address"] and "127.0.0.1" in addresses[1:]
    assert job_server_warning(ray_head["address"]) is None
    # the same report from a head bound to the machine's outward address would draw the warning
    assert exposure_warning(ray_head["address"], [a.replace("127.0.0.1", "10.0.0.5") for a in addresses],
                            auth_on) is not None


def test_submit_to_a_head_on_this_machine_works_with_the_default_runtime_env(ray_head, tmp_path, tiny_dir, capsys,
                                                                           monkeypatch):
    """No --store, no --catalog-dsn, no --profile: the shipped runtime_env.yaml, and the job writes to this
    machine's home (its local store and embedded catalog), where `mirrorscan scan` here would have."""
    from mirrorscan.cluster.catalog import embedded_pg
    from mirrorscan.cluster.catalog.client import resolve_dsn

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name in ("MIRRORSCAN_STORE", "MIRRORSCAN_CATALOG_DSN"):
        monkeypatch.delenv(name, raising=False)
    home = Path(tempfile.mkdtemp(prefix="mirrorscan-home-"))   # the catalog's system user must reach it
    home.chmod(0o755)
    monkeypatch.setenv("MIRRORSCAN_HOME", str(home))
    embedded_pg.ensure_running(home / "catalog", durable=False)   # the job finds it running; stopped below
    try:
        working_dir = tmp_path / "wd"
        exp = write_experiment(working_dir / "fc", tiny_dir)
        rc = cli.main(["submit", str(exp), "--address", ray_head["address"], "--working-dir", str(working_dir)])
        out, err = capsys.readouterr()
        assert rc == 0, out + err
        assert f"the job uses this machine's home {home}" in err
        assert "cells: 2 total · 2 ok · 0 error · 0 missing" in out
        invocation_id = re.fullmatch(r"invocation (\S+)  job \S+  status SUCCEEDED", out.strip().splitlines()[-1])[1]
        with Catalog(resolve_dsn(None)) as catalog:   # the embedded catalog of this home
            inv = catalog.get_invocation(invocation_id)
        assert inv["status"] == "complete" and inv["store_uri"] == str(home / "store")
        assert open_store(inv["store_uri"]).read("fc", invocation_id).num_rows == 2
    finally:
        embedded_pg.stop(home / "catalog")
        shutil.rmtree(home, ignore_errors=True)


# ---- checks made before any cluster is contacted ----------------------------------------------------

def _closed_address() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_unreachable_head_is_one_line_naming_the_address_and_the_fix(tmp_path, tiny_dir, capsys):
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir)
    address = _closed_address()
    rc = cli.main(["submit", str(exp), "--address", address, "--working-dir", str(tmp_path / "wd")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    assert len(err) == 1 and address in err[0] and "fix:" in err[0] and "RAY_ADDRESS" in err[0]
    assert cli.main(["status", "--address", address]) == 3


def test_bad_config_fails_locally_with_exit_2_before_the_cluster_is_contacted(tmp_path, tiny_dir, capsys):
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir, samples=0)
    rc = cli.main(["submit", str(exp), "--address", _closed_address(), "--working-dir", str(tmp_path / "wd")])
    err = capsys.readouterr().err
    assert rc == 2 and "config.json" in err and "samples" in err and "cannot reach" not in err


def test_experiment_outside_the_working_dir_is_refused(tmp_path, tiny_dir, capsys):
    exp = write_experiment(tmp_path / "elsewhere" / "fc", tiny_dir)
    (tmp_path / "wd").mkdir()
    rc = cli.main(["submit", str(exp), "--address", _closed_address(), "--working-dir", str(tmp_path / "wd")])
    err = capsys.readouterr().err
    assert rc == 2 and "outside the job's working_dir" in err and "--working-dir" in err


def test_experiment_under_an_excluded_folder_is_refused(tmp_path, tiny_dir, capsys):
    exp = write_experiment(tmp_path / "wd" / ".mirrorscan" / "fc", tiny_dir)
    rc = cli.main(["submit", str(exp), "--address", _closed_address(), "--working-dir", str(tmp_path / "wd")])
    assert rc == 2 and "excluded from the job's upload" in capsys.readouterr().err


def test_a_catalog_dsn_with_a_password_is_never_sent(tmp_path, tiny_dir, capsys):
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir)
    rc = cli.main(["submit", str(exp), "--address", _closed_address(), "--working-dir", str(tmp_path / "wd"),
                   "--catalog-dsn", "postgresql://app:hunter2@db.internal:5432/mirrorscan"])
    err = capsys.readouterr().err
    assert rc == 2 and "--catalog-dsn" in err and "hunter2" not in err


def test_without_an_address_submit_runs_the_scan_in_this_process(tmp_path, tiny_dir, catalog_dsn, capsys, monkeypatch):
    # --resume with nothing to resume: jobs.scan itself answers (after reading the catalog), no Ray needed
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    exp = write_experiment(tmp_path / "fc", tiny_dir)
    rc = cli.main(["submit", str(exp), "--resume", "--catalog-dsn", catalog_dsn, "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "running the scan in this process" in err and "has no unfinished invocation" in err


def test_status_and_logs_need_an_address(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cli.main(["status"]) == 2 and "RAY_ADDRESS" in capsys.readouterr().err
    assert cli.main(["logs", "some-job"]) == 2


def test_ray_address_from_the_environment_is_used(tmp_path, tiny_dir, capsys, monkeypatch):
    address = _closed_address()
    monkeypatch.setenv("RAY_ADDRESS", address)
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir)
    assert cli.main(["submit", str(exp), "--working-dir", str(tmp_path / "wd")]) == 3
    assert address in capsys.readouterr().err


# ---- pieces -----------------------------------------------------------------------------------------

def test_a_head_on_another_machine_with_the_default_runtime_env_names_the_setting_to_change(tmp_path, tiny_dir,
                                                                                          capsys, monkeypatch):
    for name in ("MIRRORSCAN_STORE", "MIRRORSCAN_CATALOG_DSN"):
        monkeypatch.delenv(name, raising=False)
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir)
    remote = "http://203.0.113.9:8265"   # TEST-NET-3: never this machine; nothing is contacted
    rc = cli.main(["submit", str(exp), "--address", remote, "--working-dir", str(tmp_path / "wd")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "runtime_env.yaml" in err[0] and "env_vars.MIRRORSCAN_STORE" in err[0] and "203.0.113.9" in err[0]
    assert "--profile cluster" in err[0] and "--store" in err[0]
    # a store named, the catalog is next; one on this machine's loopback is refused as well
    rc = cli.main(["submit", str(exp), "--address", remote, "--working-dir", str(tmp_path / "wd"),
                   "--store", "s3://bucket/runs", "--catalog-dsn", "postgresql://mirrorscan@127.0.0.1:5432/m"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "env_vars.MIRRORSCAN_CATALOG_DSN" in err[0] and "loopback" in err[0], err


def test_the_cluster_profile_names_what_a_remote_job_needs_and_an_unknown_profile_lists_the_known(tmp_path, tiny_dir,
                                                                                                  capsys):
    from mirrorscan.cluster.runtime.job_env import place_job, profile_file

    cluster_file = profile_file("cluster")
    assert cluster_file.name == "runtime_env.cluster.yaml" and profile_file(None).name == "runtime_env.yaml"
    assert place_job(load_runtime_env(cluster_file), cluster_file, "http://203.0.113.9:8265") == ""
    # a loopback address with the cluster profile is a port-forward to a cluster: no home of this machine
    assert place_job(load_runtime_env(cluster_file), cluster_file, "http://127.0.0.1:8265") == ""
    local_file = profile_file("local")
    assert place_job(load_runtime_env(local_file), local_file, "http://127.0.0.1:8265").startswith("MIRRORSCAN_HOME=")
    exp = write_experiment(tmp_path / "wd" / "fc", tiny_dir)
    rc = cli.main(["submit", str(exp), "--address", "http://203.0.113.9:8265", "--profile", "nosuch"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--profile" in err[0] and "local, cluster" in err[0], err


def test_which_addresses_are_this_machine():
    import socket

    from mirrorscan.cluster.runtime.job_env import on_this_machine

    for address in ("http://127.0.0.1:8265", "http://localhost:8265", "ray://127.0.0.1:10001", "127.0.0.1:6379",
                    "auto", "http://[::1]:8265"):
        assert on_this_machine(address), address
    ip = socket.gethostbyname(socket.gethostname())   # this machine's own address, as a hand-started head binds
    assert on_this_machine(f"http://{ip}:8265")
    assert not on_this_machine("http://203.0.113.9:8265")
    assert not on_this_machine("http://no-such-host.invalid:8265")



def test_secret_problem_flags_credentials_and_passes_names():
    assert secret_problem("X", "AKIAABCDEFGHIJKLMNOP")
    assert secret_problem("X", "sk-abcdefghijklmnopqrstuv")
    assert secret_problem("X", "hf_abcdefghijklmnopqrstuvwxyz")
    assert secret_problem("X", "postgresql://u:pw@h/db")
    assert secret_problem("X", "host=h user=u password=pw dbname=d")
    assert secret_problem("OPENAI_API_KEY", "anything")
    assert secret_problem("PGPASSWORD", "pw")
    assert secret_problem("PGPASSWORD", "${PGPASSWORD}") is None       # a reference, not a value
    assert secret_problem("RAY_AUTH_TOKEN_PATH", "/home/ray/.ray/auth_token") is None
    assert secret_problem("MIRRORSCAN_CATALOG_DSN", "postgresql://mirrorscan@db:5432/mirrorscan") is None
    assert secret_problem("MIRRORSCAN_STORE", "s3://bucket/prefix") is None


def test_load_runtime_env_resolves_working_dir_and_refuses_secrets_and_unknown_fields(tmp_path):
    good = tmp_path / "env.yaml"
    good.write_text("working_dir: .\nexcludes: [.venv/]\nenv_vars: {A: '1'}\n")
    env = load_runtime_env(good)
    assert env["working_dir"] == str(tmp_path.resolve()) and env["env_vars"] == {"A": "1"}
    (tmp_path / "x").mkdir()
    assert load_runtime_env(good, working_dir=tmp_path / "x")["working_dir"] == str((tmp_path / "x").resolve())
    secret = tmp_path / "secret.yaml"
    secret.write_text("working_dir: .\nenv_vars: {AWS_SECRET_ACCESS_KEY: abc}\n")
    with pytest.raises(Exception, match="env_vars.AWS_SECRET_ACCESS_KEY"):
        load_runtime_env(secret)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("working_dir: .\nworkingdir: .\n")
    with pytest.raises(Exception, match="workingdir: is not a runtime env field Ray knows"):
        load_runtime_env(unknown)
    bad_type = tmp_path / "bad_type.yaml"
    bad_type.write_text("working_dir: .\nexcludes: .venv/\n")   # a string where Ray wants a list
    with pytest.raises(Exception, match="Ray rejects it"):
        load_runtime_env(bad_type)


def test_submit_analyze_checks_the_command_here_before_any_cluster_is_contacted(capsys):
    address = _closed_address()   # nothing listens: a check that passed would end in exit 3 instead
    assert cli.main(["submit", "analyze", "--address", address, "median", "--input", "x"]) == 2
    assert "median" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "analyze", "--address", address, "null", "--input", "x", "--score", "s"])
    assert exit_.value.code == 2 and "--label" in capsys.readouterr().err
    assert cli.main(["submit", "analyze", "--address", address, "gstudy", "--input", "x", "--score", "s",
                     "--object", "m", "--facets", "w", "--out", "r.json"]) == 2
    assert "--out" in capsys.readouterr().err


def test_analysis_entrypoint_implies_ray_where_the_command_has_ray_work():
    assert analysis_entrypoint(["null", "--input", "a b"]) == "python -m mirrorscan.jobs.stats null --input 'a b' --ray"
    assert analysis_entrypoint(["auroc", "--model", "label"]).endswith("--model label --ray")
    assert analysis_entrypoint(["auroc", "--input", "x"]) == "python -m mirrorscan.jobs.stats auroc --input x"
    assert analysis_entrypoint(["null", "--ray"]).count("--ray") == 1


def test_entrypoint_quotes_every_argument():
    cmd = scan_entrypoint("experiments/my exp", resume=True, max_attempts=5, store="s3://b/p",
                          catalog_dsn="host=h dbname=d", progress=False)
    assert cmd == ("python -m mirrorscan.jobs.scan 'experiments/my exp' --max-attempts 5 --resume --store s3://b/p "
                   "--catalog-dsn 'host=h dbname=d' --quiet")


def test_find_invocation_reads_both_scan_lines():
    early = "mirrorscan-invocation: 0f8fad5b-d9cb-469f-a165-70867728950e experiment=fc new\n"
    final = "invocation 0f8fad5b-d9cb-469f-a165-70867728950e  experiment fc  status complete\n"
    assert find_invocation("noise\n" + early) == "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert find_invocation(final) == "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert find_invocation("an invocation without id\n") is None


def test_a_job_on_this_machines_head_runs_this_interpreter_and_elsewhere_the_nodes_python():
    """A head started with ``.venv/bin/ray start --head`` without activating the environment has the system's
    ``python`` on its PATH, which lacks mirrorscan: a job for a head on this machine names this interpreter
    (the machine is the same), a job for a cluster elsewhere its nodes' ``python``."""
    import shlex

    from mirrorscan.cluster.runtime.job_env import job_python, place_job

    runtime_env = load_runtime_env()   # the shipped local profile
    here = place_job(runtime_env, "runtime_env.yaml", "http://127.0.0.1:8265")
    assert here and job_python(here) == shlex.quote(sys.executable)
    cmd = scan_entrypoint("experiments/demo", resume=False, max_attempts=3, store=None, catalog_dsn=None,
                          progress=False, python=job_python(here))
    assert shlex.split(cmd)[:3] == [sys.executable, "-m", "mirrorscan.jobs.scan"]
    assert analysis_entrypoint(["gstudy"], python=job_python(here)).startswith(shlex.quote(sys.executable) + " -m ")
    assert job_python("") == "python"
