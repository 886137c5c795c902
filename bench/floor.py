"""`python -m bench.floor`: what one Celery threads worker costs per no-op task on this machine.

For each configuration it starts `celery -A bench.floor_app worker -P threads -c 100`, publishes
1,000 no-op tasks, waits for all their results, and reports the worker's CPU per task (from
/proc) and the time to drain them. Configurations: stock Celery with events and STARTED states off;
stock with both on (what Flower and the collector need); toolfleet's result backend with both on.
It shows the floor under the batch targets of `python -m bench`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import redis

from bench._context import bench_redis_url
from bench._timing import process_cpu_s
from workers.settings import redact_url

_REPO = Path(__file__).resolve().parents[1]
TASKS = 1000
CONFIGS = {
    "stock, events and STARTED off": {"BENCH_FLOOR_EVENTS": "0", "BENCH_FLOOR_STARTED": "0"},
    "stock, events and STARTED on": {"BENCH_FLOOR_EVENTS": "1", "BENCH_FLOOR_STARTED": "1"},
    "toolfleet backend, events and STARTED on": {
        "BENCH_FLOOR_EVENTS": "1",
        "BENCH_FLOOR_STARTED": "1",
        "BENCH_FLOOR_TOOLFLEET": "1",
    },
}


def _cpu_s(pid: int) -> float:
    seconds = process_cpu_s(pid)
    if seconds is None:
        raise RuntimeError(f"cannot read the CPU time of the worker (pid {pid}) from /proc")
    return seconds


def measure(url: str, config: dict[str, str]) -> tuple[float, float]:
    """(worker CPU ms per task, drain seconds) for one configuration."""
    redis.Redis.from_url(url).flushdb()
    base = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_FLOOR_")}
    env = {**base, **config, "BENCH_FLOOR_URL": url, "PYTHONPATH": str(_REPO)}
    os.environ["BENCH_FLOOR_URL"] = url  # for this process's own copy of the app (publish and read only)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.floor_app",
            "worker",
            "-P",
            "threads",
            "-c",
            "100",
            "-Q",
            "bench.floor",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "ERROR",
        ]
        + (["-E"] if config.get("BENCH_FLOOR_EVENTS") == "1" else []),
        env=env,
        cwd=_REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from bench.floor_app import noop

        noop.apply_async().get(timeout=60)  # the worker is up
        cpu_before, started = _cpu_s(worker.pid), time.monotonic()
        results = [noop.apply_async() for _ in range(TASKS)]
        for result in results:
            result.get(timeout=120)
        drained = time.monotonic() - started
        return (_cpu_s(worker.pid) - cpu_before) * 1000 / TASKS, drained
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main() -> int:
    url = bench_redis_url()
    print(f"{TASKS} no-op tasks on one threads worker (100 threads), Redis {redact_url(url)}")
    for name, config in CONFIGS.items():
        cpu_ms, drained = measure(url, config)
        print(f"  {name:<42} worker CPU {cpu_ms:.2f} ms/task, drained in {drained:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
