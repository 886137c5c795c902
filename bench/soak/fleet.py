"""The fleet under test, one role per host: Redis (AOF, fsync on every write), PostgreSQL reached
through a forwarder, two `toolfleet serve` replicas, a threads pool and a prefork pool of two workers
each, and the load generator's host. Every link between two hosts is a `FaultProxy` of its own on the
bridge's address, named `<from>><to>` (`threads-1>redis`, `replica-a>postgres`, `load>replica-b`),
so a fault can stall or cut one host's links and leave the others be.

Processes are started in sessions of their own (a group per process, its prefork children in it) and
get SIGTERM if the soak dies; `Fleet.down` stops them all, the proxies, the network and the
database. Every variable a process of the fleet reads is set here: the caller's `TOOLFLEET_*` never
reach it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
import sqlalchemy as sa

from bench._worker import REPO, log_tail, spawn, stop_group
from bench.soak.agents import HEAVY_POOL, MODEL_ENV, POOL
from bench.soak.hosts import Host, Network, alive
from bench.soak.ledger import LEDGER_ENV
from bench.soak.proxy import FaultProxy

__all__ = ["API_KEY", "REPLICAS", "WORKERS", "Fleet", "Proc"]

_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soak-spawner")
API_KEY = "sk-soak-load"
REPLICAS = ("replica-a", "replica-b")
WORKERS = {"threads-1": "threads", "threads-2": "threads", "prefork-1": "prefork", "prefork-2": "prefork"}
REDIS_PORT = 6379
SERVE_PORT = 8000
HEARTBEAT_TTL_S = 2.0  # workers' and replicas': a SIGSTOP longer than this is a lost worker
READY_TIMEOUT_S = 90.0


@dataclass
class Proc:
    """One process of the fleet on its host, started again after it was killed."""

    name: str
    host: Host
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        # Spawned from one long-lived thread: a child is sent SIGTERM when the *thread* that started
        # it ends (PR_SET_PDEATHSIG), and faults restart processes from short-lived threads.
        self.process = _SPAWNER.submit(spawn, self.host.command(self.argv), self.env, self.log_path).result()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and all of its group (a prefork worker's children), and reap it."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)

    def signal_group(self, signum: int) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signum)

    def stop(self) -> None:
        self.signal_group(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        stop_group(self.process, 15.0)

    def children(self) -> list[int]:
        """The pids of the process's children (a prefork worker's pool processes)."""
        if not self.alive:
            return []
        listed = subprocess.run(
            ["pgrep", "-P", str(self.pid)], capture_output=True, text=True, timeout=10, check=False
        )
        return [int(pid) for pid in listed.stdout.split()]

    def tail(self) -> str:
        return log_tail(self.log_path, self.name)


@dataclass
class Fleet:
    """The whole fleet of one soak run, in `directory` (logs, Redis's AOF, the ledger)."""

    directory: Path
    postgres_server: str  # a URL of the PostgreSQL server, whose database the soak replaces
    isolated: bool = True
    network: Network = field(init=False)
    hosts: dict[str, Host] = field(default_factory=dict)
    links: dict[str, FaultProxy] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.network = Network(isolated=self.isolated)
        self.database = f"toolfleet_soak_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.ledger = self.directory / "ledger.jsonl"

    # -- the addresses -------------------------------------------------------------------------------

    def link_url(self, name: str) -> tuple[str, int]:
        proxy = self.links[name]
        return proxy.listen

    def redis_url(self, host: str) -> str:
        address, port = self.link_url(f"{host}>redis")
        return f"redis://{address}:{port}/0"

    def database_url(self, host: str | None = None) -> str:
        """The soak's database, as `host` reaches it (through its forwarder link), or as the soak
        itself does (directly)."""
        server = sa.engine.make_url(self.postgres_server)
        if host is None:
            return server.set(database=self.database).render_as_string(hide_password=False)
        address, port = self.link_url(f"{host}>postgres")
        return server.set(host=address, port=port, database=self.database).render_as_string(
            hide_password=False
        )

    def replica_url(self, replica: str, through: str | None = "load") -> str:
        """Where `through`'s clients reach `replica` (None: the soak itself, directly)."""
        if through is None:
            host = self.hosts[replica]
            return f"http://{host.address}:{self._serve_port(replica)}"
        address, port = self.link_url(f"{through}>{replica}")
        return f"http://{address}:{port}"

    def _serve_port(self, replica: str) -> int:
        return SERVE_PORT if self.network.isolated else self._loopback_ports[replica]

    # -- up and down ---------------------------------------------------------------------------------

    def up(self, model_port: int) -> None:
        self.network.create()
        self._loopback_ports = {name: _free_port("127.0.0.1") for name in (*REPLICAS, "redis")}
        for role in ("redis", *REPLICAS, *WORKERS, "load"):
            self.hosts[role] = self.network.add_host(role)
        redis_host = self.hosts["redis"]
        redis_port = REDIS_PORT if self.network.isolated else self._loopback_ports["redis"]
        postgres = sa.engine.make_url(self.postgres_server)
        for role in (*REPLICAS, *WORKERS):
            self._link(f"{role}>redis", (redis_host.address, redis_port))
        for role in REPLICAS:
            self._link(f"{role}>postgres", (postgres.host or "127.0.0.1", postgres.port or 5432))
            self._link(f"{role}>model", ("127.0.0.1", model_port))
            self._link(f"load>{role}", (self.hosts[role].address, self._serve_port(role)))
        self._create_database()
        self._start_redis(redis_host, redis_port)
        for name, kind in WORKERS.items():
            self.procs[name] = self._worker(name, kind).start()
        for name in REPLICAS:
            self.procs[name] = self._replica(name).start()
        self.wait_ready()

    def down(self, *, keep_database: bool = False) -> None:
        """Stop everything and remove the network; the database too, unless kept (to read it after)."""
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        for proxy in self.links.values():
            proxy.stop()
        self.network.remove()
        if keep_database:
            print(f"soak: its journal is kept in database {self.database}")
            return
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            self._drop_database()

    @property
    def redis_address(self) -> tuple[str, int]:
        """Where the soak itself reaches Redis (directly, not through a link)."""
        port = REDIS_PORT if self.network.isolated else self._loopback_ports["redis"]
        return self.hosts["redis"].address, port

    def heal(self) -> None:
        """Every link healed and without latency, every process running (and none stopped)."""
        for proxy in self.links.values():
            proxy.heal()
            proxy.add_latency(0)
        for proc in self.procs.values():
            proc.signal_group(signal.SIGCONT)
            if not proc.alive:
                proc.start()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until both replicas answer `/readyz` (Redis, their database and a worker of each pool)."""
        deadline = time.monotonic() + timeout_s
        for name in REPLICAS:
            said = "no answer"
            while True:
                proc = self.procs[name]
                if not proc.alive:
                    raise RuntimeError(
                        f"{name} exited with {proc.process and proc.process.returncode}{proc.tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    response = httpx.get(f"{self.replica_url(name, None)}/readyz", timeout=2)
                    if response.status_code == 200:
                        break
                    said = response.text[:300]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready within {timeout_s:g} s ({said}){proc.tail()}")
                time.sleep(0.2)

    # -- the processes -------------------------------------------------------------------------------

    def env(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLFLEET_", "SOAK_"))}
        pythonpath = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.update(
            {
                "PYTHONPATH": pythonpath,
                LEDGER_ENV: str(self.ledger),
                "TOOLFLEET_HEARTBEAT_TTL_S": f"{HEARTBEAT_TTL_S:g}",
                "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
                "TOOLFLEET_LOG_LEVEL": "INFO",
                **more,
            }
        )
        return env

    def _proc(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        return Proc(
            name, self.hosts.get(name) or self.hosts["redis"], argv, env, self.directory / f"{name}.log"
        )

    def _worker(self, name: str, kind: str) -> Proc:
        pool = POOL if kind == "threads" else HEAVY_POOL
        argv = [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "worker",
            "--pool",
            pool,
            "--tools",
            "bench.soak.agents",
        ]
        argv += [
            "--kind",
            kind,
            "--concurrency",
            "8" if kind == "threads" else "2",
            "--hostname",
            f"{name}@soak",
        ]
        return self._proc(name, argv, self.env(TOOLFLEET_REDIS_URL=self.redis_url(name)))

    def _replica(self, name: str) -> Proc:
        host = self.hosts[name]
        argv = [sys.executable, "-m", "orchestrator.cli", "serve", "--agent", "soak=bench.soak.agents:soak"]
        argv += ["--host", host.address, "--port", str(self._serve_port(name))]
        model_address, model_port = self.link_url(f"{name}>model")
        env = self.env(
            TOOLFLEET_REDIS_URL=self.redis_url(name),
            TOOLFLEET_DATABASE_URL=self.database_url(name),
            TOOLFLEET_API_KEYS=API_KEY,
            TOOLFLEET_INVOCATION_HEARTBEAT_S="0.5",
            TOOLFLEET_SERVE_DRAIN_GRACE_S="5",
            **{MODEL_ENV: f"http://{model_address}:{model_port}/v1"},
        )
        return self._proc(name, argv, env)

    def _start_redis(self, host: Host, port: int) -> None:
        data = self.directory / "redis"
        data.mkdir(exist_ok=True)
        binary = shutil.which("redis-server") or _embedded_redis()
        argv = [binary, "--bind", host.address, "--port", str(port), "--dir", str(data), "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no"]
        self.procs["redis"] = self._proc("redis", argv, self.env()).start()
        client = redis.Redis(host=host.address, port=port, socket_timeout=1)
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server did not answer{self.procs['redis'].tail()}")
            time.sleep(0.05)

    def _link(self, name: str, target: tuple[str, int]) -> FaultProxy:
        gateway = self.network.gateway
        self.links[name] = FaultProxy(name, (gateway, _free_port(gateway)), target).start()
        return self.links[name]

    def restart_link(self, name: str) -> None:
        """Stop link `name` (its connections dropped) and listen again on the same address."""
        old = self.links[name]
        old.stop()
        self.links[name] = FaultProxy(name, old.listen, old.target).start()

    # -- the database --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _server(self) -> Iterator[sa.engine.Connection]:
        engine = sa.create_engine(self.postgres_server, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                yield connection
        finally:
            engine.dispose()

    def _create_database(self) -> None:
        with self._server() as connection:
            listed = connection.execute(
                sa.text("SELECT datname FROM pg_database WHERE datname LIKE 'toolfleet_soak_%'")
            )
            for (name,) in listed.all():  # what a killed soak left
                pid = name.split("_")[2]
                if pid.isdigit() and not alive(int(pid)):
                    connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(sa.text(f'CREATE DATABASE "{self.database}"'))

    def _drop_database(self) -> None:
        with self._server() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)'))


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _embedded_redis() -> str:
    from workers._devredis import redis_server_executable

    return redis_server_executable()
