"""`toolfleet flower` for integration tests: started on the test Redis behind basic auth, ready once
it has seen a given worker through its events."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests._ports import free_port
from tests._processes import reap

AUTH = ("ops", "flower-test-secret")


def start_flower(redis_url: str, port: int, log: Path, **variables: str) -> subprocess.Popen[bytes]:
    """`toolfleet flower` in its own process group, on the test Redis, behind basic auth."""
    env = {**os.environ, "TOOLFLEET_REDIS_URL": redis_url, "FLOWER_BASIC_AUTH": f"{AUTH[0]}:{AUTH[1]}"}
    with open(log, "ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "flower", "--port", str(port)],
            env={**env, **variables},
            stdout=output,
            stderr=output,
            start_new_session=True,
        )


@contextlib.contextmanager
def running_flower(redis_url: str, log: Path, hostname: str) -> Iterator[str]:
    """Flower's URL, once it has seen worker `hostname`; stopped when the block ends."""
    port = free_port()
    process = start_flower(redis_url, port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # ready once Flower has seen our worker through its events
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "Flower did not see the worker within 30 s"
            try:
                workers = httpx.get(f"{url}/api/workers", auth=AUTH, params={"refresh": "1"}, timeout=5)
                if workers.status_code == 200 and hostname in workers.json():
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        yield url
    finally:
        reap(process, grace_s=5)
