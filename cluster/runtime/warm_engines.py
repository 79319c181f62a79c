"""Warm engines: an engine loaded once as a Ray Serve deployment, answering the batches of every scan that matches it.

A scan's engine actor normally builds its engine itself (``cluster.scan.pipeline.StoringEngine``), so every
scan loads its model again. A warm engine is the same engine class (``actors.registry.engine_class``), built
by the same constructor, hosted by a Serve replica instead (``EngineReplica``) that outlives the scan. Only the
hosting differs: the scan's engine actors still render the cells, store the parts, write the inference log
and keep the in-flight journal; where they would call their own engine they call the deployment
(``WarmEngineClient``).

Which scans it serves. A warm engine is named by the hash of what shapes its answers (``engine_key``): the
engine class (engine kind and backend), the model source it loads, and every field of the model variant
except its label and the per-model keys that only say how it runs (``grid.settings.EXECUTION_MODEL_KEYS``).
A scan whose model variant hashes the same sends its batches there; any other scan starts its own engine
actors, as it always did. The replica's rows carry the run identity of the experiment that started it;
the client writes the scan's own into them (``restamp``: invocation, experiment, instrument, envelope
version, label), so a row differs from a cold scan's only where it says where it ran (actor, node, host)
and when (``created_at``, timing).

Scaling. Each engine is one Serve application of one deployment, reached by handle only (no HTTP route, no
proxy). Serve's autoscaler keeps its replicas between ``min_replicas`` and ``max_replicas`` for the batches
in flight (queued at the handles and running), and takes an idle engine to zero replicas after
``idle_timeout_s``; the next batch starts a replica again (a model load). Defaults: ``Scaling``.

Bookkeeping. A detached actor (``cluster.runtime.warm_replica.EngineRegistry``, no CPU) holds what ``engines
list`` shows and Serve does not keep: each engine's model and settings, its replicas (node, host, GPUs) and the
requests it served. It holds no engine, and losing it loses only those numbers. What runs on the cluster (the
replica and the registry) is in ``cluster.runtime.warm_replica``; this module starts, finds and stops it.

A scan uses warm engines only on a Ray cluster that outlives it (``RAY_ADDRESS``); ``MIRRORSCAN_WARM_ENGINES=0``
makes a scan ignore them. Importing this module starts nothing and imports neither Ray nor torch.

One module past 400 lines on purpose: starting, finding, scaling and stopping an engine share its naming and
its settings hash, which must be computed in exactly one place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.actors.engine import Engine
from mirrorscan.cluster.runtime.warm_replica import EngineReplica, registry
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.settings import EXECUTION_MODEL_KEYS

APP_PREFIX = "mirrorscan-engine-"
"""Serve application names of warm engines start with this, followed by the first 16 hex digits of the key."""
DEPLOYMENT = "engine"
"""The one deployment of each warm engine's application."""
WARM_BACKENDS = ("hf", "vllm")
"""Backends whose engines load a model in-process and can be hosted warm (HTTP engines hold no model); a
stand-in engine of a benchmark or test joins them through ``allow_warm_backend``."""
CLIENT_CPUS = 0.5
"""CPUs one scan engine actor asks for when its engine is warm: it renders, stores parts and writes the log."""
SWITCH_ENV = "MIRRORSCAN_WARM_ENGINES"
"""``0`` turns warm engines off for a scan driver (its engine actors load their own models)."""
RUN_COLUMNS = ("invocation_id", "experiment", "instrument", "envelope_version")
"""Trace columns a replica fills from its own run context and the client replaces with the scan's."""


@dataclass(frozen=True)
class Scaling:
    """How many replicas a warm engine runs (Serve's ``autoscaling_config``)."""

    min_replicas: int = 0
    """Replicas kept while idle; 0 lets an idle engine release its CPU, GPU and memory."""
    max_replicas: int = 1
    """Replicas at most; Serve adds one while more than ``target_batches`` batches per replica are in flight."""
    initial_replicas: int = 1
    """Replicas started by ``engines up`` (the model is loaded before the command returns)."""
    idle_timeout_s: float = 900.0
    """Seconds without a batch before the last replica is stopped (Serve's ``downscale_to_zero_delay_s``)."""
    downscale_delay_s: float = 60.0
    """Seconds of lower load before a replica beyond the first is stopped."""
    upscale_delay_s: float = 5.0
    """Seconds of higher load before a replica is added (a replica is a model load: not for a blip)."""
    look_back_period_s: float = 30.0
    """Seconds over which the batches in flight are averaged for each decision (Serve's own default)."""

    def autoscaling_config(self, target_batches: int) -> dict:
        """Serve's ``autoscaling_config`` for an engine that answers ``target_batches`` batches at once."""
        return {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                "initial_replicas": self.initial_replicas, "target_ongoing_requests": target_batches,
                "upscale_delay_s": self.upscale_delay_s, "downscale_delay_s": self.downscale_delay_s,
                "downscale_to_zero_delay_s": self.idle_timeout_s, "look_back_period_s": self.look_back_period_s}

    def check(self) -> None:
        """ConfigError naming the flag when the bounds do not make sense."""
        if self.min_replicas < 0 or self.max_replicas < 1:
            raise ConfigError("", "--min-replicas/--max-replicas", "need min ≥ 0 and max ≥ 1", "fix the bounds")
        if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise ConfigError("", "--initial-replicas", f"{self.initial_replicas} is outside "
                              f"[{self.min_replicas}, {self.max_replicas}]", "pick a value between the bounds")
        if self.idle_timeout_s < 0:
            raise ConfigError("", "--idle-timeout-s", "is negative", "pass seconds ≥ 0")


# ---- which engine a model variant needs ------------------------------------------------------------------------

def class_path(engine_cls: type[Engine]) -> str:
    """``module:Class`` of an engine class (how it travels to a replica and enters the key)."""
    return f"{engine_cls.__module__}:{engine_cls.__qualname__}"


def engine_settings(variant: ModelVariant) -> dict:
    """The fields of ``variant`` that shape an engine's answers: all but the label and the execution keys."""
    return {k: v for k, v in variant.as_dict().items() if k != "label" and k not in EXECUTION_MODEL_KEYS}


def engine_key(engine_cls: type[Engine], variant: ModelVariant, model_source: str) -> str:
    """SHA-256 (hex) over the engine class, the model source and ``engine_settings(variant)``: equal keys
    mean engines that answer a batch alike, whatever the experiment, label or pool sizes."""
    payload = {"engine": class_path(engine_cls), "model_source": model_source, "variant": engine_settings(variant)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def app_name(key: str) -> str:
    """The Serve application (and warm engine) name of ``key``."""
    return APP_PREFIX + key[:16]


def allow_warm_backend(backend: str) -> None:
    """Let engines of ``backend`` be hosted warm in this process (added to ``WARM_BACKENDS``): the hook for a
    stand-in engine registered in ``actors.registry.ENGINES`` by a benchmark or test (``bench/scale.py --study
    warm``), which, like ``hf`` and ``vllm``, answers in-process. The shipped backends need no call."""
    global WARM_BACKENDS
    if backend not in WARM_BACKENDS:
        WARM_BACKENDS = (*WARM_BACKENDS, backend)


def warmable(variant: ModelVariant, field: str = "") -> None:
    """ConfigError unless ``variant`` can run as a warm engine (in-process backend, one GPU at most)."""
    if variant.backend not in WARM_BACKENDS:
        raise ConfigError("", field or f"models[{variant.label}].backend", f"backend {variant.backend!r} holds "
                          "no model in-process, so there is nothing to keep warm",
                          f"warm engines take backends {', '.join(WARM_BACKENDS)}; leave --label {variant.label} out")
    if variant.tensor_parallel_size > 1:
        raise ConfigError("", field or f"models[{variant.label}].tensor_parallel_size", "a warm engine spans one "
                          "GPU at most", f"leave --label {variant.label} out: its scans start their own engine")


def replica_resources(engine_cls: type[Engine], variant: ModelVariant) -> dict:
    """Ray actor options of one replica: what one engine actor of a scan would ask for."""
    resources = dict(engine_cls.ray_resources(variant))
    if variant.memory_gb:
        resources["memory"] = int(variant.memory_gb * 2**30)
    return resources


# ---- starting, listing, stopping ------------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineTarget:
    """One engine a model variant needs: its class, the variant as engines get it, and the weights it loads."""

    engine_cls: type[Engine]
    """The engine class (``actors.registry.engine_class``)."""
    variant: ModelVariant
    """The model variant as its engines are given it (``cluster.models.resolve.engine_variant``)."""
    model_source: str
    """The resolved model source (a folder)."""
    kind: str
    """Engine kind: generate, score or activations."""

    @property
    def key(self) -> str:
        """``engine_key`` of this engine."""
        return engine_key(self.engine_cls, self.variant, self.model_source)

    @property
    def name(self) -> str:
        """The warm engine's name (``app_name``)."""
        return app_name(self.key)


def engine_targets(spec, labels: list[str] | None = None, *, resolve: bool = True) -> list[EngineTarget]:
    """The engines the model variants of ``spec`` (a ``grid.spec.Spec``) need, those named by ``labels`` (all when
    None); a label the spec lacks, or a variant that cannot be warm (``warmable``), is refused when named and
    left out otherwise. ``resolve`` False: find model sources without preparing anything (dry run); a model
    whose source is not ready yet is left out."""
    from mirrorscan.actors.registry import engine_class
    from mirrorscan.cluster.models.resolve import engine_variant, resolve_model_source

    known = [m.label for m in spec.models]
    for label in labels or ():
        if label not in known:
            raise ConfigError(str(spec.config_path), "--label", f"{label!r} is no model label of the experiment",
                              f"use one of: {', '.join(known)}")
    kind = spec.instrument.engine_kind
    out = []
    for i, m in enumerate(spec.models):
        if labels and m.label not in labels:
            continue
        try:
            warmable(m)
        except ConfigError:
            if labels:
                raise
            continue
        if resolve:
            source = resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
            variant = engine_variant(m)
        else:
            source = dry_source(spec, i)
            if source is None:
                continue
            variant = m if not m.tokenizer else None
            if variant is None:
                continue
        out.append(EngineTarget(engine_class(m.backend, kind), variant, source, kind))
    return out


def dry_source(spec, i: int) -> str | None:
    """Model ``i``'s source as a scan would resolve it, found without converting anything; None when not ready."""
    from mirrorscan.cluster.models.demo import demo_model_dir
    from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS, resolve_model_source

    m = spec.models[i]
    if m.model == DEMO_MODEL_ALIAS:
        folder = demo_model_dir()
        return str(folder) if (folder / "config.json").is_file() else None
    try:
        return resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
    except ConfigError:
        return None


def start_engines(targets: list[EngineTarget], experiment: str, scaling: Scaling = Scaling(),
                  cache_dir: str | None = None) -> list[tuple[str, bool]]:
    """Start a warm engine for each target on the Ray this process joined (Serve started without proxies when it
    is not running), each loaded before this returns; an engine already running is left as it is. Returns
    (name, started) per target. ``experiment`` names the run context the replicas build their engines with."""
    import logging

    from ray import serve

    from mirrorscan.cluster.runtime.ray_session import WORKER_ENV

    scaling.check()
    quiet = {"log_level": "WARNING", "enable_access_log": False}
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    running = set(serve.status().applications)
    if not running:
        serve.start(proxy_location="Disabled", logging_config=quiet)
    books = registry()
    env = {**WORKER_ENV, **{k: os.environ[k] for k in ("MIRRORSCAN_HOME", "RAY_AUTH_MODE") if k in os.environ}}
    out = []
    for t in targets:
        warmable(t.variant)
        if t.name in running:
            out.append((t.name, False))
            continue
        calls = t.engine_cls.CONCURRENT_BATCHES
        options = {**replica_resources(t.engine_cls, t.variant), "runtime_env": {"env_vars": env}}
        deployment = serve.deployment(EngineReplica, name=DEPLOYMENT, ray_actor_options=options,
                                      max_ongoing_requests=calls, graceful_shutdown_timeout_s=30,
                                      autoscaling_config=scaling.autoscaling_config(calls))
        run = InvocationContext(invocation_id="", experiment=experiment, instrument="", cache_dir=cache_dir)
        meta = {"key": t.key, "kind": t.kind, "engine": class_path(t.engine_cls), "model": t.variant.model,
                "label": t.variant.label, "experiment": experiment, "backend": t.variant.backend,
                "dtype": t.variant.dtype, "device": t.variant.device, "model_source": t.model_source,
                "settings": engine_settings(t.variant), "scaling": dataclasses.asdict(scaling),
                "resources": {k: v for k, v in options.items() if k != "runtime_env"}, "started_at": time.time()}
        books.add.remote(t.name, meta)
        serve.run(deployment.bind(t.name, class_path(t.engine_cls), t.variant, t.model_source, run),
                  name=t.name, route_prefix=None, logging_config=quiet)
        out.append((t.name, True))
    return out


def running_engines() -> dict[str, dict]:
    """Every warm engine on the Ray this process joined: name → its registry record (settings, replicas, requests;
    empty when the registry lost it) plus ``status`` (Serve's application status) and ``replica_states``
    (state → count, Serve's own)."""
    from ray import serve

    apps = {n: a for n, a in serve.status().applications.items() if n.startswith(APP_PREFIX)}
    if not apps:
        return {}
    books = registry(create=False)
    import ray

    records = ray.get(books.snapshot.remote()) if books is not None else {}
    out = {}
    for name, app in apps.items():
        deployment = app.deployments.get(DEPLOYMENT)
        states = dict(deployment.replica_states) if deployment is not None else {}
        record = records.get(name, {})
        if record.get("replicas"):   # a replica that died without Serve's graceful stop never left the registry
            record["replicas"] = {r: info for r, info in record["replicas"].items() if _alive(r, books, name)}
        out[name] = {**record, "status": str(app.status), "replica_states": {str(k): v for k, v in states.items()}}
    return out


def _alive(replica: str, books, name: str) -> bool:
    """Whether Serve's replica actor ``replica`` (its name) still exists; a dead one is removed from the registry."""
    import ray

    try:
        ray.get_actor(replica, namespace="serve")
        return True
    except ValueError:
        books.replica_down.remote(name, replica)
        return False


def stop_engines(names: list[str] | None = None) -> list[str]:
    """Delete the warm engines ``names`` (every one when None) from Serve and the registry; returns those stopped.
    The registry goes too once no engine is left; Serve itself keeps running for other applications."""
    import ray
    from ray import serve

    apps = [n for n in serve.status().applications if n.startswith(APP_PREFIX)]
    unknown = sorted(set(names or ()) - set(apps))
    if unknown:
        raise ConfigError("", "NAME", f"no warm engine named {', '.join(unknown)}",
                          "see `mirrorscan engines list` for the running ones")
    chosen = apps if names is None else [n for n in apps if n in names]
    books = registry(create=False)
    for name in chosen:
        serve.delete(name)
        if books is not None:
            ray.get(books.remove.remote(name))
    if books is not None and not [n for n in serve.status().applications if n.startswith(APP_PREFIX)]:
        ray.kill(books)
    return chosen


# ---- a scan's side --------------------------------------------------------------------------------------------

def warm_engines_on() -> bool:
    """Whether this driver may send batches to warm engines (``SWITCH_ENV`` not ``0``)."""
    return os.environ.get(SWITCH_ENV, "1") != "0"


def running_engine(engine_cls: type[Engine], variant: ModelVariant, model_source: str) -> str | None:
    """The name of the running warm engine that answers like ``engine_cls`` built for ``variant`` and
    ``model_source`` would, or None (none runs, the switch is off, or no registry: no engine was ever started)."""
    if not warm_engines_on() or registry(create=False) is None:
        return None
    from ray import serve

    name = app_name(engine_key(engine_cls, variant, model_source))
    app = serve.status().applications.get(name)
    return name if app is not None and str(app.status).endswith("RUNNING") else None


def hosted_pool(pool):
    """``pool`` (a ``cluster.scan.pipeline.Pool``) with its engines hosted by a running warm engine that
    matches it: the actors build a ``WarmEngineClient`` and ask for ``CLIENT_CPUS`` only. ``pool`` itself
    when none matches."""
    kwargs = pool.engine_kwargs
    if "deployment" in kwargs or "model_source" not in kwargs:
        return pool
    name = running_engine(pool.engine_cls, kwargs["variant"], kwargs["model_source"])
    if name is None:
        return pool
    return dataclasses.replace(pool, engine_cls=WarmEngineClient, engine_kwargs={**kwargs, "deployment": name},
                               engine_resources=WarmEngineClient.ray_resources(kwargs["variant"]))


def restamp(rows: pa.Table, variant: ModelVariant, run: InvocationContext) -> pa.Table:
    """``rows`` a replica answered, with the scan's run identity (``RUN_COLUMNS``) and label written in."""
    values = {"invocation_id": run.invocation_id, "experiment": run.experiment, "instrument": run.instrument,
              "envelope_version": run.envelope_version, "label": variant.label}
    for name, value in values.items():
        i = rows.schema.get_field_index(name)
        if i >= 0:
            rows = rows.set_column(i, rows.schema.field(i), pa.array([value] * rows.num_rows, rows.schema.field(i).type))
    return rows


class WarmEngineClient(Engine):
    """What a scan's engine actor builds instead of its engine when a warm engine matches: the same call,
    answered by the deployment. It holds no model, so it is in no registry and declares no kind of its own."""

    CONCURRENT_BATCHES = 2
    """Batches an engine actor hands over at once: the next one waits at the replica, never on the actor."""

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """``CLIENT_CPUS`` and nothing else: the model's GPUs and memory belong to the replica."""
        return {"num_cpus": CLIENT_CPUS}

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, deployment: str):
        """A handle to warm engine ``deployment``, for rows of ``variant`` in ``run``."""
        from ray import serve

        self.variant, self.run, self.source = variant, run, model_source
        self.handle = serve.get_app_handle(deployment)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The warm engine's rows for ``batch``, carrying this scan's identity (``restamp``)."""
        return restamp(self.handle.answer.remote(batch).result(), self.variant, self.run)


# ---- what a scan would use (its dry run) ----------------------------------------------------------------------

def dry_run_lines(spec, address: str | None = None) -> list[str]:
    """What a scan of ``spec`` would do about engines, one line per model: the warm engine it would send its
    batches to, or that it starts its own engine actors (and the engine ``engines up`` would start). Joins the
    cluster ``address`` or ``RAY_ADDRESS`` names to look (starting no Ray of its own); without one, no warm
    engine can serve the scan."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not warm_engines_on():
        return [f"engines: each model starts its own engine actors (warm engines off: {SWITCH_ENV}=0)"]
    if not address:
        return ["engines: each model starts its own engine actors (no Ray cluster named by RAY_ADDRESS: the scan "
                "starts a local Ray of its own, where no warm engine runs)"]
    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    ensure_ray(address)
    running = running_engines() if registry(create=False) is not None else {}
    targets = {t.variant.label: t for t in engine_targets(spec, resolve=False)}
    lines = []
    for m in spec.models:
        target = targets.get(m.label)
        if target is None:
            why = (f"backend {m.backend} holds no model" if m.backend not in WARM_BACKENDS
                   else "tensor parallel" if m.tensor_parallel_size > 1 else "its model is not prepared yet")
            lines.append(f"engines: {m.label}: starts its own engine actors ({why}: no warm engine)")
        elif target.name in running and running[target.name]["status"].endswith("RUNNING"):
            states = running[target.name]["replica_states"]
            lines.append(f"engines: {m.label}: uses warm engine {target.name} ({states.get('RUNNING', 0)} replica(s) "
                         f"running{'' if states.get('RUNNING') else '; the first batch starts one'})")
        else:
            lines.append(f"engines: {m.label}: starts its own engine actors (`mirrorscan engines up` would start "
                         f"warm engine {target.name})")
    return lines
