"""What every page of the run view reads from: the journal, the event streams, Redis, its settings.

`toolfleet ui` builds one at start-up (`UiContext.open`); inside `toolfleet serve` the view reads
through the service's own journal and Redis, the context made from the service's state at first use.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import redis
from fastapi import FastAPI, Request

from orchestrator.saga.async_journal import AsyncJournal, JournalRunner
from orchestrator.server.events import EventLog, service_redis
from orchestrator.server.ui.settings import UiSettings
from workers.redis_client import connect as connect_redis
from workers.settings import Settings

__all__ = ["UiContext", "install_settings", "set_context", "ui_context"]

_CONTEXT = "toolfleet_ui"
_SETTINGS = "toolfleet_ui_settings"


@dataclass
class UiContext:
    """The run view's readers and settings, shared by its pages."""

    ui: UiSettings
    settings: Settings
    journal: JournalRunner
    events: EventLog
    owned: list[Any] = field(default_factory=list)  # what `close` closes: the context opened them
    _sync_redis: redis.Redis | None = None

    @classmethod
    def open(cls, ui: UiSettings, settings: Settings) -> UiContext:
        """A context of its own: a journal on the database, a Redis client (`toolfleet ui`)."""
        client = service_redis(settings.redis_url)
        journal = AsyncJournal(settings.database_url, keys=settings.journal_keys)
        return cls(ui, settings, journal, EventLog(client), owned=[journal, client])

    @property
    def redis(self) -> redis.Redis:
        """A blocking Redis client, for the catalog's and late compensations' readers (in threads)."""
        if self._sync_redis is None:
            self._sync_redis = connect_redis(self.settings.redis_url)
        return self._sync_redis

    async def close(self) -> None:
        for owned in self.owned:
            with contextlib.suppress(Exception):
                await (owned.dispose() if isinstance(owned, AsyncJournal) else owned.aclose())
        if self._sync_redis is not None:
            self._sync_redis.close()


def install_settings(app: FastAPI, ui: UiSettings) -> None:
    setattr(app.state, _SETTINGS, ui)


def ui_context(request: Request) -> UiContext:
    """The application's context, made from the service's state the first time inside `toolfleet serve`."""
    state = request.app.state
    context: UiContext | None = getattr(state, _CONTEXT, None)
    if context is None:
        service = state.toolfleet  # the service's `ServiceState`
        ui: UiSettings = getattr(state, _SETTINGS, None) or UiSettings()
        ui = UiSettings(
            host=service.serve.host,
            port=service.serve.port,
            api_keys=service.serve.api_keys,  # each with its tenant and scopes
            basic_auth=ui.basic_auth,
            flower_url=ui.flower_url,
        )
        context = UiContext(ui, service.settings, service.journal, service.events)
        setattr(state, _CONTEXT, context)
    return context


def set_context(app: FastAPI, context: UiContext) -> None:
    setattr(app.state, _CONTEXT, context)
