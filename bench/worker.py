"""The benchmark worker: the bench tools, plus plain Celery tasks as the baseline.

`celery -A bench.worker worker -Q bench ...` serves both on one process, so a comparison between a
tool call and a raw task measures the dispatch and collection paths, not two different workers.
The app reads `TOOLFLEET_*` at import: the benchmark sets them before importing this module.

A tool worker's app keeps only toolfleet's own tasks when it is finalized (`workers.tasks` drops
every other one, Celery's built-ins included). The app is therefore finalized here first and the
baseline tasks registered after that, so that the same worker serves them.
"""

from __future__ import annotations

import time

from bench import tools
from workers.app import make_app
from workers.registry import ToolRegistry
from workers.settings import Settings

app = make_app(Settings.from_env(), ToolRegistry([tools]))
app.finalize()


@app.task(name="bench.raw_noop", queue="bench")  # type: ignore[untyped-decorator]
def raw_noop() -> str:
    return "ok"


@app.task(name="bench.raw_sleep", queue="bench")  # type: ignore[untyped-decorator]
def raw_sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"
