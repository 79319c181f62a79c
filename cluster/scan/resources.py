"""Whether a Ray cluster can ever place a scan's engine actors: checked before the invocation is written.

One engine actor of a model asks Ray for resources on one node (``actor_demand``): a CPU (a quarter for an
HTTP engine), its GPUs (``num_gpus``: 1 for hf or vLLM on ``cuda``, or ``tensor_parallel_size`` packed on one
node), its ``memory_gb``, and any custom resource its engine names. Ray queues an actor that no node can
hold and waits for the cluster to grow ("Cluster resources are not enough … may hang forever unless the
cluster scales up"): forever where nothing grows it. So each model's demand is held against the cluster's
``Capacity`` first (``ScanRun.check``: a scan, a submitted job, reproduce, and ``scan --dry-run``):

- its nodes: a local Ray's one node as Ray resolves it on this machine (the CPUs mirrorscan starts it with,
  the GPUs Ray detects, its memory resource; nothing is started to learn it; a dry run, which imports no Ray,
  counts the GPUs ``$CUDA_VISIBLE_DEVICES`` or the NVIDIA device files name and all of the memory), or the
  live nodes of the Ray this process already runs or joins (``--ray-address`` / ``$RAY_ADDRESS``; a dry run
  joins none and leaves a cluster's check to the scan);
- what an autoscaler can add: the node types of the cluster config an autoscaler reports to Ray (autoscaler
  v2 and KubeRay: ``ray._private.state.state.get_cluster_config()``, node groups whose max count is not 0).
  An autoscaler that reports no node types (the v1 monitor ``ray up`` starts, which only posts its status in
  Ray's key-value store) may add anything.

A demand that no node has and no autoscaler can add is a ConfigError naming the model, the field and the
resource (exit 2, nothing written). One that only an autoscaler can meet is a wait: the progress line says
what the model waits for, and ``resource_wait_s`` (``ScanOptions``; default ``RESOURCE_WAIT_S``, set by
``$MIRRORSCAN_RESOURCE_WAIT_S``) bounds it (``ResourceWatch``): a model whose demand no node can hold after
that long stops the scan as Ctrl-C does (the invocation is kept, ``interrupted``, for ``scan --resume``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.spec import API_BACKENDS

RESOURCE_WAIT_S = 600.0
"""Default seconds a model may wait for a node that can hold one of its engine actors, where only an
autoscaler can add one (a GPU node of a cloud cluster typically joins in 2–6 minutes)."""
RESOURCE_WAIT_ENV = "MIRRORSCAN_RESOURCE_WAIT_S"
"""Environment variable that sets ``resource_wait_s`` for a scan, a submitted job (``submit --env``) or reproduce."""
API_ENGINE_CPUS = 0.25
"""CPUs one HTTP engine actor asks for (``actors.http_common``: its work is waiting on the network)."""
WATCH_EVERY_S = 5.0
"""Seconds between two looks at the cluster while a model waits for room."""


@dataclass(frozen=True)
class Capacity:
    """What a Ray cluster offers engine actors: the nodes it has and the node types an autoscaler can add."""

    where: str
    """The cluster in words, for messages ("this machine's local Ray", "the Ray cluster at …")."""
    nodes: tuple[dict, ...]
    """Each live node's total resources (Ray's names: CPU, GPU, memory in bytes, custom resources)."""
    node_types: tuple[dict, ...] = ()
    """The resources of each node type an autoscaler can add (its node groups whose max count is not 0)."""
    autoscales: bool = False
    """Whether an autoscaler runs; with no ``node_types`` it may add any resource."""


def resource_wait_s() -> float:
    """``resource_wait_s`` from ``$MIRRORSCAN_RESOURCE_WAIT_S`` (seconds ≥ 0), else ``RESOURCE_WAIT_S``."""
    text = os.environ.get(RESOURCE_WAIT_ENV, "").strip()
    if not text:
        return RESOURCE_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError("", f"${RESOURCE_WAIT_ENV}", f"is {text!r}", "use a number of seconds, 0 or more")
    return value


def actor_demand(variant: ModelVariant, engine_kind: str) -> dict[str, float]:
    """The resources one engine actor of ``variant`` needs on one node, in Ray's names (nothing is reserved:
    a tensor-parallel engine's placement group is counted, not made)."""
    from mirrorscan.actors.registry import engine_class

    memory = {"memory": variant.memory_gb * 2**30} if variant.memory_gb else {}
    if variant.backend in API_BACKENDS:   # as their engines' ray_resources, without importing an HTTP client
        return {"CPU": API_ENGINE_CPUS, **memory}
    engine_cls = engine_class(variant.backend, engine_kind)
    if variant.tensor_parallel_size > 1:   # one actor bundle and tp GPU bundles, packed on one node
        args = {"num_cpus": 1, "num_gpus": variant.tensor_parallel_size}
    else:
        args = dict(engine_cls.ray_resources(variant))
    demand = {"CPU": float(args.get("num_cpus", 1)), "GPU": float(args.get("num_gpus") or 0),
              **{k: float(v) for k, v in (args.get("resources") or {}).items()}, **memory}
    return {k: v for k, v in demand.items() if v > 0}


def holds(node: dict, demand: dict[str, float]) -> bool:
    """Whether ``node`` (its total resources) can hold ``demand`` at all."""
    return all(node.get(name, 0) >= amount - 1e-9 for name, amount in demand.items())


def assess(demand: dict[str, float], capacity: Capacity) -> tuple[str, list[str]]:
    """("now" | "wait" | "never", the resources it waits for or lacks): "now" when a node of the cluster holds
    ``demand``, "wait" when only a node type an autoscaler adds does (named: what no node has enough of now),
    "never" otherwise (named: what no node or node type has enough of). All of the demand is named when each
    resource is somewhere but none holds them together."""
    if any(holds(n, demand) for n in capacity.nodes):
        return "now", []

    def short(nodes) -> list[str]:
        return [r for r, amount in demand.items() if all(n.get(r, 0) < amount - 1e-9 for n in nodes)] or list(demand)

    if (capacity.autoscales and not capacity.node_types) or any(holds(t, demand) for t in capacity.node_types):
        return "wait", short(capacity.nodes)
    return "never", short(capacity.nodes + capacity.node_types)


def amount_text(name: str, amount: float) -> str:
    """``1 GPU``, ``2 CPUs``, ``12 GiB of memory``, ``1 fake_gpu``."""
    if name == "memory":
        return f"{amount / 2**30:.3g} GiB of memory"
    count = f"{amount:g}"
    return f"{count} {name}{'s' if name in ('CPU', 'GPU') and amount > 1 else ''}"


def demand_text(demand: dict[str, float], names: list[str]) -> str:
    """The resources ``names`` of ``demand`` in words ("1 GPU and 12 GiB of memory")."""
    return " and ".join(amount_text(n, demand[n]) for n in names)


def _field(spec, i: int, short: list[str]) -> str:
    """The config field a missing resource comes from."""
    entry, m = spec.raw["models"][i], spec.models[i]
    if "GPU" in short:
        return (f"models[{i}].num_gpus" if "num_gpus" in entry else f"models[{i}].tensor_parallel_size"
                if m.tensor_parallel_size > 1 else f"models[{i}].device")
    if "memory" in short:
        return f"models[{i}].memory_gb"
    return f"models[{i}]"


def check_resources(spec, capacity: Capacity | None) -> dict[str, str]:
    """ConfigError for the first model of ``spec`` one of whose engine actors no node of ``capacity`` can hold
    and no autoscaler can add a node for; else label → what the model waits for (in words), for the models
    only an autoscaler can make room for. ``capacity`` None (a cluster a dry run does not join): nothing."""
    if capacity is None:
        return {}
    waits = {}
    for i, m in enumerate(spec.models):
        demand = actor_demand(m, spec.instrument.engine_kind)
        verdict, short = assess(demand, capacity)
        if verdict == "wait":
            waits[m.label] = demand_text(demand, short)
        elif verdict == "never":
            largest = {r: max((n.get(r, 0) for n in capacity.nodes + capacity.node_types), default=0) for r in short}
            has = ", ".join(f"at most {amount_text(r, v)}" if v else f"no {r}" for r, v in largest.items())
            fix = ('use "device": "cpu" (num_gpus 0), or run it on a Ray cluster with GPUs (--ray-address), or '
                   'one whose autoscaler adds GPU nodes') if "GPU" in short else \
                "ask for what one node has, or run it on a Ray cluster with bigger nodes (--ray-address)"
            raise ConfigError(spec.config_path, _field(spec, i, short),
                              f"model {m.label} needs {demand_text(demand, short)} per engine actor, but no node of "
                              f"{capacity.where} has it ({has} per node) and no autoscaler can add one", fix)
    return waits


def local_capacity(num_cpus: int | None = None, *, exact: bool = True) -> Capacity:
    """The node a local Ray started here would have (``cluster.runtime.ray_session.ensure_ray``: all CPUs). ``exact``:
    as Ray itself resolves it (the GPUs it detects, its memory resource: what is free less its object store),
    without starting it; else without importing Ray (a dry run): the GPUs ``$CUDA_VISIBLE_DEVICES`` names, or
    the NVIDIA device files, and all of the machine's memory (a bound: a request between the two passes here
    and is refused by the scan)."""
    where, cpus = "this machine's local Ray", float(num_cpus or os.cpu_count() or 1)
    if exact:
        from mirrorscan.cluster.runtime.ray_session import local_ray_defaults

        local_ray_defaults()   # Ray reads its loopback and auth switches when first imported, as ensure_ray sets them
        try:
            from ray._private.resource_and_label_spec import ResourceAndLabelSpec

            node = ResourceAndLabelSpec(num_cpus=int(cpus)).resolve(is_head=True,
                                                                    node_ip_address="127.0.0.1").to_resource_dict()
            return Capacity(where, (dict(node),))
        except Exception:   # noqa: BLE001 - a Ray release without it: the estimate below
            pass
    return Capacity(where, ({"CPU": cpus, "GPU": float(visible_gpus()),
                             "memory": float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))},))


def visible_gpus() -> int:
    """GPUs a process here sees without importing a GPU library: those ``$CUDA_VISIBLE_DEVICES`` lists (none
    for "", "-1" or "NoDevFiles"), else the ``/dev/nvidia<N>`` device files."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [d for d in listed.split(",") if d.strip()]
        return 0 if not ids or ids[0].strip() in ("-1", "NoDevFiles") else len(ids)
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def ray_capacity() -> Capacity:
    """The Ray this process runs or joined: its live nodes, and what its autoscaler can add (module docstring)."""
    import ray

    nodes = tuple(dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive", True))
    types, autoscales = autoscaler_node_types()
    where = f"the Ray cluster at {ray.get_runtime_context().gcs_address}"
    return Capacity(where, nodes, types, autoscales)


def autoscaler_node_types() -> tuple[tuple[dict, ...], bool]:
    """(the node types the cluster's autoscaler reports, whether an autoscaler that can add nodes runs): from the
    cluster config in Ray's GCS (autoscaler v2, KubeRay), else the v1 monitor's status (no types: it may add
    any). Every Ray runs a monitor; a local one's is read-only (its node types are its nodes, ``node_<id>``)
    and adds nothing."""
    import json
    import re

    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:   # noqa: BLE001 - a Ray release without it, or no config reported
        config = None
    if config is not None and len(config.node_group_configs):
        return tuple(dict(g.resources) for g in config.node_group_configs if g.max_count != 0), True
    try:
        report = json.loads(_internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS) or b"{}").get(
            "autoscaler_report") or {}
    except (ValueError, AttributeError):
        report = {}
    types = {*(report.get("active_nodes") or {}), *(report.get("idle_nodes") or {}),
             *(report.get("pending_launches") or {}), *(report.get("node_type_mapping") or {}).values()}
    return (), any(not re.fullmatch(r"node_[0-9a-f]+", str(t)) for t in types)


def cluster_capacity(address: str | None, *, join: bool) -> Capacity | None:
    """The capacity a scan's engines meet: the Ray this process already runs; else the cluster at ``address``
    (or ``$RAY_ADDRESS``), joined now when ``join`` (None when not: a dry run joins no cluster); else the local
    Ray a scan would start here."""
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return ray_capacity()
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        if not join:
            return None
        from mirrorscan.cluster.runtime.ray_session import ensure_ray

        ensure_ray(address)
        return ray_capacity()
    return local_capacity(exact=join)


class ResourceWatch:
    """While a model waits for a node that can hold its engine actor (only an autoscaler can add one), looks at
    the cluster every ``WATCH_EVERY_S``; when no node holds the demand ``wait_s`` seconds (monotonic clock)
    after the model's pool started, ``expired(label, what)`` is called once (a scan: a message, then the
    scan stops as Ctrl-C stops it). ``capacity`` is called to look (``ray_capacity``)."""

    def __init__(self, wait_s: float, capacity, expired, every_s: float = WATCH_EVERY_S):
        self.wait_s, self.capacity, self.expired, self.every_s = wait_s, capacity, expired, every_s
        self.stopped = threading.Event()
        self.fired = False
        """Whether a wait ran out (the stop that followed is the watch's)."""
        self.on_model = None
        """The sweep's ``on_model`` callback that starts the watch of a waiting model (``watch_waits``)."""

    def watch(self, label: str, demand: dict[str, float], what: str, on_room=None) -> None:
        """Start watching ``label``'s wait for ``demand`` (``what``: it in words) in a daemon thread;
        ``on_room()`` is called when a node holds it."""
        threading.Thread(target=self._run, args=(label, demand, what, on_room), name=f"resource-wait-{label}",
                         daemon=True).start()

    def _run(self, label: str, demand: dict[str, float], what: str, on_room) -> None:
        deadline = time.monotonic() + self.wait_s
        while not self.stopped.is_set():
            try:
                room = any(holds(n, demand) for n in self.capacity().nodes)
            except Exception:   # noqa: BLE001 - the cluster cannot be read now: look again later
                room = False
            if room:
                if on_room is not None:
                    on_room()
                return
            if time.monotonic() >= deadline:
                self.fired = True
                self.expired(label, what)
                return
            self.stopped.wait(min(self.every_s, max(0.0, deadline - time.monotonic())))

    def stop(self) -> None:
        """Stop every watch (the stage ended)."""
        self.stopped.set()


def watch_waits(run, progress) -> ResourceWatch | None:
    """The bounded waits of a stage of ``run`` (``cluster.scan.run.ScanRun``) for the models only an autoscaler
    can make room for (``run.resource_waits``): as such a model's pool starts and no node holds its engine, the
    progress line (``progress``: ``cluster.scan.progress.RunProgress``; a note where no bar is drawn) says what it
    waits for, and after ``run.options.resource_wait_s`` without one the scan stops as Ctrl-C stops it (its
    invocation kept, ``interrupted``). The watch's ``on_model`` takes the place of the progress's; None when no
    model waits."""
    if not run.resource_waits:
        return None
    import _thread

    from mirrorscan.cluster.scan.stages import instrument_ref

    wait_s = run.options.resource_wait_s if run.options.resource_wait_s is not None else resource_wait_s()
    kind = instrument_ref(run.settings).instrument.engine_kind

    def expired(label: str, what: str) -> None:
        print(f"error: model {label} waited {wait_s:g} s (resource_wait_s) for a node with {what}, and none joined "
              f"the cluster; the scan stops and keeps its invocation — fix: run it again with --resume once the "
              f"cluster can hold it, or allow a longer wait (${RESOURCE_WAIT_ENV})", file=sys.stderr, flush=True)
        _thread.interrupt_main()   # the scan stops as Ctrl-C stops it

    watch = ResourceWatch(wait_s, ray_capacity, expired)

    def on_model(variant: ModelVariant, warm: str | None = None) -> None:
        progress.on_model(variant, warm)
        what = None if warm else run.resource_waits.get(variant.label)   # a warm engine's replica holds the model
        demand = actor_demand(variant, kind) if what else {}
        if not what or any(holds(n, demand) for n in ray_capacity().nodes):
            return
        # begins as the loading text does: one model's bar shows only that (cluster.scan.progress.ModelProgress)
        progress.per_model.state[variant.label] = (
            f"{progress.per_model.state.get(variant.label, variant.label)}: waits for a node with {what} "
            f"(an autoscaler adds it; at most {wait_s:g} s)")
        progress.bar.set_description(progress.per_model.description(), refresh=True)
        if progress.bar.disable and not run.options.quiet:
            print(f"note: model {variant.label} waits for a node with {what}: only the cluster's autoscaler can add "
                  f"one (at most {wait_s:g} s, resource_wait_s)", file=sys.stderr, flush=True)
        watch.watch(variant.label, demand, what, on_room=lambda: progress.on_model(variant))

    watch.on_model = on_model
    return watch
