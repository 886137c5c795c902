"""Sending tasks: each call's message and its `task-sent` event in one round trip to the broker, and
the calls dispatched in one turn of the event loop (a batch's) together.

Celery sends a task in two round trips on a Redis broker: the message's `LPUSH`, then the `task-sent`
event's `PUBLISH` (what Flower shows a queued call by). kombu's publish batches (`Producer.batch`)
buffer both in one pipeline, and the event travels on the producer the message used, so one task is
one round trip, and a hundred tasks sent together are ten (`CHUNK` per pipeline: the first reach
their workers while the next are encoded). A call asks for its send
(`send_soon`) and awaits it; the sends asked for before the loop's next turn go out as one batch.

A batch that fails leaves its delivery uncertain (kombu cannot tell which of its commands ran):
its messages are sent again one by one, each with Celery's retry policy, as a publish whose
connection dropped is. Where the broker takes no batches (RabbitMQ), kombu publishes each message
at once inside the same calls, and nothing else changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import Celery
from kombu.exceptions import BatchPublishError, OperationalError

from orchestrator.executors.celery._pools import OUTAGE_HOLD_S
from workers.priorities import message_priority
from workers.protocol import IDEMPOTENCY_HEADER, SENT_AT_HEADER, CallTask, CompensationTask
from workers.telemetry.tracing import inject_trace_context

if TYPE_CHECKING:
    from orchestrator.executors.celery._pools import Pools
    from workers.settings import Settings

__all__ = ["Message", "Sender", "task_message"]

log = logging.getLogger(__name__)

# Calls per pipeline: the first ones reach workers while the next are encoded (Celery's message and
# event take about 0.3 ms of CPU each), and a turn of a hundred is still ten round trips, not a hundred.
CHUNK = 10


@dataclass
class Message:
    """One task to send: `Celery.send_task`'s name, keyword arguments and options."""

    name: str
    kwargs: dict[str, Any]
    options: dict[str, Any]
    sent: asyncio.Future[None] | None = field(default=None, repr=False)


def task_message(
    settings: Settings,
    pools: Pools,
    task_name: str,
    task_id: str,
    envelope: CallTask | CompensationTask,
    pool: str,
    remaining_s: float,
    *,
    key: str,
    queue: str | None = None,
) -> Message:
    """The task for `queue` (of `pool`; by default the pool's own), expiring (and on prefork pools
    time-limited) at the deadline."""
    options: dict[str, Any] = {
        "task_id": task_id,
        "queue": queue or pool,
        # An absolute time: spares Celery's own timezone arithmetic on the hot path.
        "expires": datetime.fromtimestamp(time.time() + max(remaining_s, 0.001), UTC),
        "headers": {IDEMPOTENCY_HEADER: key, SENT_AT_HEADER: time.time()},
        "priority": message_priority(envelope.invocation.parameters, settings.broker_url),
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
    if pools.kind(pool) == "prefork":
        options["soft_time_limit"] = max(remaining_s, 0.05)
        options["time_limit"] = max(remaining_s, 0.05) + 1.0
    inject_trace_context(options["headers"])  # the worker's spans are children of the call's
    sent = dataclasses.replace(envelope, deadline=time.time() + remaining_s)
    return Message(task_name, sent.to_json(), options)


class Sender:
    """Sends tasks through one Celery app, batched per event-loop turn (`send_soon`) or at once (`send`)."""

    def __init__(self, app: Celery, *, before: Callable[[], None] | None = None) -> None:
        """`before` runs before each batch is sent (the collector's deferred subscriptions)."""
        self.app = app
        self.before = before
        self._refused: OperationalError | None = None  # the broker's last refusal, held for a moment
        self._held_until = 0.0
        self._pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Message]] = (
            weakref.WeakKeyDictionary()
        )

    def send(self, message: Message) -> None:
        """Send one task now (its event in the same round trip), tried even while a refusal is held;
        `OperationalError` if the broker refuses it."""
        if self._send_together([message]):
            return
        error = self._held() or self._send_alone(message)
        if error is not None:
            raise error

    def send_soon(self, message: Message) -> asyncio.Future[None]:
        """Send the task with the others asked for in this turn of the running loop; the future ends
        once the broker took it, or with the error that refused it. A refusal fails the sends that
        follow at once for `OUTAGE_HOLD_S` (a batch's others, with the same error); only a real
        attempt starts that hold again, so the broker is tried at least that often."""
        loop = asyncio.get_running_loop()
        message.sent = loop.create_future()
        refused = self._held()
        if refused is not None:
            message.sent.set_exception(refused)
            return message.sent
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        pending.append(message)
        return message.sent

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        messages = self._pending.pop(loop, [])
        if self.before is not None:
            self.before()
        for message, error in zip(messages, self._send(messages), strict=True):
            sent = message.sent
            if sent is None or sent.done():  # its caller was cancelled meanwhile
                continue
            if error is None:
                sent.set_result(None)
            else:
                sent.set_exception(error)

    def _send(self, messages: list[Message]) -> list[BaseException | None]:
        """Each message's error (None: sent): `CHUNK` to a pipeline, one by one where a pipeline
        failed; once the broker refused one, the rest with its refusal."""
        errors: list[BaseException | None] = []
        for start in range(0, len(messages), CHUNK):
            chunk = messages[start : start + CHUNK]
            if self._held() is None and self._send_together(chunk):
                errors += [None] * len(chunk)
                continue
            for message in chunk:
                error = self._held() or self._send_alone(message)
                if isinstance(error, OperationalError) and error is not self._refused:
                    self._refuse(error)
                errors.append(error)
        return errors

    def _held(self) -> OperationalError | None:
        """The broker's refusal while it is held (`OUTAGE_HOLD_S` from the attempt refused)."""
        if self._refused is not None and time.monotonic() >= self._held_until:
            self._refused = None
        return self._refused

    def _send_together(self, chunk: list[Message]) -> bool:
        """Send `chunk` in one pipeline; False when its messages must go one by one: the pipeline
        dropped (delivery uncertain), or the batch failed before anything went out."""
        try:
            with self.app.producer_or_acquire() as producer, producer.batch(max_size=4 * len(chunk)):
                for message in chunk:
                    self.app.send_task(
                        message.name, kwargs=message.kwargs, producer=producer, **message.options
                    )
        except BatchPublishError as exc:
            log.warning("%d tasks sent together failed (%s): sent one by one", len(chunk), exc.__cause__)
            return False
        except OperationalError as exc:  # the broker away before anything went out: held for all
            self._refuse(exc)
            return False
        except Exception:  # a message that cannot be encoded: each alone says which
            return False
        return True

    def _refuse(self, error: OperationalError) -> None:
        self._refused, self._held_until = error, time.monotonic() + OUTAGE_HOLD_S

    def _send_alone(self, message: Message) -> BaseException | None:
        try:
            self.app.send_task(message.name, kwargs=message.kwargs, **message.options)
        except Exception as exc:
            return exc
        return None
