"""`CeleryExecutor`: every tool call a Celery task on its pool's queue, awaited under a deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from orchestrator.executors._attempts import Attempts
from orchestrator.executors._call_events import CallEvent, call_notifier
from orchestrator.executors._collector import FINAL_STATES, ResultCollector
from orchestrator.executors._compensation_state import reopen, settle_unfinished
from orchestrator.executors._outcomes import (
    failed_outcome,
    no_worker_outcome,
    outcome_of_meta,
    seconds_text,
    worker_of,
)
from orchestrator.executors.base import execute_batch, idempotency_key
from orchestrator.saga._inflight import Settled, settle
from workers import (
    OutcomeKind,
    ToolDefinition,
    ToolExecution,
    ToolExecutionRequest,
    ToolOutcome,
    ToolRegistry,
)
from workers._redis_errors import mapped_redis_errors
from workers.app import make_publisher
from workers.calls.invocation import Invocation
from workers.calls.retry import backoff_s, compensation_timeout_s
from workers.calls.runner import utf8_size
from workers.protocol import (
    CALL_ABANDONED,
    IDEMPOTENCY_HEADER,
    META_PREFIX,
    CallTask,
    CompensationTask,
    call_state_key,
    call_task_id,
    compensation_task_id,
    compensation_task_name,
    tool_task_name,
)
from workers.runtime.catalog import Catalog, WorkerEntry
from workers.settings import Settings

__all__ = ["CallEvent", "CeleryExecutor"]

log = logging.getLogger(__name__)

_POOL_ALIVE_CACHE_S = 1.0
_CATALOG_CACHE_S = 2.0
_CATALOG_RECHECK_S = 0.2
_LATE_RESULT_GRACE_S = 5.0
_OUTAGE_HOLD_S = 1.0
_ATTEMPTS = Attempts()  # process-wide: every executor of this process counts a key's dispatches
_COMPENSATION_WAIT_MAX_S = 1.0  # how often a compensation waiting for a worker or the broker looks again


class CeleryExecutor:
    """Runs each tool call as the Celery task `tool.<name>` on the queue of the tool's pool.

    Tools come from local objects (`tools=`) or from the live catalog that workers publish, so an
    orchestrator can run with no tool code installed. Each call has a deadline (the tool's
    `timeout`, else `Settings.default_tool_timeout_s`); at the deadline the call is abandoned:
    revoked, terminated on pools that can terminate, and published with `expires` so it never
    starts late. A pool with no live worker fails at once instead of waiting out the deadline.
    """

    def __init__(
        self,
        app: Celery | None = None,
        *,
        settings: Settings | None = None,
        tools: Iterable[object] = (),
        on_call: Callable[[CallEvent], None] | None = None,
    ) -> None:
        settings = settings or Settings.from_env()
        if app is not None:
            backend = str(app.conf.result_backend or "")
            settings = dataclasses.replace(
                settings,
                broker_url=str(app.conf.broker_url or settings.broker_url),
                redis_url=backend
                if backend.startswith(("redis://", "rediss://", "unix://"))
                else settings.redis_url,
            )
        self.settings = settings
        self.registry = ToolRegistry(tools)
        self.on_call = on_call
        self._publisher = make_publisher(settings)
        self._redis = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        self.catalog = Catalog(self._redis)
        self._pool_alive: dict[str, float] = {}
        self._pool_kinds: dict[str, str] = {}
        self._catalog_read_at = -1e9
        self._catalog_down_until = 0.0
        self._broker_down_until = 0.0
        self._broker_error = ""
        self._catalog_workers: list[WorkerEntry] = []

    @property
    def _collector(self) -> ResultCollector:
        return ResultCollector.shared(
            self.settings.redis_url,
            check_interval_s=self.settings.liveness_check_interval_s,
            heartbeat_ttl_s=self.settings.heartbeat_ttl_s,
        )

    def _live_catalog(self, max_age_s: float = _CATALOG_CACHE_S) -> list[WorkerEntry]:
        """The catalog's workers, read again when the copy is older than `max_age_s`."""
        now = time.monotonic()
        if now - self._catalog_read_at >= max_age_s:
            self._catalog_workers = self.catalog.workers()
            self._catalog_read_at = now
        return self._catalog_workers

    @property
    def max_fanout(self) -> int:
        """How many calls of one response may be in flight at once (`Settings.max_fanout`)."""
        return self.settings.max_fanout

    def definition(self, name: str) -> ToolDefinition | None:
        """A local tool of that name, else one a live worker advertises."""
        local = self.registry.get(name)
        if local is not None:
            return local
        # A name the cached copy does not know may belong to a worker that just started: look again.
        for max_age_s in (_CATALOG_CACHE_S, _CATALOG_RECHECK_S):
            for entry in self._live_catalog(max_age_s):
                for item in entry.tools:
                    if item.specification.name == name:
                        return item.definition()
        return None

    async def execute_batch(
        self, calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition | None]], invocation: Invocation
    ) -> list[ToolOutcome]:
        """All calls of one response at once, capped at `Settings.max_fanout` in flight."""
        return await execute_batch(self, calls, invocation, max_fanout=self.settings.max_fanout)

    def catalog_definitions(self) -> list[ToolDefinition]:
        """Every tool live workers serve, as definitions this executor can dispatch.

        Raises `RedisUnavailableError` (naming `TOOLFLEET_REDIS_URL`) when the catalog cannot be read.
        """
        return [item.definition() for item in self.catalog.tools()]

    async def execute(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition | None = None,
        invocation: Invocation | None = None,
        *,
        compensate_if_late: bool = False,
    ) -> ToolOutcome:
        """Dispatch one call and wait for its outcome until its deadline; a tool's failure is an outcome.

        With `compensate_if_late`, a call abandoned at its deadline that completes afterwards is undone
        by its worker: the call's state in Redis decides atomically between collected and abandoned.
        Each dispatch's task id follows from the call's idempotency key and attempt (`call_task_id`).
        """
        definition = definition or self.definition(request.name)
        invocation = invocation or Invocation()
        if definition is None:
            return failed_outcome(
                OutcomeKind.EXECUTION_ERROR, f"Unknown tool '{request.name}'", "UnknownToolError"
            )
        size = utf8_size(request.arguments)
        if size > self.settings.max_argument_bytes:
            return failed_outcome(
                OutcomeKind.ARGUMENTS_ERROR,
                f"Arguments of tool '{definition.name}' are {size} bytes, over the limit of "
                f"{self.settings.max_argument_bytes} bytes (TOOLFLEET_MAX_ARGUMENT_BYTES)",
                "ArgumentsTooLarge",
            )
        timeout_s = definition.timeout or self.settings.default_tool_timeout_s
        deadline = time.monotonic() + timeout_s
        key = idempotency_key(invocation, request)
        attempts = 1 + (definition.options.retries if definition.options.idempotent else 0)
        outcome = failed_outcome(OutcomeKind.EXECUTION_ERROR, "not run", "NotRun")
        late = compensate_if_late and definition.compensation is not None
        for attempt in range(1, attempts + 1):
            outcome = await self._dispatch(
                tool_task_name(definition.name),
                call_task_id(key, _ATTEMPTS.next(key)),
                CallTask(request, invocation, compensate_if_late=late, attempt=attempt),
                definition,
                deadline,
                timeout_s,
                key=key,
                abandon_atomically=late,
            )
            if outcome.kind is not OutcomeKind.WORKER_LOST or time.monotonic() >= deadline:
                break
            log.info(
                "tool %s call %s: worker lost; dispatching again (idempotent)", definition.name, request.id
            )
        return outcome

    async def compensate(
        self, definition: ToolDefinition, execution: ToolExecution, invocation: Invocation
    ) -> ToolOutcome:
        """Undo one successful call as the task `compensate.<tool>` on the tool's pool.

        The task id is derived from the call's idempotency key, and the worker runs a compensation at
        most once per key, so dispatching it again (after a lost worker, or from `toolfleet recover`)
        never undoes a call twice. Retries with backoff happen on the worker, within the deadline. A
        pool with no live worker, or a broker out of reach, is waited for within that deadline too: after
        a Redis restart the catalog is empty until the workers beat again.

        A dispatch that ends without a collected result leaves the compensation's state in Redis to
        decide (`_compensation_state.settle_unfinished`): a copy that ran is a success, one running is
        awaited, and one that never started is marked abandoned so that no queued copy runs it after
        it is recorded failed.
        """
        key = idempotency_key(invocation, execution.request)
        timeout_s = compensation_timeout_s(definition, self.settings)
        deadline = time.monotonic() + timeout_s
        reopen(self._redis, key)
        outcome = await self._compensate_until(definition, execution, invocation, key, deadline, timeout_s)
        if not outcome.is_error:
            return outcome
        hold_s = (definition.timeout or self.settings.default_tool_timeout_s) + 30  # a worker's lock
        return await settle_unfinished(self._redis, key, outcome, hold_s)

    async def _compensate_until(
        self,
        definition: ToolDefinition,
        execution: ToolExecution,
        invocation: Invocation,
        key: str,
        deadline: float,
        timeout_s: float,
    ) -> ToolOutcome:
        lost = waits = 0
        while True:
            outcome = await self._dispatch(
                compensation_task_name(definition.name),
                compensation_task_id(key),
                CompensationTask(execution, invocation, key),
                definition,
                deadline,
                timeout_s,
                key=key,
            )
            if outcome.kind is OutcomeKind.WORKER_LOST and lost < self.settings.compensation_retries:
                lost += 1
                if time.monotonic() < deadline:
                    log.info(
                        "compensation of %s call %s: worker lost; dispatching again", definition.name, key
                    )
                    continue
            if outcome.kind is not OutcomeKind.NO_WORKER and outcome.error_type != "BrokerUnavailable":
                return outcome
            # No live worker (the catalog may be empty after a Redis restart until workers beat again)
            # or no broker: wait and try again, within the compensation's own deadline.
            pause = backoff_s(waits, self.settings.retry_backoff_s, _COMPENSATION_WAIT_MAX_S)
            if time.monotonic() + pause >= deadline:
                log.warning(
                    "compensation of %s call %s: %s, until its deadline", definition.name, key, outcome.text
                )
                return outcome
            if waits == 0:
                log.warning(
                    "compensation of %s call %s: %s; retrying until its deadline",
                    definition.name,
                    key,
                    outcome.text,
                )
            waits += 1
            await asyncio.sleep(pause)

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled:
        """Settle a call whose orchestrator died before journaling its outcome, from the states of
        every dispatch it can have had (`orchestrator.saga._inflight.settle`). Revoked without terminating:
        a call killed midway could leave a partial effect that nothing undoes."""
        retries = definition.options.retries if definition and definition.options.idempotent else 0
        ids = [call_task_id(key, attempt) for attempt in range(1 + retries)]
        ttl = int(max(self.settings.result_expires_s, 60))
        with mapped_redis_errors(self.settings.redis_url):
            return await settle(self._redis, ids, lambda i: self._abandon(i, terminate=False), mark_ttl_s=ttl)

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
        abandon_atomically: bool = False,
    ) -> ToolOutcome:
        pool = definition.pool
        if not self._pool_has_workers(pool):
            return no_worker_outcome(definition)
        collector = self._collector
        request = envelope.request if isinstance(envelope, CallTask) else envelope.execution.request
        notify = call_notifier(self.on_call, task_id, task_name, pool, request.arguments)
        redispatch = None
        if definition.options.idempotent and isinstance(envelope, CallTask):
            # A worker lost mid-call: the same message again, for another worker of the pool.
            def redispatch() -> None:
                self._publish(task_name, task_id, envelope, pool, deadline - time.monotonic(), key=key)

        future = collector.watch(
            task_id,
            pool,
            (lambda worker: notify("started", worker)) if notify else None,
            redispatch=redispatch,
        )
        if notify:
            notify("queued", None)
        remaining = deadline - time.monotonic()
        try:
            if time.monotonic() < self._broker_down_until:
                raise OperationalError(self._broker_error)
            self._publish(task_name, task_id, envelope, pool, remaining, key=key)
        except OperationalError as exc:
            collector.forget(task_id)
            self._broker_down_until = time.monotonic() + _OUTAGE_HOLD_S  # fail the batch's others fast
            self._broker_error = str(exc)
            return failed_outcome(
                OutcomeKind.EXECUTION_ERROR,
                f"Tool '{definition.name}' could not be dispatched: the broker is unreachable ({exc})",
                "BrokerUnavailable",
            )
        waiting = asyncio.wrap_future(future)
        try:
            meta = await asyncio.wait_for(asyncio.shield(waiting), max(remaining, 0.0))
        except TimeoutError:
            if abandon_atomically and not self._mark_abandoned(task_id):
                # The worker finished first: the call succeeded and its result is on its way.
                meta = await asyncio.wait_for(waiting, _LATE_RESULT_GRACE_S)
            else:
                collector.forget(task_id)
                self._abandon(task_id, pool)
                if notify:
                    notify(OutcomeKind.TIMED_OUT.value, None)
                outcome = failed_outcome(
                    OutcomeKind.TIMED_OUT,
                    f"Tool '{definition.name}' did not finish within {seconds_text(timeout_s)} s",
                    "TimeoutError",
                )
                return dataclasses.replace(outcome, task_id=task_id, pool=pool)
        except asyncio.CancelledError:
            collector.forget(task_id)
            self._abandon(task_id, pool)
            raise
        outcome = outcome_of_meta(meta, definition, timeout_s)
        if (
            outcome.kind is OutcomeKind.WORKER_LOST
            and abandon_atomically
            and not self._mark_abandoned(task_id)
        ):
            # Declared lost, yet its worker marked it finished: the result is on its way.
            collector.forget(task_id)
            stored = await self._stored_result(task_id)
            if stored is not None:
                meta = stored
                outcome = outcome_of_meta(meta, definition, timeout_s)
        if notify:
            notify(outcome.kind.value, worker_of(meta))
        return dataclasses.replace(outcome, task_id=task_id, pool=pool, worker=worker_of(meta))

    async def _stored_result(self, task_id: str) -> dict[str, Any] | None:
        """The final state of a task, read from the result backend for up to a few seconds."""
        deadline = time.monotonic() + _LATE_RESULT_GRACE_S
        while time.monotonic() < deadline:
            try:
                raw = self._redis.get(META_PREFIX + task_id)
            except redis.RedisError:
                raw = None
            if raw:
                meta: dict[str, Any] = json.loads(raw)
                if meta.get("status") in FINAL_STATES:
                    return meta
            await asyncio.sleep(0.05)
        return None

    def _mark_abandoned(self, task_id: str) -> bool:
        """Claim a call as abandoned, unless its worker already marked it finished."""
        ttl = int(max(self.settings.result_expires_s, 60))
        try:
            return bool(self._redis.set(call_state_key(task_id), CALL_ABANDONED, nx=True, ex=ttl))
        except redis.RedisError as exc:
            log.warning(
                "could not mark %s abandoned (%s); it will not be compensated if it finishes", task_id, exc
            )
            return True

    def _publish(
        self,
        task_name: str,
        task_id: str,
        envelope: CallTask | CompensationTask,
        pool: str,
        remaining_s: float,
        *,
        key: str,
    ) -> None:
        options: dict[str, Any] = {
            "task_id": task_id,
            "queue": pool,
            # An absolute time: spares Celery's own timezone arithmetic on the hot path.
            "expires": datetime.fromtimestamp(time.time() + max(remaining_s, 0.001), UTC),
            "headers": {IDEMPOTENCY_HEADER: key},
            # What Flower shows as the call's arguments: the model's arguments and ids, never the
            # invocation parameters (they may hold credentials). Also spares Celery's saferepr.
            **envelope.reprs(),
            "retry": True,
            "retry_policy": {
                "max_retries": 2,
                "interval_start": 0.05,
                "interval_step": 0.2,
                "interval_max": 0.5,
            },
        }
        if self._pool_kinds.get(pool) == "prefork":
            options["soft_time_limit"] = max(remaining_s, 0.05)
            options["time_limit"] = max(remaining_s, 0.05) + 1.0
        sent = dataclasses.replace(envelope, deadline=time.time() + remaining_s)
        self._publisher.send_task(task_name, kwargs=sent.to_json(), **options)

    def _pool_has_workers(self, pool: str) -> bool:
        checked = self._pool_alive.get(pool)
        now = time.monotonic()
        if checked is not None and now - checked < _POOL_ALIVE_CACHE_S:
            return True
        if now < self._catalog_down_until:
            return True  # Redis just failed: do not block every call of a batch on it again
        try:
            alive = bool(self.catalog.live_workers(pool))
        except redis.RedisError as exc:
            log.warning("catalog unreadable (%s); dispatching to pool %s anyway", exc, pool)
            self._catalog_down_until = now + _OUTAGE_HOLD_S
            return True
        if alive:
            self._pool_alive[pool] = now
            if pool not in self._pool_kinds:
                self._learn_pool_kind(pool)
        else:
            self._pool_alive.pop(pool, None)
        return alive

    def _learn_pool_kind(self, pool: str) -> None:
        kinds = {entry.pool_kind for entry in self._live_catalog(_CATALOG_RECHECK_S) if pool in entry.pools}
        if kinds:
            self._pool_kinds[pool] = kinds.pop() if len(kinds) == 1 else "mixed"

    def _abandon(self, task_id: str, pool: str | None = None, *, terminate: bool | None = None) -> None:
        """Revoke a call past its deadline; terminate it where the worker's pool can (prefork)."""
        if terminate is None:
            terminate = pool is not None and self._pool_kinds.get(pool) == "prefork"
        try:
            self._publisher.control.revoke(task_id, terminate=terminate, signal="SIGKILL")
        except OperationalError as exc:
            log.warning("could not revoke %s: %s", task_id, exc)

    def close(self) -> None:
        self._redis.close()
        self._publisher.close()
