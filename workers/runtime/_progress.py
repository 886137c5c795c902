"""A running call's progress on a worker: each report stored as the task's `PROGRESS` state.

The state goes through the app's result backend (`workers/runtime/_backend.py`: stored and
published on the task's channel in one step, never over a final state), so the orchestrator's
collector hears it on the subscription it already holds, and `AsyncResult(task_id).state` (or
Flower's `/api/task/result/<id>`) reads `PROGRESS`. With task events on, each report is also sent as
a `task-progress` event, which Flower's own view of the task (`/api/task/info/<id>`: state
`PROGRESS`, the report as `result`) is made of. Reports may come from any thread of the tool (or the
reporter's timer): nothing here reads Celery's thread-local request. The reporter sees a cancellation
of its call in `CALL_CANCELLED_KEY`, which an orchestrator sets when it cancels the call.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Task

from workers.calls.progress import ProgressReport, ToolProgressReporter
from workers.protocol import CALL_CANCELLED_KEY, PROGRESS_STATE
from workers.telemetry.tracing import current_span
from workers.tools import ToolDefinition

__all__ = ["PROGRESS_EVENT", "worker_reporter"]

log = logging.getLogger(__name__)

PROGRESS_EVENT = "task-progress"


def worker_reporter(task: Task, definition: ToolDefinition) -> ToolProgressReporter:
    """The reporter of the call `task` runs now, sending its reports as the task's states."""
    task_id, hostname = str(task.request.id), task.request.hostname
    backend, app = task.backend, task.app
    events = bool(app.conf.worker_send_task_events)
    call_span = current_span()  # the call's span: reports may come from another thread

    def send(report: ProgressReport) -> None:
        meta = report.to_json()
        backend.store_result(task_id, meta, PROGRESS_STATE)
        attributes: dict[str, Any] = {"toolfleet.progress.seq": report.seq}
        if report.fraction is not None:
            attributes["toolfleet.progress.fraction"] = report.fraction
        call_span.add_event("progress", attributes)  # as sent: the reporter's rate limit applies
        if events:
            try:
                with app.events.default_dispatcher(hostname=hostname) as dispatcher:
                    dispatcher.send(PROGRESS_EVENT, uuid=task_id, result=json.dumps(meta))
            except Exception as exc:  # Flower's view only: the state itself is stored
                log.debug("progress event of %s not sent: %s", task_id, exc)

    def cancelled() -> bool:  # set by an orchestrator cancelling this call (`CALL_CANCELLED_KEY`)
        return bool(backend.client.exists(CALL_CANCELLED_KEY.format(task_id)))

    return ToolProgressReporter(
        send,
        heartbeat_timeout_s=definition.options.heartbeat_timeout_s,
        worker=hostname,
        cancelled=cancelled,
    )
