"""What a module of tools registers: its `@tool` functions with their module-level compensations, its
tool objects, and its tool classes; and which parameters registration refuses."""

from __future__ import annotations

import json
import logging
import types
from typing import Any

import pytest

from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel, ToolExecutionRequest
from orchestrator.saga.journal import Journal
from workers import (
    ToolDefinitionError,
    ToolErrorVisibleToLlm,
    ToolExecution,
    ToolRegistry,
    compensate_for,
    tool,
)
from workers.runtime.catalog import CatalogTool
from workers.tools import check_compensations, discover_tools


def module_of(name: str, **members: Any) -> types.ModuleType:
    """A module named `name` holding `members`, as `import` would make it."""
    module = types.ModuleType(name)
    for attribute, value in members.items():
        setattr(module, attribute, value)
    return module


def bank_module(ledger: list[str]) -> types.ModuleType:
    """Module-level tools: a credit undone by a module-level compensation, and a payment that fails."""

    @tool("Credits money")
    def credit(name: str, amount: int) -> str:
        ledger.append(f"credit {name} {amount}")
        return f"Credited {amount} to {name}"

    @compensate_for("credit")
    def uncredit(name: str, amount: int) -> None:
        ledger.append(f"uncredit {name} {amount}")

    @tool("A payment that is always declined")
    def pay(name: str) -> str:
        raise ToolErrorVisibleToLlm.from_message("declined")

    return module_of("bank_functions", credit=credit, uncredit=uncredit, pay=pay)


def call(call_id: str, tool_name: str, **arguments: object) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=tool_name, arguments=json.dumps(arguments))


# -- module-level compensations ---------------------------------------------------------------------


def test_a_module_level_compensation_is_linked_to_its_tool() -> None:
    # Given: a module whose credit is undone by a module-level function
    module = bank_module([])

    # When
    definitions = {d.name: d for d in discover_tools(module)}

    # Then: credit is compensable by `uncredit`, which is no tool itself
    assert sorted(definitions) == ["credit", "pay"]
    compensation = definitions["credit"].compensation
    assert compensation is not None
    assert compensation.tool_name == "credit"
    assert compensation.function is module.uncredit
    assert [p.name for p in compensation.parameters] == ["name", "amount"]
    assert definitions["pay"].compensation is None


def test_a_module_level_compensation_is_advertised_in_the_catalog() -> None:
    registry = ToolRegistry([bank_module([])])
    credit = registry.get("credit")
    assert credit is not None

    advertised = CatalogTool.from_json(json.loads(json.dumps(CatalogTool.of(credit).to_json())))

    assert advertised.compensable is True


def test_a_module_level_compensation_names_the_llm_visible_name_of_a_renamed_tool() -> None:
    @tool(name="transferMoney")
    def transfer(to: str) -> str:
        return "sent"

    @compensate_for("transferMoney")
    def undo(to: str) -> None: ...

    definitions = discover_tools(module_of("renamed", transfer=transfer, undo=undo))

    assert definitions[0].name == "transferMoney"
    assert definitions[0].compensation is not None
    assert definitions[0].compensation.function is undo


def test_a_module_level_compensation_may_take_one_tool_execution() -> None:
    @tool
    def book(seat: str) -> str:
        return seat

    @compensate_for("book")
    def release(execution: ToolExecution) -> None: ...

    module = module_of("seats", book=book, release=release)
    check_compensations(module)

    assert discover_tools(module)[0].compensation is not None


def test_the_saga_runs_a_module_level_compensation_on_the_local_executor(journal: Journal) -> None:
    # Given: a service over the module, compensation on; the model credits, then pays (declined)
    ledger: list[str] = []
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[call("1", "credit", name="Ada", amount=100)]),
            AiMessage(tool_execution_requests=[call("2", "pay", name="Ada")]),
            "The payment was declined",
        ]
    )
    service = AiService(
        chat_model=model,
        tools=[bank_module(ledger)],
        executor=LocalExecutor(),
        compensate_on_tool_errors=True,
        journal=journal,
    )

    # When
    result = service.chat("Credit Ada, then pay")

    # Then: the credit was undone by the module-level compensation, and the model was told
    assert ledger == ["credit Ada 100", "uncredit Ada 100"]
    assert result.tool_executions[0].result == (
        "Tool 'credit' was executed successfully but was rolled back due to failure of tool 'pay'"
    )


@tool
def credit(name: str, amount: int) -> str:
    """A tool the tests below give compensations of their own."""
    return name


def test_a_module_level_compensation_of_no_tool_of_the_module_is_refused_when_checked() -> None:
    @compensate_for("credti")
    def uncredit(name: str, amount: int) -> None: ...

    module = module_of("typo", credit=credit, uncredit=uncredit)

    with pytest.raises(ToolDefinitionError) as caught:
        check_compensations(module)

    text = str(caught.value)
    assert '@compensate_for("credti")' in text
    assert "uncredit" in text and "'typo'" in text and "no tool named 'credti'" in text


def test_a_module_level_compensation_with_other_parameters_is_refused_when_checked() -> None:
    @compensate_for("credit")
    def uncredit(name: str) -> None: ...

    with pytest.raises(ToolDefinitionError) as caught:
        check_compensations(module_of("shapes", credit=credit, uncredit=uncredit))

    text = str(caught.value)
    assert '@compensate_for("credit")' in text and "same parameters" in text
    assert "(name: str, amount: int)" in text and "(name: str)" in text


def test_an_ai_service_with_compensation_refuses_a_misshapen_module_level_compensation() -> None:
    @compensate_for("credit")
    def uncredit(amount: str) -> None: ...

    with pytest.raises(ToolDefinitionError, match="same parameters"):
        AiService(
            chat_model=ScriptedChatModel(["hi"]),
            tools=[module_of("shapes", credit=credit, uncredit=uncredit)],
            executor=LocalExecutor(),
            compensate_on_tool_errors=True,
            journal=Journal("sqlite://"),
        )


def test_two_module_level_compensations_of_one_tool_are_refused() -> None:
    @compensate_for("credit")
    def uncredit(name: str, amount: int) -> None: ...

    @compensate_for("credit")
    def refund(name: str, amount: int) -> None: ...

    with pytest.raises(ToolDefinitionError) as caught:
        discover_tools(module_of("twice", credit=credit, uncredit=uncredit, refund=refund))

    assert str(caught.value) == (
        "Module 'twice' has two compensations of tool 'credit': uncredit and refund; a tool has one"
    )


# -- tool classes of a module -------------------------------------------------------------------------


class Ledger:
    """A tool class whose constructor takes no arguments."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    @tool("Adds an entry")
    def add_entry(self, text: str) -> str:
        self.entries.append(text)
        return text

    @compensate_for("add_entry")
    def remove_entry(self, text: str) -> None:
        self.entries.remove(text)


class Vault:
    """A tool class that needs constructor arguments."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    @tool("Opens the vault")
    def open_vault(self) -> str:
        return self.secret


class SeatBase:
    @tool("Reserves a seat")
    def reserve(self, seat: str) -> str:
        return seat


class SeatDesk(SeatBase):
    """Inherits `reserve`."""


def test_a_tool_class_with_a_no_argument_constructor_is_served() -> None:
    # Given: a module holding the class only, as docs/tools.md's `--tools myapp.tools:BankTools` does
    module = module_of("ledger_tools", Ledger=Ledger)

    # When
    definitions = discover_tools(module)

    # Then: its tool runs on an instance made for it, its compensation linked
    assert [d.name for d in definitions] == ["add_entry"]
    assert definitions[0].function("first") == "first"
    assert definitions[0].compensation is not None


class CallableLedger(Ledger):
    """A tool class whose objects can be called, as some frameworks' tool objects can."""

    def __call__(self) -> str:
        return "called"


@pytest.mark.parametrize("kind", [Ledger, CallableLedger])
def test_a_tool_class_with_an_object_in_the_module_is_served_once_through_that_object(
    kind: type[Ledger],
) -> None:
    module = module_of("ledger_tools", **{kind.__name__: kind}, ledger=kind())

    definitions = discover_tools(module)

    assert [d.name for d in definitions] == ["add_entry"]
    definitions[0].function("entry")
    assert module.ledger.entries == ["entry"]


def test_a_base_tool_class_is_served_through_its_subclass_only() -> None:
    module = module_of("seat_tools", SeatBase=SeatBase, SeatDesk=SeatDesk)

    definitions = discover_tools(module)

    assert [d.name for d in definitions] == ["reserve"]
    assert type(getattr(definitions[0].function, "__self__", None)) is SeatDesk


def test_a_base_tool_class_whose_subclass_has_an_object_is_not_served_again() -> None:
    module = module_of("seat_tools", SeatBase=SeatBase, SeatDesk=SeatDesk, desk=SeatDesk())

    assert [d.name for d in discover_tools(module)] == ["reserve"]


def test_a_tool_class_that_needs_arguments_is_left_out_with_a_warning_saying_how_to_serve_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given: a module with a function tool and a class that needs constructor arguments
    @tool
    def ping() -> str:
        return "pong"

    module = module_of("mixed_tools", ping=ping, Vault=Vault)

    # When
    with caplog.at_level(logging.WARNING):
        definitions = discover_tools(module)

    # Then: the function is served, and the warning names the class left out and how to serve it
    assert [d.name for d in definitions] == ["ping"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Module 'mixed_tools'" in warnings[0]
    assert "Vault" in warnings[0] and "open_vault" in warnings[0]
    assert "mixed_tools:" in warnings[0]
    assert "secret" in warnings[0]


def test_a_module_with_only_classes_that_need_arguments_says_how_to_serve_them() -> None:
    module = module_of("vault_tools", Vault=Vault)

    with pytest.raises(ToolDefinitionError) as caught:
        discover_tools(module)

    text = str(caught.value)
    assert "does not have any functions annotated with @tool" not in text
    assert "Module 'vault_tools'" in text and "Vault" in text
    assert "vault_tools:" in text and "instance" in text


def test_a_module_without_tools_still_says_so() -> None:
    module = module_of("empty_tools")

    with pytest.raises(ToolDefinitionError) as caught:
        discover_tools(module)

    assert "Module 'empty_tools' does not have any functions annotated with @tool" in str(caught.value)


def test_compensations_of_a_tool_class_of_a_module_are_checked() -> None:
    class Misshapen:
        @tool
        def credit(self, amount: int) -> str:
            return "ok"

        @compensate_for("credit")
        def uncredit(self, who: str) -> None: ...

    module = module_of("misshapen_tools", Misshapen=Misshapen)

    with pytest.raises(ToolDefinitionError, match="same parameters"):
        check_compensations(module)


# -- parameters without annotations ---------------------------------------------------------------


def test_a_function_parameter_without_an_annotation_is_refused_naming_it_and_its_tool() -> None:
    @tool
    def greet(name, times: int) -> str:  # type: ignore[no-untyped-def]
        return str(name) * times

    with pytest.raises(ToolDefinitionError) as caught:
        discover_tools(greet)

    assert str(caught.value).startswith('Parameter "name" of tool "greet" has no type annotation')


def test_a_method_parameter_without_an_annotation_is_refused() -> None:
    class Greeter:
        @tool(name="hello")
        def greet(self, name) -> str:  # type: ignore[no-untyped-def]
            return str(name)

    with pytest.raises(ToolDefinitionError) as caught:
        discover_tools(Greeter())

    assert str(caught.value).startswith('Parameter "name" of tool "hello" has no type annotation')


def test_an_explicit_any_parameter_is_still_accepted() -> None:
    @tool
    def echo(value: Any) -> str:
        return str(value)

    assert discover_tools(echo)[0].specification.parameters == {
        "type": "object",
        "properties": {"value": {}},
        "required": ["value"],
    }
