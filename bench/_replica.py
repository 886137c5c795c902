"""A `toolfleet serve` replica the benchmark starts as a subprocess, on a free port, for measures 6 and 7."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

from bench._worker import REPO, log_tail, spawn, stop_group

__all__ = ["AGENTS_MODULE", "ServeReplica", "serve_replica"]

AGENTS_MODULE = "bench.agents"
DRAIN_GRACE_S = 2.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeReplica:
    """One `toolfleet serve` process serving `agents` (name -> attribute of `bench.agents`).

    Its environment is the benchmark's (the same Redis database, broker and result backend as the
    worker) with a private SQLite database for the replica's own store, no API keys (it listens on
    127.0.0.1 only), and `extra_env`. It runs in its own session and gets SIGTERM if the benchmark
    dies; `stop` sends SIGTERM (it drains for `DRAIN_GRACE_S`), then SIGKILL.
    """

    def __init__(self, agents: Mapping[str, str], directory: Path, extra_env: Mapping[str, str]) -> None:
        self.port = free_port()
        self.log_path = directory / "replica.log"
        self.command = [sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(self.port)]
        for name, attribute in agents.items():
            self.command += ["--agent", f"{name}={AGENTS_MODULE}:{attribute}"]
        env = {k: v for k, v in os.environ.items() if k not in ("TOOLFLEET_API_KEYS", "TOOLFLEET_AGENTS")}
        pythonpath = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.update(
            {
                "PYTHONPATH": pythonpath,
                "TOOLFLEET_DATABASE_URL": f"sqlite:///{directory / 'replica.db'}",
                "TOOLFLEET_SERVE_DRAIN_GRACE_S": f"{DRAIN_GRACE_S:g}",
                **extra_env,
            }
        )
        self._env = env
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout_s: float = 60.0) -> float:
        """Start the replica and wait until `/readyz` answers 200 (Redis, its database and a live
        worker of pool `bench`); return the seconds it took."""
        started = time.monotonic()
        self.process = spawn(self.command, self._env, self.log_path)
        said = "no answer"
        with httpx.Client(timeout=2) as client:
            while time.monotonic() - started < timeout_s:
                if self.process.poll() is not None:
                    raise RuntimeError(f"toolfleet serve exited with {self.process.returncode}{self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    response = client.get(f"{self.root}/readyz")
                    if response.status_code == 200:
                        return time.monotonic() - started
                    said = response.text[:300]
                time.sleep(0.1)
        raise TimeoutError(f"toolfleet serve not ready within {timeout_s:g} s ({said}){self.tail()}")

    def stop(self, timeout_s: float = DRAIN_GRACE_S + 8.0) -> int | None:
        """SIGTERM (the replica drains, then exits 0), SIGKILL after `timeout_s`; its exit status."""
        stop_group(self.process, timeout_s)
        return self.process.returncode if self.process is not None else None

    def tail(self) -> str:
        return log_tail(self.log_path, "toolfleet serve")


@contextlib.contextmanager
def serve_replica(
    agents: Mapping[str, str], extra_env: Mapping[str, str] | None = None
) -> Iterator[ServeReplica]:
    """A started replica for the block, stopped on the way out, whatever happens in it; its log and
    database are removed with it."""
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-serve-") as directory:
        replica = ServeReplica(agents, Path(directory), extra_env or {})
        try:
            replica.start()
            yield replica
        finally:
            status = replica.stop()
            if status not in (0, None):
                print(f"bench: toolfleet serve exited with {status}{replica.tail()}", file=sys.stderr)
