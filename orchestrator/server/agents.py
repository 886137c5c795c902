"""The agents a service serves: each `NAME=MODULE:ATTRIBUTE` loaded once into an `AiService`."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping

from orchestrator.executors.celery import CeleryExecutor
from orchestrator.server.settings import AgentSpec
from orchestrator.service import AiService
from workers.errors import SettingsError

__all__ = ["load_agent", "load_agents", "required_pools"]


def load_agent(spec: AgentSpec) -> AiService:
    """Import `spec.module` and read `spec.attribute` (dots reach into it): an `AiService`, or a
    callable taking no arguments that returns one."""
    try:
        module = importlib.import_module(spec.module)
    except ImportError as exc:
        raise SettingsError(f"agent {spec.name!r}: cannot import {spec.module!r}: {exc}") from exc
    target: object = module
    for part in spec.attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SettingsError(
                f"agent {spec.name!r}: {spec.module!r} has no attribute {spec.attribute!r}"
            ) from None
    if not isinstance(target, AiService) and callable(target):
        target = target()
    if not isinstance(target, AiService):
        raise SettingsError(
            f"agent {spec.name!r}: {spec.module}:{spec.attribute} is a {type(target).__name__}, not an "
            "AiService or a callable returning one"
        )
    return target


def load_agents(specs: Iterable[AgentSpec]) -> dict[str, AiService]:
    """Every agent by name, in the order given, each under its name (what its invocations are
    journaled as, whatever name its `AiService` was given, if any)."""
    return {spec.name: load_agent(spec).named(spec.name) for spec in specs}


def required_pools(agents: Mapping[str, AiService]) -> dict[str, set[str]]:
    """The pools the agents' own tools run on, each with the agents that need it (agents that run
    their tools in-process need none)."""
    needed: dict[str, set[str]] = {}
    for name, service in agents.items():
        if isinstance(service.executor, CeleryExecutor):
            for pool in service.pools():
                needed.setdefault(pool, set()).add(name)
    return needed
