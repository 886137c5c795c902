"""The fleet the capacity run measures: a private Redis (and, with `split_broker`, a second one as the
broker alone), up to `MAX_REPLICAS` `toolfleet serve` replicas and `MAX_WORKERS` threads workers of
the `bench` pool, grown and shrunk between points, and the clients' process.

With `isolated`, every role is a host of its own: a Linux network namespace on a bridge
(`bench/soak/hosts.py`, as the soak makes them), so every link is a TCP route between two addresses
through veth pairs and the bridge; else every process is on loopback. Either way the processes share
this machine's CPUs. Processes are the soak's `Proc`s (a session each, SIGTERM if the run dies).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from bench._worker import REPO, spawn, stop_group
from bench.soak.fleet import Proc
from bench.soak.hosts import Host, Network
from workers.runtime.catalog import Catalog

__all__ = ["API_KEY", "MAX_REPLICAS", "MAX_WORKERS", "WORKER_CONCURRENCY", "CapacityFleet", "Load"]

API_KEY = "sk-capacity"
MAX_REPLICAS = 4
MAX_WORKERS = 4
WORKER_CONCURRENCY = 16
AGENTS = ("plain=bench.agents:plain", "fanout=bench._capacity_agents:fanout")
RESULT_EXPIRES_S = 120  # results of a 15 s point need not outlive the run; Redis's memory stays small
READY_TIMEOUT_S = 90.0


@dataclass
class Load:
    """The clients' process (`bench/_capacity_load.py`): `mark` reads its counters."""

    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def mark(self) -> dict[str, float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(b"mark\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the clients' process exited with {self.process.poll()}")
        return dict(json.loads(line))

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.write(b"stop\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_group(self.process, 5)


@dataclass
class CapacityFleet:
    directory: Path
    isolated: bool = False
    split_broker: bool = False
    network: Network = field(init=False)
    hosts: dict[str, Host] = field(default_factory=dict)
    servers: dict[str, tuple[str, int, Proc]] = field(default_factory=dict)  # name -> address, port
    replicas: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    def up(self) -> None:
        self.network = Network(isolated=self.isolated).create()
        self.isolated = self.network.isolated
        roles = ["redis", *(f"replica-{n}" for n in range(1, MAX_REPLICAS + 1))]
        roles += [*(f"worker-{n}" for n in range(1, MAX_WORKERS + 1)), "load"]
        for role in roles:
            self.hosts[role] = self.network.add_host(role)
        self._start_redis("redis", 6379)
        if self.split_broker:
            self._start_redis("broker", 6380)

    def down(self) -> None:
        for proc in [*self.replicas, *self.workers, *(s[2] for s in self.servers.values())]:
            proc.stop()
        self.network.remove()

    # -- addresses -----------------------------------------------------------------------------------

    def url(self, server: str) -> str:
        address, port, _ = self.servers[server]
        return f"redis://{address}:{port}/0"

    def client(self, server: str) -> redis.Redis:
        address, port, _ = self.servers[server]
        return redis.Redis(host=address, port=port, socket_timeout=10)

    def _port(self, role: str, fixed: int) -> int:
        if role not in self.ports:
            self.ports[role] = fixed if self.isolated else _free_port()
        return self.ports[role]

    @property
    def targets(self) -> list[str]:
        return [f"{self.hosts[p.name].address}:{self.ports[p.name]}" for p in self.replicas]

    @property
    def namespaces(self) -> list[str | None]:
        return [h.namespace for h in self.hosts.values()] if self.isolated else [None]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")}
        broker = self.url("broker" if self.split_broker else "redis")
        env.update(
            {
                "PYTHONPATH": str(REPO),
                "TOOLFLEET_REDIS_URL": self.url("redis"),
                "TOOLFLEET_RESULT_BACKEND": self.url("redis"),
                "TOOLFLEET_BROKER_URL": broker,
                "TOOLFLEET_RESULT_EXPIRES_S": str(RESULT_EXPIRES_S),
                "TOOLFLEET_API_KEYS": API_KEY,
                "TOOLFLEET_LOG_LEVEL": "WARNING",
                "TOOLFLEET_SERVE_DRAIN_GRACE_S": "2",
            }
        )
        return env

    # -- growing and shrinking -------------------------------------------------------------------------

    def scale(self, replicas: int, workers: int) -> None:
        """Start or stop workers, then replicas, until there are this many of each, all ready."""
        while len(self.workers) > workers:
            self.workers.pop().stop()
        while len(self.workers) < workers:
            self.workers.append(self._start_worker(len(self.workers) + 1))
        while len(self.replicas) > replicas:
            self.replicas.pop().stop()
        while len(self.replicas) < replicas:
            self.replicas.append(self._start_replica(len(self.replicas) + 1))

    def _start_worker(self, number: int) -> Proc:
        name = f"worker-{number}"
        hostname = f"capacity-{number}@capacity"
        argv = [sys.executable, "-m", "orchestrator.cli", "worker", "--pool", "bench"]
        argv += [
            "--tools",
            "bench.tools",
            "--kind",
            "threads",
            "--concurrency",
            str(WORKER_CONCURRENCY),
            "--hostname",
            hostname,
        ]
        argv += ["--loglevel", "WARNING"]
        proc = Proc(name, self.hosts[name], argv, self.env(), self.directory / f"{name}.log").start()
        catalog = Catalog(self.client("redis"))
        _wait(lambda: catalog.worker_alive(hostname), proc, f"{name}'s heartbeat")
        return proc

    def _start_replica(self, number: int) -> Proc:
        name = f"replica-{number}"
        host = self.hosts[name]
        port = self._port(name, 8000)
        argv = [sys.executable, "-m", "orchestrator.cli", "serve", "--host", host.address]
        argv += ["--port", str(port)]
        for agent in AGENTS:
            argv += ["--agent", agent]
        env = {**self.env(), "TOOLFLEET_DATABASE_URL": f"sqlite:///{self.directory / name}.db"}
        proc = Proc(name, host, argv, env, self.directory / f"{name}.log").start()

        def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"http://{host.address}:{port}/readyz", timeout=2).status_code == 200
            return False

        _wait(ready, proc, f"{name}'s /readyz")
        return proc

    def _start_redis(self, name: str, fixed_port: int) -> None:
        host = self.hosts["redis"]
        port = self._port(name, fixed_port)
        data = self.directory / name
        data.mkdir(exist_ok=True)
        binary = shutil.which("redis-server") or _embedded_redis()
        # As the compose file runs it: AOF (fsync every second), no eviction; no RDB snapshots.
        argv = [binary, "--bind", host.address, "--port", str(port), "--dir", str(data), "--save", ""]
        argv += ["--appendonly", "yes", "--maxmemory-policy", "noeviction", "--protected-mode", "no"]
        proc = Proc(name, host, argv, {}, self.directory / f"{name}.log").start()
        self.servers[name] = (host.address, port, proc)
        client = self.client(name)
        _wait(lambda: bool(client.ping()), proc, f"{name} redis-server")

    def start_load(self, clients: int, agent: str) -> Load:
        config = self.directory / "load.json"
        config.write_text(
            json.dumps({"targets": self.targets, "clients": clients, "agent": agent, "api_key": API_KEY})
        )
        argv = self.hosts["load"].command([sys.executable, "-m", "bench._capacity_load", str(config)])
        return Load(spawn(argv, self.env(), self.directory / "load.log", pipes=True))


def _wait(check: Callable[[], bool], proc: Proc, what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not proc.alive:
            raise RuntimeError(f"{proc.name} exited before {what}{proc.tail()}")
        with contextlib.suppress(redis.RedisError):
            if check():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:g} s{proc.tail()}")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _embedded_redis() -> str:
    from workers._devredis import redis_server_executable

    return redis_server_executable()
