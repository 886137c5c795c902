"""The embedded-Redis wrapper `make test` and `make demo` rely on where no Redis runs."""

from __future__ import annotations

import os
import socket
import sys

from tests._cli import run_command


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_starts_an_embedded_redis_when_none_answers_and_stops_it_after() -> None:
    # given: a port where nothing listens
    url = f"redis://127.0.0.1:{_free_port()}/0"
    probe = (
        "import os, redis; print(redis.Redis.from_url(os.environ['TOOLFLEET_REDIS_URL']).ping()); "
        "raise SystemExit(3)"
    )
    # when
    command = [sys.executable, "-m", "workers._devredis", "--", sys.executable, "-c", probe]
    result = run_command(command, env={**os.environ, "TOOLFLEET_REDIS_URL": url})
    # then: the command saw a live Redis, its exit code came back, and the server is gone
    assert result.stdout.strip() == "True"
    assert result.returncode == 3
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
