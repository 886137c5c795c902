"""Finish the sagas an orchestrator left unfinished: `toolfleet recover`.

An invocation whose owner stopped beating (it died, or lost its database) while running or
compensating is claimed atomically, and every successful compensable call of it that is not yet
compensated is undone, latest first. Compensations carry the idempotency key of the call they undo,
and workers run a compensation at most once per key, so a compensation that was already running or
done when the owner died is never run twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from orchestrator.executors.base import ToolExecutor
from orchestrator.journal import Journal
from workers.invocation import Invocation
from workers.tools import ToolDefinition

__all__ = ["Recovered", "recover"]

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    """What recovery did for one invocation."""

    invocation_id: str
    compensated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


async def recover(
    journal: Journal,
    executor: ToolExecutor,
    definitions: dict[str, ToolDefinition] | None = None,
    *,
    stale_after_s: float = 60.0,
    invocation_id: str | None = None,
) -> list[Recovered]:
    """Complete every stale saga (or the one named); `definitions` maps tool names, else the
    executor's `definition(name)` is asked (a `CeleryExecutor` knows the live catalog)."""
    stale_before = datetime.now(UTC) - timedelta(seconds=stale_after_s)
    if invocation_id is not None:
        record = journal.invocation(invocation_id)
        targets = [record] if record is not None and record.state in ("running", "compensating") else []
    else:
        targets = journal.unfinished(stale_after_s)
    reports: list[Recovered] = []
    for record in targets:
        if not journal.claim(record.id, stale_before):
            log.info("invocation %s is alive or taken by another recoverer; skipped", record.id)
            continue
        reports.append(
            await _recover_one(journal, executor, definitions or {}, record.id, record.invocation_json)
        )
    return reports


async def _recover_one(
    journal: Journal,
    executor: ToolExecutor,
    definitions: dict[str, ToolDefinition],
    invocation_id: str,
    invocation_json: dict[str, object],
) -> Recovered:
    report = Recovered(invocation_id)
    invocation = Invocation.from_json(invocation_json)
    calls = journal.calls(invocation_id)
    report.unknown = [f"{c.tool} ({c.call_id})" for c in calls if c.state == "dispatched"]
    todo = [c for c in calls if c.compensable and c.state in ("succeeded", "compensation_failed")]
    todo.sort(key=lambda c: c.sequence, reverse=True)
    journal.plan_compensations(invocation_id, todo, "recovered: the orchestrator stopped mid-saga")
    for call in todo:
        definition = definitions.get(call.tool) or _lookup(executor, call.tool)
        label = f"{call.tool} ({call.call_id})"
        if definition is None or definition.compensation is None:
            journal.compensation_finished(call.id, False, f"no compensable tool named '{call.tool}' is known")
            report.failed.append(label)
            continue
        journal.compensation_running(call.id, None)
        outcome = await executor.compensate(definition, call.execution(), invocation)
        journal.compensation_finished(
            call.id, not outcome.is_error, outcome.text if outcome.is_error else None
        )
        (report.failed if outcome.is_error else report.compensated).append(label)
    state_error = "recovered after its orchestrator stopped"
    if report.unknown:
        state_error += f"; calls with unknown outcome: {', '.join(report.unknown)}"
    if report.failed:  # still owed: left compensating, so the next `recover` retries them
        state_error += f"; compensations still owed: {', '.join(report.failed)}"
    journal.set_invocation_state(invocation_id, "compensating" if report.failed else "failed", state_error)
    return report


def _lookup(executor: ToolExecutor, name: str) -> ToolDefinition | None:
    finder = getattr(executor, "definition", None)
    if finder is None:
        registry = getattr(executor, "registry", None)
        return registry.get(name) if registry is not None else None
    found = finder(name)
    return found if isinstance(found, ToolDefinition) else None
