"""``mirrorscan engines up|list|down``: engines that outlive a scan (``cluster/runtime/warm_engines.py``).

  mirrorscan engines up EXPERIMENT|CONFIG [--label L …]   load each model's engine once, as a Ray Serve deployment
  mirrorscan engines list                                 what runs: model, kind, replicas and where, GPUs, requests, idle for
  mirrorscan engines down NAME … | --all                  stop them

A warm engine lives on a Ray cluster that outlives this command: ``--address`` or ``RAY_ADDRESS`` names it (on one
machine: ``ray start --head --node-ip-address 127.0.0.1``, then ``RAY_ADDRESS=127.0.0.1:6379``). A scan on that
cluster whose model variant has the same engine settings sends its batches to the engine instead of loading the
model (docs/engines.md, Warm engines).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors

NO_CLUSTER_FIX = ("start a Ray that outlives this command (`ray start --head --node-ip-address 127.0.0.1`), then "
                  "export RAY_ADDRESS=127.0.0.1:6379 (or pass --address) here and for the scans")
"""What to do when no cluster is named: a local Ray of this command would end with it, and its engines too."""


def parser(prog: str = "mirrorscan engines") -> argparse.ArgumentParser:
    """The verb's arguments: one subcommand each for up, list and down."""
    from mirrorscan.cluster.runtime.warm_engines import Scaling

    d = Scaling()
    p = argparse.ArgumentParser(prog=prog, description="Engines that outlive a scan: each model's engine loaded once "
                                "as a Ray Serve deployment that every matching scan on the cluster uses.")
    sub = p.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start a warm engine for each model of an experiment")
    up.add_argument("experiment", help="experiment folder or its config.json")
    up.add_argument("--label", action="append", default=None, help="only this model label (repeat for more)")
    up.add_argument("--min-replicas", type=int, default=d.min_replicas,
                    help=f"replicas kept while idle (default {d.min_replicas}: an idle engine frees its resources)")
    up.add_argument("--max-replicas", type=int, default=d.max_replicas,
                    help=f"replicas at most while batches queue (default {d.max_replicas})")
    up.add_argument("--initial-replicas", type=int, default=d.initial_replicas,
                    help=f"replicas loaded before the command returns (default {d.initial_replicas})")
    up.add_argument("--idle-timeout-s", type=float, default=d.idle_timeout_s,
                    help=f"seconds without a batch before the last replica stops (default {d.idle_timeout_s:g})")
    sub.add_parser("list", help="the warm engines on the cluster")
    down = sub.add_parser("down", help="stop warm engines")
    down.add_argument("names", nargs="*", help="engine names (from `engines list`)")
    down.add_argument("--all", action="store_true", help="stop every warm engine")
    for s in (up, sub.choices["list"], down):
        s.add_argument("--address", default=None, help="Ray cluster address (default $RAY_ADDRESS)")
    return p


def join_cluster(address: str | None) -> None:
    """Join the Ray cluster named by ``address`` or ``RAY_ADDRESS`` (ConfigError when neither names one)."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError("", "--address", "no Ray cluster named: an engine started in this command's own Ray "
                          "would stop with it", NO_CLUSTER_FIX)
    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    ensure_ray(address)


def ago(seconds: float | None) -> str:
    """``seconds`` as a short duration (``42 s``, ``7 min``, ``3.5 h``); ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def engine_lines(engines: dict[str, dict], now: float) -> list[str]:
    """One line per warm engine (``cluster.runtime.warm_engines.running_engines``), under a header."""
    lines = [f"{'NAME':<34} {'MODEL':<28} {'KIND':<11} {'BACKEND':<14} {'REPLICAS':<22} {'GPUS':<5} "
             f"{'REQUESTS':<16} IDLE FOR"]
    for name, e in sorted(engines.items()):
        states = e.get("replica_states", {})
        running = states.get("RUNNING", 0)
        others = ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()) if s != "RUNNING" and n)
        hosts = sorted({r.get("hostname", "?") for r in (e.get("replicas") or {}).values()})
        scaling = e.get("scaling") or {}
        bounds = f"[{scaling.get('min_replicas', '?')}-{scaling.get('max_replicas', '?')}]"
        where = f"{running} {bounds}" + (f" on {','.join(hosts)}" if hosts else "") + (f" ({others})" if others else "")
        gpus = (e.get("resources") or {}).get("num_gpus", 0)
        last = e.get("last_request_at") or e.get("started_at")
        requests = f"{e.get('requests', 0)} ({e.get('cells', 0)} cells)" if "requests" in e else "? (no record)"
        model = str(e.get("model", "?"))
        model = model if len(model) <= 28 else "…" + model[-27:]
        lines.append(f"{name:<34} {model:<28} {e.get('kind', '?'):<11} "
                     f"{e.get('backend', '?') + '/' + str(e.get('dtype', '?')):<14} {where:<22} {gpus:<5} "
                     f"{requests:<16} {ago(now - last) if last else '-'}")
    return lines


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan engines") -> int:
    """Run ``engines up``, ``list`` or ``down``; exit code 0 when it did what was asked."""
    args = parser(prog).parse_args(argv)
    from mirrorscan.cluster.runtime import warm_engines as we

    if args.action == "up":
        from mirrorscan.cluster.home import subdir
        from mirrorscan.grid.spec import load_spec

        spec = load_spec(args.experiment)
        scaling = we.Scaling(min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                             initial_replicas=args.initial_replicas, idle_timeout_s=args.idle_timeout_s)
        scaling.check()
        targets = we.engine_targets(spec, args.label)
        if not targets:
            print(f"engines: no model of {spec.experiment} can run warm (backends {', '.join(we.WARM_BACKENDS)})")
            return 0
        join_cluster(args.address)
        for t in targets:
            started = time.monotonic()
            [(name, new)] = we.start_engines([t], spec.experiment, scaling, cache_dir=str(subdir("cache")))
            said = f"started in {time.monotonic() - started:.1f} s" if new else "already up"
            print(f"engines: {name}  {t.variant.label} ({t.variant.model}, {t.kind}, {t.variant.backend}/"
                  f"{t.variant.dtype} on {t.variant.device}): {said}", flush=True)
        return 0
    join_cluster(args.address)
    if args.action == "list":
        engines = we.running_engines()
        if not engines:
            print("engines: none running")
            return 0
        print("\n".join(engine_lines(engines, time.time())))
        return 0
    if not args.all and not args.names:
        raise ConfigError("", "NAME", "says which engines to stop", "name them (see `mirrorscan engines list`) or pass --all")
    stopped = we.stop_engines(None if args.all else args.names)
    for name in stopped:
        print(f"engines: {name} stopped")
    if not stopped:
        print("engines: none running", file=sys.stderr)
    return 0
