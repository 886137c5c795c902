"""A Redis group watched by Sentinel, on loopback: a master, a replica and one sentinel (quorum 1),
from the same redis-server binary toolfleet's embedded Redis uses (`--sentinel` makes it a sentinel).

`fail_over()` SIGKILLs the master and waits until the sentinel has promoted the replica, as a host's
death would go in production (there with three sentinels on three hosts).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests._ports import free_port
from workers._devredis import redis_answers, redis_server_executable

__all__ = ["MASTER_NAME", "SentinelGroup", "sentinel_group"]

MASTER_NAME = "fleet"
DOWN_AFTER_MS = 1000


class SentinelGroup:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.master_port, self.replica_port, self.sentinel_port = free_port(), free_port(), free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The group's URL as toolfleet reads it."""
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0?master_name={MASTER_NAME}"

    def _server(self, name: str, *args: str) -> None:
        folder = self.directory / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                [redis_server_executable(), *args, "--dir", str(folder)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self) -> None:
        common = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
        self._server("master", *common, "--port", str(self.master_port))
        self._wait_answers(self.master_port)
        self._server(
            "replica",
            *common,
            *("--port", str(self.replica_port)),
            *("--replicaof", "127.0.0.1", str(self.master_port)),
        )
        self._wait_answers(self.replica_port)
        config = self.directory / "sentinel.conf"
        config.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
        )
        folder = self.directory / "sentinel"
        folder.mkdir(exist_ok=True)
        with open(folder / "log", "ab") as log:
            self.processes["sentinel"] = subprocess.Popen(
                [redis_server_executable(), str(config), "--sentinel"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_answers(self.sentinel_port)
        deadline = time.monotonic() + 20
        while self.replica_synced() is False:
            assert time.monotonic() < deadline, "the replica never synced with its master"
            time.sleep(0.1)

    def master_port_now(self) -> int:
        """The master's port as the sentinel names it."""
        client = redis.Redis(port=self.sentinel_port, socket_timeout=2)
        try:
            _, port = client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            return int(port)
        finally:
            client.close()

    def replica_synced(self) -> bool:
        client = redis.Redis(port=self.replica_port, socket_timeout=2)
        try:
            return bool(client.info("replication").get("master_link_status") == "up")
        finally:
            client.close()

    def fail_over(self, timeout_s: float = 30.0) -> float:
        """SIGKILL the master and wait until the sentinel names the replica master; returns how long
        that took."""
        started = time.monotonic()
        self.processes["master"].send_signal(signal.SIGKILL)
        self.processes["master"].wait()
        while self.master_port_now() != self.replica_port:
            assert time.monotonic() - started < timeout_s, self.tail("sentinel")
            time.sleep(0.05)
        client = redis.Redis(port=self.replica_port, socket_timeout=2)
        try:
            while client.info("replication")["role"] != "master":
                assert time.monotonic() - started < timeout_s, self.tail("replica")
                time.sleep(0.05)
        finally:
            client.close()
        return time.monotonic() - started

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.directory / name / "log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    @staticmethod
    def _wait_answers(port: int, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not redis_answers(f"redis://127.0.0.1:{port}/0"):
            assert time.monotonic() < deadline, f"no redis-server answered on port {port}"
            time.sleep(0.05)


@contextlib.contextmanager
def sentinel_group(directory: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(directory)
    try:
        group.start()
        yield group
    finally:
        group.stop()
