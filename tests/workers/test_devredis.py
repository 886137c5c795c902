"""The embedded-Redis wrapper `make test` and `make demo` rely on where no Redis runs."""

from __future__ import annotations

import os
import socket
import sys

from tests._cli import run_command
from tests._environment import integration_redis_url


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


# A command that makes sure of a Redis in turn, as `toolfleet demo` does under `make demo`.
USES_REDIS = (
    "import os\n"
    "from workers._devredis import embedded_redis\n"
    "with embedded_redis(os.environ['TOOLFLEET_REDIS_URL']):\n"
    "    print('inside', flush=True)\n"
)


def _wrapped(url: str) -> list[str]:
    """What the wrapper and its command told, in order, running `USES_REDIS` with `url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")}
    command = [sys.executable, "-m", "workers._devredis", "--", sys.executable, "-c", USES_REDIS]
    result = run_command(command, env={**env, "TOOLFLEET_REDIS_URL": url})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "inside\n"
    return [line.removeprefix("toolfleet: ") for line in result.stderr.splitlines()]


def test_an_embedded_redis_is_started_then_used_each_told_once_in_order() -> None:
    # given: nothing listens at the URL
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    # when
    told = _wrapped(url)
    # then: the wrapper starts a server, the command uses it (saying so, as the embedded one), the
    # wrapper stops it; nobody claims it was already running
    assert len(told) == 4, told
    assert told[0] == f"no Redis answers at {url}; starting an embedded redis-server on 127.0.0.1:{port}"
    assert told[1].startswith("the embedded redis-server (pid ") and told[1].endswith(f") answers at {url}")
    assert told[2] == f"using the embedded Redis at {url}"
    assert told[3] == f"stopped the embedded redis-server on 127.0.0.1:{port}"


def test_a_running_redis_is_told_once() -> None:
    # given: the test Redis answers
    url = integration_redis_url(os.environ)
    # when
    told = _wrapped(url)
    # then: the wrapper says it uses it; the command does not say it again
    assert told == [f"using the Redis already running at {url}"]
