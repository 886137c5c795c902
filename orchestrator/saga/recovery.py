"""Finish the sagas an orchestrator left unfinished: `toolfleet recover`.

An invocation whose owner stopped beating (it died, or lost its database) while running or
compensating is claimed atomically. A compensable call dispatched but never journaled as finished is
settled first from its state in the result backend (its task id follows from its idempotency key):
a success joins the calls to undo, a failure has nothing to undo, and a call still queued or running
is revoked and marked abandoned, so that its worker undoes it if it finishes anyway. Then every
successful compensable call that is not yet compensated is undone, latest first. Compensations carry
the idempotency key of the call they undo, and workers run a compensation at most once per key, so a
compensation that was already running or done when the owner died is never run twice.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import redis

from orchestrator.errors import JournalKeyError
from orchestrator.executors._outcomes import outcome_of_meta, outcome_of_success, worker_of
from orchestrator.executors.base import ToolExecutor
from orchestrator.saga.async_journal import JournalRunner, beating
from orchestrator.saga.compensation import run_compensation
from orchestrator.saga.journal import CallRecord, InvocationRecord, Journal, owner_id
from orchestrator.saga.states import (
    CANCELLED_BY_CALLER,
    CANCELLED_WHILE_PAUSED,
    ApprovalState,
    CallState,
    InvocationState,
)
from orchestrator.telemetry import approvals_waited, continued_trace, traced_recovery
from workers.calls.invocation import Invocation
from workers.protocol import OutcomeKind, ToolOutcome
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = ["Recovered", "cancel_paused", "recover", "stale_after_floor"]

log = logging.getLogger(__name__)

STALE_AFTER_S = 60.0  # seconds without heartbeat after which an invocation's orchestrator counts as gone
MISSED_BEATS = 3  # an invocation is stale only after this many of its owner's heartbeats went missing


def stale_after_floor(settings: Settings) -> float:
    """The least staleness recovery may take an invocation at: three heartbeat intervals, so that an
    owner whose beat is merely late is never taken over."""
    return round(MISSED_BEATS * settings.invocation_heartbeat_s, 6)  # 3 × 0.1 is 0.3, not 0.30000000000000004


@dataclass
class Recovered:
    """What recovery did for one invocation: calls compensated, compensations that failed, calls
    that failed (nothing to undo), calls revoked and abandoned while queued or running (their worker
    undoes them if they finish), and calls whose outcome is unknown (not compensable, or not
    readable)."""

    invocation_id: str
    compensated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    nothing_to_undo: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    error: str | None = None  # why the invocation was not recovered at all (its parameters unreadable)


async def recover(
    journal: JournalRunner,
    executor: ToolExecutor,
    definitions: dict[str, ToolDefinition] | None = None,
    *,
    stale_after_s: float = STALE_AFTER_S,
    invocation_id: str | None = None,
) -> list[Recovered]:
    """Complete every stale saga (or the one named); `definitions` maps tool names, else the
    executor's `definition(name)` is asked (a `CeleryExecutor` knows the live catalog). `journal`: a
    `Journal`, or an `AsyncJournal` so that recovering never blocks the event loop."""
    stale_before = datetime.now(UTC) - timedelta(seconds=stale_after_s)
    if invocation_id is not None:
        record = await journal.run(lambda j: j.invocation(invocation_id))
        targets = [record] if record is not None and not record.state.finished else []
    else:
        targets = await journal.run(lambda j: j.unfinished(stale_after_s))
    reports: list[Recovered] = []
    for record in targets:
        try:  # opened before the claim: a row no key opens is reported, and the others go on
            invocation_json = record.invocation_json
        except JournalKeyError as exc:
            log.error("invocation %s not recovered: %s", record.id, exc)
            reports.append(Recovered(record.id, error=str(exc)))
            continue
        if not await journal.run(partial(Journal.claim, invocation_id=record.id, stale_before=stale_before)):
            log.info("invocation %s is alive or taken by another recoverer; skipped", record.id)
            continue
        # beating as the invocation's owner now: a recovery that outlasts the staleness is not taken over
        beat = beating(journal, record.id, stale_after_s / MISSED_BEATS) if stale_after_s > 0 else None
        try:
            reports.append(
                await _recover_one(
                    journal, executor, definitions or {}, record.id, invocation_json, _told_cancelled(record)
                )
            )
        finally:
            if beat is not None:
                beat.cancel()
    return reports


def _told_cancelled(record: InvocationRecord) -> str | None:
    """The cancellation an invocation left owing compensations was ended with (its error begins with
    it), if any: recovery then ends it `cancelled`, as its clients were told."""
    if record.state is InvocationState.COMPENSATING and record.error:
        for cancelled in (CANCELLED_BY_CALLER, CANCELLED_WHILE_PAUSED):
            if record.error.startswith(cancelled):
                return cancelled
    return None


@traced_recovery
async def _recover_one(
    journal: JournalRunner,
    executor: ToolExecutor,
    definitions: dict[str, ToolDefinition],
    invocation_id: str,
    invocation_json: dict[str, Any],
    cancelled: str | None = None,
) -> Recovered:
    report = Recovered(invocation_id)
    invocation = Invocation.from_json(invocation_json)
    unsettled: list[str] = []  # left dispatched for the next `recover` to read again
    for call in await journal.run(lambda j: j.calls(invocation_id)):
        if call.state == CallState.DISPATCHED:
            definition = definitions.get(call.tool) or executor.definition(call.tool)
            if not await _settle(journal, executor, call, definition, report):
                unsettled.append(f"{call.tool} ({call.call_id})")
    reason = "recovered: the orchestrator stopped mid-saga"
    todo = await journal.run(lambda j: _plan(j, invocation_id, reason))
    await _compensate(journal, executor, definitions, todo, invocation, report)
    state_error = "recovered after its orchestrator stopped"
    if cancelled is not None:
        state_error = f"{cancelled}; its compensations finished by recovery"
    if report.nothing_to_undo:
        state_error += f"; failed, nothing to undo: {', '.join(report.nothing_to_undo)}"
    if report.abandoned:
        state_error += (
            f"; revoked and abandoned while in flight (undone by their worker if they finish): "
            f"{', '.join(report.abandoned)}"
        )
    if report.unknown:
        state_error += f"; calls with unknown outcome: {', '.join(report.unknown)}"
    if unsettled:  # left compensating, so the next `recover` reads them again
        state_error += f"; outcome to read again by the next recover: {', '.join(unsettled)}"
    if report.failed:  # still owed: left compensating, so the next `recover` retries them
        state_error += f"; compensations still owed: {', '.join(report.failed)}"
    ended = InvocationState.FAILED if cancelled is None else InvocationState.CANCELLED
    state = InvocationState.COMPENSATING if report.failed or unsettled else ended
    await _write_end(journal, invocation_id, state, state_error)
    return report


async def settle_left(
    journal: JournalRunner,
    executor: ToolExecutor,
    invocation_id: str,
    invocation: Invocation,
    definitions: dict[str, ToolDefinition],
    *,
    compensating: bool,
) -> bool:
    """Settle what an invocation ending on an error or a cancel left open in the journal: approvals
    still pending (it ended as it paused), and calls `dispatched` its run lost track of (a journal
    write that failed as it was made, the row written all the same):
    each one's outcome journaled (one not finished is abandoned: its worker undoes it if it still
    finishes), and, when `compensating`, every success the journal has standing undone, latest
    first: those, and any whose outcome the run never heard (its write landed, its answer lost).
    Whether compensations were planned."""
    if await journal.run(lambda j: j.cancel_approvals(invocation_id)):
        log.warning("invocation %s ended as it paused: its approvals are cancelled", invocation_id)
    calls = await journal.run(lambda j: j.calls(invocation_id))
    left = [call for call in calls if call.state == CallState.DISPATCHED]
    standing = [call for call in calls if call.compensable and call.state == CallState.SUCCEEDED]
    if not left and not (compensating and standing):
        return False
    report = Recovered(invocation_id)
    for call in left:
        definition = definitions.get(call.tool) or executor.definition(call.tool)
        await _settle(journal, executor, call, definition, report)
    if left:
        log.warning("invocation %s ended with calls left in flight, settled: %s", invocation_id, report)
    if not compensating:
        return False

    def plan(j: Journal) -> list[CallRecord]:
        todo = [c for c in j.calls(invocation_id) if c.compensable and c.state == CallState.SUCCEEDED]
        todo.sort(key=lambda c: c.sequence, reverse=True)
        j.plan_compensations(invocation_id, todo, "the invocation failed")
        return todo

    todo = await journal.run(plan)
    await _compensate(journal, executor, definitions, todo, invocation, report)
    return bool(todo)


async def cancel_paused(
    journal: JournalRunner,
    executor: ToolExecutor,
    invocation_id: str,
    definitions: dict[str, ToolDefinition] | None = None,
) -> Recovered | None:
    """Cancel an invocation paused for approvals: its waiting calls never run, its successful
    compensable calls are undone latest first, and the journal says `cancelled` (`compensating` while
    a compensation is owed). Its owner meanwhile, it beats as an invocation does (the executor's
    settings), so that no recovery takes it for abandoned. None when it is not paused, or another
    process took it first, or took it over (its end is that process's to tell)."""
    if not await journal.run(lambda j: j.cancel_paused(invocation_id, owner_id())):
        return None
    settings = getattr(executor, "settings", None)
    settings = settings if isinstance(settings, Settings) else Settings.from_env()
    beat = beating(journal, invocation_id, settings.invocation_heartbeat_s)
    try:
        return await _cancel_taken(journal, executor, invocation_id, definitions)
    finally:
        beat.cancel()


async def _cancel_taken(
    journal: JournalRunner,
    executor: ToolExecutor,
    invocation_id: str,
    definitions: dict[str, ToolDefinition] | None,
) -> Recovered | None:
    record = await journal.run(lambda j: j.invocation(invocation_id))
    assert record is not None
    report = Recovered(invocation_id)
    invocation_json = record.invocation_json
    invocation = Invocation.from_json(invocation_json)
    reason = CANCELLED_WHILE_PAUSED
    todo = await journal.run(lambda j: _plan(j, invocation_id, reason))
    with continued_trace(invocation_json.get("trace_context")):
        approvals_waited(
            await journal.run(lambda j: j.approvals(invocation_id, state=ApprovalState.CANCELLED))
        )
        await _compensate(journal, executor, definitions or {}, todo, invocation, report)
    owed = f"; compensations still owed: {', '.join(report.failed)}" if report.failed else ""
    state = InvocationState.COMPENSATING if report.failed else InvocationState.CANCELLED
    return report if await _write_end(journal, invocation_id, state, reason + owed) else None


async def _write_end(journal: JournalRunner, invocation_id: str, state: InvocationState, error: str) -> bool:
    """Write how a recovery ended, only over what it claimed: the invocation still `compensating` and
    this process's (another recoverer that took it over since writes its own end); whether it did."""
    owner = owner_id()

    def write(j: Journal) -> bool:
        return j.set_invocation_state(
            invocation_id, state, error, owner=owner, expected=InvocationState.COMPENSATING
        )

    if not await journal.run(write):
        log.error(
            "invocation %s: another process took it over during its recovery; its end is theirs",
            invocation_id,
        )
        return False
    return True


async def _compensate(
    journal: JournalRunner,
    executor: ToolExecutor,
    definitions: dict[str, ToolDefinition],
    todo: list[CallRecord],
    invocation: Invocation,
    report: Recovered,
) -> None:
    for call in todo:
        definition = definitions.get(call.tool) or executor.definition(call.tool)
        label = f"{call.tool} ({call.call_id})"
        if definition is None or definition.compensation is None:
            unknown = f"no compensable tool named '{call.tool}' is known"
            await journal.run(
                partial(Journal.compensation_finished, call_row=call.id, ok=False, error=unknown)
            )
            report.failed.append(label)
            continue
        outcome = await run_compensation(executor, journal, call.id, definition, call.execution(), invocation)
        (report.failed if outcome.is_error else report.compensated).append(label)


def _plan(journal: Journal, invocation_id: str, reason: str) -> list[CallRecord]:
    """Plan a compensation for every successful compensable call not yet compensated; latest first."""
    calls = journal.calls(invocation_id)
    todo = [
        c for c in calls if c.compensable and c.state in (CallState.SUCCEEDED, CallState.COMPENSATION_FAILED)
    ]
    todo.sort(key=lambda c: c.sequence, reverse=True)
    journal.plan_compensations(invocation_id, todo, reason)
    return todo


async def _settle(
    journal: JournalRunner,
    executor: ToolExecutor,
    call: CallRecord,
    definition: ToolDefinition | None,
    report: Recovered,
) -> bool:
    """Journal what became of a call dispatched but never journaled as finished. False when its
    outcome may still be learnt (its state was unreadable, or its result had not arrived) and
    matters (the call is compensable): the call is left dispatched, for the next `recover` to read
    again. A call with nothing to undo whose outcome cannot be learnt is journaled `abandoned`."""
    label = f"{call.tool} ({call.call_id})"

    async def unknown() -> bool:
        report.unknown.append(label)
        if call.compensable:
            return False
        await journal.run(lambda j: j.set_call_state(call.id, CallState.ABANDONED))
        return True

    try:
        settled = await executor.settle(call.idempotency_key, definition)
    except redis.RedisError as exc:
        log.warning("state of %s unreadable (%s); its outcome stays unknown", label, exc)
        return await unknown()
    if settled is None:  # the executor cannot know (the call ran in a process that is gone)
        await unknown()
        return True
    state = CallState(settled.state)
    if state == CallState.ABANDONED:
        await journal.run(lambda j: j.set_call_state(call.id, CallState.ABANDONED))
        report.abandoned.append(label)
        return True
    if settled.meta is None:
        # Its worker marked it finished, but its result never arrived: what to undo is unknown.
        log.warning("%s finished but its result is not in the backend; its outcome stays unknown", label)
        return await unknown()
    if definition is not None:
        outcome = outcome_of_meta(settled.meta, definition, definition.timeout or 0.0)
    elif state == CallState.SUCCEEDED:
        outcome = outcome_of_success(settled.meta, call.tool)
    else:
        outcome = ToolOutcome(OutcomeKind.EXECUTION_ERROR, f"Tool '{call.tool}' {state}")
    worker = worker_of(settled.meta)
    outcome = dataclasses.replace(outcome, task_id=settled.task_id, pool=call.pool, worker=worker)
    await journal.run(lambda j: j.record_outcome(call.id, outcome, outcome.text))
    if outcome.is_error:
        report.nothing_to_undo.append(label)
    return True
