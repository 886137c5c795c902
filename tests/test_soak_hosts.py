"""The soak's hosts: namespaces on a bridge the soak makes and removes, each host reachable at its own
address from another host and from this machine; loopback where namespaces cannot be made; what a
killed run left removed by the next."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench.soak.hosts import Host, Network, remove_stale

ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
connection, _ = server.accept()
connection.sendall(connection.recv(100).upper())
"""
ASK = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as sock:
    sock.sendall(b"hello")
    print(sock.recv(100).decode())
"""


@pytest.fixture
def network() -> Iterator[Network]:
    made = Network().create()
    try:
        yield made
    finally:
        made.remove()


def _namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _echo_on(host: Host, port: int) -> subprocess.Popen[str]:
    server = subprocess.Popen(
        host.command([sys.executable, "-c", ECHO, host.address, str(port)]), stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "listening"
    return server


def test_each_host_answers_at_its_own_address_from_another_host(network: Network) -> None:
    if not network.isolated:
        pytest.skip(f"no network namespaces here: {network.why_not}")
    redis, worker = network.add_host("redis"), network.add_host("worker")
    assert redis.address != worker.address and redis.namespace in _namespaces()
    server = _echo_on(redis, 7001)
    try:
        asked = subprocess.run(
            worker.command([sys.executable, "-c", ASK, redis.address, "7001"]),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert asked.stdout.strip() == "HELLO", asked.stderr
    finally:
        server.kill()
        server.communicate()
    # ... and a host cannot reach another's loopback: roles talk over the bridge only
    unreachable = subprocess.run(
        worker.command([sys.executable, "-c", ASK, "127.0.0.1", "6379"]), capture_output=True, timeout=20
    )
    assert unreachable.returncode != 0


def test_the_network_is_removed_with_its_hosts(network: Network) -> None:
    if not network.isolated:
        pytest.skip(f"no network namespaces here: {network.why_not}")
    host = network.add_host("gone")
    network.remove()
    assert host.namespace not in _namespaces()
    links = subprocess.run(["ip", "link", "show", network.bridge], capture_output=True, text=True)
    assert links.returncode != 0


def test_a_killed_runs_namespaces_are_removed_by_the_next_and_a_live_ones_kept(network: Network) -> None:
    if not network.isolated:
        pytest.skip(f"no network namespaces here: {network.why_not}")
    live = network.add_host("live")
    dead = "tfsoak-2147483646-beef-left"  # no process has that pid
    subprocess.run(["ip", "netns", "add", dead], check=True)
    assert dead in remove_stale()
    assert dead not in _namespaces() and live.namespace in _namespaces()


def test_without_namespaces_every_host_is_loopback() -> None:
    plain = Network(isolated=False).create()
    host = plain.add_host("redis")
    assert (host.address, host.namespace, plain.gateway) == ("127.0.0.1", None, "127.0.0.1")
    assert host.command(["redis-server"]) == ["redis-server"]
    plain.remove()
