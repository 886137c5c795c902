"""Plain Celery apps with one no-op task: `python -m bench.floor`'s, and the stock twins of the
benchmark's worker (`bench._twins`) that measures 1 and 2 compare toolfleet with.

`make_floor_app` builds one for a broker and backend URL, with or without task events (the worker's
and the client's `task-sent`) and STARTED states, on a queue of its own; toolfleet's result backend
replaces Celery's own where asked. `app` is the one the environment describes, for
`celery -A bench.floor_app worker`: `BENCH_FLOOR_URL`, `BENCH_FLOOR_EVENTS`, `BENCH_FLOOR_STARTED`,
`BENCH_FLOOR_TOOLFLEET` (`1` for on), `BENCH_FLOOR_QUEUE`.
"""

from __future__ import annotations

import os

from celery import Celery

NOOP = "bench.floor.noop"
DEFAULT_QUEUE = "bench.floor"


def make_floor_app(
    url: str,
    *,
    events: bool,
    started: bool,
    queue: str = DEFAULT_QUEUE,
    toolfleet_backend: bool = False,
) -> Celery:
    app = Celery(f"bench-floor-{queue}", broker=url, backend=url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_send_task_events=events,
        task_send_sent_event=events,
        task_track_started=started,
        task_default_queue=queue,
    )
    if toolfleet_backend:
        from workers.runtime._backend import ResultBackend

        app.backend_cls = ResultBackend

    @app.task(name=NOOP)  # type: ignore[untyped-decorator]
    def noop() -> str:
        return "ok"

    return app


app = make_floor_app(
    os.environ.get("BENCH_FLOOR_URL", "redis://127.0.0.1:6379/14"),
    events=os.environ.get("BENCH_FLOOR_EVENTS") == "1",
    started=os.environ.get("BENCH_FLOOR_STARTED") == "1",
    queue=os.environ.get("BENCH_FLOOR_QUEUE") or DEFAULT_QUEUE,
    toolfleet_backend=os.environ.get("BENCH_FLOOR_TOOLFLEET") == "1",
)
noop = app.tasks[NOOP]
