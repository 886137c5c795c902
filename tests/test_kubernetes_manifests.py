"""The Kubernetes deploy files (deploy/kubernetes/) are valid against Kubernetes' own schemas
(kubernetes-validate, strict: no unknown field), and say what toolfleet does: probes on routes the
service has, terminations as long as its drain and its workers' longest calls, each pool's worker
serving that pool's tools and ready once it beats in the live catalog, KEDA scaling each pool on the
signals the service exports for it, and secrets reaching the processes through their environment only,
the journal's key required."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from orchestrator.cli import build_parser
from orchestrator.server import routes as service_routes
from orchestrator.server.process import ANSWER_AFTER_GRACE_S
from orchestrator.telemetry.queues import QueueSample, QueueSignals
from workers.settings import Settings
from workers.tools import discover_tools

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"


def _documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


DOCUMENTS = _documents()


def _of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in DOCUMENTS if doc["kind"] == kind}


def _arg(container: dict[str, Any], option: str) -> str:
    args = container["args"]
    return str(args[args.index(option) + 1])


@pytest.mark.parametrize(
    "document",
    [d for d in DOCUMENTS if d["apiVersion"] != "keda.sh/v1alpha1"],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_each_manifest_is_valid_against_the_kubernetes_schemas(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_a_broken_manifest_is_refused() -> None:
    [serve] = [
        d for d in DOCUMENTS if d["kind"] == "Deployment" and d["metadata"]["name"] == "toolfleet-serve"
    ]
    broken = {**serve, "spec": {**serve["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_service_is_probed_on_its_routes_and_given_time_to_drain() -> None:
    serve = _of_kind("Deployment")["toolfleet-serve"]["spec"]["template"]["spec"]
    [container] = serve["containers"]
    routes = {getattr(route, "path", None) for route in service_routes.router.routes}
    probed = {container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]}
    assert probed == {"/healthz", "/readyz"} and probed <= routes
    drain_s = float(_of_kind("ConfigMap")["toolfleet"]["data"]["TOOLFLEET_SERVE_DRAIN_GRACE_S"])
    assert serve["terminationGracePeriodSeconds"] > drain_s + ANSWER_AFTER_GRACE_S
    service = _of_kind("Service")["toolfleet-serve"]
    assert (
        service["spec"]["selector"]
        == _of_kind("Deployment")["toolfleet-serve"]["spec"]["selector"]["matchLabels"]
    )
    hpa = _of_kind("HorizontalPodAutoscaler")["toolfleet-serve"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "toolfleet-serve"


def _workers() -> dict[str, dict[str, Any]]:
    return {name: doc for name, doc in _of_kind("Deployment").items() if name.startswith("toolfleet-worker-")}


def test_each_pools_workers_serve_its_tools_and_outlive_their_longest_call() -> None:
    defaults = Settings.from_env({})
    timeout_s = float(_of_kind("ConfigMap")["toolfleet"]["data"]["TOOLFLEET_DEFAULT_TOOL_TIMEOUT_S"])
    assert _workers()
    for name, deployment in _workers().items():
        spec = deployment["spec"]["template"]["spec"]
        [container] = spec["containers"]
        pool = _arg(container, "--pool")
        assert deployment["metadata"]["labels"]["toolfleet.dev/pool"] == pool
        tools = [
            t
            for module in _arg(container, "--tools").split(",")
            for t in discover_tools(importlib.import_module(module))
        ]
        assert tools and {t.pool for t in tools} == {pool}, name
        longest = max(t.timeout or timeout_s or defaults.default_tool_timeout_s for t in tools)
        assert spec["terminationGracePeriodSeconds"] >= longest, name


def test_keda_scales_each_pool_on_the_signals_the_service_exports_for_it() -> None:
    signals = QueueSignals(lambda: QueueSample())
    exported = {family.name for family in signals.collect()}
    scaled = _of_kind("ScaledObject")
    assert set(scaled) == set(_workers())
    for name, scaled_object in scaled.items():
        assert scaled_object["apiVersion"] == "keda.sh/v1alpha1"
        target = _workers()[scaled_object["spec"]["scaleTargetRef"]["name"]]
        [container] = target["spec"]["template"]["spec"]["containers"]
        pool = _arg(container, "--pool")
        triggers = scaled_object["spec"]["triggers"]
        assert triggers and {t["type"] for t in triggers} == {"prometheus"}
        queried = set()
        for trigger in triggers:
            metadata = trigger["metadata"]
            assert metadata["serverAddress"].startswith("http") and float(metadata["threshold"]) > 0
            match = re.fullmatch(r'max\((\w+)\{pool="([\w-]+)"\}\)', metadata["query"])
            assert match is not None, metadata["query"]
            assert match.group(2) == pool, (name, metadata["query"])
            queried.add(match.group(1))
        assert queried == exported, (name, queried)


def _containers() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{doc['metadata']['name']}/{container['name']}", container)
        for doc in _of_kind("Deployment").values()
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


def test_no_container_takes_a_secret_on_its_command_line() -> None:
    # given: every value the Secret documents, by name, and password-carrying options
    documented = set(re.findall(r"--from-literal=(\w+)=", (DEPLOY / "config.yaml").read_text()))
    assert {
        "TOOLFLEET_REDIS_URL",
        "TOOLFLEET_DATABASE_URL",
        "TOOLFLEET_API_KEYS",
        "TOOLFLEET_JOURNAL_KEYS",
    } <= (documented)
    for name, container in _containers():
        line = " ".join(str(word) for word in [*container.get("command", []), *container.get("args", [])])
        # then: secrets come from the environment; none is named, spelled or referenced on the line
        assert not re.search(r"://[^/\s]*:[^/\s]*@", line), f"{name}: credentials in a URL: {line}"
        assert not any(variable in line for variable in documented), f"{name}: {line}"
        assert not re.search(r"--(requirepass|password|pass|basic-auth)\b", line), f"{name}: {line}"
        assert {"secretRef": {"name": "toolfleet"}} in container["envFrom"], name


def test_the_service_does_not_start_without_the_journals_key() -> None:
    [container] = _of_kind("Deployment")["toolfleet-serve"]["spec"]["template"]["spec"]["containers"]
    [journal_keys] = [v for v in container["env"] if v["name"] == "TOOLFLEET_JOURNAL_KEYS"]
    reference = journal_keys["valueFrom"]["secretKeyRef"]
    assert reference["name"] == "toolfleet" and reference["key"] == "TOOLFLEET_JOURNAL_KEYS"
    assert reference.get("optional", False) is False, "a missing key keeps the pod from starting"


def test_each_worker_is_ready_once_it_beats_in_the_live_catalog() -> None:
    parser = build_parser()
    for name, deployment in _workers().items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        probe = container["readinessProbe"]
        command = probe["exec"]["command"]
        # `toolfleet worker-health`, as the CLI accepts it, finding the worker by the pod's host name
        assert command[0] == "toolfleet", name
        args = parser.parse_args(command[1:])
        assert (args.command, args.hostname) == ("worker-health", None), name
        # a check outlasts its Redis client's timeouts (connect 2 s, read 3 s) and the CLI's start
        assert probe["timeoutSeconds"] >= 8 and probe["periodSeconds"] >= probe["timeoutSeconds"], name
        assert probe["failureThreshold"] >= 2, name
        # the rollout waits for it: a new worker replaces an old one only once ready
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name
