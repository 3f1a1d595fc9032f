"""Network namespaces as hosts: separate addresses, a real rate limit, cleanup whatever happens."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pytest_dlperf.processes.distributed import netns
from pytest_dlperf.processes.distributed.netns import NetnsCluster, NetnsError

pytestmark = pytest.mark.serial  # network namespaces and their bridge, and a bandwidth timed through tbf

REASON = netns.unavailable_reason()
needs_netns = pytest.mark.skipif(REASON is not None, reason=REASON or "")

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    n += len(b)
print(n, flush=True)
"""
CLIENT = """
import socket, sys, time
payload = b"x" * int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection((sys.argv[1], 5001), timeout=5); break
    except OSError:
        time.sleep(0.05)
t = time.perf_counter(); s.sendall(payload); s.shutdown(socket.SHUT_WR); s.recv(1)
print(time.perf_counter() - t, flush=True)
"""


def transfer_seconds(cluster: NetnsCluster, size: int) -> float:
    """Send ``size`` bytes from host 1 to host 0 over the veths; the receiver counts them."""
    server = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[0], sys.executable, "-c", SERVER,
                               cluster.addresses[0]], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    out = subprocess.run(["ip", "netns", "exec", cluster.namespaces[1], sys.executable, "-c", CLIENT,
                          cluster.addresses[0], str(size)], capture_output=True, text=True, timeout=60, check=True)
    received = int(server.communicate(timeout=30)[0].strip())
    assert received == size
    return float(out.stdout.strip())


def test_rates_are_validated_before_anything_is_created():
    with pytest.raises(ValueError, match="not a tc rate"):
        NetnsCluster(2, rate="fast")
    assert netns.rate_bits_per_second("100mbit") == 1e8
    assert netns.tbf_burst("1gbit") == "1250000b"  # 10 ms at the rate, not a fixed 32 KiB


def test_without_root_the_reason_says_so(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "needs root" in (netns.unavailable_reason() or "")


@needs_netns
def test_hosts_have_their_own_addresses_and_reach_each_other():
    with NetnsCluster(2) as cluster:
        assert cluster.exists() == [cluster.switch, *cluster.namespaces]
        show = subprocess.run(["ip", "-n", cluster.namespaces[1], "-4", "addr", "show", "eth0"],
                              capture_output=True, text=True, check=True).stdout
        assert f"{cluster.addresses[1]}/24" in show
        root = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True).stdout
        assert cluster.addresses[0] not in root, "the cluster leaked an address into the caller's namespace"
        assert transfer_seconds(cluster, 1 << 20) < 5.0
    assert cluster.exists() == []


@needs_netns
def test_tbf_really_limits_the_bandwidth():
    size = 2_500_000  # 20 Mbit: 2 s at 10 mbit/s
    with NetnsCluster(2, rate="10mbit") as cluster:
        limited = transfer_seconds(cluster, size)
    with NetnsCluster(2) as cluster:
        free = transfer_seconds(cluster, size)
    assert limited >= 0.8 * size * 8 / 10e6, f"{size} bytes in {limited:.2f} s is faster than 10 mbit/s"
    assert free < limited / 4, f"unlimited {free:.2f} s vs limited {limited:.2f} s"


@needs_netns
def test_a_failing_test_body_still_removes_namespaces_and_their_processes():
    with pytest.raises(RuntimeError, match="test body failed"):
        with NetnsCluster(2) as cluster:
            sleeper = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[1], "sleep", "300"],
                                       start_new_session=True)
            deadline = time.monotonic() + 5
            while sleeper.pid not in cluster.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sleeper.pid in cluster.pids()
            raise RuntimeError("test body failed")
    # killed by the cluster (a signal), not left to finish its 300 s sleep
    assert sleeper.wait(timeout=5) < 0, f"sleep ended with {sleeper.returncode}, not by a signal"
    assert cluster.exists() == []


@needs_netns
def test_a_failure_half_way_through_creation_leaves_nothing(monkeypatch):
    real = netns._run
    calls = {"n": 0}

    def flaky(argv, check=True):
        calls["n"] += 1
        if calls["n"] == 9:  # after the switch and the first host exist
            raise NetnsError("injected failure")
        return real(argv, check)

    monkeypatch.setattr(netns, "_run", flaky)
    cluster = NetnsCluster(3)
    with pytest.raises(NetnsError, match="injected"):
        cluster.__enter__()
    monkeypatch.setattr(netns, "_run", real)
    assert cluster.exists() == []
