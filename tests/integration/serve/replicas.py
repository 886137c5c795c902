"""`toolfleet serve` replicas the tests start as processes of their own, as an operator would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests._cli import TOOLFLEET
from tests._ports import free_port
from tests._waiting import wait_for
from tests.integration.worker_processes import REPO_ROOT

__all__ = ["AGENT", "AGENTS_MODULE", "API_KEY", "Replica", "replica_env", "start_replica", "two_replicas"]

AGENT = "assistant"
AGENTS_MODULE = "tests.integration.serve_agents"
API_KEY = "sk-serve-test-key"


def replica_env(redis_url: str, database_url: str, upstream: str, **changes: str | None) -> dict[str, str]:
    """The whole environment of a replica: the caller's without any `TOOLFLEET_*` variable, then the
    test's own (hermetic whatever the caller exports); `changes` set (or, when None, remove) more."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLFLEET_")}
    env.update(
        {
            "PYTHONPATH": REPO_ROOT,
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_DATABASE_URL": database_url,
            "TOOLFLEET_API_KEYS": f"old-key,{API_KEY}",
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "TOOLFLEET_INVOCATION_HEARTBEAT_S": "0.5",  # a dead replica's invocations are stale after 1.5 s
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
            "SERVE_TEST_UPSTREAM": upstream,
        }
    )
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@dataclass
class Replica:
    """One running `toolfleet serve` process and where it answers."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Send `sig` and wait for the exit; its status (SIGKILL after `timeout_s`)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_replica(
    env: Mapping[str, str],
    log_path: Path,
    *extra: str,
    agents: Sequence[str] = (AGENT,),
    ready_timeout_s: float = 30.0,
) -> Replica:
    """Start `toolfleet serve --agent NAME=tests.integration.serve_agents:NAME` for each of `agents`
    on a free port and wait until its `/healthz` answers; raise with its log if it exits first."""
    port = free_port()
    args = [TOOLFLEET, "serve", "--port", str(port)]
    for name in agents:
        args += ["--agent", f"{name}={AGENTS_MODULE}:{name}"]
    with open(log_path, "ab") as log:
        process = subprocess.Popen([*args, *extra], cwd=REPO_ROOT, env=dict(env), stdout=log, stderr=log)
    replica = Replica(process, port, log_path)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"toolfleet serve exited with {process.returncode}:\n{replica.log()}")
        try:
            return httpx.get(f"{replica.root}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, timeout_s=ready_timeout_s, what="toolfleet serve answering /healthz")
    except BaseException:
        replica.stop(signal.SIGKILL)
        raise
    return replica


@contextlib.contextmanager
def two_replicas(
    env: Mapping[str, str], logs: Path, agents: Sequence[str] = (AGENT,)
) -> Iterator[tuple[Replica, Replica]]:
    """Two replicas serving `agents` on one environment, stopped when the block ends."""
    first = start_replica(env, logs / "a.log", agents=agents)
    try:
        second = start_replica(env, logs / "b.log", agents=agents)
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()
