"""A sweep autoscales: GPU nodes are added while a model's actor pool has work and released after.

Ray's fake multi-node provider (the one behind ``ray.cluster_utils.AutoscalingCluster``) runs the real
autoscaler (v1 monitor) and starts "cloud" nodes as extra raylets on this machine. The head has no
CPUs; the one worker type carries {CPU: 2, fake_gpu: 1} (fake_gpu stands in for a GPU), min 0, max 2,
idle timeout 6 s. The stand-in engine (``standin_engine``: no model, real trace rows) asks for the
variant's ``num_gpus`` as fake_gpu, so each engine actor needs a worker node of its own.

``AutoscalingCluster`` itself is not used: its ``start()`` runs ``ray stop --force`` (which kills every
Ray process of the machine, other sessions' too) and reads an ``example.yaml`` that the Ray 2.60 wheel
does not ship. The same setup is made here with ``Cluster(head_node_args={"autoscaling_config": …})``:
the head's monitor reads the config (written with the head's GCS port, chosen beforehand) and the
fake nodes it starts are children of this process, ended by pid at teardown.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import pyarrow.compute as pc
import pytest
import standin_engine as standin

from mirrorscan.actors import registry
from mirrorscan.cluster.store.traces import open_store

pytestmark = [pytest.mark.timeout(900), pytest.mark.own_ray]
EXPERIMENT = "autoscale"
IDLE_TIMEOUT_MIN = 0.1
"""Idle minutes before the autoscaler removes a worker node (6 s)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def autoscaling_config(gcs_address: str, worker: dict, *, min_workers: int, max_workers: int) -> dict:
    """A fake-multinode autoscaler config: a CPU-less head and one worker type ``gpu_worker``."""
    return {
        "cluster_name": "mirrorscan-fake", "max_workers": max_workers,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "gpu_worker": {"resources": worker, "node_config": {}, "min_workers": min_workers,
                           "max_workers": max_workers}},
        "head_node_type": "ray.head.default", "upscaling_speed": 1.0, "idle_timeout_minutes": IDLE_TIMEOUT_MIN,
        "auth": {}, "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [], "rsync_exclude": [], "rsync_filter": [],
    }


@pytest.fixture(scope="module")
def autoscaling(tmp_path_factory):
    """A head with the autoscaler and no worker node yet; shut down and tidied after the module."""
    import ray
    from ray._common.network_utils import build_address
    from ray.cluster_utils import Cluster

    from mirrorscan.cluster.runtime.ray_session import ensure_ray
    from conftest import own_ray

    own_ray()
    port = free_port()
    address = build_address(ray._private.services.get_node_ip_address(), port)
    config = tmp_path_factory.mktemp("autoscaler") / "fake_cluster.json"
    config.write_text(json.dumps(autoscaling_config(address, {"CPU": 2, standin.FAKE_GPU: 1,
                                                              "object_store_memory": 150 * 2**20},
                                                    min_workers=0, max_workers=2)))
    env = {"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}   # read by the monitor process
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    known = standin.descendants()
    c = None
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "gcs_server_port": port,
                                                          "autoscaling_config": str(config)})
        ensure_ray(address=c.address)
        yield c
    finally:
        spawned = standin.descendants() - known   # now, while the fake nodes are still children of the monitor
        ray.shutdown()
        if c is not None:
            c.shutdown()
        standin.end_processes(spawned | (standin.descendants() - known))
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def gpu_nodes() -> set[str]:
    """Node ids of the alive nodes that carry a fake GPU."""
    import ray

    return {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(standin.FAKE_GPU)}


def wait_for(predicate, timeout_s: float, poll_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


def test_sweep_adds_gpu_nodes_and_releases_them_after(tmp_path, autoscaling, monkeypatch):
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    monkeypatch.setitem(registry.ENGINES, ("generate", "standin"), ("standin_engine", "SleepEngine"))
    assert gpu_nodes() == set(), "min_workers 0: no GPU node before the sweep"
    variants = [standin.standin_variant(label, num_gpus=1, min_actors=1, max_actors=2,
                                        engine_args={"sleep_s": 0.25}) for label in ("small", "large")]
    cells, instrument = standin.grid_cells(["small", "large"], 120)   # 480 cells per model
    invocation_id = str(uuid.uuid4())
    store_uri = str(tmp_path / "store")
    seen: set[str] = set()
    peak = [0]

    def on_part(rows: int, errors: int, label: str) -> None:
        """Note which GPU nodes are up whenever a part lands."""
        up = gpu_nodes()
        seen.update(up)
        peak[0] = max(peak[0], len(up))
    run_grid(cells, variants, {"small": "standin", "large": "standin"},
             Sweep(standin.run_identity(invocation_id, EXPERIMENT), instrument, store_uri, batch_size=8, pool_size=1,
                   max_attempts=3),
             on_part)

    rows = open_store(store_uri).read(EXPERIMENT, invocation_id)
    ok = rows.filter(pc.is_null(rows.column("error")))
    keys = list(zip(ok["probe_id"].to_pylist(), ok["sample"].to_pylist()))
    assert len(keys) == len(set(keys)) == cells.num_rows == 960
    used = set(rows["node_id"].to_pylist())
    assert used <= seen, "every row ran on a GPU node the autoscaler added"
    assert 1 <= peak[0] <= 2 <= len(seen), "nodes came and went within max_workers = 2"
    pools = {label: set(rows.filter(pc.equal(rows.column("label"), label))["actor_id"].to_pylist())
             for label in ("small", "large")}
    assert all(1 <= len(actors) <= 2 for actors in pools.values()), f"pool bounds min 1, max 2: {pools}"
    assert max(len(actors) for actors in pools.values()) == 2, "a pool with queued work grew to max_actors"
    # after the sweep the pools are gone; idle nodes go after idle_timeout_minutes (bounded wait)
    assert wait_for(lambda: gpu_nodes() == set(), timeout_s=180), f"nodes still up: {gpu_nodes()}"
