"""A plain Celery app with one no-op task, for `python -m bench.floor`.

Configured from the environment the floor benchmark sets: broker and backend URL, task events,
STARTED states, and whether toolfleet's result backend and Redis transport replace Celery's own.
"""

from __future__ import annotations

import os

from celery import Celery

URL = os.environ["BENCH_FLOOR_URL"]

app = Celery("bench-floor", broker=URL, backend=URL, set_as_current=False)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    worker_send_task_events=os.environ.get("BENCH_FLOOR_EVENTS") == "1",
    task_track_started=os.environ.get("BENCH_FLOOR_STARTED") == "1",
    task_default_queue="bench.floor",
)
if os.environ.get("BENCH_FLOOR_TOOLFLEET") == "1":
    from workers.runtime._backend import ResultBackend

    app.backend_cls = ResultBackend
    app.conf.broker_transport = "workers.runtime._transport:Transport"


@app.task(name="bench.floor.noop")  # type: ignore[untyped-decorator]
def noop() -> str:
    return "ok"
