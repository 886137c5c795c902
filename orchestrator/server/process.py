"""One replica's process: uvicorn serving the app until SIGTERM or SIGINT, then draining.

On the signal the replica stops taking invocations (new ones get 503, `/readyz` says it is draining),
stops accepting connections, lets running requests finish for `drain_grace_s`, cancels what is left
(a cancelled invocation compensates what it did, as at a deadline) and exits with status 0: a
drained replica is a normal end, not a crash.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

from orchestrator.server.settings import ServeSettings

__all__ = ["serve_until_signalled"]

log = logging.getLogger(__name__)

ANSWER_AFTER_GRACE_S = 3.0


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, marking the replica as draining on the first signal and not raising the
    signal again once it has shut down (uvicorn does, which would end the process by the signal)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        self._drain: asyncio.Future[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = getattr(self._app.state, "toolfleet", None)
        if state is not None and not state.draining:
            state.draining = True
            log.warning("%s: draining (%d invocations running)", signal.Signals(sig).name, state.in_flight)
            # The background invocations drain now, alongside the requests uvicorn lets finish.
            self._drain = asyncio.ensure_future(state.invocations.drain(state.serve.drain_grace_s))
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def serve_until_signalled(app: FastAPI, serve: ServeSettings) -> None:
    """Serve `app` at `serve.host:serve.port` until a signal, then drain (see the module's doc)."""
    config = uvicorn.Config(
        app,
        host=serve.host,
        port=serve.port,
        log_level="warning",
        log_config=None,  # uvicorn's lines go to the root logger, in the format of TOOLFLEET_LOG_FORMAT
        # Past the grace, the requests still waiting on an invocation answer that the replica shut down
        # (a 503, or an error chunk and [DONE]): uvicorn gives them a moment more to write it.
        timeout_graceful_shutdown=max(1, round(serve.drain_grace_s + ANSWER_AFTER_GRACE_S)),
        server_header=False,
    )
    _DrainingServer(config, app).run()
