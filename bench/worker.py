"""The benchmark worker: the bench tools, plus a plain Celery no-op task as the baseline."""

from __future__ import annotations

from bench import tools
from workers.app import make_app
from workers.registry import ToolRegistry
from workers.settings import Settings

app = make_app(Settings.from_env(), ToolRegistry([tools]))


@app.task(name="bench.raw_noop", queue="bench")  # type: ignore[untyped-decorator]
def raw_noop() -> str:
    return "ok"
