"""Chat memory: the message window (system message, eviction of whole tool rounds), its stores
(in-memory, SQL on SQLite and on PostgreSQL), persistence across store instances, and the memory of
an `AiService` per memory id."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    ChatMemoryStore,
    ChatMessage,
    InMemoryChatMemoryStore,
    LocalExecutor,
    MessageWindowChatMemory,
    OrchestratorError,
    ScriptedChatModel,
    SqlChatMemoryStore,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from tests._postgres import reachable_postgres
from workers import Image, ImageContent, TextContent, ToolExecutionResult, tool

# -- helpers --------------------------------------------------------------------------------------


def _call(call_id: str, name: str = "t") -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, name, f'{{"id": "{call_id}"}}')


def _ai_calls(*call_ids: str) -> AiMessage:
    return AiMessage(tool_execution_requests=[_call(i) for i in call_ids])


def _result(call_id: str) -> ToolExecutionResultMessage:
    return ToolExecutionResultMessage(call_id, "t", f"result {call_id}")


def _check_no_orphans(messages: list[ChatMessage]) -> None:
    """Every result follows its own call's AI message within that AI message's block of results, in
    call order; an AI message's calls are all answered unless its block is the last thing in memory."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert not isinstance(message, ToolExecutionResultMessage), f"orphan result at {index}: {messages}"
        index += 1
        if isinstance(message, AiMessage) and message.tool_execution_requests:
            ids = [r.id for r in message.tool_execution_requests]
            answered: list[str | None] = []
            while index < len(messages) and isinstance(messages[index], ToolExecutionResultMessage):
                answered.append(messages[index].id)  # type: ignore[union-attr]
                index += 1
            assert answered == ids[: len(answered)], f"results {answered} do not answer calls {ids}"
            if index < len(messages):
                assert answered == ids, f"calls {ids} left without results: {messages}"


def _expected_window(
    history: list[ChatMessage], system: SystemMessage | None, window: int
) -> list[ChatMessage]:
    """The reference: the system message, then the longest suffix of the conversation that fits the
    rest of the window and does not start with a tool result."""
    room = window - (1 if system is not None else 0)
    kept = history[max(len(history) - room, 0) :] if room > 0 else []
    while kept and isinstance(kept[0], ToolExecutionResultMessage):
        kept.pop(0)
    return ([system] if system is not None else []) + kept


SCRIPT: list[ChatMessage] = [
    SystemMessage("be brief"),
    UserMessage("u1"),
    _ai_calls("c1"),
    _result("c1"),
    _ai_calls("c2", "c3"),
    _result("c2"),
    _result("c3"),
    AiMessage("a1"),
    UserMessage("u2"),
    _ai_calls("c4", "c5", "c6"),
    _result("c4"),
    _result("c5"),
    _result("c6"),
    SystemMessage("be very brief"),
    AiMessage("a2"),
    UserMessage("u3"),
    _ai_calls("c7"),
    _result("c7"),
    AiMessage("a3"),
    SystemMessage("be very brief"),
    UserMessage("u4"),
]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memory.db'}"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    return reachable_postgres()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def stores() -> Iterator[Callable[[str], SqlChatMemoryStore]]:
    """Makes SQL stores (each a fresh object, like a fresh orchestrator) and disposes of them."""
    made: list[SqlChatMemoryStore] = []

    def make(url: str) -> SqlChatMemoryStore:
        store = SqlChatMemoryStore(url)
        made.append(store)
        return store

    yield make
    for store in made:
        store.engine.dispose()


@pytest.fixture
def memory_id(sql_url: str, stores: Callable[[str], SqlChatMemoryStore]) -> Iterator[str]:
    """A memory id no other test (or concurrent run) uses; its rows are deleted afterwards."""
    value = f"test-memory-{uuid.uuid4().hex}"
    yield value
    cleanup = stores(sql_url)
    for suffix in ("", ":a", ":b"):
        cleanup.delete_messages(value + suffix)


# -- the window -----------------------------------------------------------------------------------


def test_window_keeps_the_system_message_and_evicts_the_oldest_first() -> None:
    # given: a window of 3 messages
    memory = MessageWindowChatMemory(3)

    # when: a system message and four more are added
    for message in [
        SystemMessage("sys"),
        UserMessage("u1"),
        AiMessage("a1"),
        UserMessage("u2"),
        AiMessage("a2"),
    ]:
        memory.add(message)

    # then: the system message stays, and the oldest others went first
    assert memory.messages() == [SystemMessage("sys"), UserMessage("u2"), AiMessage("a2")]


def test_a_changed_system_message_replaces_the_old_one_and_the_same_one_is_not_repeated() -> None:
    # given
    memory = MessageWindowChatMemory(10)
    memory.add(SystemMessage("old"))
    memory.add(UserMessage("u1"))

    # when: the same system message again, then a changed one
    memory.add(SystemMessage("old"))
    assert memory.messages() == [SystemMessage("old"), UserMessage("u1")]
    memory.add(SystemMessage("new"))

    # then: one system message, the new one, first
    assert memory.messages() == [SystemMessage("new"), UserMessage("u1")]


def test_a_system_message_added_late_goes_first() -> None:
    # given
    memory = MessageWindowChatMemory(3)
    for message in [UserMessage("u1"), AiMessage("a1"), UserMessage("u2")]:
        memory.add(message)

    # when
    memory.add(SystemMessage("sys"))

    # then
    assert memory.messages() == [SystemMessage("sys"), AiMessage("a1"), UserMessage("u2")]


def test_evicting_a_tool_calling_ai_message_evicts_its_results_with_it() -> None:
    # given: a window of 4 holding a user message, an AI message with two calls and their results
    memory = MessageWindowChatMemory(4)
    for message in [UserMessage("u"), _ai_calls("x", "y"), _result("x"), _result("y")]:
        memory.add(message)
    assert memory.messages() == [UserMessage("u"), _ai_calls("x", "y"), _result("x"), _result("y")]

    # when: one more message
    memory.add(UserMessage("u2"))

    # then: the user message goes first (room enough now)
    assert memory.messages() == [_ai_calls("x", "y"), _result("x"), _result("y"), UserMessage("u2")]

    # when: another
    memory.add(AiMessage("a2"))

    # then: the AI message goes together with both its results: no orphan result is left
    assert memory.messages() == [UserMessage("u2"), AiMessage("a2")]


def test_a_result_that_overflows_a_small_window_takes_its_call_with_it() -> None:
    # given: a window of 2 holding an AI message with two calls and the first result
    memory = MessageWindowChatMemory(2)
    for message in [UserMessage("u"), _ai_calls("x", "y"), _result("x")]:
        memory.add(message)
    assert memory.messages() == [_ai_calls("x", "y"), _result("x")]

    # when: the second result overflows the window
    memory.add(_result("y"))

    # then: neither the call without its results nor a result without its call is left
    assert memory.messages() == []


@pytest.mark.parametrize("store_kind", ["in-memory", "sqlite"])
@pytest.mark.parametrize("window", range(1, 9))
def test_window_invariants_hold_after_every_add(window: int, store_kind: str, sqlite_url: str) -> None:
    # given: a window over a store, and a scripted conversation with tool rounds and system changes
    store: ChatMemoryStore = (
        InMemoryChatMemoryStore() if store_kind == "in-memory" else SqlChatMemoryStore(sqlite_url)
    )
    memory = MessageWindowChatMemory(window, id="prop", store=store)
    history: list[ChatMessage] = []
    system: SystemMessage | None = None

    try:
        for step, message in enumerate(SCRIPT):
            # when: each message is added
            memory.add(message)
            if isinstance(message, SystemMessage):
                system = message
            else:
                history.append(message)

            # then: the window holds, the system message is kept once and first, nothing is orphaned,
            # and what is kept is the newest part of the conversation that can be kept
            messages = memory.messages()
            where = f"window {window}, after step {step} ({message})"
            assert len(messages) <= window, where
            systems = [m for m in messages if isinstance(m, SystemMessage)]
            assert systems == [system] and messages[0] == system, where
            _check_no_orphans(messages)
            assert messages == _expected_window(history, system, window), where
    finally:
        if isinstance(store, SqlChatMemoryStore):
            store.engine.dispose()


def test_set_messages_applies_the_window_and_clear_empties_the_memory() -> None:
    # given
    memory = MessageWindowChatMemory(3)

    # when
    memory.set_messages([SystemMessage("s"), UserMessage("u1"), _ai_calls("x"), _result("x"), AiMessage("a")])

    # then: the call and its result went together; the system message stayed
    assert memory.messages() == [SystemMessage("s"), AiMessage("a")]

    # when
    memory.clear()

    # then
    assert memory.messages() == []


def test_the_window_must_hold_at_least_one_message() -> None:
    with pytest.raises(ValueError, match="max_messages must be at least 1, got 0"):
        MessageWindowChatMemory(0)


def test_memories_sharing_a_store_are_kept_apart_by_id() -> None:
    # given: two memories over one store, and one without an id
    store = InMemoryChatMemoryStore()
    a = MessageWindowChatMemory(5, id="a", store=store)
    b = MessageWindowChatMemory(5, id="b", store=store)
    unnamed = MessageWindowChatMemory(5, store=store)

    # when
    a.add(UserMessage("for a"))
    b.add(UserMessage("for b"))
    unnamed.add(UserMessage("for default"))

    # then
    assert a.messages() == [UserMessage("for a")]
    assert b.messages() == [UserMessage("for b")]
    assert store.get_messages("default") == [UserMessage("for default")]


# -- stores ---------------------------------------------------------------------------------------

CONVERSATION: list[ChatMessage] = [
    SystemMessage("sys ✓"),
    UserMessage.of("what is in this picture?", Image(url="https://example.com/cat.png")),
    AiMessage("let me look", [_call("c1", "picture"), ToolExecutionRequest("c2", "tagged", "")]),
    ToolExecutionResultMessage(
        "c1",
        "picture",
        "a cat",
        contents=(
            TextContent("a cat"),
            ImageContent(Image(base64_data="iVBORw0KGgo=", mime_type="image/png")),
        ),
    ),
    ToolExecutionResultMessage(
        "c2", "tagged", "boom", is_error=True, attributes={"found_tools": ["a"], "n": 1}
    ),
    AiMessage("It is a cat. Ünïcödé"),
]


def test_in_memory_store_keeps_each_id_and_hands_out_copies() -> None:
    # given
    store = InMemoryChatMemoryStore()
    store.update_messages("a", CONVERSATION)
    store.update_messages("b", [UserMessage("b")])

    # when: a caller changes the list it got
    got = store.get_messages("a")
    got.append(UserMessage("sneaky"))

    # then: the store is unchanged; ids are apart; unknown ids are empty
    assert store.get_messages("a") == CONVERSATION
    assert store.get_messages("b") == [UserMessage("b")]
    assert store.get_messages("nobody") == []

    # when: updated and deleted
    store.update_messages("a", [UserMessage("replaced")])
    store.delete_messages("b")
    store.delete_messages("never-there")

    # then
    assert store.get_messages("a") == [UserMessage("replaced")]
    assert store.get_messages("b") == []


def test_sql_store_round_trips_every_message_and_a_new_store_reads_it(
    sql_url: str, memory_id: str, stores: Callable[[str], SqlChatMemoryStore]
) -> None:
    # given: one store object writes a conversation
    writer = stores(sql_url)
    writer.update_messages(memory_id, CONVERSATION)

    # when: another store object (another orchestrator) reads it
    reader = stores(sql_url)

    # then: every message is back as it was
    assert reader.get_messages(memory_id) == CONVERSATION
    assert reader.get_messages(memory_id + ":a") == []


def test_sql_store_update_replaces_and_delete_removes(
    sql_url: str, memory_id: str, stores: Callable[[str], SqlChatMemoryStore]
) -> None:
    # given
    store = stores(sql_url)
    store.update_messages(memory_id + ":a", [UserMessage("a1"), AiMessage("a2")])
    store.update_messages(memory_id + ":b", [UserMessage("b1")])

    # when: a is replaced
    store.update_messages(memory_id + ":a", [UserMessage("a3")])

    # then: replaced, not appended; b untouched
    fresh = stores(sql_url)
    assert fresh.get_messages(memory_id + ":a") == [UserMessage("a3")]
    assert fresh.get_messages(memory_id + ":b") == [UserMessage("b1")]

    # when: a is deleted
    store.delete_messages(memory_id + ":a")

    # then
    assert stores(sql_url).get_messages(memory_id + ":a") == []
    assert stores(sql_url).get_messages(memory_id + ":b") == [UserMessage("b1")]


def test_a_window_over_sql_continues_in_a_new_orchestrator(
    sql_url: str, memory_id: str, stores: Callable[[str], SqlChatMemoryStore]
) -> None:
    # given: a window memory written through one store object
    first = MessageWindowChatMemory(4, id=memory_id, store=stores(sql_url))
    for message in [SystemMessage("s"), UserMessage("u1"), AiMessage("a1")]:
        first.add(message)

    # when: a memory of the same id over a new store object goes on
    second = MessageWindowChatMemory(4, id=memory_id, store=stores(sql_url))
    second.add(UserMessage("u2"))
    second.add(AiMessage("a2"))

    # then: it saw what the first wrote and applied the window to the whole
    expected = [SystemMessage("s"), AiMessage("a1"), UserMessage("u2"), AiMessage("a2")]
    assert second.messages() == expected
    assert first.messages() == expected


# -- memory of an AiService -----------------------------------------------------------------------


class Tagger:
    @tool("Tags a value")
    def tag(self, value: int) -> ToolExecutionResult:
        return ToolExecutionResult(result_object={"value": value}, attributes={"source": "tagger"})


def test_service_memory_holds_the_conversation_after_a_chat() -> None:
    # given: a service with a memory per id, a system message and an in-process tool
    call = ToolExecutionRequest("t1", "tag", '{"value": 7}')
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "tagged 7"])
    service = AiService(
        chat_model=model,
        tools=[Tagger()],
        executor=LocalExecutor(),
        system_message="You tag things",
        chat_memory_provider=lambda memory_id: MessageWindowChatMemory(20),
    )

    # when
    result = service.chat("tag 7", memory_id="m1")

    # then: the layout, the result's attributes kept in memory
    assert result.content == "tagged 7"
    assert service.memory("m1").messages() == [
        SystemMessage("You tag things"),
        UserMessage("tag 7"),
        AiMessage(tool_execution_requests=[call]),
        ToolExecutionResultMessage("t1", "tag", '{"value":7}', attributes={"source": "tagger"}),
        AiMessage("tagged 7"),
    ]
    assert model.requests[1].messages == service.memory("m1").messages()[:4]
    assert service.memory("other").messages() == []


def test_chat_memory_provider_gives_each_memory_id_its_own_memory() -> None:
    # given
    asked: list[str] = []

    def provide(memory_id: str) -> MessageWindowChatMemory:
        asked.append(memory_id)
        return MessageWindowChatMemory(10)

    model = ScriptedChatModel(["A1", "B1", "A2", "D1"])
    service = AiService(chat_model=model, chat_memory_provider=provide)

    # when: two conversations interleaved, and one without a memory id
    service.chat("a: one", memory_id="a")
    service.chat("b: one", memory_id="b")
    service.chat("a: two", memory_id="a")
    service.chat("no id")

    # then: each memory id was provided once, and each conversation saw only its own messages
    assert asked == ["a", "b", "default"]
    assert model.requests[2].messages == [UserMessage("a: one"), AiMessage("A1"), UserMessage("a: two")]
    assert model.requests[3].messages == [UserMessage("no id")]
    assert service.memory("b").messages() == [UserMessage("b: one"), AiMessage("B1")]
    assert service.memory().messages() == [UserMessage("no id"), AiMessage("D1")]


def test_stateless_orchestrators_share_conversations_through_sql(
    sql_url: str, memory_id: str, stores: Callable[[str], SqlChatMemoryStore]
) -> None:
    # given: two services (two orchestrator replicas), each opening its own SQL store
    def provider(memory_id: str) -> MessageWindowChatMemory:
        return MessageWindowChatMemory(10, store=stores(sql_url))

    first_model = ScriptedChatModel(["Nice to meet you, Mario"])
    second_model = ScriptedChatModel(["You are Mario"])
    first = AiService(chat_model=first_model, chat_memory_provider=provider)
    second = AiService(chat_model=second_model, chat_memory_provider=provider)

    # when: the conversation starts on one and continues on the other
    first.chat("I am Mario", memory_id=memory_id)
    second.chat("Who am I?", memory_id=memory_id)

    # then: the second replica's model saw the first replica's turn
    assert second_model.requests[0].messages == [
        UserMessage("I am Mario"),
        AiMessage("Nice to meet you, Mario"),
        UserMessage("Who am I?"),
    ]
    assert stores(sql_url).get_messages(memory_id)[-1] == AiMessage("You are Mario")


def test_memory_configuration_errors() -> None:
    # given: a service without memory
    service = AiService(chat_model=ScriptedChatModel(["x"]))

    # when / then: asking for its memory is an error
    with pytest.raises(OrchestratorError, match="has no memory"):
        service.memory("m")

    # and: giving both a memory and a provider is an error
    with pytest.raises(OrchestratorError, match="not both"):
        AiService(
            chat_model=ScriptedChatModel(["x"]),
            chat_memory=MessageWindowChatMemory(2),
            chat_memory_provider=lambda memory_id: MessageWindowChatMemory(2),
        )


def test_first_writes_of_one_memory_id_at_once_all_succeed_and_one_is_kept(
    sql_url: str, stores: Callable[[str], SqlChatMemoryStore]
) -> None:
    # given: ten stores (as ten replicas) about to write a memory id that has no row yet
    memory_id = f"race-{uuid.uuid4().hex}"
    writers = [stores(sql_url) for _ in range(10)]
    ready = threading.Barrier(len(writers))
    errors: list[BaseException] = []

    def write(n: int) -> None:
        ready.wait()
        try:
            writers[n].update_messages(memory_id, [UserMessage(f"turn {n}")])
        except BaseException as exc:  # the primary key raced: what this test is about
            errors.append(exc)

    # when: they write at once
    threads = [threading.Thread(target=write, args=(n,)) for n in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # then: none failed, and the row holds one of the writes, whole
    assert errors == []
    [kept] = writers[0].get_messages(memory_id)
    assert isinstance(kept, UserMessage) and kept.text in {f"turn {n}" for n in range(len(writers))}
