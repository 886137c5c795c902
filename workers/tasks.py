"""One Celery task per tool, `tool.<name>`, routed to the tool's pool queue.

A task is a thin adapter: bind the arguments, call the tool, convert the result — the same code
`LocalExecutor` runs — then return the outcome's JSON. A failed call raises a `ToolFailure` named
after the tool's exception, so Flower shows FAILURE with that type and message, while the structured
outcome travels in the exception's arguments for the orchestrator to read.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any, cast

import redis
from celery import Celery, Task
from celery.signals import worker_ready, worker_shutdown

from workers import _failures
from workers.catalog import WORKER_KEY, CatalogHeartbeat, CatalogTool, WorkerEntry
from workers.invocation import Invocation
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.registry import ToolRegistry
from workers.retry import backoff_s, is_transient
from workers.runner import bound_outcome, run_compensation, run_tool
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = [
    "COMPENSATION_PREFIX",
    "TASK_PREFIX",
    "ToolFailure",
    "call_state_key",
    "compensation_task_id",
    "compensation_timeout_s",
    "failure_for",
    "failure_type",
    "flower_reprs",
    "outcome_from_failure",
    "register_tasks",
]

log = logging.getLogger(__name__)

TASK_PREFIX = "tool."
COMPENSATION_PREFIX = "compensate."
_FAILURE_MODULE = _failures.__name__


class ToolFailure(Exception):
    """A tool call that ended in an error; `args` are (message, outcome JSON)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A prefork child hands its exception to the parent by pickle, and the parent has never seen
        # this dynamically named class: rebuild it by name there instead of looking it up.
        return (_rebuild_failure, (type(self).__name__, self.args))


def failure_type(name: str) -> type[ToolFailure]:
    cls = _failure_types.get(name)
    if cls is None:
        cls = cast(type[ToolFailure], type(name, (ToolFailure,), {"__module__": _FAILURE_MODULE}))
        setattr(_failures, name, cls)
        _failure_types[name] = cls
    return cls


def _rebuild_failure(name: str, args: tuple[Any, ...]) -> ToolFailure:
    return ToolFailure(*args) if name == "ToolFailure" else failure_type(name)(*args)


_failure_types: dict[str, type[ToolFailure]] = {}


def failure_for(outcome: ToolOutcome, worker: str | None = None) -> ToolFailure:
    """The exception a task raises for an error outcome, named after the tool's exception type."""
    name = outcome.error_type or "ToolFailure"
    if not name.isidentifier() or name == "ToolFailure":
        name = "ToolFailure"
        return ToolFailure(outcome.text, {**outcome.to_json(), "worker": worker})
    return failure_type(name)(outcome.text, {**outcome.to_json(), "worker": worker})


def outcome_from_failure(result: Any) -> ToolOutcome | None:
    """The structured outcome carried by a stored `ToolFailure`, or `None` for any other failure."""
    if not isinstance(result, dict) or result.get("exc_module") != _FAILURE_MODULE:
        return None
    message = result.get("exc_message")
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[1], dict):
        try:
            return ToolOutcome.from_json(message[1])
        except (KeyError, ValueError):
            return None
    return None


def _run_call(
    task: Task, definition: ToolDefinition, settings: Settings, kwargs: dict[str, Any]
) -> dict[str, Any]:
    request = ToolExecutionRequest.from_json(kwargs["request"])
    invocation = Invocation.from_json(kwargs["invocation"])
    deadline = float(kwargs.get("deadline") or 0) or None
    if deadline is not None and time.time() >= deadline:
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not start before its deadline",
            error_type="DeadlineExceeded",
        )
        raise failure_for(outcome)
    outcome = run_tool(definition, request, invocation)
    if outcome.error_type == "SoftTimeLimitExceeded":  # the pool's time limit: the deadline passed
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not finish within its deadline",
            error_type="TimeoutError",
        )
    outcome = bound_outcome(outcome, definition.name, settings.max_result_bytes)
    if outcome.is_error:
        attempt = int(task.request.retries or 0)
        if attempt < definition.options.retries and is_transient(outcome, definition):
            countdown = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is None or time.time() + countdown < deadline:
                log.info(
                    "tool %s attempt %d failed (%s); retrying in %.2f s",
                    definition.name,
                    attempt + 1,
                    outcome.error_type,
                    countdown,
                )
                raise task.retry(
                    countdown=countdown,
                    max_retries=definition.options.retries,
                    exc=failure_for(outcome),
                    **flower_reprs(kwargs),
                )
        raise failure_for(outcome, task.request.hostname)
    if kwargs.get("compensate_if_late") and definition.compensation is not None:
        _finish_or_compensate_late(task, definition, settings, request, invocation, outcome, deadline)
    return {**outcome.to_json(), "worker": task.request.hostname}


def flower_reprs(kwargs: dict[str, Any]) -> dict[str, str]:
    """What Flower shows as a task's arguments: the model's arguments and the ids, never the
    invocation's parameters (they may hold credentials)."""
    request = kwargs.get("request") or (kwargs.get("execution") or {}).get("request") or {}
    arguments = str(request.get("arguments", ""))
    if len(arguments) > 1024:
        arguments = arguments[:1024] + "…"
    invocation_id = ((kwargs.get("invocation") or {}).get("context") or {}).get("invocation_id")
    call_id = request.get("id")
    shown = f"{{'arguments': {arguments!r}, 'call_id': {call_id!r}, 'invocation_id': '{invocation_id}'}}"
    return {"argsrepr": "()", "kwargsrepr": shown}


def compensation_timeout_s(definition: ToolDefinition, settings: Settings) -> float:
    """How long undoing one call may take, retries and backoff included."""
    per_attempt = max(definition.timeout or settings.default_tool_timeout_s, _MIN_COMPENSATION_ATTEMPT_S)
    return per_attempt * (1 + settings.compensation_retries) + settings.retry_backoff_max_s


_MIN_COMPENSATION_ATTEMPT_S = 30.0


def call_state_key(task_id: str) -> str:
    """The per-call state in Redis that decides between "collected" and "abandoned"."""
    return f"toolfleet:call:{task_id}"


def compensation_task_id(idempotency_key: str) -> str:
    """The one task id of the compensation of a call: every path that undoes it uses the same id."""
    return "compensate-" + str(uuid.uuid5(_COMPENSATION_NAMESPACE, idempotency_key))


_COMPENSATION_NAMESPACE = uuid.UUID("5b0b6a8e-4f5e-4a57-9a43-2f3c54a0c1de")
_clients: dict[str, redis.Redis] = {}


def _redis(settings: Settings) -> redis.Redis:
    # Created lazily in the process that uses it: prefork children must not share the parent's sockets.
    key = f"{os.getpid()}:{settings.redis_url}"
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    return client


_UNBOUNDED = 1_000_000  # retries of compensation tasks are bounded by their deadline instead


def _wait_for_other_delivery(task: Task, kwargs: dict[str, Any], deadline: float | None) -> None:
    """Another delivery is undoing this call right now: look again in a second, until the deadline."""
    if deadline is not None and time.time() + 1.0 >= deadline:
        raise failure_for(
            ToolOutcome(
                kind=OutcomeKind.EXECUTION_ERROR,
                text="Compensation still in progress elsewhere at its deadline",
                error_type="CompensationInProgress",
            ),
            task.request.hostname,
        )
    raise task.retry(
        countdown=1.0,
        max_retries=_UNBOUNDED,
        kwargs=kwargs,
        exc=RuntimeError("compensation in progress"),
        **flower_reprs(kwargs),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _holder_is_gone(client: redis.Redis, holder: str, my_hostname: str | None) -> bool:
    """Whether the process that took a compensation lock died: its pid on this worker, or its worker."""
    hostname, _, rest = holder.partition("|")
    pid_text = rest.partition("|")[0]
    if hostname == my_hostname and pid_text.isdigit():
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return not client.exists(WORKER_KEY.format(hostname))


def _finish_or_compensate_late(
    task: Task,
    definition: ToolDefinition,
    settings: Settings,
    request: ToolExecutionRequest,
    invocation: Invocation,
    outcome: ToolOutcome,
    deadline: float | None,
) -> None:
    """Mark the call finished; if the orchestrator already abandoned it, enqueue its compensation.

    One atomic SET ... GET decides: whichever of worker and orchestrator writes first wins, so a late
    success is either collected by the orchestrator or compensated here, never both, never neither.
    """
    ttl = int(max(settings.result_expires_s, 60))
    attempt = 0
    while True:  # the side effect happened: this mark must land, or a late success goes unnoticed
        try:
            previous = _redis(settings).set(call_state_key(task.request.id), "finished", ex=ttl, get=True)
            break
        except redis.RedisError as exc:
            pause = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is not None and time.time() + pause > deadline + settings.result_expires_s:
                log.error("could not mark %s finished: %s", task.request.id, exc)
                return
            log.warning("marking %s finished failed (%s); retrying in %.2f s", task.request.id, exc, pause)
            time.sleep(pause)
            attempt += 1
    if previous != b"abandoned":
        return
    key = str(task.request.headers.get("idempotency_key") if task.request.headers else "") or task.request.id
    execution = ToolExecution(
        request=request,
        result=outcome.text,
        result_object=outcome.result_object,
        attributes=dict(outcome.attributes),
        status=OutcomeKind.SUCCESS.value,
        task_id=task.request.id,
        pool=definition.pool,
        worker=task.request.hostname,
    )
    log.warning(
        "tool %s call %s finished after its deadline; enqueuing its compensation", definition.name, request.id
    )
    timeout_s = compensation_timeout_s(definition, settings)
    compensation_kwargs = {
        "execution": execution.to_json(),
        "invocation": invocation.to_json(),
        "idempotency_key": key,
        "deadline": time.time() + timeout_s,
    }
    task.app.send_task(
        COMPENSATION_PREFIX + definition.name,
        kwargs=compensation_kwargs,
        task_id=compensation_task_id(key),
        queue=definition.pool,
        headers={"idempotency_key": key, "late": True},
        **flower_reprs(compensation_kwargs),
    )


def _run_compensation(
    task: Task, definition: ToolDefinition, settings: Settings, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Undo one call, at most once per idempotency key, whatever the number of deliveries."""
    execution = ToolExecution.from_json(kwargs["execution"])
    invocation = Invocation.from_json(kwargs["invocation"])
    key = str(kwargs["idempotency_key"])
    deadline = float(kwargs.get("deadline") or 0) or None
    lock = f"toolfleet:compensation:{key}"
    client = _redis(settings)
    lock_ttl = int((definition.timeout or settings.default_tool_timeout_s) + 30)
    mine = f"{task.request.hostname}|{os.getpid()}|{uuid.uuid4().hex}"
    if not client.set(lock, mine, nx=True, ex=lock_ttl):
        holder = client.get(lock)
        if holder == b"done":
            return {"kind": "success", "text": "Already compensated", "worker": task.request.hostname}
        if holder is not None and not _holder_is_gone(client, _text(holder), task.request.hostname):
            _wait_for_other_delivery(task, kwargs, deadline)
        if client.set(lock, mine, ex=lock_ttl, get=True) != holder:
            _wait_for_other_delivery(task, kwargs, deadline)
    outcome = run_compensation(definition, execution, invocation)
    if outcome.is_error:
        client.delete(lock)
        failures = int(kwargs.get("failures") or 0)  # lock waits are retries too: count failures apart
        if failures < settings.compensation_retries:
            countdown = backoff_s(failures, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is None or time.time() + countdown < deadline:
                raise task.retry(
                    countdown=countdown,
                    max_retries=_UNBOUNDED,
                    kwargs={**kwargs, "failures": failures + 1},
                    exc=failure_for(outcome),
                    **flower_reprs(kwargs),
                )
        raise failure_for(outcome, task.request.hostname)
    client.set(lock, "done", ex=7 * 24 * 3600)
    return {**outcome.to_json(), "worker": task.request.hostname}


def register_tasks(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    """Register `tool.<name>` for every tool and `compensate.<name>` for every compensable one, and
    publish the catalog while a worker of `app` runs."""
    for definition in registry:
        _register(app, definition, settings)
        if definition.compensation is not None:
            _register_compensation(app, definition, settings)
    _publish_catalog_while_running(app, registry, settings)


def _register(app: Celery, definition: ToolDefinition, settings: Settings) -> None:
    def run(self: Task, **kwargs: Any) -> dict[str, Any]:
        return _run_call(self, definition, settings, kwargs)

    run.__name__ = f"tool_{definition.name}"
    run.__doc__ = definition.specification.description
    app.task(
        bind=True,
        name=TASK_PREFIX + definition.name,
        queue=definition.pool,
        acks_late=definition.options.idempotent,
        reject_on_worker_lost=definition.options.idempotent,
        throws=(ToolFailure,),
        track_started=True,
        typing=False,
    )(run)


def _register_compensation(app: Celery, definition: ToolDefinition, settings: Settings) -> None:
    def run(self: Task, **kwargs: Any) -> dict[str, Any]:
        return _run_compensation(self, definition, settings, kwargs)

    run.__name__ = f"compensate_{definition.name}"
    run.__doc__ = f"Undoes a call of {definition.name}"
    # Compensations must complete: acknowledged late and redelivered when their worker dies.
    app.task(
        bind=True,
        name=COMPENSATION_PREFIX + definition.name,
        queue=definition.pool,
        acks_late=True,
        reject_on_worker_lost=True,
        throws=(ToolFailure,),
        track_started=True,
        typing=False,
    )(run)


def _publish_catalog_while_running(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    heartbeats: list[CatalogHeartbeat] = []

    def on_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        pools = sorted(q.name for q in sender.task_consumer.queues)
        pool_module = type(sender.pool).__module__.rsplit(".", 1)[-1]
        kind = {"thread": "threads"}.get(pool_module, pool_module)
        entry = WorkerEntry(
            hostname=sender.hostname,
            pools=pools,
            pool_kind=kind,
            concurrency=int(getattr(sender.pool, "limit", 0) or 0),
            pid=os.getpid(),
            started_at=time.time(),
            tools=[CatalogTool.of(d) for d in registry if d.pool in pools],
        )
        heartbeat = CatalogHeartbeat(
            redis.Redis.from_url(settings.redis_url), entry, settings.heartbeat_ttl_s
        )
        heartbeat.start()
        heartbeats.append(heartbeat)
        log.info(
            "worker %s serves pools %s (%s x%d)", entry.hostname, ",".join(pools), kind, entry.concurrency
        )

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        while heartbeats:
            heartbeats.pop().stop()

    worker_ready.connect(on_ready, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
