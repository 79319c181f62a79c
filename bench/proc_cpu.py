"""CPU seconds of the processes of a Ray test cluster on this machine, split into head side and node side.

A process's CPU time (user + system) is read from the kernel (``psutil``). Processes come and go during a
run (engine actors exit when their pool ends, Ray starts workers), and a process that has exited can no
longer be read, while its parent's ``children_*`` times hold it only if that parent reaped it (Ray's
workers are not always reaped by a process of the tree). So a sampler thread reads every process of the
cluster's trees every ``SAMPLE_S`` seconds and keeps each process's last reading, keyed by pid and start
time: the sum over every process ever seen is the CPU the cluster used, less at most the last
``SAMPLE_S`` of each process that exited (and any process that lived less than that). The sampler's own
CPU (it runs in the driver) is measured and taken out of the driver's.

Head side: the driver's own time and every process tree the head node started (GCS, the head raylet and
its workers, the dashboard and monitors). Node side: the process trees of the worker nodes (their raylets,
and the engine actors and workers those start).
"""

from __future__ import annotations

import os
import threading
import time

import psutil

SAMPLE_S = 0.5
"""Seconds between two readings of every process."""


def node_pids(node) -> set[int]:
    """The pids a Ray ``Node`` (of ``ray.cluster_utils.Cluster``) started: GCS, raylet, agents, monitors."""
    out = set()
    for infos in node.all_processes.values():
        for info in infos:
            if info.process is not None:
                out.add(info.process.pid)
    return out


def _name(p: psutil.Process) -> str:
    name = p.name()
    if name.startswith("python"):
        cmd = p.cmdline()
        name = os.path.basename(next((c for c in cmd[1:] if not c.startswith("-")), name)) if len(cmd) > 1 else name
    return name


class ClusterCPU:
    """Sampled CPU seconds of a test cluster's processes: ``read()`` → (head side, node side) so far."""

    def __init__(self, cluster):
        """``cluster``: a started ``ray.cluster_utils.Cluster`` whose head node this process drives."""
        self.cluster = cluster
        self.driver = psutil.Process(os.getpid())
        self.seen: dict[tuple[int, float], tuple[str, str, float]] = {}   # (pid, start) → (side, name, seconds)
        self.sampler_s = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.sample()
        self.thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            started = time.thread_time()
            self.sample()
            self.sampler_s += time.thread_time() - started

    def sample(self) -> None:
        """Read every process of the cluster's trees now."""
        roots = [("head", node_pids(self.cluster.head_node))] + [("nodes", node_pids(n)) for n in self.cluster.worker_nodes]
        readings = {}
        for side, pids in roots:
            for pid in pids:
                try:
                    root = psutil.Process(pid)
                    procs = [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                for p in procs:
                    try:
                        with p.oneshot():
                            t = p.cpu_times()
                            readings[(p.pid, p.create_time())] = (side, _name(p), t.user + t.system)
                    except psutil.Error:
                        pass
        with self.lock:
            self.seen.update(readings)

    def read(self) -> tuple[float, float]:
        """(head-side seconds, node-side seconds) used so far: the driver's own (less the sampler's) plus
        every process ever seen, at its last reading."""
        self.sample()
        t = self.driver.cpu_times()
        with self.lock:
            head = sum(s for side, _, s in self.seen.values() if side == "head")
            nodes = sum(s for side, _, s in self.seen.values() if side == "nodes")
        return t.user + t.system - self.sampler_s + head, nodes

    def head_breakdown(self) -> dict[str, float]:
        """Head-side seconds so far per process name, the driver's own (less the sampler's) as ``driver``."""
        self.sample()
        t = self.driver.cpu_times()
        out = {"driver": t.user + t.system - self.sampler_s}
        with self.lock:
            for side, name, s in self.seen.values():
                if side == "head":
                    out[name] = out.get(name, 0.0) + s
        return out

    def close(self) -> None:
        """Stop the sampler."""
        self.stop.set()
        self.thread.join(timeout=5)
