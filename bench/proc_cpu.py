"""CPU seconds of the processes of a Ray test cluster on this machine, split into head side and node side.

A process's CPU time is read from the kernel (``psutil``): user + system of itself, plus ``children_user``
+ ``children_system``, which hold the times of the children it has reaped. Summed over every live process
of a tree, that counts each process once whether it is still running or has already exited (a raylet reaps
its workers, the driver reaps what it started), so a difference of two readings is the CPU the whole tree
used in between, short-lived render-task workers and exited actors included.

Head side: the driver's own time (not its children: the nodes are its children) and every process tree
the head node started (GCS, the head raylet and its workers, the dashboard and monitors). Node side: the
process trees of the worker nodes (their raylets, and the engine actors and workers those start).
"""

from __future__ import annotations

import os

import psutil


def _own(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _with_reaped(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def tree_seconds(pids: set[int]) -> float:
    """CPU seconds used so far by the processes ``pids``, their live descendants and every process of those
    trees that has been reaped (each process counted once)."""
    seen: set[int] = set()
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            if p.pid in seen:
                continue
            seen.add(p.pid)
            try:
                total += _with_reaped(p)
            except psutil.Error:   # exited between the listing and the read: its parent reaps it next
                pass
    return total


def node_pids(node) -> set[int]:
    """The pids a Ray ``Node`` (of ``ray.cluster_utils.Cluster``) started: GCS, raylet, agents, monitors."""
    out = set()
    for infos in node.all_processes.values():
        for info in infos:
            if info.process is not None:
                out.add(info.process.pid)
    return out


class ClusterCPU:
    """Readings of a test cluster's CPU seconds: ``read()`` → (head side, node side)."""

    def __init__(self, cluster):
        """``cluster``: a started ``ray.cluster_utils.Cluster`` whose head node this process drives."""
        self.cluster = cluster
        self.driver = psutil.Process(os.getpid())

    def read(self) -> tuple[float, float]:
        """(head-side seconds, node-side seconds) used so far."""
        head = _own(self.driver) + tree_seconds(node_pids(self.cluster.head_node))
        nodes = tree_seconds(set().union(*(node_pids(n) for n in self.cluster.worker_nodes)))
        return head, nodes
