"""The capacity run's arithmetic: counters read from /proc, ss and Redis, turned into costs per call and
the rate at which each role saturates (`bench/_capacity_probe.py`, `bench/_capacity_report.py`)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from bench._capacity_probe import (
    TICKS_PER_S,
    commands_by_name,
    cpu_ticks,
    links,
    machine_ticks,
    parse_ss,
    per_call,
)
from bench._capacity_report import fleet_limit, saturation
from bench.capacity import grid_points

SS = (
    '0 0 127.0.0.1:40000 127.0.0.1:6379 users:(("python",pid=10,fd=7))\n'
    "\t cubic bytes_sent:900 bytes_acked:900 bytes_received:300 segs_out:9\n"
    '0 0 127.0.0.1:8000 127.0.0.1:40002 users:(("python",pid=10,fd=9))\n'
    "\t cubic bytes_acked:50 bytes_received:20\n"
    '0 0 127.0.0.1:40001 127.0.0.1:6379 users:(("other",pid=99,fd=3))\n'
    "\t cubic bytes_acked:1 bytes_received:1\n"
)


def test_a_proc_stat_line_gives_parent_own_and_reaped_children_ticks() -> None:
    # given: a /proc/<pid>/stat line whose name holds spaces and a parenthesis
    line = "42 (python (x) y) S 7 42 42 0 -1 4194560 1 0 0 0 120 30 5 6 20 0 3 0 100 0 0"
    # then: ppid 7, utime + stime = 150, cutime + cstime = 11
    assert cpu_ticks(line) == (7, 150, 11)


def test_the_machine_is_busy_in_all_but_idle_and_iowait() -> None:
    assert machine_ticks("cpu  10 1 4 100 5 2 3 0 0 0\ncpu0 1 1 1 1 1 1 1 1\n") == (20, 105)


def test_commandstats_become_calls_by_command() -> None:
    info = {"cmdstat_get": {"calls": 3, "usec": 9}, "cmdstat_client|list": {"calls": 1}, "errorstat_ERR": 1}
    assert commands_by_name(info) == {"get": 3, "client|list": 1}


def test_ss_sockets_of_the_fleet_are_read_with_their_bytes() -> None:
    found = parse_ss(SS, {10: "replica"})
    assert found == {
        (10, "127.0.0.1:40000", "127.0.0.1:6379"): (900, 300),
        (10, "127.0.0.1:8000", "127.0.0.1:40002"): (50, 20),
    }


def test_links_count_client_sockets_from_zero_and_skip_the_servers_side() -> None:
    # given: the replica's connection to Redis, seen before and after; its listening side's socket
    before = {(10, "127.0.0.1:40000", "127.0.0.1:6379"): (100, 50)}
    after = parse_ss(SS, {10: "replica"})
    # when
    found = links(before, after, {10: "replica"}, {6379: "redis", 8000: "replica"})
    # then: only the link to Redis, as a difference
    assert found == {"replica>redis": {"sent": 800, "received": 250}}


def test_costs_per_call_add_up_processes_of_a_kind() -> None:
    # given: 2 replicas and Redis over a window in which 100 calls ended, the machine busy 50 %
    diff = {
        "commands": {"redis": {"get": 300, "evalsha": 200}},
        "net": {"redis": {"total_net_input_bytes": 50_000, "total_net_output_bytes": 10_000}},
        "cpu_ticks": {
            "replica-1": TICKS_PER_S // 2,
            "replica-2": TICKS_PER_S // 2,
            "redis": TICKS_PER_S // 10,
        },
        "machine_ticks": (2 * TICKS_PER_S, 2 * TICKS_PER_S),
    }
    kinds = {"replica-1": "replica", "replica-2": "replica", "redis": "redis"}
    # when
    costs = per_call(diff, 100, kinds)
    # then
    assert costs["commands"] == {"redis": {"get": 3.0, "evalsha": 2.0}}
    assert costs["commands_total"] == {"redis": 5.0}
    assert costs["redis_bytes"] == {"redis": {"in": 500.0, "out": 100.0}}
    assert costs["cpu_ms"] == pytest.approx({"replica": 10.0, "redis": 1.0})
    assert costs["machine_busy_ms"] == pytest.approx(20.0)
    assert costs["unattributed_ms"] == pytest.approx(9.0)
    assert costs["machine_busy_fraction"] == pytest.approx(0.5)


def test_no_call_in_the_window_is_an_error_not_a_division_by_zero() -> None:
    diff = {"commands": {}, "net": {}, "cpu_ticks": {}, "machine_ticks": (0, 0)}
    with pytest.raises(ValueError, match="no call ended"):
        per_call(diff, 0, {})


def test_each_role_saturates_at_one_core_and_the_machine_at_all_of_them() -> None:
    # given: 1 ms of Redis, 5 ms of replica, 4 ms of worker, 0.5 ms of client per call; 11 ms busy
    costs = {"cpu_ms": {"redis": 1.0, "replica": 5.0, "worker": 4.0, "client": 0.5}, "machine_busy_ms": 11.0}
    limits = saturation(costs, 2)
    assert limits["redis"] == pytest.approx(1000)
    assert limits["replica"] == pytest.approx(200)
    assert limits["worker"] == pytest.approx(250)
    assert limits["machine"] == pytest.approx(2000 / 11)
    assert limits["fleet_on_this_machine_without_clients"] == pytest.approx(2000 / 10)


def test_a_fleet_is_bound_by_its_scarcest_role() -> None:
    limits = {"redis": 1000.0, "replica": 200.0, "worker": 250.0}
    assert fleet_limit(limits, 2, 1)["bound_by"] == "workers"
    assert fleet_limit(limits, 2, 1)["calls_per_s"] == pytest.approx(250)
    assert fleet_limit(limits, 8, 8)["bound_by"] == "redis"
    assert fleet_limit(limits, 1, 4)["calls_per_s"] == pytest.approx(200)


def test_the_grid_starts_or_stops_one_process_per_point() -> None:
    # given: the full grid in the order the run measures it
    points = list(grid_points("full"))
    # then: every point once, one replica or one worker more or less from one to the next
    assert sorted(points) == [(r, w) for r in range(1, 5) for w in range(1, 5)]
    steps = [abs(r2 - r1) + abs(w2 - w1) for (r1, w1), (r2, w2) in itertools.pairwise(points)]
    assert steps == [1] * 15


def test_the_edges_are_the_diagonal_and_the_single_replica_and_worker_lines() -> None:
    points = set(grid_points("edges"))
    assert points == {(n, n) for n in range(1, 5)} | {(1, n) for n in range(1, 5)} | {
        (n, 1) for n in range(1, 5)
    }


def test_the_capacity_run_explains_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench.capacity")
    assert "--quiet-cores" in done.stdout
