"""The live catalog as a service's tools: what live workers serve, read again as workers come and go.

An `AiService` given no tools (neither `tools=` nor `tool_providers=`) and an executor that reads a
worker catalog (`CeleryExecutor`) offers the model, at each invocation, every tool a live worker
serves. The catalog is read at most every `CATALOG_MAX_AGE_S` per executor (every service of that
executor shares the copy), off the event loop, so a pool that starts serves its tools from the next
invocation after that, and the tools of a pool whose workers all left disappear from what the model
sees.

A catalog refills after an outage of Redis longer than the workers' heartbeat TTL: the workers' entries
expire, and each worker writes its own again at its next beat. A call of a name the catalog served
before (or made while it is empty) is therefore not taken for a hallucination at once: the catalog is
read again until the name is back, for up to the heartbeat TTL (`refill_wait_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from typing import Protocol, runtime_checkable

from orchestrator.errors import OrchestratorError
from orchestrator.providers import ToolProviderRequest, ToolProviderResult
from workers.tools import ToolDefinition

__all__ = [
    "CATALOG_MAX_AGE_S",
    "CatalogSource",
    "LiveCatalogToolProvider",
    "LiveCatalogTools",
    "live_catalog_of",
]

log = logging.getLogger(__name__)

CATALOG_MAX_AGE_S = 1.0
REFILL_POLL_S = 0.1  # how often a refilling catalog is read again for a name it lost


@runtime_checkable
class CatalogSource(Protocol):
    """An executor that knows the tools live workers serve (`CeleryExecutor`)."""

    def catalog_definitions(self) -> list[ToolDefinition]: ...


class LiveCatalogTools:
    """The tools of one executor's live catalog, as a copy at most `max_age_s` old."""

    def __init__(
        self, source: CatalogSource, max_age_s: float = CATALOG_MAX_AGE_S, refill_wait_s: float | None = None
    ) -> None:
        # Weak: the copy is kept per executor, in a dictionary that must not keep the executor alive.
        self._source = weakref.ref(source)
        self.max_age_s = max_age_s
        # How long a lost name is waited for: the workers' heartbeat TTL, when the source has settings.
        settings = getattr(source, "settings", None)
        self.refill_wait_s = (
            refill_wait_s if refill_wait_s is not None else getattr(settings, "heartbeat_ttl_s", 6.0)
        )
        self._served: set[str] = set()  # every name the catalog has served
        self._lock = threading.Lock()
        self._definitions: list[ToolDefinition] | None = None
        self._read_at = -1e9  # the last successful read
        self._tried_at = -1e9  # the last read, successful or not
        self._error = ""
        self.reads = 0  # how often the catalog was read successfully: the cost the copy bounds

    def _due(self) -> bool:
        return time.monotonic() - self._tried_at >= self.max_age_s

    def current(self) -> list[ToolDefinition]:
        """The tools live workers serve, read again when the copy is older than `max_age_s`.

        An unreadable catalog (Redis unreachable) keeps the last copy, with a warning; with no copy yet
        it is an `OrchestratorError` saying what to check. Either way it is tried again only after
        `max_age_s`, so an outage does not hold up every invocation for a connection timeout.
        """
        with self._lock:  # one read at a time; the others then find the copy fresh
            if self._due():
                self._read()
            if self._definitions is None:
                raise OrchestratorError(self._error)
            return list(self._definitions)

    def copy(self) -> list[ToolDefinition]:
        """The copy as it is, without reading the catalog; the read's error if there is none."""
        with self._lock:
            if self._definitions is None:
                raise OrchestratorError(self._error or "The live worker catalog has not been read yet")
            return list(self._definitions)

    async def lost(self, name: str) -> ToolDefinition | None:
        """Tool `name`, missing from the copy an invocation was given: waited for while the catalog
        refills (for a name it served before, or while it is empty), for up to `refill_wait_s`; None
        for a name it never served, or one that is not back in time."""
        deadline = time.monotonic() + self.refill_wait_s
        while True:
            definitions = await asyncio.to_thread(self._read_now)
            found = next((d for d in definitions if d.name == name), None)
            if found is not None or time.monotonic() >= deadline:
                return found
            if definitions and name not in self._served:
                return None  # a catalog that has tools, and never had this one: a name made up
            await asyncio.sleep(REFILL_POLL_S)

    def _read_now(self) -> list[ToolDefinition]:
        with self._lock:
            self._read()
            return list(self._definitions or [])

    async def refresh(self) -> None:
        """Read the catalog in a thread if the copy is due, so the event loop never waits on Redis."""
        if self._due():
            await asyncio.to_thread(self._refresh_quietly)

    def _refresh_quietly(self) -> None:
        with contextlib.suppress(OrchestratorError):  # raised again when the invocation asks for its tools
            self.current()

    def _read(self) -> None:
        self._tried_at = time.monotonic()
        source = self._source()
        try:
            if source is None:
                raise ReferenceError("its executor no longer exists")
            definitions = source.catalog_definitions()
        except Exception as exc:  # an unreachable Redis, an unreadable entry: no catalog right now
            self._error = (
                f"The live worker catalog could not be read ({type(exc).__name__}: {exc}): check that "
                "TOOLFLEET_REDIS_URL reaches the workers' Redis, or give the AiService tools=[...]"
            )
            if self._definitions is not None:
                age_s = time.monotonic() - self._read_at
                log.warning("%s; using the copy read %.1f s ago", self._error, age_s)
            return
        self._definitions = definitions
        self._served.update(d.name for d in definitions)
        self._read_at = self._tried_at
        self.reads += 1


_shared: weakref.WeakKeyDictionary[object, LiveCatalogTools] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def live_catalog_of(executor: object) -> LiveCatalogTools | None:
    """The live-catalog tools of `executor` (one copy per executor), or None if it has no catalog."""
    if not isinstance(executor, CatalogSource):
        return None
    with _shared_lock:
        tools = _shared.get(executor)
        if tools is None:
            tools = _shared[executor] = LiveCatalogTools(executor)
        return tools


class LiveCatalogToolProvider:
    """The live catalog as a service's static tool provider, asked once per invocation: it gives the
    copy the invocation refreshed (off the event loop) before it started, so it does no I/O itself."""

    is_dynamic = False

    def __init__(self, catalog: LiveCatalogTools) -> None:
        self.catalog = catalog

    def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult:
        return ToolProviderResult(tools=self.catalog.copy())

    def __repr__(self) -> str:
        return "LiveCatalogToolProvider()"
