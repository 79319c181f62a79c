"""The browser on Ray Serve (the cluster path) through the CLI: ``mirrorscan browse --serve`` as a user runs it,
joined to the shared local Ray by ``RAY_ADDRESS`` (as on a cluster), prints its address; the same app, built
on its replica, answers over HTTP with the same policy and refuses writes; Ctrl-C stops Serve and the verb
exits 0. Real Ray and Serve, a real catalog; the store of ``browse_world``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import free_port, new_database
from processes import mirrorscan_with_ctrl_c
from mirrorscan.results.browse.app import CSP

import browse_world as world  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory, pg_dsn, ray_local):
    """The world behind ``mirrorscan browse --serve`` at 127.0.0.1; yields (url, world, the verb's process).
    Serve is shut down after the module whatever the verb did."""
    from ray import serve

    base, dsn = tmp_path_factory.mktemp("serve"), new_database(pg_dsn)
    built = world.build(base, dsn)
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    argv = ["browse", "--serve", "--catalog-dsn", dsn, "--port", str(free_port()), "--index-dir", str(base / "index")]
    # `mirrorscan ARGV` with Ctrl-C as in a terminal, even where this run was started with SIGINT ignored (inherited)
    proc = subprocess.Popen(mirrorscan_with_ctrl_c(*argv), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        printed = []
        for line in proc.stdout:   # the verb prints its address once Serve answers
            printed.append(line)
            if line.startswith("browse: "):
                break
        assert printed and printed[-1].startswith("browse: http://127.0.0.1:"), "".join(printed)
        yield printed[-1].split()[1], built, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode != 0:   # the verb did not stop Serve itself
            serve.shutdown()


def test_the_serve_deployment_answers_the_same_pages(served):
    url, built, _ = served
    with httpx.Client(base_url=url, timeout=120) as client:
        matrix = client.get(f"invocations/{built['invocation_id']}/matrix", params={"answer": "B"})
        assert matrix.status_code == 200 and matrix.headers["content-security-policy"] == CSP
        assert '<th class="row">beta</th>' in matrix.text and '<th class="row">alpha</th>' not in matrix.text
        trace = client.get(f"invocations/{built['invocation_id']}/trace",
                           params={"probe_id": "beta|cat|dog|english_strict|AB", "sample": 0, "attempt": 1})
        assert trace.status_code == 200 and "&lt;script&gt;" in trace.text and "<script" not in trace.text
        assert client.post("/").status_code == 405


def test_ctrl_c_stops_serve_and_the_verb_exits_0(served):
    url, _, proc = served
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0, proc.stdout.read()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=10)
