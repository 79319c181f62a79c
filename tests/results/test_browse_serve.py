"""The browser on Ray Serve (the cluster path): the same app, built on its replica, answers over HTTP with the
same policy and refuses writes. Real local Ray and Serve, a real catalog; the store of ``browse_world``."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from conftest import free_port, new_database
from results.browse.app import CSP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import browse_world as world  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory, pg_dsn, ray_local):
    """The world behind the browser on Serve at 127.0.0.1 (Serve shut down after the module)."""
    from results.browse import serve

    base, dsn = tmp_path_factory.mktemp("serve"), new_database(pg_dsn)
    built = world.build(base, dsn)
    url = serve.start(dsn, str(base / "index"), store=None, refresh_s=30.0, host="127.0.0.1", port=free_port())
    yield url, built
    serve.stop()


def test_the_serve_deployment_answers_the_same_pages(served):
    url, built = served
    with httpx.Client(base_url=url, timeout=120) as client:
        matrix = client.get(f"invocations/{built['invocation_id']}/matrix", params={"answer": "B"})
        assert matrix.status_code == 200 and matrix.headers["content-security-policy"] == CSP
        assert '<th class="row">beta</th>' in matrix.text and '<th class="row">alpha</th>' not in matrix.text
        trace = client.get(f"invocations/{built['invocation_id']}/trace",
                           params={"probe_id": "beta|cat|dog|english_strict|AB", "sample": 0, "attempt": 1})
        assert trace.status_code == 200 and "&lt;script&gt;" in trace.text and "<script" not in trace.text
        assert client.post("/").status_code == 405
