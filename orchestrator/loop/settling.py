"""What an invocation ending on an error leaves in flight in the journal, settled before its end."""

from __future__ import annotations

import asyncio
import logging

from orchestrator.loop.state import RunState
from workers.tools import ToolDefinition

__all__ = ["SETTLE_RETRIES_S", "settle_left"]

log = logging.getLogger(__name__)

SETTLE_RETRIES_S = (0.2, 0.5, 1.0, 2.0, 4.0)  # pauses between tries: about 8 s in all


async def settle_left(state: RunState) -> None:
    """Settle the calls the invocation left in flight in the journal (`SagaCoordinator.settle_left`).
    A journal that fails meanwhile (it restarts: the invocation's error may be its own) is tried again
    for some seconds, as the invocation's end is written after it, and a call left `dispatched` under
    an ended invocation is settled by nobody."""
    definitions = {name: t for name, t in state.tools.items() if isinstance(t, ToolDefinition)}
    invocation_id = state.context.invocation_id
    for wait_s in (*SETTLE_RETRIES_S, None):
        try:
            await state.saga.settle_left(state.invocation(), definitions)
            return
        except Exception as exc:
            if wait_s is None:
                log.warning("invocation %s: calls left in flight not settled: %s", invocation_id, exc)
                return
            log.info(
                "invocation %s: calls left in flight not settled yet (%s): again in %g s",
                invocation_id,
                exc,
                wait_s,
            )
            await asyncio.sleep(wait_s)
