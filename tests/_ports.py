"""Loopback ports for the servers tests start, none of which another test process can be offered.

The kernel's pick (`bind(("127.0.0.1", 0))`) comes from the ephemeral range, which every outgoing
connection of every process draws from too: between the moment a test learns a free port and the
moment its server binds it, a client socket — or another test process asking the kernel the same
question — may take it ("Address already in use"). So ports come from below the ephemeral range, each
test process of a parallel run (pytest-xdist's `gw0`, `gw1`…) from a block of its own, in turn, and
only one that binds right now is given.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

__all__ = ["free_port"]

LOWEST = 10_000
BLOCKS = 16  # test processes with disjoint blocks of ports


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default when the kernel does not say


def _block() -> range:
    """This process's ports: its worker's block of [LOWEST, the ephemeral range)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) % BLOCKS if worker[2:].isdigit() else 0
    size = (_ephemeral_start() - LOWEST) // BLOCKS
    return range(LOWEST + index * size, LOWEST + (index + 1) * size)


_BLOCK = _block()
_turn = itertools.count(random.randrange(max(len(_BLOCK), 1)))  # anywhere: a run right after takes others


def free_port() -> int:
    """A loopback TCP port nothing is bound to now and no other test process is offered."""
    if len(_BLOCK) < 100:  # no room below the ephemeral range here: the kernel's pick
        return _bound(0)
    for _ in range(len(_BLOCK)):
        try:
            return _bound(_BLOCK[next(_turn) % len(_BLOCK)])
        except OSError:
            continue
    raise RuntimeError(f"no free loopback port in {_BLOCK}")


def _bound(port: int) -> int:
    """`port` once a socket could bind it on loopback (the kernel's pick for 0); the socket is closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
        return int(probe.getsockname()[1])
