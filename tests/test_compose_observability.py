"""The compose stack's `observability` profile: an OpenTelemetry collector and Prometheus whose
configuration files (under deploy/, JSON after their comments, which YAML readers take as it is)
parse and point at endpoints the stack's services really listen on."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from tests.test_compose import COMPOSE, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "observability"


def _compose() -> dict[str, Any]:
    parsed: dict[str, Any] = parse_yaml(COMPOSE.read_text())
    return parsed


def _config(service: dict[str, Any]) -> dict[str, Any]:
    mounted = [v for v in service["volumes"] if v.startswith("./deploy/")]
    assert len(mounted) == 1, mounted
    path = ROOT / mounted[0].split(":")[0]
    # JSON, which is YAML, after comment lines: read strictly by the standard library
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def _listens(services: dict[str, Any]) -> set[tuple[str, int]]:
    """(service, port) of every toolfleet HTTP endpoint, read from the services' commands."""
    found: set[tuple[str, int]] = set()
    for name, service in services.items():
        words = shlex.split(str(service.get("command", "")))
        for option in ("--port", "--metrics-port"):
            if option in words:
                found.add((name, int(words[words.index(option) + 1])))
    return found


def test_the_profile_adds_a_collector_and_prometheus_only_when_asked() -> None:
    services = _compose()["services"]
    profiled = {name for name, s in services.items() if s.get("profiles")}
    assert profiled == {"otel-collector", "prometheus"}
    assert all(services[name]["profiles"] == [PROFILE] for name in profiled)


def test_prometheus_scrapes_every_replica_and_worker_where_they_serve_metrics() -> None:
    services = _compose()["services"]
    config = _config(services["prometheus"])
    listening = _listens(services)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    replicas = jobs["toolfleet-orchestrator"]["dns_sd_configs"][0]
    assert ("orchestrator", int(replicas["port"])) in listening
    assert replicas["names"] == ["orchestrator"]
    workers = jobs["toolfleet-worker"]["static_configs"][0]["targets"]
    served = {(name, port) for name, port in listening if name.startswith("worker-")}
    assert {(t.split(":")[0], int(t.split(":")[1])) for t in workers} == served
    assert {name for name, _ in served} == {n for n in services if n.startswith("worker-")}
    # every worker listens beyond its own loopback, so Prometheus reaches it
    for name in {n for n, _ in served}:
        words = shlex.split(services[name]["command"])
        assert words[words.index("--metrics-host") + 1] == "0.0.0.0"
    collector = jobs["otel-collector"]["static_configs"][0]["targets"]
    metrics = _config(services["otel-collector"])["service"]["telemetry"]["metrics"]["readers"][0]
    assert collector == [f"otel-collector:{metrics['pull']['exporter']['prometheus']['port']}"]


def test_the_services_send_spans_to_the_collectors_otlp_receiver() -> None:
    services = _compose()["services"]
    config = _config(services["otel-collector"])
    http = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    port = int(http.rsplit(":", 1)[1])
    pipeline = config["service"]["pipelines"]["traces"]
    assert set(pipeline["receivers"]) <= set(config["receivers"])
    assert set(pipeline["exporters"]) <= set(config["exporters"])
    assert set(pipeline["processors"]) <= set(config["processors"])
    for name in ("worker-io", "worker-heavy", "orchestrator"):
        endpoint = services[name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert endpoint == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}", name
    # the documented value names the collector's service and receiver port
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:{port}" in COMPOSE.read_text()
    page = ROOT / "docs" / "observability.md"
    assert re.search(r"docker compose --profile observability up", page.read_text())
