"""The capacity run's arithmetic and report: where each role saturates, the tables printed, the plot.

Saturation, from one point's costs per call (`saturation`): Redis executes commands on one thread, so
one server serves at most 1 CPU-second per second, 1000 / (its CPU ms per call) calls/s; a replica
and a threads worker are one Python process each, their Python bound to one core by the GIL, so each
serves at most about 1000 / (its CPU ms per call); the machine gives `cpus` CPU-seconds per second
to everything, the clients included, so it serves at most cpus x 1000 / (all busy CPU ms per call).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["fleet_limit", "grid_table", "per_call_table", "plot", "saturation", "summary"]

ROLES = ("redis", "broker", "replica", "worker", "client")


def saturation(per_call: Mapping[str, Any], cpus: int) -> dict[str, float]:
    """Calls/s at which each role's one process (one Redis server, one replica, one worker) runs out
    of its one core, and at which the machine runs out of its `cpus`, from CPU ms per call."""
    limits = {}
    for role in ROLES:
        ms = per_call["cpu_ms"].get(role)
        if ms:
            limits[role] = 1000.0 / ms
    limits["machine"] = cpus * 1000.0 / per_call["machine_busy_ms"]
    fleet_ms = sum(per_call["cpu_ms"].get(role, 0.0) for role in ROLES if role != "client")
    limits["fleet_on_this_machine_without_clients"] = cpus * 1000.0 / fleet_ms
    return limits


def fleet_limit(limits: Mapping[str, float], replicas: int, workers: int) -> dict[str, Any]:
    """Calls/s of `replicas` replicas and `workers` workers on one Redis, each process on a core of
    its own: the least of Redis's limit and R (W) times one replica's (worker's), and which it is."""
    bounds = {
        "redis": limits["redis"],
        "replicas": replicas * limits["replica"],
        "workers": workers * limits["worker"],
    }
    bound = min(bounds, key=lambda k: bounds[k])
    return {"calls_per_s": bounds[bound], "bound_by": bound, "bounds": bounds}


def summary(points: Sequence[Mapping[str, Any]], quiet_cores: float, cpus: int) -> dict[str, Any]:
    """The costs of one call as the medians over the loopback `plain` points whose quietest slice had
    at most `quiet_cores` of other work (all of them if none had), where each role saturates at those
    costs, and where R replicas and W workers would, each on a core of its own."""
    plain = [p for p in points if p["fleet"] == "loopback" and p["agent"] == "plain"]
    quiet = [p for p in plain if abs(p["outside_cores"]) <= quiet_cores] or plain
    roles = sorted({role for p in quiet for role in p["per_call"]["cpu_ms"]})
    costs: dict[str, Any] = {
        "cpu_ms": {r: statistics.median(p["per_call"]["cpu_ms"].get(r, 0.0) for p in quiet) for r in roles},
        "machine_busy_ms": statistics.median(p["per_call"]["machine_busy_ms"] for p in quiet),
        "commands": statistics.median(sum(p["per_call"]["commands_total"].values()) for p in quiet),
    }
    limits = saturation(costs, cpus)
    return {
        "points": [f"{p['replicas']}x{p['workers']}" for p in quiet],
        **costs,
        "saturation": limits,
        "fleet_limits": {f"{n}x{n}": fleet_limit(limits, n, n) for n in (1, 2, 4, 8)},
    }


def grid_table(points: Sequence[Mapping[str, Any]]) -> str:
    """Calls/s with replicas down and workers across."""
    cells = {(p["replicas"], p["workers"]): p["calls_per_s"] for p in points}
    workers = sorted({w for _, w in cells})
    replicas = sorted({r for r, _ in cells})
    lines = ["replicas \\ workers " + "".join(f"{w:>9}" for w in workers)]
    for r in replicas:
        row = "".join(f"{cells[(r, w)]:>9.0f}" if (r, w) in cells else f"{'':>9}" for w in workers)
        lines.append(f"{r:>18} {row}")
    return "\n".join(lines)


def per_call_table(point: Mapping[str, Any]) -> str:
    """One point's CPU, commands and bytes per call, in lines."""
    pc = point["per_call"]
    lines = [
        f"{point['fleet']} {point['replicas']}x{point['workers']} ({point['agent']}): "
        f"{point['calls_per_s']:.0f} calls/s, machine busy {pc['machine_busy_fraction']:.0%}",
        "  CPU ms per call: "
        + ", ".join(f"{k} {v:.3f}" for k, v in pc["cpu_ms"].items())
        + f"; outside them {pc['unattributed_ms']:.3f}; all (machine) {pc['machine_busy_ms']:.3f}",
    ]
    for server, total in pc["commands_total"].items():
        top = ", ".join(f"{name} {count:.2f}" for name, count in list(pc["commands"][server].items())[:8])
        lines.append(f"  {server}: {total:.1f} commands per call ({top})")
        traffic = pc["redis_bytes"][server]
        lines.append(f"  {server}: {traffic['in']:.0f} bytes in, {traffic['out']:.0f} bytes out per call")
    for link, traffic in point["link_bytes_per_call"].items():
        lines.append(f"  link {link}: {traffic['sent']:.0f} bytes sent, {traffic['received']:.0f} received")
    limits = ", ".join(f"{k} {v:.0f}" for k, v in point["saturation"].items())
    lines.append(f"  saturates at (calls/s): {limits}")
    return "\n".join(lines)


def plot(points: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """Left: calls/s against workers, a line per replica count (loopback), and the network-namespace
    diagonal. Right: the CPU ms one call costs, by role, at each point of the diagonals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (axis, costs) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    grid = [p for p in points if p["fleet"] == "loopback" and p["agent"] == "plain" and "repeat" not in p]
    for replicas in sorted({p["replicas"] for p in grid}):
        row = sorted((p["workers"], p["calls_per_s"]) for p in grid if p["replicas"] == replicas)
        axis.plot([w for w, _ in row], [c for _, c in row], marker="o", label=f"{replicas} replica(s)")
    spread = sorted(
        (p["workers"], p["calls_per_s"]) for p in points if p["fleet"] == "netns" and p["agent"] == "plain"
    )
    if spread:
        axis.plot(
            [w for w, _ in spread],
            [c for _, c in spread],
            marker="s",
            linestyle="--",
            color="black",
            label="N replicas x N workers, a network namespace each",
        )
    axis.set_xlabel("worker processes (threads pool, 16 threads each)")
    axis.set_ylabel("tool calls / s (one call per chat completion)")
    axis.set_xticks([1, 2, 3, 4])
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    axis.set_title(title, fontsize=9)
    _cost_bars(costs, [p for p in points if p["replicas"] == p["workers"] and "repeat" not in p])
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _cost_bars(axis: Any, points: Sequence[Mapping[str, Any]]) -> None:
    """Stacked bars: CPU ms per call of each role, and the machine's busy time outside the fleet."""
    labels = [
        f"{p['fleet'][:4]} {p['replicas']}x{p['workers']}{'' if p['agent'] == 'plain' else ' fan'}"
        for p in points
    ]
    bottoms = [0.0] * len(points)
    for role in (*ROLES, "outside"):
        values = [
            max(p["per_call"]["unattributed_ms"], 0.0)
            if role == "outside"
            else p["per_call"]["cpu_ms"].get(role, 0.0)
            for p in points
        ]
        if any(values):
            axis.bar(
                labels, values, bottom=bottoms, label=role, color="#cccccc" if role == "outside" else None
            )
            bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    axis.set_ylabel("CPU ms per tool call")
    axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    axis.legend(fontsize=8)
    axis.set_title("where a call's CPU goes (outside: the kernel, other processes)", fontsize=9)
