"""A stand-in engine and cells for the multi-node tests: no model, so the tests are about scheduling.

``SleepEngine`` follows the engine interface (``SleepEngine(variant, model_source, run)``, a batch of
rendered cells in, trace rows out, built with ``actors.rows.trace_row``): it sleeps
``engine_args["sleep_s"]`` per batch and answers "A". It asks Ray for the variant's ``num_gpus`` as the
custom resource ``fake_gpu`` (a stand-in for GPUs on a one-machine cluster), and it calls ``os._exit(1)``
— the whole actor process dies, as on a CUDA fault — when a batch holds ``engine_args["poison"]``.

Ray workers cannot import this folder, so the module is registered to be pickled by value.
"""

from __future__ import annotations

import os
import sys
import time

import pyarrow as pa
import ray.cloudpickle

from mirrorscan.actors.engine import Engine
from mirrorscan.actors.placement import tensor_parallel_group
from mirrorscan.actors.rows import trace_row, where_am_i
from fc_grid import fc_cells, fc_ref
from mirrorscan.grid.instrument import InstrumentRef
from mirrorscan.instruments.forced_choice.envelopes import PACKAGED, load_bearing_ids, load_envelopes
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.trace_schema import to_trace_table

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
FAKE_GPU = "fake_gpu"
"""Custom Ray resource standing in for a GPU."""
RENDEZVOUS_S = 60.0
"""Longest wait (s) of an actor for its peers at a rendezvous (``SleepEngine._meet``)."""
TP_GROUP_TIMEOUT_S = 45.0
"""How long a tensor-parallel stand-in waits for its placement group (s)."""


class SleepEngine(Engine):
    """Answers every cell "A" after sleeping ``sleep_s`` per batch; dies on a batch holding the poison probe."""

    kind, backend = "generate", "standin"

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext):
        """No model: remember the run identity and where this actor runs."""
        self.variant, self.source, self.run = variant, model_source, run
        args = variant.engine_args
        self.sleep_s, self.poison = float(args.get("sleep_s", 0.05)), args.get("poison")
        self.where = where_am_i()

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """One CPU, and the variant's num_gpus as the custom resource ``fake_gpu``; a tensor-parallel
        variant gets a placement group of ``fake_gpu`` bundles, as vLLM's engine gets one of GPUs."""
        if variant.tensor_parallel_size > 1:
            return tensor_parallel_group(variant, FAKE_GPU, timeout_s=TP_GROUP_TIMEOUT_S)
        gpus = variant.num_gpus or 0
        return {"num_cpus": 1, **({"resources": {FAKE_GPU: gpus}} if gpus else {})}

    def _meet(self) -> None:
        """With ``engine_args["rendezvous"]`` (a folder) and ``["peers"]`` (n): on its first batch the actor
        leaves a file there and waits, at most RENDEZVOUS_S, until n actors have, so that pools running side
        by side are known to overlap whatever their start-up times; pools run one after another never meet."""
        folder = self.variant.engine_args.get("rendezvous")
        if folder is None or getattr(self, "_met", False):
            return
        self._met = True
        open(os.path.join(folder, f"{self.variant.label}-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + RENDEZVOUS_S
        while len(os.listdir(folder)) < int(self.variant.engine_args["peers"]) and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Trace rows for ``batch`` (response "A"), after ``sleep_s`` seconds."""
        cells = batch.to_pylist()
        if self.poison is not None and any(c["probe_id"] == self.poison for c in cells):
            os._exit(1)
        self._meet()
        start = time.monotonic()
        time.sleep(self.sleep_s)
        total_ms = (time.monotonic() - start) * 1000
        return to_trace_table([trace_row(self.variant, self.run, self.source, self.where, c, response="A",
                                         finish_reason="stop", timing_scope="batch", batch_size=len(cells),
                                         total_ms=total_ms, endpoint="engine://standin")
                               for c in cells])


def standin_variant(label: str, **fields) -> ModelVariant:
    """A resolved variant of the stand-in backend (``fields`` override ModelVariant fields)."""
    return ModelVariant(label=label, model="standin", backend="standin", temperature=0.0, top_p=1.0,
                        max_tokens=4, **fields)


def grid_cells(labels: list[str], n_pairs: int, samples: int = 1) -> tuple[pa.Table, InstrumentRef]:
    """Cells of ``n_pairs`` made-up pairs × two load-bearing envelopes × AB/BA × samples per label,
    planned (attempt 1) and seeded as a scan does; plus the instrument as the pipeline takes it."""
    pairs = pa.table({"pair_id": [f"p{i}" for i in range(n_pairs)], "word_a": [f"alpha{i}" for i in range(n_pairs)],
                      "word_b": [f"beta{i}" for i in range(n_pairs)]})
    env_ids = load_bearing_ids(load_envelopes(PACKAGED))[:2]
    return fc_cells(labels, pairs, env_ids, ["AB", "BA"], samples, seed=7), fc_ref(env_ids)


def run_identity(invocation_id: str, experiment: str) -> InvocationContext:
    """The run an engine gets (no catalog: inference-log rows are spilled beside the traces)."""
    return InvocationContext(invocation_id=invocation_id, experiment=experiment, instrument="forced_choice",
                      envelope_version=load_envelopes(PACKAGED).version)


def descendants() -> set:
    """This process's descendants now (psutil.Process objects: a reused pid is not mistaken for them)."""
    import psutil

    return set(psutil.Process().children(recursive=True))


def end_processes(procs: set, grace_s: float = 10.0) -> list[int]:
    """After a cluster's shutdown: end those of ``procs`` (processes this test started: raylets and
    workers of nodes, including the autoscaler's fake nodes, which outlive the monitor that started them)
    still running — SIGTERM, then SIGKILL after ``grace_s``. Returns the pids that were running."""
    import psutil

    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.Error:
            pass
    for proc in left:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return [p.pid for p in left]
