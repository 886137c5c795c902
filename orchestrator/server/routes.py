"""The routes: health, readiness, metrics, and the agents as OpenAI's models (chat completions are in
`completions`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.server import readiness
from orchestrator.server.error_shape import error_body
from orchestrator.server.state import (
    service_state,
)
from orchestrator.telemetry.metrics import exposition

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive and answering."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Redis, the database and the broker answer, and every pool the agents' tools need has a live
    worker; otherwise 503 naming what is missing."""
    problems = await readiness.problems(service_state(request))
    if problems:
        return JSONResponse(
            {"status": "not ready", "problems": problems, **error_body(503, "; ".join(problems))},
            status_code=503,
        )
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics() -> Response:
    """This replica's Prometheus metrics: tool calls per tool and pool, compensations, approvals
    waiting, invocations and model calls per service."""
    body, content_type = await asyncio.to_thread(exposition)  # the approvals are counted in SQL
    return Response(body, media_type=content_type)


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    """The agents, as OpenAI's model list."""
    state = service_state(request)
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": state.started_at, "owned_by": "toolfleet"}
            for name in state.agents
        ],
    }
