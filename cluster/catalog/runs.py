"""Driver runs and their liveness lease: who is running an invocation now, seen from every host.

Each driver start of an invocation (the first run, or a resume) appends a row to the catalog table
``scan_runs`` (migrations 0003, 0004): host, pid, user, the execution settings it used, the config as
submitted, and a lease. While it runs,
a background thread renews the lease (``heartbeat_at``) every ``ttl/6`` seconds on its own connection. A
lease is *fresh* while ``heartbeat_at`` is within ``lease_ttl_s`` of the server's clock, so hosts need no
synchronised clocks.

- ``acquire`` starts a run. Under an advisory lock on the invocation, it refuses (ConfigError naming the
  host and pid) while another run's lease is fresh; a stale lease (its driver died, or lost the catalog)
  is taken over, and the new row records which run it took over. A lease held by this same process (same
  host and pid: an earlier driver in it that could not stamp its end while the catalog was down), or by a
  process of this host that no longer exists (a driver killed with -9), is taken over at once.
- A driver that cannot renew its lease for longer than its time-to-live must stop writing, since another
  driver may take the invocation over: ``DriverRun.lost`` turns true and ``check()`` raises LeaseLost,
  which the scan calls as each part lands.
- ``end`` stamps ``ended_at``; a crashed driver leaves it null and its lease goes stale.

The time-to-live is ``$MIRRORSCAN_LEASE_TTL_S`` (default 120 s): long enough to ride out a brief catalog
restart, short enough that a resume after a crash waits at most two minutes.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field

from mirrorscan.grid.errors import CatalogError, ConfigError

LEASE_TTL_S = 120.0
"""Default seconds a lease stays fresh without renewal ($MIRRORSCAN_LEASE_TTL_S overrides)."""


class LeaseLost(CatalogError):
    """This driver could not renew its lease within its time-to-live; it must stop writing."""


def lease_ttl_s() -> float:
    """The lease time-to-live in seconds: $MIRRORSCAN_LEASE_TTL_S, else LEASE_TTL_S."""
    return float(os.environ.get("MIRRORSCAN_LEASE_TTL_S", LEASE_TTL_S))


def _lock_key(invocation_id: str) -> int:
    """A 32-bit advisory-lock key for one invocation (collisions only serialise two acquires)."""
    return zlib.crc32(f"scan_runs:{invocation_id}".encode())


@dataclass
class DriverRun:
    """This process's run of an invocation, holding its lease until ``end``."""

    run_id: str
    invocation_id: str
    dsn: str
    ttl_s: float
    took_over: str | None = None
    """The run whose stale lease this one took over (None: the lease was free)."""
    last_renewed: float = field(default_factory=time.monotonic)
    """Monotonic time of the last successful renewal (or of acquiring)."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def lost(self) -> bool:
        """True once the lease went unrenewed for longer than its time-to-live."""
        return time.monotonic() - self.last_renewed > self.ttl_s

    def check(self) -> None:
        """Raise LeaseLost when the lease is lost (call before writing more)."""
        if self.lost:
            raise LeaseLost(f"catalog: the lease on invocation {self.invocation_id} was not renewed for "
                            f"{time.monotonic() - self.last_renewed:.0f} s (time-to-live {self.ttl_s:.0f} s), so "
                            f"another driver may have taken it over; this driver stops. Finish it with "
                            f"scan --resume once the catalog is reachable")

    def start_heartbeat(self) -> None:
        """Renew the lease every ttl/6 seconds in a daemon thread, on a connection of its own."""
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.run_id[:8]}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        import psycopg

        conn = None
        while not self._stop.wait(self.ttl_s / 6):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                conn.execute("UPDATE scan_runs SET heartbeat_at = now() WHERE run_id = %s", [self.run_id])
                self.last_renewed = time.monotonic()
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def end(self, catalog=None) -> None:
        """Stop renewing and stamp ``ended_at`` (best effort: a catalog that is down leaves it null)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if catalog is None:
            return
        try:
            if not catalog.connected:
                catalog.reconnect()
            catalog.execute("UPDATE scan_runs SET ended_at = now(), heartbeat_at = now() WHERE run_id = %s",
                            [self.run_id])
        except CatalogError:
            pass


@dataclass(frozen=True)
class DriverStart:
    """What one driver start of an invocation records in ``scan_runs`` besides who it is."""

    execution: dict
    """The execution settings this start uses (``grid.settings.execution``: store, pool sizes, per-model
    execution keys); they may differ from an earlier start's."""
    resumed: bool
    """Whether the start resumes an invocation an earlier start began."""
    config_file: str = ""
    """The config file a refusal names."""
    submitted: dict | None = None
    """The config as the user submitted it (its file and JSON; no secrets: the caller redacts the DSN's password)."""


def acquire(catalog, invocation_id: str, start: DriverStart, ttl_s: float | None = None, host: str | None = None,
            pid: int | None = None) -> DriverRun:
    """Record a driver start (``start``) of ``invocation_id`` holding its lease for ``ttl_s`` seconds (default
    ``lease_ttl_s``), or refuse while another's is fresh. ``host`` and ``pid`` name the driver (default this
    process)."""
    ttl_s = lease_ttl_s() if ttl_s is None else ttl_s
    host, pid = host or socket.gethostname(), pid or os.getpid()
    run_id = str(uuid.uuid4())
    with catalog.transaction():
        catalog.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(invocation_id)])
        holder = catalog.execute(   # the newest run holds the lease (earlier ones ended or were taken over)
            "SELECT run_id, host, pid, EXTRACT(EPOCH FROM now() - heartbeat_at), lease_ttl_s FROM scan_runs "
            "WHERE invocation_id = %s AND ended_at IS NULL AND started_at = (SELECT max(started_at) FROM scan_runs "
            "WHERE invocation_id = %s)", [invocation_id, invocation_id])
        took_over = None
        if holder:
            other_run, other_host, other_pid, age_s, other_ttl = holder[0]
            ours = (other_host, other_pid) == (host, pid)   # an earlier driver of this process (ended or dead)
            dead = other_host == host and not pid_alive(int(other_pid))   # killed on this very host
            if float(age_s) <= float(other_ttl) and not (ours or dead):
                raise ConfigError(start.config_file, "--resume",
                                  f"invocation {invocation_id} is being run by the driver on host {other_host} "
                                  f"(pid {other_pid}), whose lease was renewed {float(age_s):.0f} s ago",
                                  f"wait for it to finish, or stop it; a lease not renewed for {float(other_ttl):.0f} s "
                                  f"is taken over")
            took_over = str(other_run)
        catalog.execute(
            "INSERT INTO scan_runs (run_id, invocation_id, host, pid, username, resumed, took_over, execution, "
            "lease_ttl_s, submitted_config) VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb)",
            [run_id, invocation_id, host, pid, _user(), start.resumed, took_over, json.dumps(start.execution), ttl_s,
             None if start.submitted is None else json.dumps(start.submitted)])
    return DriverRun(run_id, invocation_id, catalog.dsn, ttl_s, took_over)


def _experiment_key(experiment: str) -> int:
    """A 32-bit advisory-lock key for appending to one experiment."""
    return zlib.crc32(f"scan_experiment:{experiment}".encode())


def refuse_concurrent_append(catalog, experiment: str, config_file: str = "", *, invocation_id: str | None = None,
                             host: str | None = None, pid: int | None = None) -> None:
    """For an instrument that appends to its experiment (cells held across invocations): refuse (ConfigError
    naming the running invocation, its host and pid) while a driver of another invocation of ``experiment``
    holds a fresh lease, since both would ask the cells neither holds yet. Call it inside the transaction that
    then creates the invocation and ``acquire``s its lease: the advisory lock it takes on the experiment lasts
    to that transaction's end, so two scans starting at once are told apart. A lease of this process, or of a
    process of this host that no longer exists, does not count (as in ``acquire``)."""
    host, pid = host or socket.gethostname(), pid or os.getpid()
    catalog.execute("SELECT pg_advisory_xact_lock(%s)", [_experiment_key(experiment)])
    rows = catalog.execute(
        "SELECT r.invocation_id::text, r.host, r.pid, EXTRACT(EPOCH FROM now() - r.heartbeat_at), r.lease_ttl_s "
        "FROM scan_runs r JOIN scan_invocations i ON i.invocation_id = r.invocation_id WHERE i.experiment = %s "
        "AND r.ended_at IS NULL ORDER BY r.started_at DESC", [experiment])
    for other, other_host, other_pid, age_s, ttl in rows:
        if other == invocation_id or float(age_s) > float(ttl) or (other_host, other_pid) == (host, pid):
            continue
        if other_host == host and not pid_alive(int(other_pid)):
            continue
        raise ConfigError(config_file, "experiment", f"experiment {experiment!r} is being scanned by invocation "
                          f"{other} (driver on host {other_host}, pid {other_pid}, lease renewed {float(age_s):.0f} s "
                          f"ago)", "wait for that scan to finish, or stop it; two scans appending to one experiment "
                          "would ask the same cells twice")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
