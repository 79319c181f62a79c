"""What a warm engine runs on the cluster: the Serve replica that holds an engine, and the registry beside it.

``EngineReplica`` is the deployment class of every warm engine (``cluster.runtime.warm_engines`` starts, finds
and stops them): it builds the engine a scan's engine actor would build, answers one batch per request, and
reports itself and each batch to ``EngineRegistry``, a detached actor (``REGISTRY_NAME`` in Ray namespace
``NAMESPACE``, no CPU) that keeps what Serve does not: each engine's settings, its replicas and the batches it
served. Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import importlib
import json
import socket
import time

import pyarrow as pa

from mirrorscan.grid.records import InvocationContext, ModelVariant

NAMESPACE = "mirrorscan"
"""Ray namespace of the registry actor (Serve's own applications live in Serve's namespace)."""
REGISTRY_NAME = "mirrorscan-engines"
"""Name of the detached registry actor."""


# ---- the replica ----------------------------------------------------------------------------------------------

class EngineReplica:
    """A Serve replica holding one engine (``actors/``), built as a scan's engine actor builds it."""

    def __init__(self, name: str, engine: str, variant: ModelVariant, model_source: str, run: InvocationContext):
        """Build the engine ``engine`` (``module:Class``) of ``variant`` (the model loads here, once per
        replica) and report this replica to the registry."""
        module, cls = engine.split(":")
        self.name = name
        self.engine = getattr(importlib.import_module(module), cls)(variant=variant, model_source=model_source, run=run)
        import ray

        ctx = ray.get_runtime_context()
        self.replica = ctx.get_actor_name() or ctx.get_actor_id()
        self.registry = registry(create=False)
        info = {"actor_id": ctx.get_actor_id(), "node_id": ctx.get_node_id(), "hostname": socket.gethostname(), "gpus": list(ray.get_gpu_ids()),
                "started_at": time.time()}
        if self.registry is not None:
            self.registry.replica_up.remote(name, self.replica, info)

    def answer(self, batch: pa.Table) -> pa.Table:
        """The engine's rows for ``batch`` (rendered cells), one per cell, in order."""
        rows = self.engine(batch)
        if self.registry is not None:
            self.registry.served.remote(self.name, batch.num_rows, time.time())
        return rows

    def __del__(self):
        """Serve's graceful shutdown: stop the engine (vLLM's core) and leave the registry."""
        engine = self.__dict__.get("engine")   # None when the model failed to load
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:
                pass
        if getattr(self, "registry", None) is not None:
            try:
                self.registry.replica_down.remote(self.name, self.replica)
            except Exception:
                pass


# ---- the registry ---------------------------------------------------------------------------------------------

class EngineRegistry:
    """What ``engines list`` shows beyond Serve's own status: settings, replicas, requests served."""

    def __init__(self):
        """Empty."""
        self.engines: dict[str, dict] = {}

    def add(self, name: str, meta: dict) -> None:
        """Record (or replace) engine ``name``'s settings."""
        self.engines[name] = {**meta, "replicas": self.engines.get(name, {}).get("replicas", {}),
                              "requests": 0, "cells": 0, "last_request_at": None}

    def remove(self, name: str) -> None:
        """Forget engine ``name``."""
        self.engines.pop(name, None)

    def replica_up(self, name: str, replica: str, info: dict) -> None:
        """Record a started replica of ``name``."""
        self.engines.setdefault(name, {"replicas": {}, "requests": 0, "cells": 0, "last_request_at": None})
        self.engines[name]["replicas"][replica] = info

    def replica_down(self, name: str, replica: str) -> None:
        """Forget a stopped replica of ``name``."""
        self.engines.get(name, {}).get("replicas", {}).pop(replica, None)

    def served(self, name: str, cells: int, at: float) -> None:
        """Count one answered batch of ``cells`` cells at ``at`` (wall clock, s since the epoch)."""
        entry = self.engines.get(name)
        if entry is not None:
            entry["requests"] += 1
            entry["cells"] += cells
            entry["last_request_at"] = at

    def snapshot(self) -> dict:
        """Every engine's record (a copy)."""
        return json.loads(json.dumps(self.engines))


def registry(create: bool = True):
    """The registry actor's handle (created, detached and CPU-free, when ``create``); None when there is none."""
    import ray

    try:
        return ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    except ValueError:
        if not create:
            return None
    return ray.remote(EngineRegistry).options(name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached",
                                              get_if_exists=True, num_cpus=0, max_restarts=-1).remote()
