"""The soak's hosts: one Linux network namespace per role, each with its own address on a bridge the
soak creates and removes, so that every link between roles is a real TCP route between addresses
(and goes through a fault proxy of the soak's, listening on the bridge's own address).

Where namespaces cannot be made (not root, no `ip`, a container without the capability), `Network`
says so in one line and every host is this machine's loopback. Names carry the soak's pid, so that a
run removes only its own, and what a killed run left is removed by the next (`remove_stale`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Host", "Network", "alive", "remove_stale"]

_PREFIX = "tfsoak"
_NAMESPACE = re.compile(rf"^{_PREFIX}-(\d+)-([0-9a-f]{{4}})-")
_COMMAND_TIMEOUT_S = 10


@dataclass(frozen=True)
class Host:
    """One role's host: its name, its address, and the namespace its processes run in (None: this
    machine's own network, on loopback)."""

    name: str
    address: str
    namespace: str | None = None

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run on this host."""
        if self.namespace is None:
            return list(argv)
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Network:
    """The bridge and the hosts of one soak run (`create`, then `add_host` per role, `remove` at the end)."""

    isolated: bool = True  # False: every host on loopback
    pid: int = field(default_factory=os.getpid)
    hosts: list[Host] = field(default_factory=list)
    why_not: str | None = None  # when namespaces could not be made: why, in one line

    def __post_init__(self) -> None:
        # The run's own names (interfaces' at most 15 characters) and subnet: runs may overlap, and
        # the kernel removes a deleted namespace's links a moment later.
        self.run = secrets.token_hex(2)
        self.subnet = f"10.77.{int(self.run, 16) % 200 + 20}"
        self.bridge = f"tfs{self.run}b"

    @property
    def gateway(self) -> str:
        """The bridge's address: where the soak's proxies listen for the hosts."""
        return f"{self.subnet}.1" if self.isolated else "127.0.0.1"

    def create(self) -> Network:
        """Make the bridge, or fall back to loopback saying why."""
        if self.isolated:
            self.why_not = _unavailable()
        if self.isolated and self.why_not is None:
            try:
                remove_stale()
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
            except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                self.why_not = f"the bridge could not be made ({_first_line(exc)})"
                self.remove()
        if self.why_not is not None:
            self.isolated = False
            print(f"soak: no network namespaces here ({self.why_not}): every host runs on loopback")
        return self

    def add_host(self, name: str) -> Host:
        """A host for role `name`, on its own address (loopback when not isolated)."""
        if not self.isolated:
            host = Host(name, "127.0.0.1")
            self.hosts.append(host)
            return host
        number = len(self.hosts) + 2
        namespace = f"{_PREFIX}-{self.pid}-{self.run}-{name}"
        outside, inside = f"tfs{self.run}h{number}", f"tfs{self.run}p{number}"
        address = f"{self.subnet}.{number}"
        _ip("netns", "add", namespace)
        host = Host(name, address, namespace)
        self.hosts.append(host)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "route", "add", "default", "via", self.gateway)
        return host

    def remove(self) -> None:
        """Remove the hosts' namespaces (their links go with them) and the bridge."""
        for host in self.hosts:
            if host.namespace is not None:
                _ip("netns", "del", host.namespace, check=False)
        self.hosts = []
        if self.isolated:
            _ip("link", "del", self.bridge, check=False)


def remove_stale() -> list[str]:
    """Remove the namespaces (and bridges) of soak runs whose process is gone; their names."""
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S
    )
    removed = []
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = _NAMESPACE.match(name)
        if match is None or alive(int(match.group(1))):
            continue
        _ip("netns", "del", name, check=False)
        _ip("link", "del", f"tfs{match.group(2)}b", check=False)
        removed.append(name)
    return removed


def alive(pid: int) -> bool:
    """Whether process `pid` runs (what a soak names after its pid is removed once it does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "the `ip` command is not installed"
    if os.geteuid() != 0:
        return "not root"
    probe = f"{_PREFIX}-{os.getpid()}-probe"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S
    )
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()[:200]}"
    _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> None:
    _run(["ip", *args], check=check)


def _run(argv: list[str], *, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)


def _first_line(exc: BaseException) -> str:
    stderr = getattr(exc, "stderr", None)
    return (str(stderr or exc).strip().splitlines() or [type(exc).__name__])[0][:200]
