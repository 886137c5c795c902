"""The soak's fault proxy on loopback, in front of an echo server: data passes both ways; latency
delays it; a stall holds it with the connection kept, until healed; a cut closes the connections and
refuses new ones, until healed."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from bench.soak.proxy import FaultProxy
from tests._ports import free_port


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    link = FaultProxy("echo", ("127.0.0.1", free_port()), ("127.0.0.1", server.server_address[1])).start()
    try:
        yield link
    finally:
        link.stop()
        server.shutdown()
        server.server_close()


def _connect(link: FaultProxy) -> socket.socket:
    return socket.create_connection(link.listen, timeout=5)


def _round_trip(sock: socket.socket, data: bytes = b"ping") -> float:
    started = time.monotonic()
    sock.sendall(data)
    assert sock.recv(4096) == data
    return time.monotonic() - started


def test_data_passes_both_ways_and_latency_delays_it(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        assert _round_trip(sock) < 0.1
        proxy.add_latency(0.05)
        assert _round_trip(sock) >= 0.1  # 50 ms each way
        proxy.add_latency(0)
        assert _round_trip(sock) < 0.1


def test_a_stall_holds_data_on_an_open_connection_until_healed(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        _round_trip(sock)
        proxy.stall()
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(4096) == b"held"  # the same connection, the data kept


def test_a_cut_closes_connections_and_refuses_new_ones_until_healed(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        _round_trip(sock)
        proxy.cut()
        assert sock.recv(4096) == b""  # closed by the proxy
    with _connect(proxy) as refused:
        assert refused.recv(4096) == b""
    proxy.heal()
    with _connect(proxy) as sock:
        assert _round_trip(sock) < 1
