"""A dead replica's invocation its client cancelled meanwhile is not carried on: the adopter would stop
it at once (its cancel mark is there) before its loop journals anything, leaving it `running` for the
next adopter, again and again; it is left to recovery, which undoes it and ends it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from orchestrator.server.adoption import adopt_in_background
from workers.protocol import CANCELLED_KEY


class Redis:
    def __init__(self, marked: set[str]) -> None:
        self.marked = marked

    async def exists(self, key: str) -> int:
        return int(key in self.marked)


class Untouchable:
    """Anything past the cancel mark's check: reached only if the invocation were carried on."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the adoption went on to {name}")


def test_a_cancelled_invocation_is_left_to_recovery() -> None:
    state = SimpleNamespace(
        redis=Redis({CANCELLED_KEY.format("inv-1")}), events=Untouchable(), journal=Untouchable()
    )
    assert asyncio.run(adopt_in_background(state, "inv-1", "dead-host:1", 1.5)) == ""  # type: ignore[arg-type]
