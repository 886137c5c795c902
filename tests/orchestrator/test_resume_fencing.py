"""A run resuming a paused invocation takes the invocation's event stream only once it has claimed the
invocation: when two replicas try to go on with it at once (an approval posted to one while the
other's housekeeping finds it decided), the one that lost the claim must not take the winner's stream,
or the winner's events, its last among them, would be refused."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from orchestrator.messages import UserMessage
from orchestrator.result import InvocationResumed
from orchestrator.server.invocations import Invocations, Run


class Stream:
    """An event log that keeps who took the stream and what each runner added, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str | None]] = []  # ("take", runner) or (event type, runner)

    async def take(self, invocation_id: str, runner: str) -> None:
        self.said.append(("take", runner))

    async def add(self, invocation_id: str, event: dict[str, Any], *, runner: str | None = None) -> str:
        self.said.append((str(event["type"]), runner))
        return f"{len(self.said)}-0"


class NoRedis:
    async def exists(self, key: str) -> int:
        return 0


class Resuming:
    """A service whose resume of the invocation claims it (`won`) or finds another process did."""

    def __init__(self, won: bool) -> None:
        self.won = won

    async def stream_resume(self, invocation_id: str, **options: Any) -> Any:
        if self.won:
            yield InvocationResumed(invocation_id, ())


def _told(won: bool) -> list[tuple[str, str | None]]:
    stream = Stream()

    async def scenario() -> None:
        invocations = Invocations(cast(Any, NoRedis()), cast(Any, stream))
        service = cast(Any, Resuming(won))
        run = Run("inv-9", "clerk", service, UserMessage("hi"), cast(Any, None), None, resuming=True)

        async def nothing() -> None:
            pass

        await invocations.start(run, nothing, on_end=lambda: None, let_go=nothing)
        await asyncio.gather(*invocations.running.values(), return_exceptions=True)

    asyncio.run(scenario())
    return stream.said


def test_a_resume_that_lost_the_claim_does_not_take_the_stream() -> None:
    assert [what for what, _ in _told(won=False)] == []


def test_a_resume_that_claimed_the_invocation_takes_the_stream_before_saying_so() -> None:
    told = _told(won=True)
    assert [what for what, _ in told] == ["take", "invocation.resumed"]
    (_, taken), (_, writer) = told
    assert taken is not None and writer == taken  # the resumed event is written as the runner that took it
