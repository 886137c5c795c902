"""A dead replica's invocation its client cancelled meanwhile is not carried on: the adopter would stop
it at once (its cancel mark is there) before its loop journals anything, leaving it `running` for the
next adopter, again and again; it is left to recovery, which undoes it and ends it. So is one whose
stream already told its clients it ended (its run failed, and so did the journal's end): carried on,
it would succeed after its clients were told it failed."""

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


class EndedStream:
    """An event log whose stream of the invocation told its end (its run failed, its journal unwritten)."""

    async def ended(self, invocation_id: str) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the adoption went on to {name}")


def test_an_invocation_whose_clients_were_told_its_end_is_left_to_recovery() -> None:
    state = SimpleNamespace(redis=Redis(set()), events=EndedStream(), journal=Untouchable())
    assert asyncio.run(adopt_in_background(state, "inv-2", "dead-host:1", 1.5)) == ""  # type: ignore[arg-type]
