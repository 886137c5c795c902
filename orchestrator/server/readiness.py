"""Whether a replica can take work: Redis, the database and the broker answer, and each pool its
agents' tools need has a live worker."""

from __future__ import annotations

import asyncio
import time

from orchestrator.saga.journal import Journal
from orchestrator.server.agents import required_pools
from orchestrator.server.state import ServiceState
from workers.protocol import POOL_KEY
from workers.settings import redact_url

__all__ = ["CHECK_TIMEOUT_S", "problems"]

CHECK_TIMEOUT_S = 2.0


async def problems(state: ServiceState) -> list[str]:
    """What keeps the replica from being ready, one line each; empty when it is ready."""
    found: list[str] = []
    if state.draining:
        found.append("this replica is draining (it was told to stop): send new work to another")
    try:
        await asyncio.wait_for(state.redis.ping(), CHECK_TIMEOUT_S)
    except Exception as exc:
        found.append(f"Redis at {redact_url(state.settings.redis_url)} does not answer: {type(exc).__name__}")
        return found
    try:
        await asyncio.wait_for(state.journal.run(_ping_database), CHECK_TIMEOUT_S)
    except Exception as exc:
        found.append(
            f"the database at {redact_url(state.settings.database_url)} does not answer: {type(exc).__name__}"
        )
    if state.settings.broker_url != state.settings.redis_url:
        try:
            await asyncio.wait_for(asyncio.to_thread(_ping_broker, state), CHECK_TIMEOUT_S)
        except Exception as exc:
            found.append(
                f"the broker at {redact_url(state.settings.broker_url)} does not answer: {type(exc).__name__}"
            )
    needed = required_pools(state.agents)
    for pool in sorted(needed):
        if not await state.redis.zcount(POOL_KEY.format(pool), time.time(), "+inf"):
            agents = ", ".join(sorted(needed[pool]))
            found.append(f"no live worker serves pool {pool!r} (needed by {agents})")
    return found


def _ping_database(journal: Journal) -> None:
    journal.ping()


def _ping_broker(state: ServiceState) -> None:
    from kombu.connection import Connection

    broker = Connection(state.settings.broker_url, connect_timeout=CHECK_TIMEOUT_S)  # type: ignore[no-untyped-call]
    with broker as connection:
        connection.ensure_connection(max_retries=1)
