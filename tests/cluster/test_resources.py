"""A scan whose engines ask for resources no node has and no autoscaler can add is refused before anything is
written, in one line naming the model and the resource (Ray would queue the engines forever: "Cluster resources
are not enough … may hang forever"); one that only an autoscaler can meet waits, bounded by resource_wait_s.
This machine has no GPU: ``"device": "cuda"`` is such a config. Real local Ray, real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from mirrorscan.cluster.scan.resources import Capacity, ResourceWatch, assess, check_resources, local_capacity
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


def cuda_experiment(tmp_path, model: str, **entry) -> Path:
    exp = tmp_path / "on_cuda"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ncd,cat,dog\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice",
        "models": [{"model": model, "label": "tiny", "max_tokens": 4, "device": "cuda", **entry}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}))
    return exp


def no_invocation_written(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        table = conn.execute("SELECT to_regclass('scan_invocations')").fetchone()[0]
        return table is None or conn.execute("SELECT count(*) FROM scan_invocations").fetchone()[0] == 0


@pytest.mark.skipif(local_capacity(exact=False).nodes[0].get("GPU"), reason="this machine has a GPU")
@pytest.mark.parametrize("dry", [False, True])
def test_a_cuda_model_on_a_machine_without_gpu_is_refused_at_once(tmp_path, tiny_dir, catalog_dsn, dry):
    exp, store = cuda_experiment(tmp_path, str(tiny_dir)), tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(exp), "--store", str(store),
                           "--catalog-dsn", catalog_dsn, *(["--dry-run"] if dry else [])],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "models[0].device: model tiny needs 1 GPU per engine actor" in lines[0]
    assert "no node of this machine's local Ray has it (no GPU per node) and no autoscaler can add one" in lines[0]
    assert took < 90   # refused, not queued (the queue waited until Ctrl-C)
    assert not store.exists() or not any(store.rglob("*"))   # nothing written: no store files …
    assert no_invocation_written(catalog_dsn)                 # … and no catalog row


@pytest.mark.timeout(300)
def test_the_running_ray_is_what_a_scan_is_held_against(tmp_path, tiny_dir, catalog_dsn, ray_local):
    from mirrorscan.cluster.scan.records import ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun

    exp = cuda_experiment(tmp_path, str(tiny_dir), device="cpu", memory_gb=4096)   # 4 TiB: no node has it
    run = ScanRun(load_spec(exp), ScanOptions(store=str(tmp_path / "store"), catalog_dsn=catalog_dsn, quiet=True))
    with pytest.raises(ConfigError) as err:
        run.execute()
    assert err.value.field == "models[0].memory_gb"
    assert "model tiny needs 4.1e+03 GiB of memory per engine actor, but no node of the Ray cluster at" in str(err.value)
    assert no_invocation_written(catalog_dsn)


GPU_NODE = {"CPU": 4.0, "GPU": 1.0, "memory": 16 * 2.0**30}
CPU_HEAD = {"CPU": 8.0, "memory": 32 * 2.0**30}


@pytest.mark.parametrize("capacity, verdict", [
    (Capacity("c", (CPU_HEAD, GPU_NODE)), "now"),
    (Capacity("c", (CPU_HEAD,)), "never"),                                    # no node, no autoscaler
    (Capacity("c", (CPU_HEAD,), (GPU_NODE,), True), "wait"),                  # a node type of that shape
    (Capacity("c", (CPU_HEAD,), ({"CPU": 4.0, "fake_gpu": 1.0},), True), "never"),   # types without a GPU
    (Capacity("c", (CPU_HEAD,), (), True), "wait"),                           # an autoscaler naming no types
])
def test_what_a_cluster_can_hold_now_later_or_never(capacity, verdict):
    assert assess({"CPU": 1.0, "GPU": 1.0}, capacity)[0] == verdict


def test_a_custom_resource_is_named_and_resources_a_node_lacks_together_are_all_named():
    assert assess({"CPU": 1.0, "fake_gpu": 1.0}, Capacity("c", (CPU_HEAD,))) == ("never", ["fake_gpu"])
    apart = Capacity("c", ({"CPU": 1.0}, {"GPU": 1.0}))
    assert assess({"CPU": 1.0, "GPU": 1.0}, apart) == ("never", ["CPU", "GPU"])


def test_check_names_the_tensor_parallel_field_and_reports_the_waits(tmp_path, tiny_dir):
    spec = load_spec(cuda_experiment(tmp_path, str(tiny_dir), backend="vllm", tensor_parallel_size=2))
    with pytest.raises(ConfigError) as err:
        check_resources(spec, Capacity("a cluster", (CPU_HEAD, GPU_NODE)))
    assert err.value.field == "models[0].tensor_parallel_size" and "needs 2 GPUs per engine actor" in str(err.value)
    assert check_resources(spec, Capacity("a cluster", (CPU_HEAD,), ({"CPU": 8.0, "GPU": 4.0},), True)) == \
        {"tiny": "2 GPUs"}
    assert check_resources(spec, None) == {}   # a cluster a dry run does not join: checked by the scan


def test_a_wait_ends_when_a_node_joins_or_runs_out_after_resource_wait_s():
    expired, room = [], threading.Event()
    nodes = [CPU_HEAD]
    watch = ResourceWatch(30.0, lambda: Capacity("c", tuple(nodes)), lambda *a: expired.append(a), every_s=0.05)
    watch.watch("big", {"GPU": 1.0}, "1 GPU", on_room=room.set)
    time.sleep(0.2)
    nodes.append(GPU_NODE)   # the autoscaler's node joined
    assert room.wait(5) and not expired and not watch.fired

    watch = ResourceWatch(0.3, lambda: Capacity("c", (CPU_HEAD,)), lambda *a: expired.append(a), every_s=0.05)
    watch.watch("big", {"GPU": 1.0}, "1 GPU")
    deadline = time.monotonic() + 5
    while not expired and time.monotonic() < deadline:
        time.sleep(0.05)
    assert expired == [("big", "1 GPU")] and watch.fired


def test_resource_wait_s_comes_from_the_environment(monkeypatch):
    from mirrorscan.cluster.scan.resources import RESOURCE_WAIT_S, resource_wait_s

    monkeypatch.delenv("MIRRORSCAN_RESOURCE_WAIT_S", raising=False)
    assert resource_wait_s() == RESOURCE_WAIT_S == 600
    monkeypatch.setenv("MIRRORSCAN_RESOURCE_WAIT_S", "45")
    assert resource_wait_s() == 45
    monkeypatch.setenv("MIRRORSCAN_RESOURCE_WAIT_S", "soon")
    with pytest.raises(ConfigError, match="MIRRORSCAN_RESOURCE_WAIT_S"):
        resource_wait_s()


def test_http_engines_are_counted_as_their_ray_resources_ask():
    from mirrorscan.actors.registry import ENGINES, engine_class
    from mirrorscan.cluster.scan.resources import API_ENGINE_CPUS
    from mirrorscan.grid.spec import API_BACKENDS

    http = [(kind, backend) for kind, backend in ENGINES if backend in API_BACKENDS]
    assert len(http) == 4
    for kind, backend in http:
        assert engine_class(backend, kind).ray_resources(None) == {"num_cpus": API_ENGINE_CPUS}, (kind, backend)


def test_a_model_only_an_autoscaler_can_place_says_what_it_waits_for_and_the_wait_is_bounded(
        tmp_path, tiny_dir, monkeypatch, capsys):
    import _thread
    from types import SimpleNamespace

    from tqdm import tqdm

    from mirrorscan.cluster.scan import resources
    from mirrorscan.cluster.scan.progress import ModelProgress
    from mirrorscan.cluster.scan.stages import grid_cells

    spec = load_spec(cuda_experiment(tmp_path, str(tiny_dir)))
    settings = spec.settings()
    run = SimpleNamespace(resource_waits={"tiny": "1 GPU"}, settings=settings,
                          options=SimpleNamespace(resource_wait_s=0.3, quiet=False))
    progress = SimpleNamespace(per_model=ModelProgress(grid_cells(settings), "scan on_cuda"),
                               bar=tqdm(total=1, disable=True))
    progress.on_model = progress.per_model.loading
    stopped = threading.Event()
    monkeypatch.setattr(resources, "ray_capacity", lambda: Capacity("c", (CPU_HEAD,), (GPU_NODE,), True))
    monkeypatch.setattr(_thread, "interrupt_main", stopped.set)

    watch = resources.watch_waits(run, progress)
    watch.on_model(settings.models[0])
    assert progress.per_model.description() == ("scan on_cuda · loading tiny (transformers): waits for a node with "
                                                "1 GPU (an autoscaler adds it; at most 0.3 s)")
    assert stopped.wait(10)   # no node joined within resource_wait_s: the scan is stopped as Ctrl-C stops it
    err = capsys.readouterr().err
    assert "note: model tiny waits for a node with 1 GPU" in err   # no bar drawn: a note says it
    assert "error: model tiny waited 0.3 s (resource_wait_s) for a node with 1 GPU, and none joined" in err
    watch.stop()
