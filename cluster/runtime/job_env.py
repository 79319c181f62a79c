"""Which runtime env a submitted job ships, and where its traces and invocation record go.

Two profiles ship beside each other in the repository root:

- ``runtime_env.yaml`` (profile ``local``, the default): names no store and no catalog. A job submitted to
  a Ray head on this machine (``ray start --head``) uses this machine's mirrorscan home, so it writes to
  the same local store and catalog as ``mirrorscan scan`` here, and finds the models prepared there.
- ``runtime_env.cluster.yaml`` (profile ``cluster``): a cluster's shared store (``s3://…``) and catalog
  (a PostgreSQL server the nodes reach), named in its ``env_vars``. Edit those two for your cluster.

``--profile NAME`` picks ``runtime_env.NAME.yaml`` (``local``: ``runtime_env.yaml``); ``--runtime-env FILE``
any file. A job for a cluster on another machine must name a store and a catalog that cluster reaches
(the runtime env's ``MIRRORSCAN_STORE`` / ``MIRRORSCAN_CATALOG_DSN``, the config's ``store`` /
``catalog_dsn``, or ``--store`` / ``--catalog-dsn``); otherwise ``submit`` stops before anything is sent
and says which setting to change.
"""

from __future__ import annotations

import ipaddress
import shlex
import socket
from pathlib import Path
from urllib.parse import urlsplit

from mirrorscan.grid.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = "local"
"""The profile ``submit`` uses unless told otherwise: a Ray head on this machine, this machine's home."""


def profile_file(profile: str | None) -> Path:
    """The runtime env YAML of ``profile``: ``runtime_env.yaml`` for ``local`` (or None), else
    ``runtime_env.<profile>.yaml`` in the repository root. ConfigError naming the profiles there when it
    does not exist."""
    if profile in (None, "", DEFAULT_PROFILE):
        return REPO_ROOT / "runtime_env.yaml"
    path = REPO_ROOT / f"runtime_env.{profile}.yaml"
    if not path.is_file() or "/" in profile or profile.startswith("."):
        known = [DEFAULT_PROFILE] + sorted(p.name[len("runtime_env."):-len(".yaml")]
                                           for p in REPO_ROOT.glob("runtime_env.*.yaml"))
        raise ConfigError("", "--profile", f"{profile!r} names no runtime env file ({path.name} is missing)",
                          f"use one of: {', '.join(known)}, or --runtime-env FILE")
    return path


def _host(address: str) -> str:
    """The host part of a Ray address: ``http://HOST:8265``, ``ray://HOST:10001`` or ``HOST:6379``."""
    return (urlsplit(address if "://" in address else f"//{address}").hostname or "").strip("[]")


def on_this_machine(address: str) -> bool:
    """Whether the Ray head at ``address`` runs on this machine: a loopback host, ``auto``, or a host that
    resolves to an address this machine can bind (one of its own interfaces)."""
    if address.strip() == "auto":
        return True
    host = _host(address)
    if not host or host == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        ip = sockaddr[0]
        if ipaddress.ip_address(ip.split("%")[0]).is_loopback:
            return True
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((ip, 0))   # only an address of this machine's own interfaces can be bound
            return True
        except OSError:
            continue
    return False


def _loopback_host(dsn: str) -> bool:
    """Whether a catalog DSN (URL or ``key=value`` form) points at this machine's loopback."""
    if "://" in dsn:
        host = urlsplit(dsn).hostname or "localhost"
    else:
        parts = dict(p.split("=", 1) for p in dsn.split() if "=" in p)
        host = parts.get("host", parts.get("hostaddr", "localhost"))
    if host.startswith("/") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def place_job(runtime_env: dict, env_file: str | Path, address: str, *, store: str | None = None,
              catalog_dsn: str | None = None, config_store: str | None = None, config_catalog_dsn: str | None = None,
              needs_store: bool = True) -> str:
    """Where a job's traces and invocation record go; returns a prefix for its entrypoint ("" or
    ``MIRRORSCAN_HOME=… ``).

    On this machine's head the job uses this machine's home (its store, catalog and prepared models; the flags
    and the config may still name others), unless the runtime env names a store: then it is a cluster's
    profile, the address a port-forward to it (KubeRay), and nothing is added. For a head elsewhere, the store and the catalog
    must be named and the catalog must not be this machine's loopback: ConfigError naming the runtime env's
    setting to change otherwise. ``config_store``, ``config_catalog_dsn``: the experiment's config values;
    ``needs_store=False`` for a job that finds the store in the catalog (an analysis of a stored invocation).
    """
    env_vars = runtime_env.get("env_vars") or {}
    store = store or config_store or env_vars.get("MIRRORSCAN_STORE")
    catalog_dsn = catalog_dsn or config_catalog_dsn or env_vars.get("MIRRORSCAN_CATALOG_DSN")
    if "MIRRORSCAN_STORE" in env_vars and on_this_machine(address):
        return ""   # a profile for a cluster, reached through a loopback port-forward (KubeRay)
    if on_this_machine(address):
        from mirrorscan.cluster.home import home

        return f"MIRRORSCAN_HOME={shlex.quote(str(home()))} "
    host = _host(address)
    fix = (f"use --profile cluster (runtime_env.cluster.yaml) with {{setting}} set to one the nodes of {host} reach, "
           f"or set it in {Path(env_file).name} or pass {{flag}}")
    if needs_store and not store:
        raise ConfigError(str(env_file), "env_vars.MIRRORSCAN_STORE",
                          f"is not set, and the cluster at {host} is another machine: its job would write traces "
                          "to that node's own disk, where nothing here reads them",
                          fix.format(setting="MIRRORSCAN_STORE (s3://bucket/prefix)", flag="--store"))
    if not catalog_dsn or catalog_dsn.strip() == "embedded" or _loopback_host(catalog_dsn):
        problem = ("is not set" if not catalog_dsn or catalog_dsn.strip() == "embedded"
                   else "names this machine's loopback")
        raise ConfigError(str(env_file), "env_vars.MIRRORSCAN_CATALOG_DSN",
                          f"{problem}, and the cluster at {host} is another machine: its job could not record "
                          "the invocation where this machine's verbs find it",
                          fix.format(setting="MIRRORSCAN_CATALOG_DSN (postgresql://user@host:5432/db, no password)",
                                     flag="--catalog-dsn"))
    return ""


def describe(prefix: str) -> str | None:
    """One line saying where a job on this machine's head writes, for ``submit``'s stderr; None otherwise."""
    if not prefix:
        return None
    home = shlex.split(prefix)[0].split("=", 1)[1]
    return f"submit: the Ray head is on this machine: the job uses this machine's home {home} (store, catalog, models)"


def job_python(prefix: str) -> str:
    """The interpreter a job's entrypoint names, quoted: for a head on this machine (``prefix`` from ``place``
    is set) this very interpreter, whose environment holds mirrorscan and its dependencies — the head's own
    ``PATH`` need not (``.venv/bin/ray start --head`` without activating the environment finds the system's
    ``python``); for a cluster elsewhere, ``python`` of its nodes."""
    import sys

    return shlex.quote(sys.executable) if prefix else "python"
