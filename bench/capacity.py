"""`python -m bench.capacity`: calls/s of a fleet on this machine against its replicas and workers (1-4
each), and what one tool call costs in Redis commands, bytes on each link and CPU of each process kind.

Each point: the fleet scaled to R `toolfleet serve` replicas and W threads workers of the `bench` pool
(`bench/_capacity_fleet.py`, on a private Redis), `--clients` keep-alive HTTP clients sending chat
completions round-robin to the replicas (`bench/_capacity_load.py`; agent `plain` of `bench/agents.py`:
one `noop` call per completion), `--warmup` seconds, then a window of `--window` seconds cut into
`--slices` by snapshots (`bench/_capacity_probe.py`). The machine is shared: a point's figures are
those of its quietest slice (the whole window's are kept beside them), and a point whose quietest
slice still had more than `--quiet-cores` of other work is measured again, at most `--attempts` times,
the least disturbed measurement kept. After the grid, on the same fleet at 2x2: the `fanout` agent
(8 calls per completion) and `plain` again beside it. Then, unless `--no-netns`, the diagonal on
network namespaces (a host per process), and, unless `--no-split`, 2x2 with the broker on a Redis of
its own.
Writes the JSON report (`--report`) and the plot (`--plot`); prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import _capacity_report as reporting
from bench._capacity_agents import FANOUT
from bench._capacity_fleet import WORKER_CONCURRENCY, CapacityFleet
from bench._capacity_probe import TICKS_PER_S, Snapshot, difference, links, per_call, take
from bench._machine import load_average, machine_info
from bench._report import RESULTS_DIR

DEFAULT_PLOT = Path(__file__).resolve().parents[1] / "docs" / "scaling-curve.png"
CALLS_PER_REQUEST = {"plain": 1, "fanout": FANOUT}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--grid", choices=("full", "edges"), default="full", help="4x4, or diagonal + edges")
    parser.add_argument("--window", type=float, default=12.0, help="seconds measured per point")
    parser.add_argument("--slices", type=int, default=4, help="slices of the window (the quietest counts)")
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=0.1,
        help="measure a point again while its quietest slice had more CPU than this busy outside the fleet",
    )
    parser.add_argument("--attempts", type=int, default=2, help="at most this many measurements of a point")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the window")
    parser.add_argument("--clients", type=int, default=48, help="concurrent HTTP clients (default 48)")
    parser.add_argument("--no-netns", action="store_true", help="skip the network-namespace diagonal")
    parser.add_argument("--no-split", action="store_true", help="skip the point with a separate broker")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    parser.add_argument("--report", type=Path, default=RESULTS_DIR / f"capacity-{stamp}.json")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    return parser.parse_args(argv)


def grid_points(kind: str) -> Iterator[tuple[int, int]]:
    """(replicas, workers) of each point, replicas rising and workers up then down, so that the full
    grid starts or stops one process from one point to the next; `edges`: the diagonal, 1 replica x
    1-4 workers and 1-4 replicas x 1 worker."""
    for replicas in range(1, 5):
        order = range(1, 5) if replicas % 2 else range(4, 0, -1)
        for workers in order:
            if kind == "full" or replicas == workers or 1 in (replicas, workers):
                yield replicas, workers


def measure(
    fleet: CapacityFleet, name: str, replicas: int, workers: int, agent: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One point: scale, load, warm up, snapshots `--slices` times across the window, stop the load.

    The machine is shared: the point's figures are those of its quietest slice (the least busy time
    outside the fleet's processes); the whole window's are kept beside them, under `window`."""
    fleet.scale(replicas, workers)
    load = fleet.start_load(args.clients, agent)
    try:
        time.sleep(args.warmup)
        processes = {s: proc.pid for s, (_, _, proc) in fleet.servers.items()}
        processes.update({p.name: p.pid for p in [*fleet.replicas, *fleet.workers]})
        processes["client"] = load.pid
        kinds = {n: n.split("-")[0] for n in processes}
        by_pid = {pid: kinds[n] for n, pid in processes.items() if n not in fleet.servers}
        ports = {port: s for s, (_, port, _) in fleet.servers.items()}
        ports.update({fleet.ports[p.name]: "replica" for p in fleet.replicas})
        servers = {s: fleet.client(s) for s in fleet.servers}
        marks = [load.mark()]
        snaps = [take(time.monotonic(), servers, processes, fleet.namespaces, by_pid)]
        for index in range(1, args.slices + 1):
            time.sleep(args.window / args.slices)
            last = index == args.slices
            snaps.append(
                take(time.monotonic(), servers, processes, fleet.namespaces, by_pid if last else None)
            )
            marks.append(load.mark())
    finally:
        load.stop()
    calls_per_request = CALLS_PER_REQUEST[agent]
    slices = [
        _slice(marks[i], marks[i + 1], snaps[i], snaps[i + 1], calls_per_request, kinds)
        for i in range(args.slices)
    ]
    whole = _slice(marks[0], marks[-1], snaps[0], snaps[-1], calls_per_request, kinds)
    # Per-process and whole-machine accounting differ by a little in a short slice, either way.
    quietest = min(slices, key=lambda item: abs(item["outside_cores"]))
    point = {
        "fleet": name,
        "agent": agent,
        "replicas": replicas,
        "workers": workers,
        "clients": args.clients,
        **quietest,
        "slices_calls_per_s": [round(item["calls_per_s"], 1) for item in slices],
        "slices_outside_cores": [item["outside_cores"] for item in slices],
        "window": whole,
        "link_bytes_per_call": {
            link: {k: v / whole["calls"] for k, v in traffic.items()}
            for link, traffic in sorted(links(snaps[0].sockets, snaps[-1].sockets, by_pid, ports).items())
        },
        "load_average": load_average(),
        "saturation": reporting.saturation(quietest["per_call"], os.cpu_count() or 1),
    }
    print(
        f"capacity: {name} {replicas}x{workers} {agent}: {point['calls_per_s']:.0f} calls/s in the quietest "
        f"slice ({point['outside_cores']:.2f} cores outside the fleet), {whole['calls_per_s']:.0f} over "
        f"the window ({whole['outside_cores']:.2f}); {whole['failed']} failed",
        file=sys.stderr,
        flush=True,
    )
    return point


def _slice(
    first: dict[str, float],
    last: dict[str, float],
    before: Snapshot,
    after: Snapshot,
    calls_per_request: int,
    kinds: dict[str, str],
) -> dict[str, Any]:
    """Calls/s, costs per call and CPU by process between two snapshots (and the clients' marks)."""
    requests = int(last["ok"] - first["ok"])
    calls = requests * calls_per_request
    diff = difference(before, after)
    seconds = diff["seconds"]
    costs = per_call(diff, calls, kinds)
    return {
        "seconds": round(seconds, 2),
        "requests": requests,
        "failed": int(last["failed"] - first["failed"]),
        "calls": calls,
        "calls_per_s": calls / (last["t"] - first["t"]),
        "outside_cores": round(costs["unattributed_ms"] * calls / 1000 / seconds, 3),
        "per_call": costs,
        "cpu_cores": {n: round(t / TICKS_PER_S / seconds, 3) for n, t in diff["cpu_ticks"].items()},
    }


def _run_fleet(
    name: str,
    directory: Path,
    points: Sequence[tuple[int, int, str]],
    args: argparse.Namespace,
    *,
    isolated: bool = False,
    split_broker: bool = False,
) -> list[dict[str, Any]]:
    """Measure `points` (replicas, workers, agent) on a fleet of its own, brought down at the end."""
    fleet = CapacityFleet(directory / name, isolated=isolated, split_broker=split_broker)
    fleet.directory.mkdir()
    measured = []
    try:
        fleet.up()
        if isolated and not fleet.isolated:
            print(f"capacity: {name} skipped: {fleet.network.why_not}", file=sys.stderr)
            return []
        for replicas, workers, agent in points:
            # A point whose quietest slice still had other work on the machine is measured again.
            attempts = [measure(fleet, name, replicas, workers, agent, args)]
            while abs(attempts[-1]["outside_cores"]) > args.quiet_cores and len(attempts) < args.attempts:
                attempts.append(measure(fleet, name, replicas, workers, agent, args))
            best = min(attempts, key=lambda point: abs(point["outside_cores"]))
            best["attempts"] = len(attempts)
            measured.append(best)
    finally:
        fleet.down()
    return measured


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the fleet and its network are stopped and removed on the way out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    started = datetime.now(UTC)
    machine = machine_info()
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="toolfleet-capacity-") as scratch:
        directory = Path(scratch)
        grid = [(r, w, "plain") for r, w in grid_points(args.grid)]
        grid += [(2, 2, "fanout"), (2, 2, "plain")]
        points += _run_fleet("loopback", directory, grid, args)
        if points:
            points[-1]["repeat"] = True  # plain at 2x2 again, beside fanout: not a point of the grid
        if not args.no_netns:
            diagonal = [(n, n, "plain") for n in range(1, 5)]
            points += _run_fleet("netns", directory, diagonal, args, isolated=True)
        if not args.no_split:
            points += _run_fleet("split", directory, [(2, 2, "plain")], args, split_broker=True)
    machine["load_average_end"] = load_average()
    report = {
        "started_at": started.isoformat(timespec="seconds"),
        "command": "python -m bench.capacity " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "setup": {
            "clients": args.clients,
            "warmup_s": args.warmup,
            "window_s": args.window,
            "slices": args.slices,
            "quiet_cores": args.quiet_cores,
            "attempts": args.attempts,
            "worker": f"toolfleet worker --pool bench --kind threads --concurrency {WORKER_CONCURRENCY}",
            "calls_per_request": CALLS_PER_REQUEST,
        },
        "points": points,
    }
    report["summary"] = reporting.summary(points, args.quiet_cores, os.cpu_count() or 1)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    loopback = [p for p in points if p["fleet"] == "loopback" and p["agent"] == "plain" and "repeat" not in p]
    title = f"toolfleet calls/s on this {os.cpu_count()}-CPU machine, {started:%Y-%m-%d}"
    reporting.plot(points, args.plot, title)
    print(reporting.grid_table(loopback))
    for point in points:
        if point["replicas"] == point["workers"] or point["fleet"] != "loopback":
            print(reporting.per_call_table(point))
    print(f"summary: {json.dumps(report['summary'], indent=1)}")
    print(f"capacity: report {args.report}, plot {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
