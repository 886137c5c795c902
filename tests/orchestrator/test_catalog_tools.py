"""`AiService` without `tools=` on an executor with a worker catalog: the model sees the live catalog,
read again per invocation through a short-lived copy (`orchestrator.loop.catalog_tools`).

The catalog here is a double: a `LocalExecutor` that also answers `catalog_definitions()` from a list
the test changes, as workers joining and leaving would. tests/integration/test_live_catalog.py does
the same with real worker processes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    ChatRequest,
    LocalExecutor,
    OrchestratorError,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolProviderRequest,
    ToolProviderResult,
)
from orchestrator.loop.catalog_tools import CATALOG_MAX_AGE_S, LiveCatalogTools, live_catalog_of
from workers import ToolDefinition, tool
from workers.tools import discover_tools


def _greeting(word: str) -> Callable[[str], str]:
    """The tool `word`, described as saying it, that says it to `name`."""

    def greet(name: str) -> str:
        return f"{word} {name}"

    return tool(f"Says {word}", name=word)(greet)


hello, goodbye = _greeting("hello"), _greeting("goodbye")


class CatalogExecutor(LocalExecutor):
    """Runs tools in-process and advertises `served` as its live catalog, counting the reads."""

    def __init__(self, served: list[object]) -> None:
        super().__init__(tools=served)
        self.served: list[ToolDefinition] = [d for f in served for d in discover_tools(f)]
        self.reads = 0
        self.read_threads: list[str] = []
        self.failure: Exception | None = None

    def catalog_definitions(self) -> list[ToolDefinition]:
        self.reads += 1
        self.read_threads.append(threading.current_thread().name)
        if self.failure is not None:
            raise self.failure
        return list(self.served)


def _calls_what_the_user_names(request: ChatRequest) -> AiMessage | str:
    """Calls the tool the user message names if the model is shown it; else says it is not there."""
    last = request.messages[-1]
    if isinstance(last, ToolExecutionResultMessage):
        return last.text
    wanted = request.messages[-1].single_text  # type: ignore[union-attr]
    if wanted in {spec.name for spec in request.tool_specifications}:
        return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", wanted, '{"name": "Ada"}')])
    return f"no tool {wanted}"


def _shown(model: ScriptedChatModel, index: int) -> set[str]:
    return {spec.name for spec in model.requests[index].tool_specifications}


def test_without_tools_the_model_sees_and_calls_the_live_catalog() -> None:
    # given: a service with no tools= on an executor whose catalog serves `hello`
    executor = CatalogExecutor([hello])
    model = ScriptedChatModel(_calls_what_the_user_names)
    service = AiService(chat_model=model, executor=executor)

    # when
    result = service.chat("hello")

    # then: the model was shown the catalog's tool, called it, and it ran
    assert _shown(model, 0) == {"hello"}
    assert result.content == "hello Ada"
    assert [e.request.name for e in result.tool_executions] == ["hello"]
    assert service.tool_specifications()[0].name == "hello"


def test_tools_that_join_and_leave_the_catalog_show_from_the_next_invocation() -> None:
    # given: a service whose catalog copy is read again at every invocation
    executor = CatalogExecutor([hello, goodbye])
    executor.served = discover_tools(hello)
    live_catalog_of(executor).max_age_s = 0.0  # type: ignore[union-attr]
    model = ScriptedChatModel(_calls_what_the_user_names)
    service = AiService(chat_model=model, executor=executor)

    # when: `goodbye` joins between the first and second invocation, and `hello` leaves after it
    first = service.chat("goodbye")
    executor.served = discover_tools(hello) + discover_tools(goodbye)
    second = service.chat("goodbye")
    executor.served = discover_tools(goodbye)
    third = service.chat("hello")

    # then
    assert first.content == "no tool goodbye"
    assert second.content == "goodbye Ada"
    assert third.content == "no tool hello"
    assert _shown(model, 0) == {"hello"}
    assert _shown(model, 1) == {"hello", "goodbye"}
    assert _shown(model, 3) == {"goodbye"}


def test_the_catalog_is_read_once_per_max_age_by_every_service_of_an_executor() -> None:
    # given: two services on one executor, with the default copy age
    executor = CatalogExecutor([hello])
    services = [
        AiService(chat_model=ScriptedChatModel(lambda request: "ok"), executor=executor) for _ in range(2)
    ]

    # when: five invocations in quick succession
    for number in range(5):
        services[number % 2].chat("hi")

    # then: one read served them all (the copy is CATALOG_MAX_AGE_S old at most)
    assert CATALOG_MAX_AGE_S >= 0.5
    assert executor.reads == 1


def test_the_catalog_is_read_off_the_event_loop() -> None:
    # given
    executor = CatalogExecutor([hello])
    service = AiService(chat_model=ScriptedChatModel(lambda request: "ok"), executor=executor)

    # when: an async invocation
    asyncio.run(service.achat("hi"))

    # then: Redis (here the double) was read in a worker thread, not the event loop's
    assert executor.reads == 1
    assert executor.read_threads != [threading.main_thread().name]


def test_given_tools_are_used_and_the_catalog_is_never_read() -> None:
    # given
    executor = CatalogExecutor([hello])
    model = ScriptedChatModel(_calls_what_the_user_names)
    service = AiService(chat_model=model, executor=executor, tools=[goodbye])

    # when
    result = service.chat("hello")

    # then
    assert result.content == "no tool hello"
    assert _shown(model, 0) == {"goodbye"}
    assert executor.reads == 0


def test_a_local_executor_without_tools_offers_no_tools() -> None:
    # given: LocalExecutor has no catalog
    model = ScriptedChatModel(["plain answer"])
    service = AiService(chat_model=model)

    # when
    result = service.chat("hello")

    # then
    assert result.content == "plain answer"
    assert model.requests[0].tool_specifications == []


def test_an_unreadable_catalog_keeps_the_last_copy_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # given: a copy read once, then Redis out of reach
    executor = CatalogExecutor([hello])
    catalog = LiveCatalogTools(executor, max_age_s=0.0)
    assert [d.name for d in catalog.current()] == ["hello"]
    executor.failure = ConnectionError("Redis is down")

    # when
    with caplog.at_level(logging.WARNING, logger="orchestrator.loop.catalog_tools"):
        definitions = catalog.current()

    # then
    assert [d.name for d in definitions] == ["hello"]
    assert "could not be read (ConnectionError: Redis is down)" in caplog.text
    assert "using the copy read" in caplog.text


def test_an_unreadable_catalog_with_no_copy_is_a_clear_error_not_retried_at_once() -> None:
    # given: Redis out of reach from the start
    executor = CatalogExecutor([hello])
    executor.failure = ConnectionError("Redis is down")
    catalog = LiveCatalogTools(executor, max_age_s=60.0)

    # when: two invocations ask within the copy's age
    errors = []
    for _ in range(2):
        with pytest.raises(OrchestratorError) as caught:
            catalog.current()
        errors.append(str(caught.value))

    # then: one read, and an error that says what to check
    assert executor.reads == 1
    assert errors[0] == errors[1]
    assert "TOOLFLEET_REDIS_URL" in errors[0] and "tools=[...]" in errors[0]
    assert "Redis is down" in errors[0]


def test_a_service_whose_catalog_is_unreadable_fails_the_invocation_clearly() -> None:
    # given
    executor = CatalogExecutor([hello])
    executor.failure = ConnectionError("Redis is down")
    service = AiService(chat_model=ScriptedChatModel(["never"]), executor=executor)

    # when / then
    with pytest.raises(OrchestratorError, match="live worker catalog could not be read"):
        service.chat("hello")


def test_the_shared_copy_does_not_keep_its_executor_alive() -> None:
    # given: an executor whose catalog copy is shared through live_catalog_of
    executor = CatalogExecutor([hello])
    AiService(chat_model=ScriptedChatModel(["ok"]), executor=executor).chat("hi")
    gone = weakref.ref(executor)

    # when
    del executor
    gc.collect()

    # then
    assert gone() is None


class StaticProvider:
    """A static provider giving `goodbye` only."""

    is_dynamic = False

    def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult:
        return ToolProviderResult(tools=[goodbye])


def test_a_service_with_tool_providers_chooses_its_tools_itself() -> None:
    # given: the catalog serves `hello` and `goodbye`; the service's provider gives only `goodbye`
    # (a provider may be there to narrow the tools down, per user or tenant)
    executor = CatalogExecutor([hello, goodbye])
    model = ScriptedChatModel(_calls_what_the_user_names)
    service = AiService(chat_model=model, executor=executor, tool_providers=[StaticProvider()])

    # when
    result = service.chat("hello")

    # then: the catalog was not added, nor read
    assert result.content == "no tool hello"
    assert _shown(model, 0) == {"goodbye"}
    assert executor.reads == 0


class RefillingExecutor(CatalogExecutor):
    """A catalog that serves nothing for its first `empty_reads` reads, then `served` again: workers
    writing their entries back at their next beat, after a Redis outage longer than their TTL."""

    def __init__(self, served: list[object], empty_reads: int) -> None:
        super().__init__(served)
        self.empty_reads = empty_reads

    def catalog_definitions(self) -> list[ToolDefinition]:
        served = super().catalog_definitions()
        return [] if self.reads <= self.empty_reads else served


def _calls(name: str) -> Callable[[ChatRequest], AiMessage | str]:
    """A model that calls `name` whatever it is shown (as one that saw it in an earlier turn would)."""

    def answer(request: ChatRequest) -> AiMessage | str:
        last = request.messages[-1]
        if isinstance(last, ToolExecutionResultMessage):
            return last.text
        return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", name, '{"name": "Ada"}')])

    return answer


def test_a_call_made_while_the_catalog_refills_waits_for_its_tool() -> None:
    # given: a catalog empty for its first three reads (the invocation is given the empty copy)
    executor = RefillingExecutor([hello], empty_reads=3)
    service = AiService(chat_model=ScriptedChatModel(_calls("hello")), executor=executor)

    # when: the model calls `hello` meanwhile
    result = service.chat("hello")

    # then: the call waited for the catalog and ran; no hallucination
    assert result.content == "hello Ada"
    assert executor.reads == 4


def test_a_name_the_catalog_never_served_is_a_hallucination_at_once() -> None:
    # given: a catalog serving `hello`, which waits up to 30 s for a lost name
    executor = CatalogExecutor([hello])
    catalog = live_catalog_of(executor)
    assert catalog is not None
    catalog.refill_wait_s = 30.0
    service = AiService(chat_model=ScriptedChatModel(_calls("hellp")), executor=executor)

    # when: the model calls a name the catalog never had
    started = time.monotonic()
    with pytest.raises(OrchestratorError, match="hellp"):
        service.chat("hellp")

    # then: it is not waited for (one read more, to be sure)
    assert time.monotonic() - started < 5
    assert executor.reads == 2


def test_a_lost_name_not_back_within_the_wait_is_a_hallucination() -> None:
    # given: a catalog that served `hello`, then lost it for good
    executor = CatalogExecutor([hello, goodbye])
    catalog = live_catalog_of(executor)
    assert catalog is not None
    catalog.current()
    executor.served = discover_tools(goodbye)
    catalog.max_age_s, catalog.refill_wait_s = 0.0, 0.5
    service = AiService(chat_model=ScriptedChatModel(_calls("hello")), executor=executor)

    # when
    started = time.monotonic()
    with pytest.raises(OrchestratorError, match="hello"):
        service.chat("hello")

    # then: it was waited for, read again about every REFILL_POLL_S, no longer than the wait
    waited = time.monotonic() - started
    assert 0.5 <= waited < 3
    assert executor.reads >= 4
