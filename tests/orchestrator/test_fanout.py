"""`max_fanout`: the one limit on an invocation's tool calls in flight, in-process (`LocalExecutor`)."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel
from orchestrator.errors import OrchestratorError
from workers import ToolExecutionRequest, tool
from workers.errors import SettingsError

CALLS = 6


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    @tool("Holds a slot for a moment")
    def occupy(self) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.2)  # the work: holding the slot is what is measured
        with self.lock:
            self.now -= 1
        return "ok"


def _service(counter: Counter, **options: object) -> AiService:
    calls = [ToolExecutionRequest(f"call-{i}", "occupy", "{}") for i in range(CALLS)]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    return AiService(chat_model=model, tools=[counter], **options)  # type: ignore[arg-type]


def test_toolfleet_max_fanout_bounds_the_default_local_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLFLEET_MAX_FANOUT", "2")
    counter = Counter()
    service = _service(counter)
    assert service.max_fanout == 2
    assert service.chat("go").content == "done"
    assert counter.most == 2


def test_an_executors_own_limit_is_the_default_and_the_keyword_overrides_it() -> None:
    executor = LocalExecutor(max_fanout=3)
    try:
        counter = Counter()
        _service(counter, executor=executor).chat("go")
        assert counter.most == 3
        counter = Counter()
        _service(counter, executor=executor, max_fanout=1).chat("go")
        assert counter.most == 1
    finally:
        executor.close()


def test_local_executor_reads_toolfleet_max_fanout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLFLEET_MAX_FANOUT", "7")
    executor = LocalExecutor()
    try:
        assert executor.max_fanout == 7
    finally:
        executor.close()


def test_max_concurrent_tool_calls_is_a_deprecated_alias_of_max_fanout() -> None:
    counter = Counter()
    with pytest.warns(DeprecationWarning, match="use max_fanout="):
        service = _service(counter, max_concurrent_tool_calls=2)
    assert service.max_fanout == 2
    service.chat("go")
    assert counter.most == 2


def test_the_alias_and_the_name_may_not_disagree() -> None:
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(OrchestratorError, match="max_fanout=3 and its deprecated alias"),
    ):
        _service(Counter(), max_fanout=3, max_concurrent_tool_calls=2)


@pytest.mark.parametrize("source", ["keyword", "environment"])
def test_a_limit_below_one_is_refused_saying_what_to_change(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    if source == "environment":
        monkeypatch.setenv("TOOLFLEET_MAX_FANOUT", "0")
    options = {"max_fanout": 0} if source == "keyword" else {}
    refused = r"max_fanout must be at least 1, got 0 .*TOOLFLEET_MAX_FANOUT"
    if source == "environment":  # the settings refuse it as they are read, naming the range
        refused = r"^TOOLFLEET_MAX_FANOUT must be an integer >= 1, got 0$"
    error = OrchestratorError if source == "keyword" else SettingsError
    with pytest.raises(error, match=refused):
        _service(Counter(), **options)
