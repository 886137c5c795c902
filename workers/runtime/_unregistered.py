"""A task this worker does not serve: refused as Celery refuses it, with the worker and its tools named.

Celery's consumer stores `NotRegistered(<task name>)` as the task's failure: the orchestrator then
knows neither which worker refused the call nor why. Here the same refusal (same log line, rejected
message, FAILURE state, `task-failed` event, `task_unknown` signal) stores
`NotRegistered(<task name>, NotRegisteredDetail JSON)`: the worker's hostname, the pool the message
came through and the tools this worker serves there, so the outcome can say that the pool's workers
serve different tools.
"""

from __future__ import annotations

from typing import Any

from celery import signals
from celery.exceptions import NotRegistered
from celery.utils.objects import Bunch
from celery.worker.consumer import consumer as celery_consumer

from workers.protocol import NotRegisteredDetail, tool_of_task

__all__ = ["refuse_unknown_task", "unregistered_detail"]


def unregistered_detail(tasks: Any, hostname: str, pool: str | None) -> NotRegisteredDetail:
    """The worker, the pool and the tools this worker serves on it (all its tools if the pool is unknown)."""
    tools = sorted(
        tool
        for name, task in list(tasks.items())
        if (tool := tool_of_task(name)) is not None and (pool is None or getattr(task, "queue", None) == pool)
    )
    return NotRegisteredDetail(worker=hostname, pool=pool, tools=tuple(tools))


def refuse_unknown_task(consumer: Any, body: Any, message: Any, exc: BaseException) -> None:
    """What Celery's `Consumer.on_unknown_task` does, with the detail added to the stored failure."""
    celery_consumer.error(
        celery_consumer.UNKNOWN_TASK_ERROR,
        exc,
        celery_consumer.dump_body(message, body),
        message.headers,
        message.delivery_info,
        exc_info=True,
    )
    try:
        task_id, name = message.headers["id"], message.headers["task"]
        root_id = message.headers.get("root_id")
    except KeyError:  # task message protocol 1
        payload = message.payload
        task_id, name, root_id = payload["id"], payload["task"], None
    request = Bunch(
        name=name,
        chord=None,
        root_id=root_id,
        correlation_id=message.properties.get("correlation_id"),
        reply_to=message.properties.get("reply_to"),
        errbacks=None,
    )
    message.reject_log_error(celery_consumer.logger, consumer.connection_errors)
    pool = (message.delivery_info or {}).get("routing_key") or None
    detail = unregistered_detail(consumer.app.tasks, consumer.hostname, pool)
    consumer.app.backend.mark_as_failure(task_id, NotRegistered(name, detail.to_json()), request=request)
    if consumer.event_dispatcher:
        consumer.event_dispatcher.send("task-failed", uuid=task_id, exception=f"NotRegistered({name!r})")
    signals.task_unknown.send(sender=consumer, message=message, exc=exc, name=name, id=task_id)
