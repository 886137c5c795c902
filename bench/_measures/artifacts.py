"""Measure 17: a 50 MB artifact from a worker's tool, through the directory artifact store and `GET
/v1/artifacts/{id}` of `toolfleet serve`, to a client, in MB/s; next to a plain copy of the same file on
this machine (`shutil.copyfile`), and the ratio of the two."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median

import httpx

from bench import artifacts
from bench._context import Bench
from bench._replica import serve_replica
from bench._timing import Measure, Side, cpu_json, ms, process_cpu_s, summarize, walls
from bench._worker import REPO, log_tail, spawn, stop_group
from workers import OutcomeKind
from workers.artifacts import ArtifactRef
from workers.runtime.catalog import Catalog
from workers.tools import discover_tools

SIZE_BYTES = 50_000_000  # 50 MB (decimal, as MB/s is)
RATIO_TARGET = 0.1  # the artifact's way at least a tenth of a plain copy's speed
WARMUP = 1  # pairs
PAIRS = 5
_CHUNK = 1 << 20


@contextlib.contextmanager
def _artifact_worker(b: Bench, env: dict[str, str], log_path: Path) -> Iterator[int]:
    """`toolfleet worker` serving `bench.artifacts` (threads), in the catalog; its pid for the block."""
    hostname = f"{artifacts.POOL}-{os.getpid()}@{socket.gethostname()}"
    command = [sys.executable, "-m", "orchestrator.cli", "worker", "--pool", artifacts.POOL]
    command += ["--tools", artifacts.__name__, "--concurrency", "2", "--hostname", hostname]
    command += ["--loglevel", "WARNING"]
    process = spawn(command, env, log_path)
    try:
        catalog, deadline = Catalog(b.redis), time.monotonic() + 60
        while not catalog.worker_alive(hostname):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the artifact worker did not start{log_tail(log_path, 'worker')}")
            time.sleep(0.05)
        yield process.pid
    finally:
        stop_group(process, 10)


def _source(path: Path) -> str:
    """A file of `SIZE_BYTES` bytes that differ chunk by chunk at `path`; its SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as file:
        for start in range(0, SIZE_BYTES, _CHUNK):
            chunk = os.urandom(min(_CHUNK, SIZE_BYTES - start))
            digest.update(chunk)
            file.write(chunk)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def measure_artifacts(b: Bench) -> Measure:
    m = Measure(
        "artifact_transfer",
        "artifact 50 MB worker -> client",
        "A tool on a worker of its own (`toolfleet worker --tools bench.artifacts`, threads) returns a "
        "50 MB file as an `Artifact`; the worker streams it to a directory artifact store; a client "
        "(httpx, streaming) reads it through `GET /v1/artifacts/{id}` of a `toolfleet serve` replica on "
        "127.0.0.1 and writes it to a file. Against `shutil.copyfile` of the same file on this machine. "
        "Sides interleaved (AB, BA, …); MB/s from each side's median; the result is their ratio.",
        f"artifact MB/s >= {RATIO_TARGET:g} x a file copy's",
    )
    definition = discover_tools(artifacts)[0]
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-artifacts-") as name:
        directory = Path(name)
        source, fetched_path, copied_path = (
            directory / "source.bin",
            directory / "fetched.bin",
            directory / "copy.bin",
        )
        source_sha256 = _source(source)
        store_url = (directory / "store").as_uri()
        env = {**os.environ, "TOOLFLEET_ARTIFACT_URL": store_url}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        arguments = json.dumps({"path": str(source)})
        fetched: list[ArtifactRef] = []
        stored_s: list[float] = []  # each run's call (the tool's file into the store), then its read
        read_s: list[float] = []
        with (
            _artifact_worker(b, env, directory / "worker.log") as worker_pid,
            serve_replica({"plain": "plain"}, {"TOOLFLEET_ARTIFACT_URL": store_url}) as replica,
        ):
            async with httpx.AsyncClient(base_url=replica.root, timeout=60) as client:

                async def through_artifacts() -> None:
                    started = time.perf_counter()
                    outcome = await b.executor.execute(b.request(definition.name, arguments), definition)
                    if outcome.kind is not OutcomeKind.SUCCESS:
                        raise RuntimeError(f"the artifact tool failed: {outcome.text}")
                    ref = ArtifactRef.from_json(outcome.result_object)
                    stored = time.perf_counter()
                    size = 0
                    async with client.stream("GET", f"/v1/artifacts/{ref.id}") as response:
                        if response.status_code != 200:
                            raise RuntimeError(f"GET /v1/artifacts answered {response.status_code}")
                        with fetched_path.open("wb") as file:
                            async for piece in response.aiter_raw():
                                file.write(piece)
                                size += len(piece)
                    if size != SIZE_BYTES or ref.size != SIZE_BYTES:
                        raise RuntimeError(f"the client read {size} bytes of {ref.size}, not {SIZE_BYTES}")
                    fetched.append(ref)
                    stored_s.append(stored - started)
                    read_s.append(time.perf_counter() - stored)

                async def plain_copy() -> None:
                    shutil.copyfile(source, copied_path)

                sides: dict[str, Side] = {"artifact": through_artifacts, "copy": plain_copy}
                await b.timer.rotated(sides, b.reps(WARMUP), {"artifact": worker_pid})
                if _sha256(fetched_path) != source_sha256 or fetched[-1].sha256 != source_sha256:
                    raise RuntimeError("the artifact the client read is not the file the tool returned")
                replica_before = process_cpu_s(replica.pid) if replica.pid else None
                runs = await b.timer.rotated(sides, b.reps(PAIRS), {"artifact": worker_pid})
                replica_after = process_cpu_s(replica.pid) if replica.pid else None
    megabytes = SIZE_BYTES / 1e6
    artifact_s, copy_s = median(walls(runs["artifact"])), median(walls(runs["copy"]))
    artifact_rate, copy_rate = megabytes / artifact_s, megabytes / copy_s
    ratio = artifact_rate / copy_rate
    m.sides = {name: summarize(walls(samples)) for name, samples in runs.items()}
    m.cpu = {name: cpu_json(samples, 1) for name, samples in runs.items()}
    m.details = {
        "megabytes": megabytes,
        "artifact_mb_per_s": round(artifact_rate, 1),
        "copy_mb_per_s": round(copy_rate, 1),
        "ratio": round(ratio, 4),
        "artifact_median_ms": ms(artifact_s),
        "copy_median_ms": ms(copy_s),
        "artifact_stored_median_ms": ms(median(stored_s[-len(runs["artifact"]) :])),
        "artifact_read_median_ms": ms(median(read_s[-len(runs["artifact"]) :])),
        "artifact_mb_per_s_runs": [round(megabytes / s, 1) for s in walls(runs["artifact"])],
        "copy_mb_per_s_runs": [round(megabytes / s, 1) for s in walls(runs["copy"])],
        "replica_cpu_ms_per_run": (
            ms((replica_after - replica_before) / len(runs["artifact"]))
            if replica_before is not None and replica_after is not None
            else None
        ),
        "ratio_target": RATIO_TARGET,
    }
    m.met = ratio >= RATIO_TARGET
    m.result = f"{artifact_rate:.0f} MB/s vs copy {copy_rate:.0f} MB/s (x{ratio:.3f})"
    return m
