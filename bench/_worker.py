"""The benchmark's worker: one `celery -A bench.worker worker` subprocess serving the `bench` queue."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import redis

from workers.runtime.catalog import Catalog

__all__ = ["REPO", "BenchWorker", "log_tail", "spawn", "stop_group"]

REPO = Path(__file__).resolve().parents[1]
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the benchmark dies without stopping us (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    command: list[str], env: Mapping[str, str], log_path: Path, *, pipes: bool = False
) -> subprocess.Popen[bytes]:
    """Start `command` in the repository, in a session of its own (a Ctrl-C in the terminal reaches
    only the benchmark, which then stops it), its output appended to `log_path`; it gets SIGTERM if
    the benchmark dies without stopping it (Linux). With `pipes`, its stdin and stdout are pipes to
    the benchmark (its stderr still goes to the log)."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            env=dict(env),
            cwd=REPO,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else log,
            stderr=log,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def stop_group(process: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM to the process group `process` leads (started with `start_new_session`), then SIGKILL
    if it does not exit within `timeout_s`; also when interrupted while waiting."""
    if process is None or process.poll() is not None:
        return
    # The group is signalled only while its leader is not reaped yet, so its id cannot be reused.
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except BaseException:
        # Interrupted while waiting: still leave nothing behind.
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        raise


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def log_tail(path: Path, what: str, chars: int = 3000) -> str:
    """The end of the log at `path`, headed with `what`; empty if it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return f"\n--- {what} log {path} ---\n{text[-chars:]}"


class BenchWorker:
    """A threads-pool worker for the bench tools and raw tasks, ready once it is in the live catalog.

    It runs in its own session (a Ctrl-C in the terminal reaches only the benchmark, which then
    stops it) and is stopped with its whole process group: warm shutdown, then SIGKILL.
    """

    def __init__(
        self, redis_url: str, env: Mapping[str, str], *, concurrency: int = 100, queue: str = "bench"
    ) -> None:
        self.redis_url = redis_url
        self.hostname = f"{queue}-{os.getpid()}@{socket.gethostname()}"
        self.concurrency = concurrency
        self.command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.worker",
            "worker",
            "-Q",
            queue,
            "-P",
            "threads",
            "-c",
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "-n",
            self.hostname,
            "--loglevel",
            "WARNING",
        ]
        pythonpath = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        self._env = {**env, "PYTHONPATH": pythonpath}
        handle, name = tempfile.mkstemp(prefix="toolfleet-bench-worker-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> float:
        """Start the worker and wait until its heartbeat is in the catalog; return the seconds it took."""
        started = time.monotonic()
        self.process = spawn(self.command, self._env, self.log_path)
        client = redis.Redis.from_url(self.redis_url)
        catalog = Catalog(client)
        try:
            while time.monotonic() - started < timeout_s:
                if self.process.poll() is not None:
                    raise RuntimeError(f"bench worker exited with {self.process.returncode}{self._tail()}")
                if catalog.worker_alive(self.hostname):
                    return time.monotonic() - started
                time.sleep(0.05)
        finally:
            client.close()
        raise TimeoutError(f"bench worker not ready within {timeout_s:g} s{self._tail()}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Warm shutdown (SIGTERM to the group), then SIGKILL if it does not exit in time."""
        stop_group(self.process, timeout_s)

    def remove_log(self) -> None:
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def _tail(self) -> str:
        return log_tail(self.log_path, "worker")

    def log_tail(self) -> str:
        return self._tail()
