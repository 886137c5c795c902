"""The run view alone, in process (no browser, no worker): an HTTP client of its app on a SQLite
journal and the test Redis (where signed-out sessions are kept), its readers closed afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.server.events import EventLog
from orchestrator.server.ui import UiSettings, create_ui_app
from orchestrator.server.ui.context import UiContext, set_context
from tests._environment import integration_redis_url
from workers.settings import Settings

__all__ = ["view_client"]


@contextlib.asynccontextmanager
async def view_client(
    folder: Path, ui: UiSettings, redis_url: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the view of `ui` on the journal `folder`/journal.db and `redis_url` (by default the
    test Redis database)."""
    redis_url = redis_url or integration_redis_url(os.environ)
    settings = Settings(database_url=f"sqlite:///{folder / 'journal.db'}", redis_url=redis_url)
    app = create_ui_app(ui, settings)
    client = aioredis.Redis.from_url(settings.redis_url)
    journal = AsyncJournal(settings.database_url, keys=())
    context = UiContext(ui, settings, journal, EventLog(client), owned=[journal, client])
    set_context(app, context)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as http:
            yield http
    finally:
        await context.close()
