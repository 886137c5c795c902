"""One compensation, journaled before and after it runs: what the saga and recovery both do."""

from __future__ import annotations

import asyncio

from orchestrator.executors.base import ToolExecutor
from orchestrator.saga.async_journal import JournalRunner, to_the_end
from orchestrator.telemetry import traced_compensation
from workers.calls.invocation import Invocation
from workers.protocol import ToolExecution, ToolOutcome
from workers.tools import ToolDefinition

__all__ = ["run_compensation"]


@traced_compensation
async def run_compensation(
    executor: ToolExecutor,
    journal: JournalRunner | None,
    call_row: int | None,
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
) -> ToolOutcome:
    """Undo one call on `executor`; with a journal and the call's row, the compensation is marked
    running (one more attempt) before it is sent and succeeded or failed once its outcome is known."""
    if journal is not None and call_row is not None:
        await journal.run(lambda j: j.compensation_running(call_row, None))
    outcome = await executor.compensate(definition, execution, invocation)
    if journal is not None and call_row is not None:
        error = outcome.text if outcome.is_error else None
        finished = journal.run(lambda j: j.compensation_finished(call_row, not outcome.is_error, error))
        _, cancelled = await to_the_end(finished)
        if cancelled:  # journaled all the same: a compensation done is never run again
            raise asyncio.CancelledError
    return outcome
