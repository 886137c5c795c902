"""The compensation coordinator: undo the successful calls of an invocation when one of them fails.

The saga lives for the whole invocation. Every call is written to the journal before it is
dispatched (intent) and again when its outcome is known; successful calls of compensable tools are
kept in request order. When a batch has a failure — or the invocation ends abnormally — their
compensations run latest first, one at a time, each on the tool's pool (or in-process with
`LocalExecutor`) with its own deadline, retries and the idempotency key of the call it undoes. A
compensation that keeps failing is recorded and the rest go on; the record is then cleared, so
nothing is compensated twice. An invocation that still owes a compensation when it ends (one failed,
or never finished) never ends `succeeded`: it is left `compensating`, its standing calls marked
`kept`, so `toolfleet recover` retries exactly what is owed once its heartbeat is stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import InvocationTakenOverError
from orchestrator.executors.base import ToolExecutor, idempotency_key
from orchestrator.saga._journal_checkpoints import turn_rows, turn_write
from orchestrator.saga._journal_writes import Intent, intent_write, outcome_write, state_write
from orchestrator.saga.async_journal import JournalRunner, to_the_end
from orchestrator.saga.compensation import run_compensation
from orchestrator.saga.journal import Journal, owner_id
from orchestrator.saga.recovery import settle_left
from orchestrator.saga.states import CallState, CompensationState, InvocationState
from workers.calls.invocation import Invocation
from workers.protocol import ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition

__all__ = ["ROLLED_BACK", "Saga", "SagaStep", "rollback_reason", "rolled_back_text"]

log = logging.getLogger(__name__)

ROLLED_BACK = "Tool '{tool}' was executed successfully but was rolled back due to failure of tool '{failed}'"


def rolled_back_text(tool: str, failed: str) -> str:
    return ROLLED_BACK.format(tool=tool, failed=failed)


def rollback_reason(tool: str, call_id: str | None) -> str:
    """The journaled reason of the compensations a failed call set off: it names that call."""
    return f"tool '{tool}' call {call_id or '-'} failed"


@dataclass
class SagaStep:
    """A successful call of a compensable tool, waiting to be undone if the saga fails."""

    definition: ToolDefinition
    execution: ToolExecution
    call_row: int | None


class Saga:
    """The compensations owed by one invocation."""

    def __init__(
        self, executor: ToolExecutor, journal: JournalRunner | None, invocation_id: str, *, keep: bool = True
    ) -> None:
        self.executor = executor
        self.compensating = keep
        self.journal = journal
        self.invocation_id = invocation_id
        self.steps: list[SagaStep] = []
        self._sequence = 0
        self.turn: int | None = None  # the model turn whose calls are being journaled, from 1
        self._planned = False  # compensations were planned in the journal: read them at the end
        # Passed before a call's intent is written, so before it is dispatched (`Beat.fence`): a
        # process whose invocation was taken over while it stood still dispatches nothing more.
        self.fence: Callable[[], Awaitable[None]] | None = None

    async def intent(
        self, request: ToolExecutionRequest, definition: ToolDefinition, invocation: Invocation
    ) -> int | None:
        """Write the call to the journal before it is dispatched."""
        self._sequence += 1
        if self.journal is None:
            return None
        if self.fence is not None:
            await self.fence()
        sequence, turn = self._sequence, self.turn
        key = idempotency_key(invocation, request)
        intent = Intent(sequence, request, definition.pool, definition.compensation is not None, key)
        written = await self.journal.execute(intent_write(self.invocation_id, intent, turn))
        return int(written.rows[0][0])

    async def checkpoint(
        self,
        message: dict[str, Any],
        calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition]],
        invocation: Invocation,
    ) -> list[int]:
        """Write the current turn's response (the AI message, JSON) and the intents of `calls`, those
        of it about to be published, in one transaction before any is; their rows, in order."""
        if self.journal is None or self.turn is None:
            return []
        if self.fence is not None:
            await self.fence()
        intents = []
        for request, definition in calls:
            self._sequence += 1
            key = idempotency_key(invocation, request)
            intents.append(
                Intent(self._sequence, request, definition.pool, definition.compensation is not None, key)
            )
        turn = self.turn
        if intents and self.journal.backend == "postgresql":  # one statement, in autocommit
            written = await self.journal.execute(turn_write(self.invocation_id, turn, message, intents))
            return turn_rows(intents, written.rows)
        return await self.journal.run(
            lambda journal: journal.record_turn(self.invocation_id, turn, message, intents)
        )

    async def outcome(
        self,
        call_row: int | None,
        outcome: ToolOutcome,
        text: str,
        *,
        abandoned: bool = False,
        progress: dict[str, Any] | None = None,
    ) -> None:
        """Write a call's outcome to the journal as soon as it is known; `abandoned`: the call was
        given up on at its deadline (if it still completes, its worker undoes it); `progress`: the
        last progress its tool reported."""
        if self.journal is None or call_row is None:
            return
        abandon = CallState.ABANDONED if abandoned else None
        writing = self.journal.execute(outcome_write(call_row, outcome, text, progress, state=abandon))
        _, cancelled = await to_the_end(writing)
        if cancelled:  # the outcome is journaled all the same: the saga reads it to undo the call
            raise asyncio.CancelledError

    async def abandon(self, call_rows: Sequence[int]) -> None:
        """Mark calls given up in flight (their invocation cancelled) abandoned, so that no row is left
        `dispatched`: a worker that still finishes one undoes it, as after a deadline. A row whose
        outcome was journaled meanwhile keeps it (a success is undone with the invocation's end)."""
        if self.journal is None or not call_rows:
            return

        def write(journal: Journal) -> None:
            journal.abandon_in_flight(call_rows)

        await to_the_end(self.journal.run(write))

    async def settle_left(self, invocation: Invocation, definitions: dict[str, ToolDefinition]) -> None:
        """As the invocation ends on an error: settle the calls the journal still has in flight though
        this run lost track of them (`recovery.settle_left`), undoing those that succeeded."""
        if self.journal is None:
            return
        planned = await settle_left(
            self.journal,
            self.executor,
            self.invocation_id,
            invocation,
            definitions,
            compensating=self.compensating,
        )
        self._planned = self._planned or planned

    def restore(self, steps: list[SagaStep], sequence: int) -> None:
        """Go on with a resumed invocation's saga: the steps it owes and the calls journaled so far."""
        self.steps = list(steps)
        self._sequence = sequence

    def keep(self, definition: ToolDefinition, execution: ToolExecution, call_row: int | None) -> None:
        """Remember a successful call for compensation (called in request order after each batch)."""
        if self.compensating and definition.compensation is not None:
            self.steps.append(SagaStep(definition, execution, call_row))

    async def compensate_all(self, invocation: Invocation, reason: str) -> list[SagaStep]:
        """Undo every recorded success, latest first, one at a time; returns those undone."""
        steps, self.steps = list(reversed(self.steps)), []
        if not steps:
            return []
        if self.journal is not None:

            def plan(journal: Journal) -> None:
                rows = {c.id: c for c in journal.calls(self.invocation_id)}
                journal.set_invocation_state(
                    self.invocation_id, InvocationState.COMPENSATING, owner=owner_id()
                )
                journal.plan_compensations(
                    self.invocation_id, [rows[s.call_row] for s in steps if s.call_row in rows], reason
                )

            try:
                await self.journal.run(plan)
            except BaseException:  # nothing planned (the database away): still owed, to undo later
                self.steps = list(reversed(steps))
                raise
            self._planned = True
        undone: list[SagaStep] = []
        for step in steps:
            request = step.execution.request
            outcome = await run_compensation(
                self.executor, self.journal, step.call_row, step.definition, step.execution, invocation
            )
            if outcome.is_error:
                log.error(
                    "compensation of %s call %s failed (%s): %s; see `toolfleet sagas --failed`",
                    request.name,
                    request.id,
                    outcome.kind.value,
                    outcome.text,
                )
            else:
                log.info("compensated %s call %s (%s)", request.name, request.id, reason)
                undone.append(step)
        return undone

    async def end(
        self, state: InvocationState | str, error: str | None = None, *, answer: str | None = None
    ) -> None:
        """Write the invocation's final state (`succeeded` or `failed`) and the model's final `answer`,
        unless it owes compensations, in one transaction.

        Owed are those the journal does not show succeeded. The invocation is then left
        `compensating` with what is owed in its error, and the successful calls still recorded —
        those that stand — are marked `kept`, so recovery retries only what is owed.
        """
        if self.journal is None:
            return
        if self._planned:  # what is owed decides
            await self.journal.run(lambda journal: self._end(journal, state, error, answer))
            return
        final = InvocationState(state)
        end = state_write(self.invocation_id, final, error, answer, owner_id(), None)
        if not (await self.journal.execute(end)).rowcount:  # one conditional update
            await self.journal.run(lambda journal: self._taken_over(journal, final))

    def _end(
        self, journal: Journal, state: InvocationState | str, error: str | None, answer: str | None
    ) -> None:
        owed = (
            [c for c in journal.compensations(self.invocation_id) if c.state != CompensationState.SUCCEEDED]
            if self._planned
            else []
        )
        if not owed:
            if not journal.set_invocation_state(
                self.invocation_id, state, error, final_answer=answer, owner=owner_id()
            ):
                self._taken_over(journal, state)
            return
        calls = {c.id: c for c in journal.calls(self.invocation_id)}
        for step in self.steps:
            if step.call_row is not None:
                journal.set_call_state(step.call_row, CallState.KEPT)
        listed = "; ".join(
            f"{c.tool} ({calls[c.tool_call_id].call_id if c.tool_call_id in calls else '?'}) "
            f"{c.state}: {c.error or 'not finished'}"
            for c in owed
        )
        text = f"{len(owed)} compensation(s) owed, `toolfleet recover` retries them: {listed}"
        log.error("invocation %s ended with %s", self.invocation_id, text)
        if not journal.set_invocation_state(
            self.invocation_id,
            InvocationState.COMPENSATING,
            f"{error}; {text}" if error else text,
            final_answer=answer,
            owner=owner_id(),
        ):
            self._taken_over(journal, InvocationState.COMPENSATING)

    def _taken_over(self, journal: Journal, state: InvocationState | str) -> None:
        """The invocation's end was not written: another process (a recovery) owns it now."""
        record = journal.invocation(self.invocation_id)
        log.error(
            "invocation %s ended %s here, but %s took it over (its journal says %s): its end is not written",
            self.invocation_id,
            InvocationState(state).value,
            record.owner if record is not None else "nobody",
            record.state.value if record is not None else "nothing",
        )
        owner = record.owner if record is not None else "another process"
        raise InvocationTakenOverError(
            f"invocation {self.invocation_id} was taken over by {owner}: its end is that process's"
        )
