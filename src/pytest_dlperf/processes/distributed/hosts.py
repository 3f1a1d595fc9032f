"""The hosts a distributed job's ranks run on, as a hostfile names them, each checked before use.

Hostfile format (the one of MXNet's ``launch.py`` and Open MPI, plus an ssh port and
an interpreter): one ``[user@]host[:port] [slots=N] [python=/abs/path]`` per line; ``#``
starts a comment. ``python=`` is the interpreter the ranks on that host run (default:
this one's path, which must then exist there too: the job checks it up front). The host is a
DNS name or an IP address; an IPv6 address with a port is bracketed
(``[fe80::1]:2222``), and a bare IPv6 address (``fe80::1``) never carries a port.
Only the ssh launcher honours a port (``ssh -p``); mpi and slurm refuse one.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_NUMBER = re.compile(r"^[0-9]{1,9}$")
_PYTHON = re.compile(r"^/[A-Za-z0-9_./+-]{1,4095}$")  # bounded: int() of a huge digit string raises
#: An IPv6 zone (``fe80::1%eth0``): an interface name, nothing a shell or ssh could misread.
_ZONE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


class HostfileError(ValueError):
    """A hostfile line is not a valid host; the message names the file, the line and the rule."""


@dataclass(frozen=True)
class Host:
    """One validated host: a DNS name or an IP address, an optional user, its slots, its ssh port.

    ``address`` is the address alone, never with the port: it is what ranks bind and
    rendezvous at (``MASTER_ADDR``, ``TF_CONFIG``, ``DMLC_PS_ROOT_URI``), and ``port``
    is only the port ssh logs in at (None: ssh's own default or ``~/.ssh/config``).
    """

    address: str
    user: str | None = None
    slots: int = 1
    port: int | None = None
    #: The interpreter the ranks on this host run (an absolute path there); None: the caller's own path.
    python: str | None = None

    @property
    def target(self) -> str:
        """What ssh connects to: ``user@address`` or ``address`` (the port goes to ``-p``)."""
        return f"{self.user}@{self.address}" if self.user else self.address

    @property
    def entry(self) -> str:
        """The host as a hostfile writes it: ``user@node1:2222``, ``[fe80::1]:2222``, ``node1``."""
        if self.port is None:
            return self.target
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user + '@' if self.user else ''}{address}:{self.port}"


def _ssh_port(value: str, where: str) -> int:
    if not _NUMBER.match(value) or not 1 <= int(value) <= 65535:
        raise HostfileError(f"{where}: port {value!r} is not a TCP port (host:PORT, PORT from 1 to 65535)")
    return int(value)


def _split_port(text: str, where: str) -> tuple[str, int | None]:
    """``host:port``, ``[ipv6]:port`` or ``[ipv6]``; no colon or several (a bare IPv6 address): no port."""
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or ":" not in inside or (rest and not rest.startswith(":")):
            raise HostfileError(f"{where}: {text!r} is not understood; brackets hold an IPv6 address, "
                                "optionally followed by ':PORT' ('[fe80::1]:2222')")
        return inside, _ssh_port(rest[1:], where) if rest else None
    if text.count(":") == 1:
        address, _, port = text.partition(":")
        return address, _ssh_port(port, where)
    return text, None


def validate_host(text: str, where: str = "host") -> Host:
    """Parse ``[user@]address[:port][ slots=N]``; reject anything a shell or ssh could misread."""
    parts = text.split()
    if not parts:
        raise HostfileError(f"{where}: empty host entry")
    slots = 1
    python = None
    for extra in parts[1:]:
        key, _, value = extra.partition("=")
        if key == "python":
            if not _PYTHON.match(value):
                raise HostfileError(f"{where}: python={value!r} is not an absolute path without spaces or shell "
                                    "characters (python=/opt/venv/bin/python)")
            python = value
            continue
        if key not in ("slots", "max_slots") or not _NUMBER.match(value) or int(value) < 1:
            raise HostfileError(f"{where}: {extra!r} is not understood; only 'slots=N' (N >= 1) and "
                                "'python=/abs/path' may follow the host")
        if key == "slots":
            slots = int(value)
    user, _, hostport = parts[0].rpartition("@")
    if user and not _USER.match(user):
        raise HostfileError(f"{where}: user {user!r} is not a valid login name (letters, digits, _ . -)")
    address, port = _split_port(hostport, where)
    if address.startswith("-"):
        raise HostfileError(f"{where}: host {address!r} starts with '-', which ssh would read as an option")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        if not _HOSTNAME.match(address):
            raise HostfileError(
                f"{where}: {address!r} is neither an IP address nor a DNS host name "
                "(letters, digits, '-' and '.', no spaces or shell characters"
                + ("; an IPv6 address with a port is written [ADDRESS]:PORT)" if ":" in address else ")")
            ) from None
    else:
        zone = getattr(ip, "scope_id", None)  # ipaddress accepts any text after '%'
        if zone is not None and not _ZONE.match(zone):
            raise HostfileError(f"{where}: IPv6 zone {zone!r} is not an interface name (letters, digits, _ . -)")
    return Host(address=address, user=user or None, slots=slots, port=port, python=python)


def read_hostfile(path: str | Path) -> list[Host]:
    """Every host of ``path``, validated; a bad line fails with its line number."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HostfileError(f"cannot read hostfile {path}: {exc.strerror}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        content = line.split("#", 1)[0].strip()
        if content:
            hosts.append(validate_host(content, f"{path}:{number}"))
    if not hosts:
        raise HostfileError(f"hostfile {path} lists no hosts; write one host name or address per line")
    return hosts


def slot_hosts(hosts: Sequence[Host], count: int) -> list[Host]:
    """``count`` placements filling each host's slots in order, wrapping round (as mpirun does)."""
    expanded = [h for h in hosts for _ in range(h.slots)]
    if not expanded:
        raise HostfileError("no hosts to place ranks on")
    return [expanded[i % len(expanded)] for i in range(count)]
