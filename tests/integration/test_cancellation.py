"""Cancelling invocations on real workers: `AiService.cancel` and `toolfleet cancel` from another
process stop the work — a prefork pool's call is terminated at once, a threads pool's cooperative tool
stops at its next report — and what the invocation did is undone exactly once, the journal saying
`cancelled` and the model not asked again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import tests.integration.cancel_tools as ct
from orchestrator import AiService, CeleryExecutor, Journal, ScriptedChatModel
from tests._background import Background
from tests._cli import toolfleet
from tests._waiting import wait_for
from tests.integration.scripts import ask, call
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import REPO_ROOT, threads_and_prefork
from workers import ToolExecutionRequest
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

MODULE = "tests.integration.cancel_tools"


@pytest.fixture(scope="module")
def cancel_pools(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    logs = tmp_path_factory.mktemp("cancel-workers")
    with threads_and_prefork(redis_url, MODULE, (ct.THREADS, ct.PREFORK), logs, threads=4):
        yield


@pytest.fixture
def ns() -> str:
    return uuid.uuid4().hex[:10]


def _service(settings: Settings, journal_path: Path, *steps: object) -> tuple[AiService, ScriptedChatModel]:
    model = ScriptedChatModel([*steps, "done"])
    service = AiService(
        chat_model=model,
        tools=[ct.hold, ct.crawl, ct.Desk()],
        executor=CeleryExecutor(settings=settings),
        journal=Journal(f"sqlite:///{journal_path}"),
        compensate_on_tool_errors=True,
    )
    return service, model


def _counter(ns: str, what: str) -> int:
    return int(process_client().get(f"cancel:{ns}:{what}") or 0)


def _cancelled_run(service: AiService, invocation_id: str) -> Background[object]:
    return Background(lambda: service.chat("go", invocation_id=invocation_id))


def test_cancel_terminates_a_prefork_call_at_once_and_undoes_what_was_done(
    cancel_pools: None, settings: Settings, tmp_path: Path, ns: str
) -> None:
    # given: an invocation that reserved a seat, then holds a prefork process for 30 s
    service, model = _service(
        settings,
        tmp_path / "journal.db",
        ask(call("r1", "reserve", ns=ns)),
        ask(call("h1", "hold", ns=ns, seconds=30)),
    )
    invocation_id = str(uuid.uuid4())
    running = _cancelled_run(service, invocation_id)
    wait_for(lambda: _counter(ns, "held"), timeout_s=20, what="the hold started")
    pid = _counter(ns, "pid")

    # when: it is cancelled
    asked = time.monotonic()
    assert service.cancel(invocation_id) is True

    # then: the call's process is killed within 0.5 s, and the invocation ends cancelled
    wait_for(lambda: not _alive(pid), timeout_s=0.5, what="the prefork child running the call killed")
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=30)
    assert time.monotonic() - asked < 10
    wait_for(lambda: _counter(ns, "undone"), timeout_s=10, what="the reservation undone")
    time.sleep(0.5)  # a second compensation would have run by now
    assert (_counter(ns, "booked"), _counter(ns, "undone"), _counter(ns, "finished")) == (1, 1, 0)
    record = Journal(f"sqlite:///{tmp_path / 'journal.db'}").invocation(invocation_id)
    assert record is not None and record.state == "cancelled"
    assert len(model.requests) == 2  # the model was not asked again after the cancel


def test_a_cooperative_tool_on_threads_stops_at_its_next_report(
    cancel_pools: None, settings: Settings, tmp_path: Path, ns: str
) -> None:
    service, _ = _service(settings, tmp_path / "journal.db", ask(call("c1", "crawl", ns=ns, steps=300)))
    invocation_id = str(uuid.uuid4())
    running = _cancelled_run(service, invocation_id)
    wait_for(lambda: _counter(ns, "steps") >= 3, timeout_s=20, what="the crawl under way")

    service.cancel(invocation_id)

    wait_for(lambda: _counter(ns, "saw"), timeout_s=2, what="the tool seeing its cancellation")
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=30)
    steps = _counter(ns, "steps")
    time.sleep(0.5)
    assert _counter(ns, "steps") == steps < 300  # it stopped


def test_toolfleet_cancel_from_another_process(
    cancel_pools: None, settings: Settings, tmp_path: Path, ns: str, redis_url: str
) -> None:
    journal_path = tmp_path / "journal.db"
    service, _ = _service(settings, journal_path, ask(call("h1", "hold", ns=ns, seconds=30)))
    invocation_id = str(uuid.uuid4())
    running = _cancelled_run(service, invocation_id)
    wait_for(lambda: _counter(ns, "held"), timeout_s=20, what="the hold started")

    done = toolfleet(
        "cancel",
        invocation_id,
        cwd=Path(REPO_ROOT),
        env={"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_DATABASE_URL": f"sqlite:///{journal_path}"},
    )

    assert done.returncode == 0, done.stderr
    assert f"cancel requested for invocation {invocation_id}" in done.stdout
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=30)
    again = toolfleet(
        "cancel",
        invocation_id,
        cwd=Path(REPO_ROOT),
        env={"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_DATABASE_URL": f"sqlite:///{journal_path}"},
    )
    assert again.returncode == 1 and "has already ended (cancelled)" in again.stderr


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a killed child its parent has not reaped yet does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("tool", ["hold", "crawl"])
def test_cancelling_one_call_fails_it_and_the_invocation_goes_on(
    cancel_pools: None, settings: Settings, tmp_path: Path, ns: str, tool: str
) -> None:
    # given: a call that would run for long, on a prefork pool (hold) or a threads pool (crawl)
    arguments = {"seconds": 30} if tool == "hold" else {"steps": 300}
    service, model = _service(settings, tmp_path / "journal.db", ask(call("x1", tool, ns=ns, **arguments)))
    invocation_id = str(uuid.uuid4())
    running = Background(lambda: service.chat("go", invocation_id=invocation_id))
    started = "held" if tool == "hold" else "steps"
    wait_for(lambda: _counter(ns, started), timeout_s=20, what="the call under way")

    # when: that call alone is cancelled
    assert service.cancel_call(invocation_id, "x1") is True

    # then: the model hears the call was cancelled and answers; the invocation ends normally
    result = running.join(timeout_s=30)
    assert result.content == "done"  # type: ignore[attr-defined]
    told = model.requests[1].messages[-1]
    assert "Tool '" + tool + "' was cancelled" in told.text  # type: ignore[union-attr]
    if tool == "crawl":
        wait_for(lambda: _counter(ns, "saw"), timeout_s=2, what="the tool seeing its cancellation")
    else:
        wait_for(lambda: not _alive(_counter(ns, "pid")), timeout_s=2, what="the call's process killed")


def test_a_cooperative_tool_given_up_at_its_deadline_stops_at_its_next_report(
    cancel_pools: None, settings: Settings, ns: str
) -> None:
    # given: the crawl, its deadline cut to 0.5 s
    async def timed_out() -> str:
        executor = CeleryExecutor(settings=settings)
        try:
            crawl = executor.definition("crawl")
            assert crawl is not None
            short = dataclasses.replace(crawl, options=dataclasses.replace(crawl.options, timeout=0.5))
            request = ToolExecutionRequest("d1", "crawl", json.dumps({"ns": ns, "steps": 300}))
            return (await executor.execute(request, short)).kind.value
        finally:
            executor.close()

    # when: its deadline passes
    assert asyncio.run(timed_out()) == "timed_out"

    # then: the tool was told, and stopped at its next report instead of running on for 30 s
    wait_for(lambda: _counter(ns, "saw"), timeout_s=2, what="the tool seeing it was given up")
    steps = _counter(ns, "steps")
    time.sleep(0.5)
    assert _counter(ns, "steps") == steps < 300


def test_a_cancel_undoes_what_the_running_batch_completed_and_leaves_no_call_dispatched(
    cancel_pools: None, settings: Settings, tmp_path: Path, ns: str
) -> None:
    # given: one response asking for a seat (compensable, done at once) and a long crawl, run together
    journal_path = tmp_path / "journal.db"
    service, model = _service(
        settings, journal_path, ask(call("r1", "reserve", ns=ns), call("c1", "crawl", ns=ns, steps=300))
    )
    invocation_id = str(uuid.uuid4())
    running = _cancelled_run(service, invocation_id)
    journal = Journal(f"sqlite:///{journal_path}")

    def reserved_while_crawling() -> bool:  # the seat's outcome journaled, the crawl under way
        return bool(_counter(ns, "steps")) and _states(journal, invocation_id).get("r1") == "succeeded"

    wait_for(reserved_while_crawling, timeout_s=20, what="the seat reserved while the crawl runs")

    # when: the invocation is cancelled in the middle of that batch
    assert service.cancel(invocation_id) is True
    with pytest.raises(asyncio.CancelledError):
        running.join(timeout_s=30)

    # then: the seat the batch reserved is released, once; the crawl is abandoned, not left dispatched
    wait_for(lambda: _counter(ns, "undone"), timeout_s=10, what="the reservation undone")
    time.sleep(0.5)  # a second compensation would have run by now
    assert (_counter(ns, "booked"), _counter(ns, "undone")) == (1, 1)
    assert _states(journal, invocation_id) == {"r1": "compensated", "c1": "abandoned"}
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "cancelled"
    assert len(model.requests) == 1


def _states(journal: Journal, invocation_id: str) -> dict[str, str]:
    """The state of each call of the invocation in the journal, by call id."""
    return {str(c.call_id): str(c.state) for c in journal.calls(invocation_id)}
