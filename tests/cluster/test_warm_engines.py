"""Warm engines (cluster/runtime/warm_engines.py) on real Ray Serve with the tiny random model and a real catalog.

A warm scan and a cold scan of the same experiment store the same rows cell by cell, apart from where and when
each ran; the warm one never loads the model in its own actors (its rows name the Serve replica). Two scans of
different experiments, two drivers at once, share one engine and both finish complete. ``engines list`` shows
what runs and ``engines down`` stops it, after which scans are cold again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest

from mirrorscan.cluster.runtime import warm_engines as we
from mirrorscan.cluster.scan.records import ScanOptions
from mirrorscan.cluster.scan.run import ScanRun
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec

WHERE_AND_WHEN = {"invocation_id", "actor_id", "node_id", "hostname", "created_at", "ttft_ms", "total_ms",
                  "prefill_ms", "decode_tok_s", "intervals_ms", "n_chunks", "batch_size", "started_at", "ttft_answer_ms"}
"""Columns that say where and when a row was answered (and which invocation holds it): the only ones allowed to
differ between a warm and a cold scan. ``batch_size`` is the engine call's size, which Ray Data's block cutting
sets for both alike; it is left out only because it describes the call, not the answer."""


def experiment(root: Path, name: str, model: Path, pairs: str, temperature: float = 0.8) -> Path:
    """A forced-choice experiment folder on ``model``: sampled cells (two samples each) so that seeds matter."""
    exp = root / name
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\n" + pairs)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "temperature": temperature, "samples": 2, "batch_size": 4,
        "models": [{"model": str(model), "label": "tiny", "max_tokens": 6}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "bare_vs"]}}))
    return exp


def scan(exp: Path, store: str, dsn: str):
    """One scan of ``exp`` in this process (the shared local Ray); its result."""
    run = ScanRun(load_spec(exp), ScanOptions(store=store, catalog_dsn=dsn, quiet=True))
    run.check()
    return run.execute()


def rows_of(store: str, experiment_name: str, invocation_id: str) -> pa.Table:
    """An invocation's rows, ordered by (probe_id, sample, attempt)."""
    t = open_store(store).read(experiment_name, invocation_id)
    return t.sort_by([("probe_id", "ascending"), ("sample", "ascending"), ("attempt", "ascending")])


@pytest.fixture(scope="module")
def serve_module(ray_local):
    """Serve on the shared Ray for this module, shut down afterwards unless another application runs."""
    yield
    from ray import serve

    we.stop_engines()
    if not serve.status().applications:
        serve.shutdown()


@pytest.fixture
def serve_session(serve_module):
    """Every warm engine a test started is stopped after it (each test starts from none)."""
    yield
    we.stop_engines()


@pytest.mark.timeout(900)
def test_a_warm_scan_stores_the_rows_of_a_cold_one_and_never_loads_the_model(tmp_path, tiny_dir, catalog_dsn,
                                                                            serve_session, monkeypatch, capsys):
    exp = experiment(tmp_path, "warm_fc", tiny_dir, "vw,vodka,whiskey\ncd,cat,dog\nsr,sun,rain\n")
    store = str(tmp_path / "store")
    spec = load_spec(exp)
    targets = we.engine_targets(spec)
    assert [t.kind for t in targets] == ["generate"] and targets[0].variant.label == "tiny"

    import ray

    from mirrorscan.jobs.dry_run import dry_run

    from mirrorscan.cluster.scan.progress import RunProgress

    heard, told = [], RunProgress.on_model   # what the progress line was told about each model's engine
    monkeypatch.setattr(RunProgress, "on_model", lambda self, v, warm=None: (heard.append((v.label, warm)),
                                                                             told(self, v, warm))[1])
    monkeypatch.setenv(we.SWITCH_ENV, "0")
    cold = scan(exp, store, catalog_dsn)
    monkeypatch.delenv(we.SWITCH_ENV)
    assert we.running_engine(targets[0].engine_cls, targets[0].variant, targets[0].model_source) is None
    name = targets[0].name
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert "no Ray cluster named by RAY_ADDRESS" in we.dry_run_lines(spec)[0]
    monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    assert we.dry_run_lines(spec) == [f"engines: tiny: starts its own engine actors (`mirrorscan engines up` would "
                                      f"start warm engine {name})"]

    assert we.start_engines(targets, spec.experiment, we.Scaling(min_replicas=1)) == [(name, True)]
    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn)
    assert f"engines: tiny: uses warm engine {name} (1 replica(s) running)" in capsys.readouterr().out
    assert we.start_engines(targets, spec.experiment) == [(name, False)]   # already up: left as it is
    warm = scan(exp, store, catalog_dsn)
    assert cold.status == warm.status == "complete" and cold.counts["cells"] == warm.counts["cells"] == 24
    assert heard == [("tiny", None), ("tiny", name)]   # the warm scan's line names the engine, not a model load

    a, b = rows_of(store, "warm_fc", cold.invocation_id), rows_of(store, "warm_fc", warm.invocation_id)
    assert a.num_rows == b.num_rows == 24 and a.column_names == b.column_names
    compared = [c for c in a.column_names if c not in WHERE_AND_WHEN]
    assert {"response", "class", "seed", "label", "experiment", "system_text", "user_text", "completion_tokens",
            "generation_overrides", "model_canonical"} <= set(compared)
    for column in compared:
        assert a.column(column).to_pylist() == b.column(column).to_pylist(), column
    assert set(a.column("invocation_id").to_pylist()) == {cold.invocation_id}
    assert set(b.column("invocation_id").to_pylist()) == {warm.invocation_id}
    assert len(set(b.column("response").to_pylist())) > 1   # sampled text: the seeds reached the engine

    # the warm rows were answered by the Serve replica, the cold ones by the scan's own engine actor
    engines = we.running_engines()
    replicas = engines[name]["replicas"]
    assert set(b.column("actor_id").to_pylist()) == {r["actor_id"] for r in replicas.values()}
    assert not set(a.column("actor_id").to_pylist()) & set(b.column("actor_id").to_pylist())
    assert engines[name]["cells"] == 24 and engines[name]["requests"] >= 6   # batches of 4
    # every cell of both scans has its inference_log row
    with psycopg.connect(catalog_dsn) as conn:
        for inv in (cold.invocation_id, warm.invocation_id):
            n = conn.execute("SELECT count(*) FROM inference_log WHERE invocation_id = %s", (inv,)).fetchone()[0]
            assert n == 24


@pytest.mark.timeout(900)
def test_two_drivers_scanning_two_experiments_share_one_engine(tmp_path, tiny_dir, catalog_dsn, serve_session):
    import ray

    first = experiment(tmp_path, "share_one", tiny_dir, "vw,vodka,whiskey\ncd,cat,dog\n")
    second = experiment(tmp_path, "share_two", tiny_dir, "sr,sun,rain\nhb,hot,cold\nup,up,down\n")
    store = str(tmp_path / "store")
    spec = load_spec(first)
    [target] = we.engine_targets(spec)
    assert we.engine_targets(load_spec(second))[0].name == target.name   # other experiment, same engine
    name = we.start_engines([target], spec.experiment, we.Scaling(min_replicas=1))[0][0]
    before = we.running_engines()[name]["cells"]

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "disabled",
           "MIRRORSCAN_CATALOG_DSN": catalog_dsn}
    command = [sys.executable, "-m", "mirrorscan.jobs.cli", "scan", "--store", store]
    drivers = [subprocess.Popen([*command, str(exp)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for exp in (first, second)]
    outputs = [None, None]

    def wait(i):
        outputs[i] = drivers[i].communicate(timeout=600)[0]

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [d.returncode for d in drivers] == [0, 0], outputs
    store_ = open_store(store)
    for exp_name, cells in (("share_one", 16), ("share_two", 24)):
        table = store_.dataset(exp_name).to_table()
        assert table.num_rows == cells and table.column("error").null_count == cells, exp_name
        assert set(table.column("experiment").to_pylist()) == {exp_name}
    assert we.running_engines()[name]["cells"] - before == 40   # both scans' batches went to the one engine


@pytest.mark.timeout(600)
def test_the_engines_verb_starts_lists_and_stops_them_and_scans_are_cold_again(tmp_path, tiny_dir, catalog_dsn,
                                                                              serve_session, capsys, monkeypatch):
    import ray

    from mirrorscan.grid.errors import EXIT_CONFIG
    from mirrorscan.jobs.engines import main

    exp = experiment(tmp_path, "down_fc", tiny_dir, "vw,vodka,whiskey\n")
    [target] = we.engine_targets(load_spec(exp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["list"]) == EXIT_CONFIG   # no cluster named: an engine would die with the command
    assert "no Ray cluster named" in capsys.readouterr().err
    address = ["--address", ray.get_runtime_context().gcs_address]
    assert main(["up", str(exp), "--min-replicas", "1", "--max-replicas", "2", *address]) == 0
    said = capsys.readouterr().out
    name = target.name
    assert f"engines: {name}  tiny (" in said and "started in" in said
    assert main(["list", *address]) == 0
    [header, line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith(("NAME", name))]
    assert "generate" in line and "hf/float32" in line and " 1 [1-2] on " in line and "0 (0 cells)" in line
    listed = we.running_engines()[name]
    assert listed["model"] == str(tiny_dir) and listed["replica_states"].get("RUNNING") == 1
    assert len(listed["replicas"]) == 1
    with pytest.raises(Exception, match="no warm engine named"):
        we.stop_engines(["mirrorscan-engine-nope"])
    assert main(["down", name, *address]) == 0 and f"{name} stopped" in capsys.readouterr().out
    assert name not in we.running_engines()
    assert we.running_engine(target.engine_cls, target.variant, target.model_source) is None
    result = scan(exp, str(tmp_path / "store"), catalog_dsn)
    assert result.status == "complete"
    rows = open_store(str(tmp_path / "store")).read("down_fc", result.invocation_id)
    assert not set(rows.column("actor_id").to_pylist()) & {r["actor_id"] for r in listed["replicas"].values()}


@pytest.mark.timeout(1200)
def test_a_replica_killed_during_a_warm_scan_loses_no_cell_and_stores_none_twice(tmp_path, tiny_dir, catalog_dsn,
                                                                                serve_session):
    """The replica is killed once the engine has answered a batch of the scan; whether a batch was in flight
    at that moment is up to the scheduler, so the test holds what must be true either way: the scan completes,
    and every cell has exactly one row without an error (a died batch's cells are retried by the journal)."""
    import ray

    pairs = "".join(f"p{i},w{i}a,w{i}b\n" for i in range(12))
    exp = experiment(tmp_path, "kill_fc", tiny_dir, pairs, temperature=0.0)
    config = json.loads((exp / "config.json").read_text())
    config["models"][0]["max_tokens"] = 48   # longer batches: more of the run has a batch in flight
    (exp / "config.json").write_text(json.dumps(config))
    [target] = we.engine_targets(load_spec(exp))
    [(name, _)] = we.start_engines([target], "kill_fc", we.Scaling(min_replicas=1))
    [first] = list(we.running_engines()[name]["replicas"])
    killed = threading.Event()

    def kill_after_first_batch():
        wait_for(lambda: we.running_engines()[name]["requests"] >= 1, "the first batch answered", 600)
        ray.kill(ray.get_actor(first, namespace="serve"), no_restart=True)
        killed.set()

    killer = threading.Thread(target=kill_after_first_batch, daemon=True)
    killer.start()
    result = scan(exp, str(tmp_path / "store"), catalog_dsn)
    killer.join(timeout=60)
    assert killed.is_set() and result.status == "complete" and result.counts["cells"] == 96
    rows = open_store(str(tmp_path / "store")).read("kill_fc", result.invocation_id)
    good = rows.filter(pa.compute.is_null(rows.column("error")))
    keys = list(zip(good.column("probe_id").to_pylist(), good.column("sample").to_pylist()))
    assert len(keys) == len(set(keys)) == 96   # every cell once, none twice
    assert first not in we.running_engines()[name]["replicas"]   # a killed replica is not listed as running


@pytest.mark.timeout(900)
def test_a_warm_scan_killed_with_9_resumes_to_every_cell_exactly_once(tmp_path, tiny_dir, catalog_dsn, serve_session):
    """The journal and resume hold against a warm engine: a driver joined to the cluster sends its batches to the
    engine and is killed with -9 mid-run (its invocation stays ``running``); ``--resume`` finishes the grid with
    every cell exactly once, every row answered by the engine's replica, which kept running throughout."""
    import ray
    from processes import kill_session, wait_for_driver_gone, wait_for_parts

    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.jobs.scan import run_scan

    pairs = "".join(f"r{i},w{i}a,w{i}b\n" for i in range(12))
    exp = experiment(tmp_path, "resume_fc", tiny_dir, pairs, temperature=0.0)
    config = json.loads((exp / "config.json").read_text())
    config["models"][0]["max_tokens"] = 24   # enough work per batch that the kill lands mid-run
    (exp / "config.json").write_text(json.dumps(config))
    [target] = we.engine_targets(load_spec(exp))
    [(name, _)] = we.start_engines([target], "resume_fc", we.Scaling(min_replicas=1))
    replica_actors = {r["actor_id"] for r in we.running_engines()[name]["replicas"].values()}
    store_dir = str(tmp_path / "store")
    store = open_store(store_dir)
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "disabled",
           "MIRRORSCAN_CATALOG_DSN": catalog_dsn}
    proc = subprocess.Popen([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", "--store", store_dir, "--quiet",
                             str(exp)], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        parts = wait_for_parts(store, "resume_fc", proc, 3)
    finally:
        kill_session(proc)
    wait_for_driver_gone(proc.pid)
    invocation_id = parts[0].split("/")[-3]
    before = store.read("resume_fc", invocation_id)
    assert 0 < before.num_rows < 96
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "running"

    done = run_scan(str(exp), resume=True, store=store_dir, catalog_dsn=catalog_dsn, quiet=True)
    assert done.invocation_id == invocation_id and done.status == "complete"
    rows = store.read("resume_fc", invocation_id)
    ok = rows.filter(pa.compute.is_null(rows.column("error")))
    keys = list(zip(ok.column("probe_id").to_pylist(), ok.column("sample").to_pylist()))
    assert len(keys) == len(set(keys)) == 96 and ok.num_rows == rows.num_rows   # every cell once, none redone
    assert set(zip(before.column("probe_id").to_pylist(), before.column("sample").to_pylist())) <= set(keys)
    assert set(rows.column("actor_id").to_pylist()) == replica_actors   # the engine answered, before and after
    assert we.running_engines()[name]["status"].endswith("RUNNING")


def replicas_running(name: str) -> int:
    """Running replicas of warm engine ``name`` as Serve reports them."""
    return we.running_engines()[name]["replica_states"].get("RUNNING", 0)


def wait_for(condition, what: str, deadline_s: float) -> None:
    """Poll ``condition`` every 0.5 s until it holds, or fail naming ``what`` after ``deadline_s`` seconds: a
    bound generous enough for a replica's start on a loaded 2-core machine, not a timing the test relies on."""
    import time

    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"not within {deadline_s:.0f} s: {what}"
        time.sleep(0.5)


@pytest.mark.timeout(1800)
def test_an_engine_scales_out_with_batches_in_flight_and_to_zero_when_idle(tmp_path, tiny_dir, serve_session):
    """1 → 2 replicas while more batches are in flight than one replica takes, then 0 once idle; every batch
    sent meanwhile is answered in full. The deadlines only bound the waits (Serve decides from averaged load)."""
    from ray import serve

    from fc_grid import fc_rendered

    exp = experiment(tmp_path, "scale_fc", tiny_dir, "vw,vodka,whiskey\ncd,cat,dog\n")
    [target] = we.engine_targets(load_spec(exp))
    scaling = we.Scaling(min_replicas=0, max_replicas=2, initial_replicas=1, idle_timeout_s=1.0,
                         downscale_delay_s=1.0, upscale_delay_s=1.0, look_back_period_s=2.0)
    [(name, _)] = we.start_engines([target], "scale_fc", scaling)
    assert replicas_running(name) == 1
    batch = fc_rendered(["tiny"], pa.table({"pair_id": ["vw", "cd"], "word_a": ["vodka", "cat"],
                                            "word_b": ["whiskey", "dog"]}), ["english_strict"], ["AB", "BA"])
    handle = serve.get_app_handle(name)
    answered, stop = [], threading.Event()

    def sender():   # one batch in flight at all times; six senders: six times what one replica takes at once
        while not stop.is_set():
            answered.append(handle.answer.remote(batch).result(timeout_s=300))

    senders = [threading.Thread(target=sender) for _ in range(6)]
    for t in senders:
        t.start()
    try:
        wait_for(lambda: replicas_running(name) == 2, "a second replica while batches queue", 600)
    finally:
        stop.set()
        for t in senders:
            t.join()
    assert answered and all(t.num_rows == batch.num_rows and t.column("error").null_count == t.num_rows
                            for t in answered)
    wait_for(lambda: we.running_engines()[name]["requests"] == len(answered), "every batch counted", 30)
    wait_for(lambda: replicas_running(name) == 0, "zero replicas once idle", 300)
    wait_for(lambda: not we.running_engines()[name]["replicas"], "the stopped replicas leaving the registry", 30)
    again = handle.answer.remote(batch).result(timeout_s=300)   # the next batch starts a replica again
    assert again.column("response").to_pylist() == answered[0].column("response").to_pylist()
    assert replicas_running(name) == 1


def test_the_key_is_what_shapes_answers_and_nothing_else(tiny_dir):
    from dataclasses import replace

    from mirrorscan.actors.hf_sampler import HFSampler
    from mirrorscan.grid.records import ModelVariant

    v = ModelVariant(label="a", model=str(tiny_dir), max_tokens=6)
    key = we.engine_key(HFSampler, v, str(tiny_dir))
    assert we.engine_key(HFSampler, replace(v, label="b", max_actors=4, memory_gb=2.0), str(tiny_dir)) == key
    for changed in (replace(v, dtype="bfloat16"), replace(v, max_tokens=7), replace(v, temperature=0.5),
                    replace(v, chat_template_kwargs={"enable_thinking": False}), replace(v, device="cuda")):
        assert we.engine_key(HFSampler, changed, str(tiny_dir)) != key
    assert we.engine_key(HFSampler, v, "/elsewhere") != key
    with pytest.raises(Exception, match="nothing to keep warm"):
        we.warmable(replace(v, backend="openai"))
