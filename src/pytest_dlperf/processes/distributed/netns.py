"""Separate network hosts on one machine: Linux network namespaces joined by a bridge.

``NetnsCluster(n)`` makes ``n`` namespaces ("hosts"), each with ``lo`` and an
``eth0`` carrying its own address (10.77.0.1, 10.77.0.2, ...), all plugged by veth
pairs into a bridge that lives in a further "switch" namespace. Nothing is created
in the caller's namespace, so the host's own network is never touched and two
clusters may use the same subnet at once (they are separate layer-2 domains).

An optional rate limit adds ``tc qdisc ... tbf`` on every host's ``eth0`` (egress),
the one shaping discipline available where ``netem`` is not. Everything is removed
on exit, on an error half-way through creation, and at interpreter exit; processes
still running inside a namespace are killed before it is deleted.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); :func:`unavailable_reason` says why
not, for a test to skip with.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from typing import Sequence

SUBNET_PREFIX = "10.77.0."
PREFIX_LEN = 24
#: The head namespace's address (``head=True``): where launch clients (ssh, mpirun, slurmctld) run.
HEAD_ADDRESS = f"{SUBNET_PREFIX}254"
#: tbf's bucket must hold what the rate sends in one timer tick (tc-tbf(8)); 10 ms worth, at least 32 KiB.
TBF_MIN_BURST_BYTES = 32 * 1024
TBF_LATENCY = "50ms"
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_LIVE: set["NetnsCluster"] = set()


class NetnsError(RuntimeError):
    """A namespace command failed; the message holds the command and its stderr."""


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "the netns launcher needs root (ip netns add, veth, tc); run as root or in a privileged container"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the netns launcher needs {tool!r} from iproute2 (apt-get install iproute2)"
    probe = f"dlp-probe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return f"cannot create a network namespace here: {exc}"
    _ip("netns", "del", probe, check=False)
    return None


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def validate_rate(rate: str) -> str:
    """A tc rate such as ``100mbit``; raises ValueError naming the accepted forms."""
    if not _RATE.match(rate):
        raise ValueError(f"rate {rate!r} is not a tc rate; write e.g. '100mbit', '1gbit' or '500kbit'")
    return rate


def rate_bits_per_second(rate: str) -> float:
    """``"100mbit"`` -> 1e8 (tc's units: bit/kbit/mbit/gbit, and bps/kbps/... for bytes)."""
    validate_rate(rate)
    unit = re.sub(r"^[\d.]+", "", rate)
    return float(rate[: len(rate) - len(unit)]) * _UNITS[unit]


def tbf_burst(rate: str) -> str:
    return f"{max(TBF_MIN_BURST_BYTES, int(rate_bits_per_second(rate) / 8 / 100))}b"


class NetnsCluster:
    """``with NetnsCluster(2, rate="100mbit") as c: c.namespaces, c.addresses``."""

    def __init__(self, hosts: int, rate: str | None = None, token: str | None = None, head: bool = False):
        if hosts < 1 or hosts > 200:
            raise ValueError(f"hosts={hosts} must be between 1 and 200")
        self.hosts = hosts
        self.rate = validate_rate(rate) if rate else None
        self.token = token or secrets.token_hex(3)
        self.switch = f"dlp-{self.token}-sw"
        self.namespaces = [f"dlp-{self.token}-h{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET_PREFIX}{i + 1}" for i in range(hosts)]
        #: A further namespace on the bridge (``HEAD_ADDRESS``, never rate-limited) that is not one of the
        #: hosts: the "login node" launch clients run in, so the hosts are remote to them.
        self.head = f"dlp-{self.token}-hd" if head else None
        self._created: list[str] = []

    def __enter__(self) -> "NetnsCluster":
        _LIVE.add(self)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _plug(self, ns: str, port: str, address: str) -> None:
        """``ns``'s eth0 at ``address``, its veth peer ``port`` on the bridge."""
        self._add_namespace(ns)
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def _create(self) -> None:
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        if self.head:
            self._plug(self.head, "phd", HEAD_ADDRESS)
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses)):
            self._plug(ns, f"p{i}", address)
            if self.rate:
                _run(["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", self.rate,
                      "burst", tbf_burst(self.rate), "latency", TBF_LATENCY])

    def link(self, host: int, up: bool) -> None:
        """Take host ``host``'s link down (a host vanishing from the network) or back up."""
        _ip("-n", self.namespaces[host], "link", "set", "eth0", "up" if up else "down")

    def pids(self) -> list[int]:
        """Processes running inside any of this cluster's namespaces."""
        found: list[int] = []
        for ns in self._created:
            out = _ip("netns", "pids", ns, check=False).stdout
            found += [int(p) for p in out.split() if p.isdigit()]
        return found

    def kill_all(self, grace: float = 2.0) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.05)

    def close(self) -> None:
        """Kill what runs inside, delete every namespace created (the veths and bridge go with them)."""
        try:
            self.kill_all()
        finally:
            for ns in reversed(self._created):
                # the veth first: a namespace kept alive by a straggler would otherwise keep its
                # peer on the bridge, and the next bring-up meets "File exists"
                if ns != self.switch:
                    _ip("-n", ns, "link", "del", "eth0", check=False)
                _ip("netns", "del", ns, check=False)
            self._created.clear()
            _LIVE.discard(self)

    def exists(self) -> list[str]:
        """Which of this cluster's namespaces still exist (for tests of the cleanup)."""
        listed = _ip("netns", "list", check=False).stdout.split()
        return [n for n in [self.switch, *self.namespaces] if n in listed]


@atexit.register
def _cleanup_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.close()
