"""Worker pools as subprocesses: used by the demo, the benchmarks and the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from workers.redis_client import connect as connect_redis
from workers.runtime.catalog import Catalog

__all__ = ["WorkerProcess"]


class WorkerProcess:
    """`toolfleet worker` in a child process, ready once it appears in the live catalog."""

    def __init__(
        self,
        *,
        pools: Sequence[str],
        modules: Sequence[str],
        redis_url: str,
        kind: str = "threads",
        concurrency: int | None = None,
        hostname: str | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        loglevel: str = "WARNING",
        extra_args: Sequence[str] = (),
        build_id: str | None = None,
    ) -> None:
        self.pools = list(pools)
        self.hostname = hostname or f"{'-'.join(self.pools)}-{os.getpid()}-{time.monotonic_ns() % 10**8}@test"
        self.redis_url = redis_url
        command = [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "worker",
            "--pool",
            ",".join(self.pools),
            "--tools",
            ",".join(modules),
            "--kind",
            kind,
            "--hostname",
            self.hostname,
            "--loglevel",
            loglevel,
        ]
        if concurrency is not None:
            command += ["--concurrency", str(concurrency)]
        if build_id is not None:
            command += ["--build-id", build_id]
        command += list(extra_args)  # further `toolfleet worker` options, such as --allow-mixed-pool
        environment = {**os.environ, **(env or {}), "TOOLFLEET_REDIS_URL": redis_url}
        environment.setdefault("TOOLFLEET_BROKER_URL", redis_url)
        environment.setdefault("TOOLFLEET_RESULT_BACKEND", redis_url)
        self.log_path = log_path
        self._log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            command, env=environment, stdout=self._log, stderr=self._log, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout_s: float = 30.0) -> WorkerProcess:
        """Block until the worker's heartbeat is in the catalog; raise with its log if it died."""
        client = connect_redis(self.redis_url)
        catalog = Catalog(client)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"worker {self.hostname} exited with {self.process.returncode}{self._tail()}"
                    )
                if catalog.worker_alive(self.hostname):
                    return self
                time.sleep(0.05)
        finally:
            client.close()
        raise TimeoutError(f"worker {self.hostname} not ready within {timeout_s} s{self._tail()}")

    def child_pids(self) -> list[int]:
        """Pids of the pool's child processes (prefork), read from /proc."""
        children: list[int] = []
        for task in Path(f"/proc/{self.pid}/task").glob("*/children"):
            children += [int(pid) for pid in task.read_text().split()]
        return children

    def kill(self) -> None:
        """SIGKILL the worker and its children at once: no cleanup, no goodbye."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log is not subprocess.DEVNULL:
            self._log.close()  # type: ignore[union-attr]

    def _tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n--- worker log ---\n" + self.log_path.read_text(errors="replace")[-3000:]

    @contextlib.contextmanager
    def running(self, timeout_s: float = 30.0) -> Iterator[WorkerProcess]:
        """Ready within `timeout_s`, and stopped on the way out, also when it never got ready."""
        try:
            yield self.wait_ready(timeout_s)
        finally:
            self.stop()

    def __enter__(self) -> WorkerProcess:
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()  # `with` calls __exit__ only once __enter__ has returned
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
