"""The warning ``scan`` and ``submit`` print when the Ray cluster they join listens beyond loopback with
authentication off: the decision on the addresses Ray reports (GCS ``ip:port``, node addresses, job server
URLs), one line naming them and the fix."""

from __future__ import annotations

import pytest

from cluster.ray_session import beyond_loopback, exposure_warning


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
