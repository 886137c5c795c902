"""The compose stack's health checks: every long-running service has one that the CLI (or the image)
answers, with timings that fit the service, and the orchestrator starts only once what it needs is
healthy. What the workers' check tells a live worker from a dead one is tested against real workers in
tests/test_cli_worker_health.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.cli import build_parser
from tests.test_compose import COMPOSE, parse_yaml
from workers.settings import Settings

# Services that run once and exit, and need no health check: none in this stack.
ONE_SHOT: set[str] = set()


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document: dict[str, Any] = parse_yaml(COMPOSE.read_text())
    found: dict[str, dict[str, Any]] = document["services"]
    return found


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    assert match is not None, f"a duration in ms, s or m: {duration!r}"
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60}[match[2]]


def _toolfleet(service: dict[str, Any]) -> bool:
    return "build" in service


def test_every_long_running_toolfleet_service_has_a_health_check(services: dict[str, dict[str, Any]]) -> None:
    toolfleet = {name for name, service in services.items() if _toolfleet(service)}
    assert toolfleet == {"flower", "worker-io", "worker-heavy", "orchestrator"}
    for name in toolfleet - ONE_SHOT:
        check = services[name].get("healthcheck")
        assert check is not None, f"{name} has no health check"
        assert check["test"][0] == "CMD", f"{name}: run the check directly, with no shell between"
        interval, timeout = _seconds(check["interval"]), _seconds(check["timeout"])
        assert 0 < timeout <= interval, f"{name}: a check ends before the next one starts"
        assert check["retries"] >= 2, f"{name}: one slow check does not make it unhealthy"
        assert _seconds(check["start_period"]) >= 10, f"{name}: time to start before failures count"


def test_each_workers_check_is_the_worker_health_command(services: dict[str, dict[str, Any]]) -> None:
    workers = {name: service for name, service in services.items() if name.startswith("worker-")}
    assert set(workers) == {"worker-io", "worker-heavy"}
    ttl_s = Settings.from_env(
        {name: value for name, value in workers["worker-io"]["environment"].items() if "$" not in value}
    ).heartbeat_ttl_s
    for name, service in workers.items():
        check = service["healthcheck"]
        # `toolfleet` is the image's entry point; the CLI accepts the command as it stands
        assert check["test"][1] == "toolfleet", name
        args = build_parser().parse_args(check["test"][2:])
        assert args.command == "worker-health", name
        assert args.hostname is None, f"{name}: the worker is found by this container's host name"
        # a dead worker's heartbeat has expired before a check counts a failure of it, and the check
        # is given longer than its Redis client's own timeouts (connect 2 s, read 3 s) plus start-up
        assert _seconds(check["interval"]) > ttl_s
        assert _seconds(check["timeout"]) >= 8
        # a worker starting (importing its tools, joining the broker) is not counted unhealthy
        assert _seconds(check["start_period"]) >= 30
    # the header tells how soon a dead worker fails its check, as the settings have it
    assert f"(TOOLFLEET_HEARTBEAT_TTL_S, {ttl_s:g} s)" in COMPOSE.read_text()


def test_the_orchestrator_starts_once_what_it_needs_is_healthy(services: dict[str, dict[str, Any]]) -> None:
    depends_on = services["orchestrator"]["depends_on"]
    needed = {"redis", "postgres", "worker-io", "worker-heavy"}
    assert set(depends_on) == needed
    for name in needed:
        assert "healthcheck" in services[name], name
        assert depends_on[name] == {"condition": "service_healthy"}, name
    # and the balancer waits for a healthy orchestrator
    assert services["balancer"]["depends_on"]["orchestrator"] == {"condition": "service_healthy"}
