"""The invocations one replica runs in the background (the native API's, and the chat completions',
whose handler listens to its own), writing their events to the shared event log, and their
cancellation from any replica.

A cancel request may reach any replica: it is published on `CANCEL_CHANNEL` (and remembered under
`CANCELLED_KEY`, for an invocation that starts on a replica just after), and the process running the
invocation cancels it, as every process does (`orchestrator.loop.cancellation`). The invocation then
ends as it does when its caller cancels it: running calls are abandoned as at a deadline (their
workers undo them if they finish), what succeeded is compensated, and the journal says `cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from orchestrator.errors import ApiError, InvocationTakenOverError
from orchestrator.executors import CallEvent, observe_calls
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.models.base import FinishReason, PartialResponse
from orchestrator.result import (
    ApprovalRequested,
    CompleteResponse,
    InvocationResumed,
    ToolExecuted,
    ToolProgress,
)
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.server.answers import journaled_answer
from orchestrator.server.error_shape import invocation_failure
from orchestrator.server.events import EVENTS_TTL_S, EventLog, Retold, call_finished, tell_settled
from orchestrator.server.tenants import DEFAULT_TENANT
from orchestrator.service import AiService
from orchestrator.telemetry.metrics import SERVED_ENDED, SERVED_STARTED
from workers.protocol import CANCEL_CHANNEL, CANCELLED_KEY, COMPENSATION_PREFIX

__all__ = ["Invocations", "Run", "succeeded_event"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """One invocation to run: its id, the agent (by name and service), the question, the
    conversation and the parameters."""

    invocation_id: str
    agent: str
    service: AiService
    question: UserMessage
    memory: ChatMemory
    parameters: Mapping[str, Any] | None
    conversation_id: str | None = None
    tenant: str = DEFAULT_TENANT  # whose it is (the request's key's): told in its first event
    resuming: bool = False  # go on with a paused invocation whose calls are all decided
    adopting: bool = False  # carry on an invocation this replica adopted from a dead one
    runner: str | None = None  # the stream's runner token its adoption took (`EventLog.take`)
    # Told every event of the stream as it comes, then how the invocation ended: its CompleteResponse
    # (once the conversation is saved), or the exception it ended with (CancelledError when cancelled).
    listener: Callable[[object], None] | None = None


class Invocations:
    """This replica's running invocations, by id."""

    def __init__(self, client: aioredis.Redis, events: EventLog, journal: AsyncJournal | None = None) -> None:
        self.client = client
        self.events = events
        self.journal = journal  # read when an invocation fails: whether it had its answer first
        self.running: dict[str, asyncio.Task[None]] = {}
        self.past_grace = asyncio.Event()  # set when a drain's grace has run out
        self._letting_go: set[asyncio.Future[None]] = set()

    async def start(
        self,
        run: Run,
        finish: Callable[[], Awaitable[None]],
        on_end: Callable[[], object],
        let_go: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run the invocation as a task of this replica; `finish()` is awaited when it ends (before its
        last event), then `on_end()` is called. A run that stops without an end of its own (another
        process went on with the invocation, or its task stopped before it began) awaits `let_go()`
        instead of `finish()`. Its first event (`invocation.started`) is written before this returns:
        a client told the invocation's id finds its events at once, anywhere."""
        # A resumed one says so once this process has taken it (InvocationResumed), an adopted one
        # as it is adopted (`invocation.adopted`).
        if not run.resuming and not run.adopting:
            await self.events.add(run.invocation_id, {"type": "invocation.started", **_origin(run)})
            SERVED_STARTED.labels(run.agent, run.tenant).inc()
        finished = False

        async def finish_once() -> None:
            nonlocal finished
            finished = True
            await finish()

        task = asyncio.create_task(self._run(run, finish_once))
        self.running[run.invocation_id] = task

        def ended(_: asyncio.Task[None]) -> None:
            self.running.pop(run.invocation_id, None)
            if not finished and let_go is not None:  # however it stopped, even before it began
                self._letting_go.add(letting := asyncio.ensure_future(let_go()))
                letting.add_done_callback(self._letting_go.discard)
            on_end()

        task.add_done_callback(ended)

    async def drain(self, grace_s: float) -> None:
        """Let the running invocations finish for `grace_s`, then cancel the rest and wait while they
        compensate what they did."""
        tasks = list(self.running.values())
        if not tasks:
            return
        log.warning("draining %d invocations (%.0f s grace)", len(tasks), grace_s)
        started = time.monotonic()
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        self.past_grace.set()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        log.warning("drained in %.1f s (%d cancelled and undone)", time.monotonic() - started, len(pending))

    async def cancel(self, invocation_id: str) -> None:
        """Ask whichever replica runs the invocation to cancel it."""
        await self.client.set(CANCELLED_KEY.format(invocation_id), b"1", ex=EVENTS_TTL_S)
        await self.client.publish(CANCEL_CHANNEL, invocation_id)

    async def _tell_settled(self, invocation_id: str) -> None:
        """Before an end that cut the run short: the ends of calls settled as it stopped, from the journal."""
        if self.journal is not None:
            try:
                await tell_settled(self.journal, self.events, invocation_id)
            except Exception as exc:  # the end goes on being told
                log.warning("invocation %s: its calls' ends not told: %s", invocation_id, exc)

    async def _cancelled_before(self, invocation_id: str) -> bool:
        """Whether a cancel came before the run began; unknown while Redis does not answer, then not
        (a cancel published meanwhile still reaches the running invocation)."""
        try:
            return bool(await self.client.exists(CANCELLED_KEY.format(invocation_id)))
        except Exception as exc:
            log.warning("invocation %s: whether it was cancelled is unknown: %s", invocation_id, exc)
            return False

    async def _fenced(self, run: Run, take: bool) -> Callable[..., Awaitable[str | None]]:
        """How this run writes its events: with a runner token of its own, taking the stream from any
        earlier run when `take` (an adopting one, or a resuming one once it has claimed the invocation:
        a resume that lost the claim to another replica must not take the winner's stream; an adoption
        given its runner took it as it claimed; a fresh invocation's token is accepted until another
        run takes the stream, at no extra write); unfenced if Redis does not take the claim."""
        invocation_id, runner = run.invocation_id, run.runner or uuid.uuid4().hex
        if not take:
            return functools.partial(self.events.add, runner=runner)
        try:
            await self.events.take(invocation_id, runner)
        except Exception as exc:  # Redis away: as before fencing, every run's events are written
            log.warning("invocation %s: its events are not fenced: %s", invocation_id, exc)
            return self.events.add
        return functools.partial(self.events.add, runner=runner)

    async def _run(self, run: Run, finish: Callable[[], Awaitable[None]]) -> None:
        invocation_id = run.invocation_id
        add = await self._fenced(run, take=run.adopting and not run.runner)
        tell = run.listener or (lambda _: None)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        pending: set[asyncio.Future[Any]] = set()
        last: list[asyncio.Future[Any] | None] = [None]  # the call event written last
        tasks: dict[str, str] = {}  # each tool call's task, by call id, for its progress events
        # An adopted invocation's calls were told of up to where its first replica died: a call
        # re-attached to (or a compensation sent again) is not told queued or started twice, nor a
        # call its replay concludes again (one a failed batch never ran) told finished twice.
        told = await self.events.retold(invocation_id) if run.adopting else Retold()

        async def wrap_up() -> None:  # before the last event: the conversation, then the call events
            # saved first: the journal has the invocation ended, and a replica dying from here on
            # leaves the rest to its recoverer (`unended.py`), which adds a turn not yet saved
            try:
                await finish()
            except Exception as exc:
                log.warning("invocation %s: its conversation was not saved: %s", invocation_id, exc)
            await _settle(pending)

        def observed(event: CallEvent) -> None:  # called from the collector's thread too
            if event.call_id is not None and not event.task_name.startswith(COMPENSATION_PREFIX):
                tasks[event.call_id] = event.task_id
            payload = call_event(event)
            if payload is None:
                return
            if (
                payload["type"].endswith((".queued", ".started"))
                and (payload["type"], str(payload["call_id"])) in told.calls
            ):
                return

            def write() -> None:  # after the one before: the stream keeps the order the calls told
                before = last[0]

                async def in_turn() -> None:
                    if before is not None:
                        await asyncio.wait([before])  # how it ended is its own to report
                    try:
                        await add(invocation_id, payload)
                    except Exception as exc:  # the invocation goes on; its stream lacks this step
                        log.warning(
                            "invocation %s: event %s not written: %s", invocation_id, payload["type"], exc
                        )

                future = last[0] = asyncio.ensure_future(in_turn())
                pending.add(future)
                future.add_done_callback(pending.discard)

            loop.call_soon_threadsafe(write)

        origin = _origin(run)
        try:
            # (a resumed or adopted one reads the cancel itself, from its journaled run, and ends it there)
            if not run.resuming and not run.adopting and await self._cancelled_before(invocation_id):
                raise asyncio.CancelledError
            with observe_calls(observed):
                stream = (
                    run.service.stream_resume(invocation_id, memory=run.memory)
                    if run.resuming
                    else run.service.stream_adopted(invocation_id, memory=run.memory)
                    if run.adopting
                    else run.service.stream(
                        run.question,
                        memory=run.memory,
                        memory_id=run.conversation_id,  # what the journal and the run view name it by
                        parameters=run.parameters,
                        invocation_id=invocation_id,
                    )
                )
                # closed however this stops (cancelled while writing an event, too): the stream then
                # cancels its invocation and waits while it undoes what it did
                async with contextlib.aclosing(stream):  # type: ignore[type-var]
                    async for event in stream:
                        if not isinstance(event, CompleteResponse):
                            tell(event)
                        if isinstance(event, PartialResponse) and (text := told.text(event.text)):
                            await add(invocation_id, {"type": "text.delta", "text": text})
                        elif isinstance(event, ToolProgress):
                            task_id = None if event.request_id is None else tasks.get(event.request_id)
                            await add(invocation_id, progress_event(event, task_id))
                        elif isinstance(event, ToolExecuted):
                            await _settle(pending)  # after the call's queued and started, in order
                            ended = finished_event(event)
                            if ("tool_call.finished", str(ended["call_id"])) not in told.calls:
                                await add(invocation_id, ended)  # (an adopted run replays some)
                        elif isinstance(event, ApprovalRequested):
                            await add(invocation_id, approval_event(event))
                        elif isinstance(event, InvocationResumed):  # claimed here: its stream is this run's
                            add = await self._fenced(run, take=not run.runner)
                            decided = [a.to_json() for a in event.approvals]
                            await add(
                                invocation_id, {"type": "invocation.resumed", **origin, "approvals": decided}
                            )
                        elif isinstance(event, CompleteResponse):
                            await wrap_up()
                            ending = succeeded_event(event, time.monotonic() - started)
                            await add(invocation_id, ending)
                            SERVED_ENDED.labels(run.agent, run.tenant, ending["type"].split(".")[1]).inc()
                            tell(event)
        except asyncio.CancelledError as exc:
            await wrap_up()
            await self._tell_settled(invocation_id)
            await add(invocation_id, {"type": "invocation.cancelled", "invocation_id": invocation_id})
            SERVED_ENDED.labels(run.agent, run.tenant, "cancelled").inc()
            tell(exc)
        except InvocationTakenOverError as exc:
            # another process carries it on (this replica was taken for dead): its end and its
            # conversation are that process's; this run tells and saves nothing (its turn let go)
            log.warning("invocation %s: %s", invocation_id, exc)
            await _settle(pending)
            tell(exc)
        except Exception as exc:
            failure = exc if isinstance(exc, ApiError) else invocation_failure(exc, invocation_id)
            await wrap_up()
            answered = await journaled_answer(self.journal, invocation_id)
            if answered is not None:  # it failed after the journal had its answer: the answer stands
                await add(invocation_id, succeeded_event(answered, time.monotonic() - started))
                SERVED_ENDED.labels(run.agent, run.tenant, "succeeded").inc()
                tell(answered)
                return
            await self._tell_settled(invocation_id)
            if await add(invocation_id, {"type": "invocation.failed", "error": failure.message}) is None:
                # not its stream's end (another run took it, or told an end): its client hears that one
                tell(InvocationTakenOverError(f"invocation {invocation_id}: its stream is another run's"))
                return
            SERVED_ENDED.labels(run.agent, run.tenant, "failed").inc()
            tell(failure)


def _origin(run: Run) -> dict[str, Any]:
    """Who asked for the invocation: its first event's fields, read by whoever resumes it, and by
    every route that names it (its tenant)."""
    return {
        "invocation_id": run.invocation_id,
        "agent": run.agent,
        "conversation_id": run.conversation_id,
        "tenant": run.tenant,
    }


async def _settle(pending: set[asyncio.Future[Any]]) -> None:
    """Let the call events already observed reach the log before the invocation's last event."""
    await asyncio.sleep(0)
    with contextlib.suppress(Exception):
        await asyncio.gather(*list(pending), return_exceptions=True)


def call_event(event: CallEvent) -> dict[str, Any] | None:
    """A step the executor reported, as an event: a tool call waiting for a concurrency slot, queued or
    started (its end is told by `finished_event`, with the call's id), or any step of a compensation."""
    is_tool = not event.task_name.startswith(COMPENSATION_PREFIX)
    step = event.state if event.state in ("waiting", "queued", "started") else "finished"
    if is_tool and step == "finished":
        return None
    kind = "tool_call" if is_tool else "compensation"
    name = event.task_name.split(".", 1)[-1]
    payload: dict[str, Any] = {
        "type": f"{kind}.{step}",
        "call_id": event.call_id,
        "tool": name,
        "pool": event.pool,
        "task_id": event.task_id,
        "worker": event.worker,
    }
    if step == "finished":
        payload["outcome"] = event.state
    return payload


def progress_event(event: ToolProgress, task_id: str | None) -> dict[str, Any]:
    """A running call's progress report, as `tool_call.progress` (`task_id`: its call's task)."""
    return {
        "type": "tool_call.progress",
        "call_id": event.request_id,
        "task_id": task_id,
        "tool": event.tool_name,
        "fraction": event.fraction,
        "message": event.message,
        "data": event.data,
        "at": event.at.isoformat(),
    }


def finished_event(event: ToolExecuted) -> dict[str, Any]:
    run, request = event.execution, event.execution.request
    ids = (request.id, request.name, run.pool, run.worker, run.task_id, run.status, run.duration_s)
    return call_finished(*ids, run.result_object, run.result)


def approval_event(event: ApprovalRequested) -> dict[str, Any]:
    """The invocation paused: the calls waiting for a person, as `approval.requested`."""
    return {
        "type": "approval.requested",
        "invocation_id": event.invocation_id,
        "approvals": [a.to_json() for a in event.approvals],
    }


def succeeded_event(event: CompleteResponse, elapsed_s: float) -> dict[str, Any]:
    """The invocation's end (`invocation.succeeded`), or its pause (`invocation.paused`, not the last
    event: the stream goes on when the invocation is resumed, on any replica)."""
    result = event.result
    usage = result.token_usage
    paused = result.finish_reason is FinishReason.APPROVAL_REQUIRED
    return {
        "type": "invocation.paused" if paused else "invocation.succeeded",
        "content": result.content,
        "finish_reason": None if result.finish_reason is None else str(result.finish_reason).lower(),
        "usage": None
        if usage is None
        else {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        "elapsed_ms": round(elapsed_s * 1000, 1),
        **({"budget_exceeded": result.budget_exceeded} if result.budget_exceeded else {}),
    }
