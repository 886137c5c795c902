"""Where a dispatch publishes and watches: a call on the queue of the build serving its version, watched
there (a queued call ends `no_worker` once that build's last worker stops); an undo, or an undo in doubt,
on a build of its version while one lives, else on the pool's own queue."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.executors.celery import _compensation as compensation_module
from orchestrator.executors.celery._compensation import undo_in_doubt
from orchestrator.executors.celery._dispatch import Dispatcher
from orchestrator.executors.celery._pools import Pools
from tests.orchestrator.test_version_routes import POOL, FakeCatalog, New, Old, definition, worker
from workers import OutcomeKind, ToolDefinition, ToolExecution, ToolOutcome
from workers.calls.invocation import Invocation
from workers.protocol import CallTask, CompensationTask, ToolExecutionRequest
from workers.runtime.catalog import WorkerEntry
from workers.settings import Settings

SUCCESS = {"status": "SUCCESS", "result": {"kind": "success", "text": "ok", "worker": "w@h"}}


class Collector:
    """Resolves every call at once; remembers the queue each was watched on."""

    def __init__(self) -> None:
        self.watched: list[tuple[str, str]] = []

    def watch(
        self, task_id: str, queue: str, *_: Any, **__: Any
    ) -> concurrent.futures.Future[dict[str, Any]]:
        self.watched.append((task_id, queue))
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        future.set_result(SUCCESS)
        return future

    def forget(self, task_id: str) -> None: ...

    def subscribe_deferred(self) -> None: ...


class Publisher:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def producer_or_acquire(self) -> Iterator[Any]:
        yield self  # a producer of its own: its batches send nothing until they end

    @contextlib.contextmanager
    def batch(self, max_size: int) -> Iterator[None]:
        yield

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append((name, options["queue"]))


class Recording(Dispatcher):
    def __init__(self, *workers: WorkerEntry) -> None:
        super().__init__(Settings(), Publisher(), None, Pools(FakeCatalog(workers)))  # type: ignore[arg-type]
        self.stub = Collector()
        self.routes._choose = lambda queues, weights: queues[0]

    @property
    def collector(self) -> Any:
        return self.stub


def _dispatch(
    dispatcher: Dispatcher, tool: ToolDefinition, envelope: CallTask | CompensationTask
) -> ToolOutcome:
    name = "compensate.lookup" if isinstance(envelope, CompensationTask) else "tool.lookup"
    return asyncio.run(
        dispatcher.dispatch(
            name, "t-1", envelope, tool, time.monotonic() + 5, 5.0, key="inv:c1", on_call=None
        )
    )


REQUEST = ToolExecutionRequest("c1", "lookup", '{"key": "k"}')


def test_a_call_is_published_and_watched_on_its_builds_queue() -> None:
    # given: an old and a new build of the pool
    old, new = worker("old@h", Old), worker("new@h", New)
    dispatcher = Recording(old, new)
    # when: a call of the new version is dispatched
    outcome = _dispatch(dispatcher, definition(New), CallTask(REQUEST, Invocation()))
    # then: sent to the new build's queue and watched there; its outcome names the pool
    assert dispatcher.publisher.sent == [("tool.lookup", new.queue(POOL))]  # type: ignore[attr-defined]
    assert dispatcher.stub.watched == [("t-1", new.queue(POOL))]
    assert (outcome.kind, outcome.pool) == (OutcomeKind.SUCCESS, POOL)


def test_a_call_of_a_version_nobody_serves_is_neither_published_nor_watched() -> None:
    dispatcher = Recording(worker("new@h", New))
    outcome = _dispatch(dispatcher, definition(Old), CallTask(REQUEST, Invocation()))
    assert outcome.kind is OutcomeKind.NO_WORKER
    assert dispatcher.publisher.sent == [] and dispatcher.stub.watched == []  # type: ignore[attr-defined]


def test_an_undo_goes_to_a_build_of_its_version_else_to_the_pools_queue() -> None:
    old, new = worker("old@h", Old), worker("new@h", New)
    execution = ToolExecution(request=REQUEST, result="ok")
    undo = CompensationTask(execution, Invocation(), "inv:c1")
    # while the old build lives, the old call's undo runs there
    both = Recording(old, new)
    _dispatch(both, definition(Old), undo)
    assert both.publisher.sent == [("compensate.lookup", old.queue(POOL))]  # type: ignore[attr-defined]
    # once only the new build lives, on the pool's own queue
    new_only = Recording(new)
    _dispatch(new_only, definition(Old), undo)
    assert new_only.publisher.sent == [("compensate.lookup", POOL)]  # type: ignore[attr-defined]


def test_an_undo_in_doubt_goes_to_a_build_of_its_version_else_to_the_pools_queue() -> None:
    old, new = worker("old@h", Old), worker("new@h", New)
    lost = ToolOutcome(kind=OutcomeKind.WORKER_LOST, text="lost", error_type="WorkerLostError")
    for live, expected in (((old, new), old.queue(POOL)), ((new,), POOL)):
        dispatcher = Recording(*live)
        asyncio.run(undo_in_doubt(dispatcher, definition(Old), REQUEST, Invocation(), lost))
        assert dispatcher.publisher.sent == [("compensate.lookup", expected)]  # type: ignore[attr-defined]


def test_an_undo_sent_again_when_lost_goes_to_a_build_of_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: an awaited undo that no worker has and that no longer waits in its queue
    monkeypatch.setattr(compensation_module, "LOOK_AGAIN_S", 0.01)
    monkeypatch.setattr(compensation_module, "_lost", lambda *_: True)
    old, new = worker("old@h", Old), worker("new@h", New)
    undo = CompensationTask(ToolExecution(request=REQUEST, result="ok"), Invocation(), "inv:c1")
    for live, expected in (((old, new), old.queue(POOL)), ((new,), POOL)):
        dispatcher = Recording(*live)
        # when: it is looked for until its deadline
        resend = compensation_module._resend_if_lost(
            dispatcher, definition(Old), "t-1", undo, "inv:c1", time.monotonic() + 0.1
        )
        asyncio.run(resend)
        # then: it was sent again, each time to a build of its version while one lives
        sent = dispatcher.publisher.sent  # type: ignore[attr-defined]
        assert sent and set(sent) == {("compensate.lookup", expected)}
