"""The warning ``scan`` and ``submit`` print when the Ray cluster they join listens beyond loopback with
authentication off: the decision on the addresses Ray reports (GCS ``ip:port``, node addresses, job server
URLs), one line naming them and the fix."""

from __future__ import annotations

import pytest

from mirrorscan.cluster.runtime.ray_session import beyond_loopback, exposure_warning


@pytest.mark.parametrize("address,reachable", [
    ("127.0.0.1", False), ("127.0.0.1:6379", False), ("127.3.4.5:6379", False), ("localhost:8265", False),
    ("http://127.0.0.1:8265", False), ("http://localhost:8265/", False), ("[::1]:8265", False), ("::1", False),
    ("::ffff:127.0.0.1", False),
    ("10.0.0.5", True), ("10.0.0.5:6379", True), ("0.0.0.0:6379", True), ("http://192.168.1.20:8265", True),
    ("[2001:db8::5]:6379", True), ("::", True), ("head.example.org:6379", True), ("http://head:8265", True),
])
def test_an_address_is_reachable_unless_it_is_loopback(address, reachable):
    assert beyond_loopback(address) is reachable


def test_a_hand_started_head_with_auth_off_gets_one_line_naming_its_addresses_and_the_fix():
    # what `ray start --head` on a machine reports: its outward address for the GCS and the node
    warning = exposure_warning("10.0.0.5:6379", ["10.0.0.5:6379", "10.0.0.5", "10.0.0.5"], auth_on=False)
    assert warning is not None and "\n" not in warning
    assert warning.startswith("warning: the Ray cluster at 10.0.0.5:6379 listens beyond loopback "
                              "(10.0.0.5, 10.0.0.5:6379) with authentication off")
    assert "--node-ip-address 127.0.0.1" in warning and "RAY_AUTH_MODE=token" in warning


def test_no_warning_with_auth_on_or_on_loopback_only():
    assert exposure_warning("10.0.0.5:6379", ["10.0.0.5:6379", "10.0.0.5"], auth_on=True) is None
    assert exposure_warning("127.0.0.1:6379", ["127.0.0.1:6379", "127.0.0.1", "localhost"], auth_on=False) is None
    # one reachable node of several is enough
    assert "10.0.0.7" in exposure_warning("127.0.0.1:6379", ["127.0.0.1:6379", "127.0.0.1", "10.0.0.7"], False)


def test_a_ray_started_in_cluster_mode_with_auth_off_is_reported_reachable_by_what_ray_says():
    """A real Ray started as a hand-started head is (cluster mode: the machine's address; auth off), in a
    process of its own: the addresses Ray reports for it draw the warning, unless this machine has no address
    but loopback (then Ray reports 127.0.0.1 and there is nothing to warn about)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import json, ray\n"
            "ray.init(address='local', num_cpus=1, include_dashboard=False, logging_level='ERROR')\n"
            "from mirrorscan.cluster.runtime.ray_session import joined_cluster_warning\n"
            "nodes = [n['NodeManagerAddress'] for n in ray.nodes()]\n"
            "print(json.dumps({'nodes': nodes, 'warning': joined_cluster_warning()}))\n"
            "ray.shutdown()\n")
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if all(not beyond_loopback(a) for a in report["nodes"]):
        pytest.skip("this machine has no address but loopback")
    assert report["warning"] is not None and report["nodes"][0] in report["warning"]
