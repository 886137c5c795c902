"""`toolfleet ui` alone: the run view as an application of its own, reading the same database and
Redis as the service (`TOOLFLEET_DATABASE_URL`, `TOOLFLEET_REDIS_URL`), serving no agent."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from orchestrator.server.ui import decisions, fleet, pages
from orchestrator.server.ui.context import UiContext, install_settings, set_context
from orchestrator.server.ui.settings import UiSettings
from workers.settings import Settings

__all__ = ["create_ui_app", "mount_ui", "serve_ui"]


def mount_ui(app: FastAPI, ui: UiSettings) -> None:
    """Add the run view at `/ui` to `app` (the service's, or its own)."""
    install_settings(app, ui)
    app.include_router(pages.router)
    app.include_router(decisions.router)
    app.include_router(fleet.router)


def create_ui_app(ui: UiSettings, settings: Settings) -> FastAPI:
    """The run view alone, with its own journal and Redis clients for its lifetime."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        context = UiContext.open(ui, settings)
        set_context(app, context)
        try:
            yield
        finally:
            await context.close()

    app = FastAPI(
        title="toolfleet run view", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    mount_ui(app, ui)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=303)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def serve_ui(app: FastAPI, ui: UiSettings) -> None:
    """Serve `app` at `ui.host:ui.port` until SIGINT or SIGTERM."""
    config = uvicorn.Config(
        app, host=ui.host, port=ui.port, log_level="warning", log_config=None, server_header=False
    )  # uvicorn's lines go to the root logger, in the format of TOOLFLEET_LOG_FORMAT
    uvicorn.Server(config).run()
