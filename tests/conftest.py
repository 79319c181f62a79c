"""Shared fixtures. Catalog: one real embedded PostgreSQL per test session, one fresh database per test."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cluster import embedded_pg


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


@pytest.fixture
def catalog_dsn(pg_dsn):
    """DSN of a new, empty database (``t_<random>``) on the session server, one per test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(pg_dsn, dbname=name)
