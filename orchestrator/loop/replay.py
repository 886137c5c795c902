"""An adopted invocation's state, rebuilt from its checkpoints: the conversation it started from, each
journaled turn's response, and what became of each call of it (journaled outcome, still running, or
never sent) — so that the loop goes on from there without asking the model again for a journaled
turn, running again a call whose outcome is journaled, or sending again a call that was sent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.approvals import ApprovalRecord
from orchestrator.loop.calls import Call, conclude
from orchestrator.loop.config import LoopConfig, Mode
from orchestrator.loop.pausing import settle_waiting
from orchestrator.loop.state import Emit, RunState, new_state
from orchestrator.memory import ChatMemory
from orchestrator.messages import AiMessage, ChatMessage, UserMessage, message_from_json, messages_from_json
from orchestrator.saga.journal import CallRecord, Checkpoint, InvocationRecord
from workers.calls.invocation import Invocation, InvocationParameters
from workers.protocol import OutcomeKind, ToolOutcome
from workers.tools import ToolDefinition

__all__ = ["Replayed", "adopted_state", "replayed_batch"]


@dataclass(frozen=True)
class Replayed:
    """One journaled turn: its AI message, the journal rows of its calls and the decisions on those
    that waited for a person, by call id."""

    turn: int
    message: AiMessage
    rows: Mapping[str, CallRecord]
    approvals: Mapping[str, ApprovalRecord] = field(default_factory=dict)


def adopted_state(
    config: LoopConfig,
    record: InvocationRecord,
    checkpoint: Checkpoint,
    calls: Sequence[CallRecord],
    approvals: Sequence[ApprovalRecord],
    mode: Mode,
    emit: Emit | None,
    memory: ChatMemory | None,
) -> tuple[RunState, list[ChatMessage], list[Replayed]]:
    """The invocation's state as it started (its history still to be set in its memory: returned
    with it) and its journaled turns, in order, to replay."""
    invocation = Invocation.from_json(record.invocation_json)
    opening = checkpoint.opening
    question = message_from_json(opening["user_message"])
    assert isinstance(question, UserMessage)
    state = new_state(
        config,
        question,
        invocation.context.memory_id,
        InvocationParameters(invocation.to_json()["parameters"]),
        mode,
        emit,
        memory=memory,
        invocation_id=record.id,
    )
    state.context = invocation.context
    state.saga.restore([], max((c.sequence for c in calls), default=0))
    by_turn: dict[int, dict[str, CallRecord]] = {}
    for call in calls:
        if call.turn is not None and call.call_id is not None:
            by_turn.setdefault(call.turn, {})[call.call_id] = call
    decided = {approval.call_id: approval for approval in approvals}
    turns = []
    for turn in sorted(checkpoint.turns):
        message = message_from_json(checkpoint.turns[turn])
        assert isinstance(message, AiMessage)
        ids = {r.id for r in message.tool_execution_requests}
        turns.append(
            Replayed(turn, message, by_turn.get(turn, {}), {i: a for i, a in decided.items() if i in ids})
        )
    return state, messages_from_json(opening["history"]), turns


def replayed_batch(config: LoopConfig, state: RunState, replayed: Replayed) -> list[Call]:
    """The calls of a journaled turn: those whose outcome is journaled concluded from it (told to the
    stream, which passes over what it told already: the run that died may have journaled an end it
    never told), those sent and not finished to be re-attached to, those a person rejected (or let
    expire) told as such, the rest (an approved one with its approved arguments) to be run."""
    batch = []
    for index, request in enumerate(replayed.message.tool_execution_requests):
        call = Call(index, request)
        row = replayed.rows.get(request.id or "")
        approval = replayed.approvals.get(request.id or "")
        tool = state.tools.get(request.name)
        if approval is not None and not settle_waiting(config, state, call, approval):
            batch.append(call)  # it did not run: what the model reads of it is settled
            continue
        if row is not None:
            call.row = row.id
            if isinstance(tool, ToolDefinition):
                call.definition, call.behavior = tool, tool.return_behavior
            if row.outcome is not None:  # ended (and perhaps undone since)
                conclude(
                    state,
                    call,
                    _journaled_outcome(row),
                    row.started_at,
                    finished_at=row.finished_at,
                )
            else:
                call.published_at = row.started_at
        batch.append(call)
    return batch


def _journaled_outcome(row: CallRecord) -> ToolOutcome:
    """A call's outcome as the journal keeps it: its kind, the text its tool returned (or its error),
    its result object."""
    assert row.outcome is not None
    kind = OutcomeKind(row.outcome)
    error_type = None if kind is OutcomeKind.SUCCESS else kind.value
    return ToolOutcome(
        kind,
        row.result or "",
        result_object=row.result_object,
        error_type=error_type,
        task_id=row.task_id,
        pool=row.pool,
        worker=row.worker,
    )
