"""Where the workers of a test run: this host's loopback (the user's launcher), or netns hosts."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from pytest_dlperf.processes.distributed.launchers import Launcher, LocalLauncher, NetnsLauncher
from pytest_dlperf.processes.distributed.netns import NetnsCluster, unavailable_reason

#: Where the workers of a test run: this host's loopback, or separate netns hosts (optionally rate-limited).
NETWORKS = ("loopback", "netns", "netns_limited")


class NetworkUnavailable(RuntimeError):
    """The network asked for cannot be built here; the message is the reason to skip."""


@contextmanager
def network(kind: str, hosts: int, rate: str = "1gbit", launcher: Launcher | None = None) -> Iterator[Launcher]:
    """A launcher for ``kind``; netns namespaces exist only inside the ``with`` block.

    ``loopback`` means the user's launcher (``--dlperf-launcher``: local by default).
    """
    if kind == "loopback":
        yield launcher or LocalLauncher()
        return
    if kind not in NETWORKS:
        raise ValueError(f"network {kind!r}: use one of {', '.join(NETWORKS)}")

    reason = unavailable_reason()
    if reason:
        raise NetworkUnavailable(reason)
    with NetnsCluster(hosts, rate=rate if kind == "netns_limited" else None) as cluster:
        yield NetnsLauncher(cluster.namespaces, cluster.addresses)
