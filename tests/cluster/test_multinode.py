"""Faults on a multi-node Ray cluster, on one machine, with nothing lost.

``ray.cluster_utils.Cluster``: a head with no CPUs (the driver only) and two worker nodes with two CPUs
and one ``fake_gpu`` each (a custom resource standing in for a GPU). The engine is the stand-in of
``standin_engine`` (no model, 50–100 ms per batch, real trace rows), one actor per fake GPU, run
through ``cluster.scan.sweep.run_grid`` exactly as a scan does (registered as backend "standin"):

(a) the grid spreads over both nodes and every row says which node and actor answered it;
(c) an actor that dies on a poison cell: that cell ends as error rows (one per attempt), its
    batch-mates and the rest of the grid finish, nothing loops;
(b) a worker node removed mid-run (it leaves one node): the run still finishes every cell;
(d) two tensor-parallel models in one sweep: each pool's placement group is removed when it ends;
(e) two models whose pools fit together run at once (their engine calls overlap), and the parts of both
    reach the caller interleaved, each with its label;
(f) two tensor-parallel models that fit one at a time with max_concurrent_models 2: one waits (no engine
    call of the two overlaps) and both finish.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import standin_engine as standin

from mirrorscan.actors import registry
from mirrorscan.cluster.scan.journal import DIED, INFLIGHT
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.cells import plan_attempts

pytestmark = [pytest.mark.timeout(900), pytest.mark.own_ray]
EXPERIMENT = "multinode"


@pytest.fixture(scope="module")
def cluster():
    """A head (0 CPUs) and two worker nodes {CPU: 2, fake_gpu: 1}; shut down and tidied after the module."""
    import ray
    from ray.cluster_utils import Cluster

    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    from conftest import own_ray

    own_ray()
    known = standin.descendants()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        workers = [c.add_node(num_cpus=2, resources={standin.FAKE_GPU: 1}) for _ in range(2)]
        c.wait_for_nodes(timeout=120)
        ensure_ray(address=c.address)
        yield c, workers
    finally:
        spawned = standin.descendants() - known
        ray.shutdown()
        c.shutdown()
        standin.end_processes(spawned | (standin.descendants() - known))


@pytest.fixture
def standin_backend(monkeypatch):
    """The stand-in engine registered as backend "standin" for this test."""
    monkeypatch.setitem(registry.ENGINES, ("generate", "standin"), ("standin_engine", "SleepEngine"))


def run_sweep(tmp_path, variant, cells: pa.Table, instrument, *, batch_size: int = 8,
              on_part=None) -> tuple[object, str]:
    """Run ``cells`` of one stand-in variant through run_grid into a fresh store; return (store, invocation)."""
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    invocation_id = str(uuid.uuid4())
    store_uri = str(tmp_path / "store")
    run = standin.run_identity(invocation_id, EXPERIMENT)
    run_grid(cells, [variant], {variant.label: "standin"},
             Sweep(run, instrument, store_uri, batch_size=batch_size, pool_size=1, max_attempts=3),
             on_part or (lambda rows, errors, label: None))
    return open_store(store_uri), invocation_id


def keys_of(table: pa.Table) -> list[tuple[str, int]]:
    return list(zip(table["probe_id"].to_pylist(), table["sample"].to_pylist()))


def assert_every_cell_once(rows: pa.Table, cells: pa.Table, *, except_keys: set = frozenset()) -> None:
    ok = rows.filter(pc.is_null(rows.column("error")))
    got = keys_of(ok)
    assert len(got) == len(set(got)), "a cell has two successful rows"
    assert set(got) == set(keys_of(cells)) - set(except_keys)


def worker_node_ids(workers) -> set[str]:
    return {w.node_id for w in workers}


def test_a_grid_spreads_over_nodes_and_rows_say_where(tmp_path, cluster, standin_backend, monkeypatch):
    import ray.data
    from ray.data._internal.execution import streaming_executor_state

    from mirrorscan.cluster.scan.pipeline import EXECUTOR_POLL_S

    _, workers = cluster
    monkeypatch.setattr(streaming_executor_state, "WAIT_FOR_TASK_COMPLETION_TIMEOUT_S", 0.1)   # Ray's own
    variant = standin.standin_variant("spread", num_gpus=1, min_actors=2, max_actors=2,
                                      engine_args={"sleep_s": 0.1})
    cells, instrument = standin.grid_cells(["spread"], 60)
    ctx = ray.data.DataContext.get_current()
    before, ctx.wait_for_min_actors_s = ctx.wait_for_min_actors_s, 300   # both actors up before work starts
    try:
        store, invocation_id = run_sweep(tmp_path, variant, cells, instrument)
    finally:
        ctx.wait_for_min_actors_s = before
    rows = store.read(EXPERIMENT, invocation_id)
    assert rows.num_rows == cells.num_rows == 240
    assert_every_cell_once(rows, cells)
    nodes = set(rows["node_id"].to_pylist())
    assert len(nodes) == 2 and nodes <= worker_node_ids(workers)   # never on the head (no CPUs, no fake GPU)
    pairs = set(zip(rows["actor_id"].to_pylist(), rows["node_id"].to_pylist()))
    actors = {a for a, _ in pairs}
    assert None not in actors and len(actors) == len(pairs) == 2   # one actor per fake GPU, each on one node
    # the sweep's driver set its executor's wait (cluster.scan.pipeline.executor_poll) on the path a scan runs
    assert streaming_executor_state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S == EXECUTOR_POLL_S


def test_c_poison_cell_ends_as_error_rows_and_the_rest_completes(tmp_path, cluster, standin_backend):
    cells, instrument = standin.grid_cells(["poison"], 60)
    poison = cells["probe_id"][77].as_py()
    variant = standin.standin_variant("poison", num_gpus=1, min_actors=2, max_actors=2,
                                      engine_args={"sleep_s": 0.05, "poison": poison})
    store, invocation_id = run_sweep(tmp_path, variant, cells, instrument)
    rows = store.read(EXPERIMENT, invocation_id)
    assert_every_cell_once(rows, cells, except_keys={(poison, 0)})
    mine = rows.filter(pc.equal(rows.column("probe_id"), poison))
    assert mine.num_rows == 3, "one error row per attempt, max_attempts = 3"
    assert sorted(mine["attempt"].to_pylist()) == [1, 2, 3]
    assert all(e.startswith(DIED) for e in mine["error"].to_pylist())
    # its first batch died with it: the batch-mates got an error row at attempt 1, then succeeded alone
    died = rows.filter(pc.starts_with(rows.column("error"), DIED))
    mates = set(died.filter(pc.not_equal(died.column("probe_id"), poison))["probe_id"].to_pylist())
    assert len(mates) == 7   # a batch of 8
    retried = rows.filter(pc.and_(pc.is_in(rows.column("probe_id"), pa.array(sorted(mates))),
                                  pc.is_null(rows.column("error"))))
    assert set(retried["attempt"].to_pylist()) == {2} and retried.num_rows == 7
    # from its second attempt on, the poison cell ran alone, so it died alone
    assert sorted(zip(mine["attempt"].to_pylist(), mine["batch_size"].to_pylist()))[1:] == [(2, 1), (3, 1)]
    # what a resume would plan: nothing to run, the poison cell given up
    todo, given_up = plan_attempts(cells.drop_columns(["attempt", "seed"]),
                                   rows.select(["probe_id", "sample", "error"]), 3)
    assert todo.num_rows == 0 and given_up["probe_id"].to_pylist() == [poison]
    inflight = tmp_path / "store" / EXPERIMENT / invocation_id / INFLIGHT
    assert not any(p.is_file() for p in inflight.rglob("*")), "markers are removed once settled"


def engine_intervals(rows: pa.Table) -> dict[str, list[tuple[float, float]]]:
    """Per label, the (start, end) wall-clock seconds of each engine call (a batch: its rows end at
    ``created_at``, ``total_ms`` after the call began)."""
    out: dict[str, set] = {}
    for label, created, total_ms in zip(rows["label"].to_pylist(), rows["created_at"].to_pylist(),
                                        rows["total_ms"].to_pylist()):
        end = created.timestamp()
        out.setdefault(label, set()).add((round(end - total_ms / 1000, 2), round(end, 2)))
    return {label: sorted(spans) for label, spans in out.items()}


def overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds during which some call of ``a`` and some call of ``b`` ran together."""
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def test_e_two_models_that_fit_run_at_once(tmp_path, cluster, standin_backend):
    """Two one-GPU models on a cluster of two fake GPUs with max_concurrent_models 2: both pools start at
    once, so their engine calls overlap (one after the other they could not: the first pool's actor waits
    at the rendezvous for the second's, in vain, and then answers alone), and the caller hears parts of both
    models, interleaved, each with its label."""
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    meet = tmp_path / "rendezvous"   # each actor waits on its first batch until both have one
    meet.mkdir()
    variants = [standin.standin_variant(label, num_gpus=1, min_actors=1, max_actors=1,
                                        engine_args={"sleep_s": 0.3, "rendezvous": str(meet), "peers": 2})
                for label in ("left", "right")]
    cells, instrument = standin.grid_cells([v.label for v in variants], n_pairs=10)   # 40 cells, 5 batches each
    invocation_id, store_uri = str(uuid.uuid4()), str(tmp_path / "store")
    heard, started = [], []
    run_grid(cells, variants, {v.label: "standin" for v in variants},
             Sweep(standin.run_identity(invocation_id, EXPERIMENT), instrument, store_uri, batch_size=8, pool_size=1,
                   max_concurrent_models=2),
             lambda rows, errors, label: heard.append(label), on_model=lambda v, warm: started.append(v.label))
    rows = open_store(store_uri).read(EXPERIMENT, invocation_id)
    assert_every_cell_once(rows, cells)
    spans = engine_intervals(rows)
    assert overlap_s(spans["left"], spans["right"]) > 0.1, f"the two pools never ran together: {spans}"
    assert started == ["left", "right"]
    assert set(heard) == {"left", "right"} and len(heard) == 10
    last = {label: max(i for i, x in enumerate(heard) if x == label) for label in ("left", "right")}
    first = {label: heard.index(label) for label in ("left", "right")}
    assert first["right"] < last["left"] and first["left"] < last["right"], f"parts came one model after the other: {heard}"


def test_b_node_removed_mid_run_every_cell_once(tmp_path, cluster, standin_backend):
    c, workers = cluster
    victim = workers[1]
    variant = standin.standin_variant("lose", num_gpus=1, min_actors=2, max_actors=2,
                                      engine_args={"sleep_s": 0.1})
    cells, instrument = standin.grid_cells(["lose"], 120)
    seen = {"rows": 0, "removed_at": None}
    store_now = open_store(str(tmp_path / "store"))

    def on_part(rows: int, errors: int, label: str) -> None:
        """Once ≥ 96 rows landed and some of them came from the victim's actor, remove the victim."""
        seen["rows"] += rows
        if seen["removed_at"] is None and seen["rows"] >= 96:
            landed = store_now.dataset(EXPERIMENT).to_table(columns=["node_id"])
            if victim.node_id in set(landed["node_id"].to_pylist()):
                seen["removed_at"] = seen["rows"]
                c.remove_node(victim)
    store, invocation_id = run_sweep(tmp_path, variant, cells, instrument, on_part=on_part)
    assert seen["removed_at"] is not None, "the node was never removed"
    rows = store.read(EXPERIMENT, invocation_id)
    assert_every_cell_once(rows, cells)
    ok = rows.filter(pc.is_null(rows.column("error")))
    by_node = pc.value_counts(ok.column("node_id")).to_pylist()
    counts = {d["values"]: d["counts"] for d in by_node}
    assert victim.node_id in counts and workers[0].node_id in counts
    assert counts[workers[0].node_id] > cells.num_rows / 2   # the survivor finished what the lost node held
    todo, _ = plan_attempts(cells.drop_columns(["attempt", "seed"]), rows.select(["probe_id", "sample", "error"]), 3)
    assert todo.num_rows == 0


def test_d_tensor_parallel_pools_release_their_placement_groups(tmp_path, cluster, standin_backend):
    """Two tensor-parallel models (2 fake GPUs each, packed on one node) on a node that holds one group at
    a time: the second model is placed only if the first model's group was removed when its pool ended;
    afterwards no group is left reserving the node's fake GPUs."""
    import ray
    from ray.util.placement_group import placement_group_table

    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    c, _ = cluster
    c.add_node(num_cpus=2, resources={standin.FAKE_GPU: 2})
    c.wait_for_nodes(timeout=120)
    variants = [standin.standin_variant(label, tensor_parallel_size=2, min_actors=1, max_actors=1,
                                        engine_args={"sleep_s": 0.02}) for label in ("tp-first", "tp-second")]
    cells, instrument = standin.grid_cells([v.label for v in variants], n_pairs=4)
    invocation_id, store_uri = str(uuid.uuid4()), str(tmp_path / "store")
    run_grid(cells, variants, {v.label: "standin" for v in variants},
             Sweep(standin.run_identity(invocation_id, EXPERIMENT), instrument, store_uri, batch_size=8, pool_size=1),
             lambda rows, errors, label: None)
    rows = open_store(store_uri).read(EXPERIMENT, invocation_id)
    assert_every_cell_once(rows, cells)
    assert {"tp-first", "tp-second"} == set(rows.column("label").unique().to_pylist())
    groups = [g for g in placement_group_table().values() if g["name"].startswith("engine-tp-")]
    assert len(groups) == 2 and all(g["state"] == "REMOVED" for g in groups)
    deadline = time.monotonic() + 60   # the resource view catches up with a removal asynchronously
    while ray.available_resources().get(standin.FAKE_GPU, 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get(standin.FAKE_GPU, 0) >= 2   # the node's fake GPUs are free again


def test_f_models_that_fit_one_at_a_time_take_turns(tmp_path, cluster, standin_backend):
    """Two tensor-parallel models (2 fake GPUs each, on one node) where one node offers 2: with
    max_concurrent_models 2 both ask at once, the second's placement group waits as demand until the
    first pool ends and removes its group, so no engine call of the two overlaps, and both finish."""
    import ray

    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    def big_nodes() -> int:
        return sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get(standin.FAKE_GPU, 0) >= 2)

    c, _ = cluster
    if big_nodes() == 0:   # test_d adds it when run before
        c.add_node(num_cpus=2, resources={standin.FAKE_GPU: 2})
        c.wait_for_nodes(timeout=120)
    assert big_nodes() == 1, "the test needs exactly one node that holds a 2-GPU group"
    variants = [standin.standin_variant(label, tensor_parallel_size=2, min_actors=1, max_actors=1,
                                        engine_args={"sleep_s": 0.2}) for label in ("turn-first", "turn-second")]
    cells, instrument = standin.grid_cells([v.label for v in variants], n_pairs=6)   # 24 cells, 3 batches each
    invocation_id, store_uri = str(uuid.uuid4()), str(tmp_path / "store")
    run_grid(cells, variants, {v.label: "standin" for v in variants},
             Sweep(standin.run_identity(invocation_id, EXPERIMENT), instrument, store_uri, batch_size=8, pool_size=1,
                   max_concurrent_models=2),
             lambda rows, errors, label: None)
    rows = open_store(store_uri).read(EXPERIMENT, invocation_id)
    assert_every_cell_once(rows, cells)
    spans = engine_intervals(rows)
    assert set(spans) == {"turn-first", "turn-second"}
    assert overlap_s(spans["turn-first"], spans["turn-second"]) == 0, f"both ran at once on one 2-GPU node: {spans}"
