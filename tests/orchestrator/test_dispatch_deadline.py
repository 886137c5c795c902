"""A compensable call whose worker finishes it just as its deadline passes (`Dispatcher.dispatch`).

The dispatcher's claim (`SET NX` on the call's state) loses to the worker's "finished" mark, so the
call succeeded and its result is on its way. The collector, Redis, the broker and the catalog are
stubs here: the race is set up exactly, which real processes cannot do on demand.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.executors.celery import _dispatch as dispatch_module
from orchestrator.executors.celery._dispatch import Dispatcher
from workers import (
    OutcomeKind,
    ToolDefinition,
    ToolExecution,
    ToolOutcome,
    ToolRegistry,
    compensate_for,
    tool,
)
from workers.calls.invocation import Invocation
from workers.calls.retry import call_state_ttl_s
from workers.protocol import (
    CALL_FINISHED,
    META_PREFIX,
    CallTask,
    CompensationTask,
    ToolExecutionRequest,
    call_state_key,
)
from workers.settings import Settings


class Bank:
    """One compensable tool, whose deadline passes long before the test's grace for late results."""

    @tool("Credits an account", pool="bank", timeout=0.05)
    def credit(self, amount: int) -> str:
        return f"credited {amount}"

    @compensate_for("credit")
    def debit(self, amount: int) -> None: ...


class Collector:
    """Hands out futures nobody resolves: the call's result is never heard on the subscription."""

    def __init__(self) -> None:
        self.watched: list[str] = []
        self.forgotten: list[str] = []

    def watch(
        self, task_id: str, *arguments: Any, **options: Any
    ) -> concurrent.futures.Future[dict[str, Any]]:
        self.watched.append(task_id)
        return concurrent.futures.Future()

    def forget(self, task_id: str) -> None:
        self.forgotten.append(task_id)

    def subscribe_deferred(self) -> None:
        pass  # nothing is heard anyway


class Redis:
    """The call's state as the worker left it: marked finished, its result stored or not."""

    def __init__(self, stored: dict[str, Any] | None, *, finished_first: bool = True) -> None:
        self.values: dict[str, bytes] = {}
        self.stored = stored
        self.finished_first = finished_first
        self.sets: list[tuple[str, str, dict[str, Any]]] = []

    def set(self, key: str, value: str, **options: Any) -> bool:
        self.sets.append((key, value, options))
        return not self.finished_first or not options.get("nx")  # the worker's mark may be there first

    def get(self, key: str) -> bytes | None:
        if key.startswith(META_PREFIX) and self.stored is not None:
            return json.dumps(self.stored).encode()
        return self.values.get(key)


class Pools:
    def __init__(self, kind: str = "threads") -> None:
        self.pool_kind = kind

    def has_workers(self, pool: str) -> bool:
        return True

    def kind(self, pool: str) -> str:
        return self.pool_kind

    def limit(self, pool: str) -> int | None:
        return None  # no fleet-wide limit of the pool

    def workers(self, max_age_s: float = 0.0) -> list[Any]:
        return []  # no build advertised: calls go to the pool's own queue

    def last_read(self) -> list[Any]:
        return []


class Control:
    def __init__(self) -> None:
        self.revoked: list[str] = []
        self.terminated: list[str] = []

    def revoke(self, task_id: str, **options: Any) -> None:
        self.revoked.append(task_id)
        if options.get("terminate"):
            self.terminated.append(task_id)


class Publisher:
    def __init__(self) -> None:
        self.control = Control()
        self.sent: list[str] = []

    @contextlib.contextmanager
    def producer_or_acquire(self) -> Iterator[Any]:
        yield self  # a producer of its own: its batches send nothing until they end

    @contextlib.contextmanager
    def batch(self, max_size: int) -> Iterator[None]:
        yield

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append(options["task_id"])


class Stubbed(Dispatcher):
    """The dispatcher with its collector replaced."""

    def __init__(
        self, stored: dict[str, Any] | None, *, finished_first: bool = True, kind: str = "threads"
    ) -> None:
        redis = Redis(stored, finished_first=finished_first)
        super().__init__(Settings(), Publisher(), redis, Pools(kind))  # type: ignore[arg-type]
        self.stub = Collector()

    @property
    def collector(self) -> Any:
        return self.stub


def definition() -> ToolDefinition:
    found = ToolRegistry([Bank()]).get("credit")
    assert found is not None and found.compensation is not None
    return found


def dispatch(dispatcher: Dispatcher) -> ToolOutcome:
    request = ToolExecutionRequest("c1", "credit", '{"amount": 5}')
    envelope = CallTask(request, Invocation(), compensate_if_late=True)
    started = time.monotonic()
    return asyncio.run(
        dispatcher.dispatch(
            "tool.credit",
            "t-1",
            envelope,
            definition(),
            started + 0.05,
            0.05,
            key="inv:c1",
            on_call=None,
            abandon_atomically=True,
        )
    )


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch_module, "LATE_RESULT_GRACE_S", 0.2)


def test_a_result_the_collector_missed_is_read_from_the_backend() -> None:
    # given: a call its worker finished at the deadline; its result is stored, yet never heard
    stored = {"status": "SUCCESS", "result": {"kind": "success", "text": "credited 5", "worker": "bank@h"}}
    dispatcher = Stubbed(stored)

    # when: it is dispatched and its deadline passes
    outcome = dispatch(dispatcher)

    # then: the stored result is its outcome; the call is forgotten by the collector, not revoked
    assert (outcome.kind, outcome.text, outcome.worker, outcome.task_id) == (
        OutcomeKind.SUCCESS,
        "credited 5",
        "bank@h",
        "t-1",
    )
    assert dispatcher.stub.forgotten == ["t-1"]
    assert dispatcher.publisher.control.revoked == []
    # ... and the claim it lost was the one-shot SET NX, kept as long as the call's state lives
    [(key, value, options)] = dispatcher.redis.sets  # type: ignore[attr-defined]
    assert (key, value, options) == (
        call_state_key("t-1"),
        "abandoned",
        {"nx": True, "ex": call_state_ttl_s(dispatcher.settings)},
    )


def test_a_result_that_never_arrives_times_the_call_out_without_revoking_it() -> None:
    # given: a call its worker finished at the deadline, whose result is nowhere
    dispatcher = Stubbed(None)
    dispatcher.redis.values[call_state_key("t-1")] = CALL_FINISHED.encode()  # type: ignore[attr-defined]

    # when: it is dispatched and its deadline passes
    outcome = dispatch(dispatcher)

    # then: it timed out (an outcome, not an exception), and nothing is revoked: it finished
    assert (outcome.kind, outcome.text, outcome.task_id) == (
        OutcomeKind.TIMED_OUT,
        "Tool 'credit' did not finish within 0.05 s",
        "t-1",
    )
    assert dispatcher.stub.forgotten == ["t-1"]
    assert dispatcher.publisher.control.revoked == []


def test_a_compensation_given_up_is_never_revoked() -> None:
    # a compensation's task id is its call's: revoked once, every retry of it (a recovery's) would be
    # discarded by the workers, and the call never undone
    dispatcher = Stubbed(None)
    request = ToolExecutionRequest("c1", "credit", '{"amount": 5}')
    execution = ToolExecution(request=request, result="credited 5", status="success")
    started = time.monotonic()
    outcome = asyncio.run(
        dispatcher.dispatch(
            "compensate.credit",
            "compensate-1",
            CompensationTask(execution, Invocation(), "inv:c1"),
            definition(),
            started + 0.05,
            0.05,
            key="inv:c1",
            on_call=None,
        )
    )
    assert outcome.kind is OutcomeKind.TIMED_OUT
    assert dispatcher.publisher.control.revoked == []  # type: ignore[attr-defined]


def cancelled_dispatch(dispatcher: Dispatcher, *, compensable: bool = True) -> ToolOutcome:
    """A call with a long deadline, its invocation cancelled while it runs."""
    request = ToolExecutionRequest("c1", "credit", '{"amount": 5}')
    envelope = CallTask(request, Invocation(), compensate_if_late=compensable)

    async def scenario() -> ToolOutcome:
        running = asyncio.ensure_future(
            dispatcher.dispatch(
                "tool.credit",
                "t-1",
                envelope,
                definition(),
                time.monotonic() + 30,
                30,
                key="inv:c1",
                on_call=None,
                abandon_atomically=compensable,
            )
        )
        await asyncio.sleep(0.05)
        running.cancel()
        return await running

    return asyncio.run(scenario())


def test_a_call_its_worker_finished_as_its_invocation_was_cancelled_is_told_succeeded() -> None:
    # given: a call whose worker marks it finished just before the orchestrator's claim
    stored = {"status": "SUCCESS", "result": {"kind": "success", "text": "credited 5", "worker": "bank@h"}}
    dispatcher = Stubbed(stored)

    # when: its invocation is cancelled
    outcome = cancelled_dispatch(dispatcher)

    # then: it succeeded, and says so (the invocation undoes it with its other successes); not revoked
    assert (outcome.kind, outcome.text, outcome.worker) == (OutcomeKind.SUCCESS, "credited 5", "bank@h")
    assert dispatcher.publisher.control.revoked == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("compensable", [True, False])
def test_a_cancelled_prefork_call_is_killed_only_if_nothing_would_undo_it(compensable: bool) -> None:
    # given: a call on a prefork pool that the orchestrator abandons first
    dispatcher = Stubbed(None, finished_first=False, kind="prefork")

    # when: its invocation is cancelled
    with pytest.raises(asyncio.CancelledError):
        cancelled_dispatch(dispatcher, compensable=compensable)

    # then: it is revoked; killed midway only when it is not undone by its worker if it finishes (killed
    # after its effect, before it could tell, it would leave an effect nothing undoes)
    control = dispatcher.publisher.control  # type: ignore[attr-defined]
    assert control.revoked == ["t-1"]
    assert control.terminated == ([] if compensable else ["t-1"])
