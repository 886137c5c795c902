"""One dispatch of a task: publish it on its pool's queue (that of a build serving its tool's version,
`_versions`), await its final state under the call's deadline, and abandon it (revoke, terminate where
the pool can) when the deadline passes first."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from orchestrator.executors._call_events import CallEvent, call_notifier
from orchestrator.executors._collector import FINAL_STATES, ResultCollector
from orchestrator.executors._outcomes import failed_outcome, outcome_of_meta, timed_out_outcome, worker_of
from orchestrator.executors._progress import meta_listener, progress_listener
from orchestrator.executors.celery._admission import Admission
from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._publish import Sender, task_message
from orchestrator.executors.celery._versions import Routes
from workers import OutcomeKind, ToolDefinition, ToolOutcome
from workers.calls.retry import call_state_ttl_s
from workers.protocol import (
    CALL_ABANDONED,
    CALL_CANCELLED_KEY,
    META_PREFIX,
    CallTask,
    CompensationTask,
    call_state_key,
)
from workers.settings import Settings

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

ABANDON_RETRY_S = 15.0  # how long a call given up on is tried to be marked abandoned while Redis is away
ABANDON_RETRY_EVERY_S = 0.5

LATE_RESULT_GRACE_S = 5.0  # how long a result a worker marked finished may take to reach the backend


class Dispatcher:
    """Publishes tasks through one Celery app and awaits them on the shared `ResultCollector`."""

    def __init__(self, settings: Settings, publisher: Celery, client: redis.Redis, pools: Pools) -> None:
        self.settings = settings
        self.publisher = publisher
        self.sender = Sender(publisher, before=lambda: self.collector.subscribe_deferred())
        self.redis = client
        self.pools = pools
        self.admission = Admission(client, settings.redis_url, pools)  # fleet-wide slots and rate limits
        self.routes = Routes(pools, settings.build_id)  # which of a pool's queues serves a call's version

    @property
    def collector(self) -> ResultCollector:
        return ResultCollector.shared(
            self.settings.redis_url,
            check_interval_s=self.settings.liveness_check_interval_s,
            heartbeat_ttl_s=self.settings.heartbeat_ttl_s,
        )

    async def dispatch(
        self,
        task_name: str,
        task_id: str,
        envelope: CallTask | CompensationTask,
        definition: ToolDefinition,
        deadline: float,
        timeout_s: float,
        *,
        key: str,
        on_call: Callable[[CallEvent], None] | None,
        abandon_atomically: bool = False,
        publish: bool = True,
    ) -> ToolOutcome:
        """Run one task to its outcome: `NO_WORKER` at once for a pool with no live worker (of the tool's
        version, `_versions`); a call once it is admitted (its fleet-wide slots held until its outcome,
        its rate limit's turn come; told so instead if its deadline would pass first); then `_dispatch`."""
        undoing = isinstance(envelope, CompensationTask)
        queue = self.routes.queue(definition, undoing=undoing) if publish else definition.pool
        if not isinstance(queue, str):
            return queue  # no call waits in line for a pool nobody serves
        admitted = None
        if publish and isinstance(envelope, CallTask):
            admitted = await self.admission.enter(
                task_id, task_name, envelope, definition, deadline, timeout_s, on_call
            )
            if admitted is not None and admitted.refused is not None:
                return admitted.told(admitted.refused)
        try:
            outcome = await self._dispatch(
                task_name,
                task_id,
                envelope,
                definition,
                deadline,
                timeout_s,
                key=key,
                on_call=on_call,
                abandon_atomically=abandon_atomically,
                publish=publish,
                queue=queue,
            )
        finally:
            if admitted is not None and admitted.holds:
                self.admission.slots.release(task_id)
        return outcome if admitted is None else admitted.told(outcome)

    async def _dispatch(
        self,
        task_name: str,
        task_id: str,
        envelope: CallTask | CompensationTask,
        definition: ToolDefinition,
        deadline: float,
        timeout_s: float,
        *,
        key: str,
        on_call: Callable[[CallEvent], None] | None,
        abandon_atomically: bool = False,
        publish: bool = True,
        queue: str,
    ) -> ToolOutcome:
        """Run one task to its outcome once admitted (`dispatch`), published to `queue` (of its pool):
        `BrokerUnavailable` when it cannot be published, `TIMED_OUT` (abandoned) at the deadline.

        With `abandon_atomically`, the call's state in Redis decides between abandoned and finished, so
        a call its worker completes at the deadline is collected rather than abandoned. Without
        `publish`, the task is one an orchestrator that died published: it is watched, not sent."""
        pool = definition.pool
        # A compensation is never revoked: its task id is its call's, every retry (a recovery's too)
        # sends that id again, and workers discard a revoked id for good; it runs at most once anyway.
        undoing = isinstance(envelope, CompensationTask)
        # A call its worker undoes if it finishes is never killed midway when given up (killed after
        # its effect and before it could tell, nothing would undo it); others are, on prefork pools.
        terminate = False if abandon_atomically else None
        collector = self.collector
        request = envelope.request if isinstance(envelope, CallTask) else envelope.execution.request
        notify = call_notifier(on_call, task_id, task_name, pool, request.arguments, request.id)
        redispatch = None
        if definition.options.idempotent and isinstance(envelope, CallTask):
            # A worker lost mid-call: the same message again, for another worker of the pool.
            def redispatch() -> None:
                self.publish(
                    task_name, task_id, envelope, pool, deadline - time.monotonic(), key=key, queue=queue
                )

        is_call = isinstance(envelope, CallTask)
        future = collector.watch(
            task_id,
            queue,  # a queued call ends `no_worker` once no worker of its build (or pool) is left
            (lambda worker: notify("started", worker)) if notify else None,
            redispatch=redispatch,
            on_progress=meta_listener(progress_listener()) if is_call else None,
            heartbeat_timeout_s=definition.options.heartbeat_timeout_s if is_call else None,
            deferred=publish,  # subscribed to with the others published in the same loop turn
        )
        if notify and publish:
            notify("queued", None)
        waiting = asyncio.wrap_future(future)
        try:
            if publish:  # cancelled meanwhile, the call is sent all the same, and abandoned below
                remaining = deadline - time.monotonic()
                refused = await self._publish_or_why_not(
                    task_name, task_id, envelope, pool, remaining, key, queue
                )
                if refused is not None:
                    collector.forget(task_id)
                    return failed_outcome(
                        OutcomeKind.EXECUTION_ERROR,
                        f"Tool '{definition.name}' could not be dispatched: "
                        f"the broker is unreachable ({refused})",
                        "BrokerUnavailable",
                    )
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                meta = await asyncio.shield(waiting)  # a timeout leaves the result to come
        except TimeoutError:
            if abandon_atomically and not await self.claim_abandoned(task_id):
                # The worker finished first: the call succeeded and its result is on its way.
                late = await self._late_result(waiting, task_id)
                if late is None:
                    log.warning("%s finished at its deadline; its result never arrived", task_id)
                    if notify:
                        notify(OutcomeKind.TIMED_OUT.value, None)
                    return timed_out_outcome(definition, timeout_s, task_id, pool)
                meta = late
            else:
                collector.forget(task_id)
                if not undoing:
                    self.abandon(task_id, pool, terminate=terminate)
                if notify:
                    notify(OutcomeKind.TIMED_OUT.value, None)
                return timed_out_outcome(definition, timeout_s, task_id, pool)
        except asyncio.CancelledError:
            # The invocation (or this call alone) was cancelled: the call is abandoned as at a
            # deadline, so its worker undoes it if it still finishes. Shielded: a second cancel must
            # not leave the mark unwritten.
            if abandon_atomically and not await asyncio.shield(self.claim_abandoned(task_id)):
                # Its worker finished first: the call succeeded. Its outcome is returned, so that the
                # invocation undoes it with its other successes; nothing else would.
                late = await asyncio.shield(self._late_result(waiting, task_id))
                if late is not None:
                    outcome = outcome_of_meta(late, definition, timeout_s)
                    if notify:
                        notify(outcome.kind.value, worker_of(late))
                    return dataclasses.replace(outcome, task_id=task_id, pool=pool, worker=worker_of(late))
                log.error(
                    "%s finished as it was cancelled, but its result never arrived: not undone", task_id
                )
            collector.forget(task_id)
            if not undoing:
                self.abandon(task_id, pool, terminate=terminate)
            if notify:
                notify("cancelled", None)
            raise
        outcome = outcome_of_meta(meta, definition, timeout_s)
        # Declared lost, or its pool left without a worker as it waited: its worker may have marked it
        # finished meanwhile (the result is on its way), else it is given up as at a deadline.
        lost = outcome.kind in (OutcomeKind.WORKER_LOST, OutcomeKind.NO_WORKER)
        if lost and abandon_atomically and not await self.claim_abandoned(task_id):
            collector.forget(task_id)
            stored = await self.stored_result(task_id)
            if stored is not None:
                meta, outcome = stored, outcome_of_meta(stored, definition, timeout_s)
        elif outcome.kind is OutcomeKind.NO_WORKER and not undoing:
            # nobody known to have taken it, its message may yet be taken (a worker that comes back):
            # revoked, so that it is discarded, or (claimed abandoned above) undone by its worker
            self.abandon(task_id, pool, terminate=terminate)
        if notify:
            notify(outcome.kind.value, worker_of(meta))
        return dataclasses.replace(outcome, task_id=task_id, pool=pool, worker=worker_of(meta))

    async def _publish_or_why_not(
        self,
        task_name: str,
        task_id: str,
        envelope: CallTask | CompensationTask,
        pool: str,
        remaining_s: float,
        key: str,
        queue: str,
    ) -> str | None:
        """Publish the task with the others of this loop turn (`_publish.Sender`, which also holds a
        refusal for the calls that follow); or why the broker refused it."""
        message = task_message(
            self.settings, self.pools, task_name, task_id, envelope, pool, remaining_s, key=key, queue=queue
        )
        try:
            await asyncio.shield(self.sender.send_soon(message))
        except OperationalError as exc:
            return str(exc)
        return None

    def publish(
        self,
        task_name: str,
        task_id: str,
        envelope: CallTask | CompensationTask,
        pool: str,
        remaining_s: float,
        *,
        key: str,
        queue: str | None = None,
    ) -> None:
        """Send the task to `queue` (of `pool`; by default the pool's own) now (`_publish.task_message`)."""
        message = task_message(
            self.settings, self.pools, task_name, task_id, envelope, pool, remaining_s, key=key, queue=queue
        )
        self.sender.send(message)

    def abandon(self, task_id: str, pool: str | None = None, *, terminate: bool | None = None) -> None:
        """Give up a call (past its deadline, or cancelled): revoke it, so it is discarded if still queued,
        terminate it where the worker's pool can (prefork) unless told not to, and tell its tool
        (`flag_cancelled`), so a cooperative tool stops at its next report or heartbeat."""
        self.flag_cancelled(task_id)
        if terminate is None:
            terminate = pool is not None and self.pools.kind(pool) == "prefork"
        try:
            self.publisher.control.revoke(task_id, terminate=terminate, signal="SIGKILL")
        except OperationalError as exc:
            log.warning("could not revoke %s: %s", task_id, exc)

    async def _late_result(
        self, waiting: asyncio.Future[dict[str, Any]], task_id: str
    ) -> dict[str, Any] | None:
        """The final state of a call its worker marked finished just as its deadline passed: heard by
        the collector within `LATE_RESULT_GRACE_S`, else read from the result backend (the collector
        may have missed it); None if it never arrives."""
        try:
            return await asyncio.wait_for(waiting, LATE_RESULT_GRACE_S)
        except TimeoutError:
            self.collector.forget(task_id)
            return await self.stored_result(task_id)

    def stored_state(self, task_id: str) -> dict[str, Any] | None:
        """The state the result backend holds for a task, if any (one read; Redis errors raised)."""
        raw = self.redis.get(META_PREFIX + task_id)
        if not raw:
            return None
        meta: dict[str, Any] = json.loads(raw)
        return meta

    async def stored_result(self, task_id: str, *, raise_errors: bool = False) -> dict[str, Any] | None:
        """The final state of a task, read from the result backend for up to `LATE_RESULT_GRACE_S`;
        None if none arrived. A Redis error counts as no state yet, or is raised with `raise_errors`."""
        deadline = time.monotonic() + LATE_RESULT_GRACE_S
        while True:
            try:
                meta = self.stored_state(task_id)
            except redis.RedisError:
                if raise_errors:
                    raise
                meta = None
            if meta is not None and meta.get("status") in FINAL_STATES:
                return meta
            if time.monotonic() >= deadline:
                log.warning("%s was marked finished but its result never arrived", task_id)
                return None
            await asyncio.sleep(0.05)

    def flag_cancelled(self, task_id: str) -> None:
        """Tell the running call it was cancelled (`CALL_CANCELLED_KEY`): a tool with a progress
        reporter raises `ToolCancelled` at its next report or heartbeat."""
        try:
            self.redis.set(CALL_CANCELLED_KEY.format(task_id), b"1", ex=call_state_ttl_s(self.settings))
        except redis.RedisError as exc:
            log.warning("could not flag %s cancelled: %s", task_id, exc)

    async def claim_abandoned(self, task_id: str) -> bool:
        """`mark_abandoned`, tried again while Redis does not answer (a restart), for up to
        `ABANDON_RETRY_S`, on a thread: a call abandoned during an outage is still undone by its
        worker if it finishes, where a mark never written would leave its side effect in place."""
        deadline = time.monotonic() + ABANDON_RETRY_S
        while True:
            try:
                return await asyncio.to_thread(self.mark_abandoned, task_id, raise_errors=True)
            except redis.RedisError as exc:
                if time.monotonic() >= deadline:
                    log.warning(
                        "could not mark %s abandoned (%s); it will not be compensated if it finishes",
                        task_id,
                        exc,
                    )
                    return True
            await asyncio.sleep(ABANDON_RETRY_EVERY_S)

    def mark_abandoned(self, task_id: str, *, raise_errors: bool = False) -> bool:
        """Claim a call as abandoned, unless its worker already marked it finished (one `SET NX`).

        A Redis error counts as claimed (the call will not be compensated if it finishes), or is
        raised with `raise_errors`."""
        try:
            return bool(
                self.redis.set(
                    call_state_key(task_id), CALL_ABANDONED, nx=True, ex=call_state_ttl_s(self.settings)
                )
            )
        except redis.RedisError as exc:
            if raise_errors:
                raise
            log.warning(
                "could not mark %s abandoned (%s); it will not be compensated if it finishes", task_id, exc
            )
            return True
