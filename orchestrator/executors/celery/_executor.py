"""`CeleryExecutor`: every tool call a Celery task on its pool's queue, awaited under a deadline.

The jobs behind it live beside it: `_pools` (which pools have live workers), `_dispatch` (publish, await,
abandon), `_compensation` (undo a call, waiting for a worker within its deadline) and `_settle` (what
became of a call an orchestrator that died left in flight).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from celery import Celery

from orchestrator.executors._call_events import CallEvent
from orchestrator.executors._outcomes import failed_outcome
from orchestrator.executors.base import Settled, execute_batch, idempotency_key
from orchestrator.executors.celery._attach import deadline_of, in_broker, uncertain_outcome
from orchestrator.executors.celery._compensation import compensate, undo_in_doubt
from orchestrator.executors.celery._dispatch import Dispatcher
from orchestrator.executors.celery._pools import CATALOG_CACHE_S, CATALOG_RECHECK_S, Pools
from orchestrator.executors.celery._settle import settle
from orchestrator.telemetry import outcome_known
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
from workers.calls.runner import utf8_size
from workers.protocol import CallTask, call_task_id, tool_task_name
from workers.redis_client import connect as connect_redis
from workers.redis_client import is_redis
from workers.runtime.catalog import Catalog, newest_first
from workers.settings import Settings

__all__ = ["CallEvent", "CeleryExecutor"]

log = logging.getLogger(__name__)


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
                redis_url=backend if is_redis(backend) else settings.redis_url,
            )
        self.settings = settings
        self.registry = ToolRegistry(tools)
        self.on_call = on_call
        client = connect_redis(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        self.catalog = Catalog(client)
        self._pools = Pools(self.catalog)
        self._dispatcher = Dispatcher(settings, make_publisher(settings), client, self._pools)

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
        # The newest worker's definition, as `catalog_definitions` gives it (its builds may differ).
        for max_age_s in (CATALOG_CACHE_S, CATALOG_RECHECK_S):
            for entry in newest_first(self._pools.workers(max_age_s)):
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
        The call has one task id, derived from its idempotency key (`call_task_id`): the one the journal
        records before it is published. An idempotent call whose worker dies is published again under
        that id by the result collector, within the deadline; `retries` are the worker's own.
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
        key = idempotency_key(invocation, request)
        late = compensate_if_late and definition.compensation is not None
        outcome = await self._dispatcher.dispatch(
            tool_task_name(definition.name),
            call_task_id(key),
            CallTask(request, invocation, compensate_if_late=late),
            definition,
            time.monotonic() + timeout_s,
            timeout_s,
            key=key,
            on_call=self.on_call,
            abandon_atomically=late,
        )
        outcome_known(outcome)
        if late and outcome.kind is OutcomeKind.WORKER_LOST:
            await undo_in_doubt(self._dispatcher, definition, request, invocation, outcome)
        return outcome

    async def attach(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition,
        invocation: Invocation,
        *,
        published_at: datetime,
        compensate_if_late: bool = False,
    ) -> ToolOutcome:
        """The outcome of a call an orchestrator that died published at `published_at` (its intent
        journaled then), for the one that adopted its invocation: watched where it is (a worker runs
        it, or its message waits in the queue), its deadline counted from `published_at`, never sent
        again; with no sign that it reached the broker, published again under the same task id and
        idempotency key if its tool is idempotent, else settled as lost (`_attach`)."""
        timeout_s = definition.timeout or self.settings.default_tool_timeout_s
        key = idempotency_key(invocation, request)
        task_id = call_task_id(key)
        dispatcher = self._dispatcher
        with mapped_redis_errors(self.settings.redis_url):
            reached = dispatcher.stored_state(task_id) is not None
            waiting = reached or bool(in_broker(dispatcher, task_id, definition.pool))
        if not waiting and not definition.options.idempotent:
            return uncertain_outcome(dispatcher, definition, task_id)
        late = compensate_if_late and definition.compensation is not None
        outcome = await dispatcher.dispatch(
            tool_task_name(definition.name),
            task_id,
            CallTask(request, invocation, compensate_if_late=late),
            definition,
            deadline_of(timeout_s, published_at),
            timeout_s,
            key=key,
            on_call=self.on_call,
            abandon_atomically=late,
            publish=not waiting,
        )
        outcome_known(outcome)
        if late and outcome.kind is OutcomeKind.WORKER_LOST:
            await undo_in_doubt(dispatcher, definition, request, invocation, outcome)
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
        """
        return await compensate(self._dispatcher, definition, execution, invocation, on_call=self.on_call)

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled:
        """Settle a call whose orchestrator died before journaling its outcome, from the state of its
        one task id (`_settle.settle`). Revoked without terminating: a call killed midway could leave
        a partial effect that nothing undoes."""
        dispatcher = self._dispatcher

        def revoke(task_id: str) -> None:
            dispatcher.abandon(task_id, terminate=False)

        with mapped_redis_errors(self.settings.redis_url):
            return await settle(dispatcher, call_task_id(key), revoke)

    def close(self) -> None:
        """Free the concurrency slots its ended calls released, close its Redis connection and broker
        publisher."""
        self._dispatcher.admission.slots.flush()
        self._dispatcher.redis.close()
        self._dispatcher.publisher.close()
