"""The worker's broker consumer: back within a fraction of a second of the broker answering again.

Celery's consumer retries a lost broker connection with kombu's default backoff (2 s, then 4, 6, ...
up to 30 s between attempts): after an 8 s Redis outage a worker consumed again 4 s after Redis was
back, 12 s after the outage began. Here attempts come every `RETRY_INTERVAL_MAX_S` at most; an
attempt against a broker that is down is refused at once, so trying that often costs nothing.

Each time the consumer is connected again, `broker_reconnected` is sent (sender: the consumer), so
the worker can announce itself in the catalog at once instead of at its next heartbeat.

The connection that carries the worker's events (`connection_for_write`, used by Celery's Events
step alone) publishes without the broker's confirms that every other publish waits for. Celery reads
that connection in the worker's event loop (for the broker's heartbeats), while a pool thread that
fills the events' buffer publishes them itself: waiting for a confirm, that thread read the same
socket as the loop, the loop took the confirm, and the thread waited for it forever while holding
the events' lock the loop needed next. On RabbitMQ a threads worker stopped consuming mid-batch
(once in about 25 batches of 100 calls) until the broker closed its connection for missed heartbeats
three minutes later. Without confirms an event is only written, never waited for; events are for
monitoring, and a lost one changes no call.
"""

from __future__ import annotations

from typing import Any

from celery.utils.dispatch import Signal
from celery.worker.consumer import Consumer as CeleryConsumer

__all__ = ["EVENTS_TRANSPORT_OPTIONS", "RETRY_INTERVAL_MAX_S", "Consumer", "broker_reconnected"]

RETRY_INTERVAL_START_S = 0.1
RETRY_INTERVAL_STEP_S = 0.2
RETRY_INTERVAL_MAX_S = 0.5

broker_reconnected = Signal(name="broker_reconnected")

# Merged over the app's `broker_transport_options` for the events' connection.
EVENTS_TRANSPORT_OPTIONS = {"confirm_publish": False}


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer with a short reconnection backoff and a signal once reconnected."""

    def ensure_connected(self, conn: Any) -> Any:
        ensure = conn.ensure_connection

        def ensure_promptly(errback: Any = None, max_retries: Any = None, **options: Any) -> Any:
            options.setdefault("interval_start", RETRY_INTERVAL_START_S)
            options.setdefault("interval_step", RETRY_INTERVAL_STEP_S)
            options.setdefault("interval_max", RETRY_INTERVAL_MAX_S)
            return ensure(errback, max_retries, **options)

        conn.ensure_connection = ensure_promptly  # this connection object only: Celery's own checks apply
        return super().ensure_connected(conn)

    def connection_for_write(self, url: Any = None, heartbeat: Any = None) -> Any:
        """The events' connection: publishes without waiting for the broker's confirms."""
        connection = self.app.connection_for_write(
            url=url, heartbeat=heartbeat, transport_options=EVENTS_TRANSPORT_OPTIONS
        )
        return self.ensure_connected(connection)

    def on_unknown_task(self, body: Any, message: Any, exc: BaseException) -> None:
        """Refuse a task this worker does not serve, naming the worker and its tools in the failure."""
        from workers.runtime._unregistered import refuse_unknown_task

        refuse_unknown_task(self, body, message, exc)

    def on_ready(self) -> None:
        """Called each time the consumer's loop starts: once at start-up, then after every reconnection."""
        first = self.init_callback is not None  # Celery clears it after the first start (worker_ready)
        super().on_ready()
        if not first:
            broker_reconnected.send(sender=self)
