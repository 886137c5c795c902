"""What the capacity run reads around each window of load, and the per-call arithmetic on it.

A `Snapshot` holds, at one moment: each Redis server's `INFO commandstats` and `INFO stats` byte
counters; the CPU time (user + system, in clock ticks) of every process of the fleet with its live
descendants and its reaped children; the bytes each of those processes' TCP connections sent and
received, by the port at their far end (`ss -tinp`, per network namespace); the whole machine's busy
and idle time (`/proc/stat`). `per_call` turns two snapshots and a number of calls into commands,
bytes and CPU seconds per call. The functions below the snapshot are pure, and tested.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

__all__ = [
    "Snapshot",
    "commands_by_name",
    "cpu_ticks",
    "difference",
    "links",
    "machine_ticks",
    "parse_ss",
    "per_call",
    "take",
]

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Commands the probe itself sends, left out of the per-call counts.
PROBE_COMMANDS = frozenset({"info", "ping", "client|setname", "client|list"})
_SS_PROCESS = re.compile(r'users:\(\("[^"]*",pid=(\d+),fd=\d+\)')
_SS_BYTES = re.compile(r"\b(bytes_acked|bytes_received):(\d+)")


@dataclass
class Snapshot:
    """Counters at one moment (see the module's doc); `t` is `time.monotonic()`."""

    t: float
    commands: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> command -> calls
    net: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> input/output bytes
    cpu: dict[str, int] = field(default_factory=dict)  # process name -> ticks
    sockets: dict[tuple[int, str, str], tuple[int, int]] = field(default_factory=dict)
    machine: tuple[int, int] = (0, 0)  # busy, idle ticks of all CPUs


def commands_by_name(info: Mapping[str, Any]) -> dict[str, int]:
    """`INFO commandstats` as redis-py parses it (`cmdstat_get: {calls: …}`) -> `{"get": calls}`."""
    counts = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and isinstance(value, Mapping):
            counts[key.removeprefix("cmdstat_")] = int(value["calls"])
    return counts


def cpu_ticks(stat_line: str) -> tuple[int, int, int]:
    """`(ppid, own ticks, reaped children's ticks)` from a `/proc/<pid>/stat` line."""
    fields = stat_line[stat_line.rindex(")") + 2 :].split()
    # After the name: state, ppid, ..., utime (14th field of the line), stime, cutime, cstime.
    ppid = int(fields[1])
    return ppid, int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def machine_ticks(proc_stat: str) -> tuple[int, int]:
    """`(busy, idle)` ticks of all CPUs from `/proc/stat` (idle and iowait are idle)."""
    values = [int(v) for v in proc_stat.splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values[:8]) - idle, idle


def parse_ss(text: str, pids: Mapping[int, str]) -> dict[tuple[int, str, str], tuple[int, int]]:
    """`ss -tinpH` output -> `{(pid, local, peer): (bytes sent, bytes received)}` for `pids`' sockets."""
    found: dict[tuple[int, str, str], tuple[int, int]] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = _SS_PROCESS.search(line)
        if match is None or int(match.group(1)) not in pids:
            continue
        parts = line.split()
        local, peer = parts[2], parts[3]
        detail = lines[index + 1] if index + 1 < len(lines) else ""
        counters = dict((name, int(value)) for name, value in _SS_BYTES.findall(detail))
        found[(int(match.group(1)), local, peer)] = (
            counters.get("bytes_acked", 0),
            counters.get("bytes_received", 0),
        )
    return found


def links(
    before: Mapping[tuple[int, str, str], tuple[int, int]],
    after: Mapping[tuple[int, str, str], tuple[int, int]],
    pids: Mapping[int, str],
    ports: Mapping[int, str],
) -> dict[str, dict[str, int]]:
    """Bytes sent and received in between, per link `<process kind>><peer kind>`: a socket's kind is its
    pid's (`pids`: pid -> kind), its peer's the kind listening on the far port (`ports`). A connection
    opened in between counts from zero; one closed in between is not counted; the side of a socket
    that listens on one of `ports` is the server's, counted by its client."""
    totals: dict[str, dict[str, int]] = {}
    for key, (sent, received) in after.items():
        pid, local, peer = key
        peer_kind = ports.get(int(peer.rsplit(":", 1)[1]))
        if peer_kind is None or int(local.rsplit(":", 1)[1]) in ports:  # a server's side: not a link
            continue
        sent_before, received_before = before.get(key, (0, 0))
        link = totals.setdefault(f"{pids[pid]}>{peer_kind}", {"sent": 0, "received": 0})
        link["sent"] += sent - sent_before
        link["received"] += received - received_before
    return totals


def difference(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """What happened between two snapshots: commands and net bytes per server, CPU ticks per process,
    the machine's busy and idle ticks, the seconds."""
    commands = {
        server: {
            name: count - before.commands[server].get(name, 0)
            for name, count in counts.items()
            if name not in PROBE_COMMANDS and count != before.commands[server].get(name, 0)
        }
        for server, counts in after.commands.items()
    }
    net = {
        server: {key: value - before.net[server][key] for key, value in counters.items()}
        for server, counters in after.net.items()
    }
    cpu = {name: ticks - before.cpu.get(name, ticks) for name, ticks in after.cpu.items()}
    return {
        "seconds": after.t - before.t,
        "commands": commands,
        "net": net,
        "cpu_ticks": cpu,
        "machine_ticks": (after.machine[0] - before.machine[0], after.machine[1] - before.machine[1]),
    }


def per_call(diff: Mapping[str, Any], calls: int, kinds: Mapping[str, str]) -> dict[str, Any]:
    """Commands (by server and name), Redis bytes in and out (by server) and CPU ms (by process kind,
    `kinds`: process name -> kind) per call, from a `difference` over which `calls` tool calls ended."""
    if calls <= 0:
        raise ValueError("no call ended in the window: nothing to divide by")
    commands = {
        server: dict(sorted(((n, c / calls) for n, c in counts.items()), key=lambda item: -item[1]))
        for server, counts in diff["commands"].items()
    }
    cpu_ms: dict[str, float] = {}
    for name, ticks in diff["cpu_ticks"].items():
        kind = kinds[name]
        cpu_ms[kind] = cpu_ms.get(kind, 0.0) + ticks * 1000 / TICKS_PER_S / calls
    busy, idle = diff["machine_ticks"]
    machine_ms = busy * 1000 / TICKS_PER_S / calls
    return {
        "commands": commands,
        "commands_total": {server: sum(counts.values()) for server, counts in commands.items()},
        "redis_bytes": {
            server: {
                "in": counters["total_net_input_bytes"] / calls,
                "out": counters["total_net_output_bytes"] / calls,
            }
            for server, counters in diff["net"].items()
        },
        "cpu_ms": cpu_ms,
        "machine_busy_ms": machine_ms,
        # Busy time no process of the fleet was charged with: the kernel's work outside any process
        # (softirq: packets through veth pairs and a bridge), and any other process on the machine.
        "unattributed_ms": machine_ms - sum(cpu_ms.values()),
        "machine_busy_fraction": busy / (busy + idle) if busy + idle else 0.0,
    }


# -- reading the machine ---------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, int]]:
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                table[int(entry)] = cpu_ticks(handle.read())
        except (OSError, ValueError):
            continue
    return table


def _tree_ticks(root: int, table: Mapping[int, tuple[int, int, int]]) -> int:
    """`root`'s ticks, its reaped children's, and those of its live descendants (a prefork pool)."""
    if root not in table:
        return 0
    total = table[root][1] + table[root][2]
    for pid, (ppid, _, _) in table.items():
        if ppid == root:
            total += _tree_ticks(pid, table)
    return total


def _sockets(namespaces: Iterable[str | None], pids: Mapping[int, str]) -> dict[Any, tuple[int, int]]:
    found: dict[Any, tuple[int, int]] = {}
    for namespace in namespaces:
        argv = ["ss", "-tinpH", "state", "established"]
        if namespace is not None:
            argv = ["ip", "netns", "exec", namespace, *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        found.update(parse_ss(done.stdout, pids))
    return found


def take(
    t: float,
    servers: Mapping[str, redis.Redis],
    processes: Mapping[str, int],
    namespaces: Iterable[str | None] = (None,),
    socket_kinds: Mapping[int, str] | None = None,
) -> Snapshot:
    """A snapshot of `servers` (name -> client) and `processes` (name -> root pid); with `socket_kinds`
    (pid -> kind), the TCP connections of those pids in `namespaces` too."""
    snapshot = Snapshot(t)
    for name, client in servers.items():
        snapshot.commands[name] = commands_by_name(client.info("commandstats"))
        stats = client.info("stats")
        snapshot.net[name] = {
            key: int(stats[key]) for key in ("total_net_input_bytes", "total_net_output_bytes")
        }
    table = _proc_table()
    snapshot.cpu = {name: _tree_ticks(pid, table) for name, pid in processes.items()}
    if socket_kinds:
        snapshot.sockets = _sockets(namespaces, socket_kinds)
    with open("/proc/stat") as handle:
        snapshot.machine = machine_ticks(handle.read())
    return snapshot
