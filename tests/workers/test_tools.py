"""Declaring tools: `@tool` and its options, descriptions, `Param`, injected parameters and
registration errors. Discovery, inheritance, compensations and the registry: test_tool_discovery.py."""

import dataclasses
from typing import Annotated, Optional

import pytest

from tests.workers._schemas import described, parameters
from tests.workers.tool_classes import WeatherTools, definition_of
from workers import (
    InvocationContext,
    InvocationParameters,
    Param,
    ReturnBehavior,
    SearchBehavior,
    ToolDefinitionError,
    ToolMemoryId,
    ToolSpecification,
    tool,
    tool_specifications_from,
)

# ---------------------------------------------------------------------------------------------------
# @tool forms and options
# ---------------------------------------------------------------------------------------------------

DEFAULT_OPTIONS = {
    "name": None,
    "description": None,
    "return_behavior": ReturnBehavior.TO_LLM,
    "search_behavior": SearchBehavior.SEARCHABLE,
    "metadata": {},
    "pool": "default",
    "timeout": None,
    "retries": 0,
    "idempotent": False,
    "retry_on": (),
    "heartbeat_timeout_s": None,
    "requires_approval": False,
    "concurrency": None,
    "concurrency_key": None,
    "rate_limit": None,
    "rate_limit_key": None,
}


def test_bare_tool_uses_the_function_name_and_default_options() -> None:
    # given
    @tool
    def get_time(zone: str) -> str:
        return "noon"

    # when
    definition = definition_of(get_time, "get_time")

    # then
    assert definition.specification == ToolSpecification(
        name="get_time",
        description=None,
        parameters=parameters(["zone"], zone="string"),
    )
    assert dataclasses.asdict(definition.options) == DEFAULT_OPTIONS


def test_bare_tool_returns_the_function_unchanged() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert tool(add) is add
    assert add(2, 3) == 5


def test_tool_with_a_positional_description() -> None:
    @tool("Returns the time in a zone")
    def get_time(zone: str) -> str:
        """Docstring that is not used."""
        return "noon"

    [specification] = tool_specifications_from(get_time)

    assert specification.name == "get_time"
    assert specification.description == "Returns the time in a zone"


def test_tool_with_description_and_name_keywords() -> None:
    @tool(description="Returns the time in a zone", name="currentTime")
    def get_time(zone: str) -> str:
        return "noon"

    [specification] = tool_specifications_from(get_time)

    assert specification == ToolSpecification(
        name="currentTime",
        description="Returns the time in a zone",
        parameters=parameters(["zone"], zone="string"),
    )


def test_every_keyword_is_recorded_in_the_options() -> None:
    # given
    @tool(
        "Sends an email",
        name="send_mail",
        return_behavior=ReturnBehavior.IMMEDIATE,
        search_behavior=SearchBehavior.ALWAYS_VISIBLE,
        metadata={"team": "ops", "cost": 2},
        pool="mail",
        timeout=2.5,
        retries=3,
        idempotent=True,
        heartbeat_timeout_s=4,
        requires_approval=True,
        concurrency=3,
        concurrency_key="tenant",
        rate_limit="10/m",
        rate_limit_key="account",
    )
    def send(to: str) -> str:
        return "sent"

    # when
    definition = definition_of(send, "send_mail")

    # then
    assert dataclasses.asdict(definition.options) == {
        "name": "send_mail",
        "description": "Sends an email",
        "return_behavior": ReturnBehavior.IMMEDIATE,
        "search_behavior": SearchBehavior.ALWAYS_VISIBLE,
        "metadata": {"team": "ops", "cost": 2},
        "pool": "mail",
        "timeout": 2.5,
        "retries": 3,
        "idempotent": True,
        "retry_on": (),
        "heartbeat_timeout_s": 4,
        "requires_approval": True,
        "concurrency": 3,
        "concurrency_key": "tenant",
        "rate_limit": "10/m",
        "rate_limit_key": "account",
    }
    assert definition.requires_approval
    assert definition.pool == "mail"
    assert definition.timeout == 2.5
    assert definition.return_behavior is ReturnBehavior.IMMEDIATE
    assert definition.search_behavior is SearchBehavior.ALWAYS_VISIBLE


def test_metadata_becomes_the_specification_metadata() -> None:
    @tool(metadata={"team": "ops", "limits": {"per_day": 5}})
    def send(to: str) -> str:
        return "sent"

    [specification] = tool_specifications_from(send)

    assert specification.metadata == {"team": "ops", "limits": {"per_day": 5}}


def test_return_behavior_given_as_text_is_recorded_as_the_enum() -> None:
    @tool(return_behavior="IMMEDIATE_IF_LAST")  # type: ignore[arg-type]
    def send(to: str) -> str:
        return "sent"

    assert definition_of(send, "send").return_behavior is ReturnBehavior.IMMEDIATE_IF_LAST


# ---------------------------------------------------------------------------------------------------
# Descriptions
# ---------------------------------------------------------------------------------------------------


def test_description_is_the_first_paragraph_of_the_docstring() -> None:
    @tool
    def lookup(city: str) -> str:
        """Looks up the weather
        for a city.

        More details that the model does not need.
        """
        return "sunny"

    [specification] = tool_specifications_from(lookup)

    assert specification.description == "Looks up the weather for a city."


def test_description_is_none_without_docstring_or_decorator_text() -> None:
    @tool
    def lookup(city: str) -> str:
        return "sunny"

    [specification] = tool_specifications_from(lookup)

    assert specification.description is None


def test_google_style_args_describe_the_parameters() -> None:
    # given
    @tool
    def book(city: str, nights: int = 1) -> str:
        """Books a hotel.

        Args:
            city: The city to stay in.
            nights (int): How many nights.

        Returns:
            The booking reference.
        """
        return "B-1"

    # when
    [specification] = tool_specifications_from(book)

    # then
    assert specification == ToolSpecification(
        name="book",
        description="Books a hotel.",
        parameters=parameters(
            ["city"],
            city=described("string", "The city to stay in."),
            nights=described("integer", "How many nights."),
        ),
    )


def test_param_description_wins_over_the_docstring_args() -> None:
    @tool
    def book(city: Annotated[str, Param("Destination city")]) -> str:
        """Books a hotel.

        Args:
            city: The city to stay in.
        """
        return "B-1"

    [specification] = tool_specifications_from(book)

    assert specification.parameters == parameters(["city"], city=described("string", "Destination city"))


# ---------------------------------------------------------------------------------------------------
# Param and required
# ---------------------------------------------------------------------------------------------------


def test_param_name_renames_the_parameter_for_the_model() -> None:
    # given
    @tool
    def weather(city_name: Annotated[str, Param("The city", name="cityName")]) -> str:
        return city_name

    # when
    definition = definition_of(weather, "weather")

    # then
    assert definition.specification.parameters == parameters(
        ["cityName"], cityName=described("string", "The city")
    )
    [parameter] = definition.parameters
    assert (parameter.attribute, parameter.name) == ("city_name", "cityName")


def test_required_follows_optional_default_and_param_in_parameter_order() -> None:
    # given
    @tool
    def t(
        z_first: int,
        maybe: int | None,
        old_optional: Optional[str],  # noqa: UP045
        not_required: Annotated[int | None, Param(required=False)],
        with_default: int = 1,
        param_false: Annotated[str, Param(required=False)] = "x",
        param_true_with_default: Annotated[int, Param(required=True)] = 5,
        *,
        a_last: float,
        param_true: Annotated[bool, Param(required=True)],
    ) -> None: ...

    # when
    [specification] = tool_specifications_from(t)

    # then
    assert specification.parameters is not None
    assert list(specification.parameters["properties"]) == [
        "z_first",
        "maybe",
        "old_optional",
        "not_required",
        "with_default",
        "param_false",
        "param_true_with_default",
        "a_last",
        "param_true",
    ]
    assert specification.parameters["required"] == ["z_first", "a_last", "param_true"]


def test_a_default_makes_a_parameter_optional_even_with_param_required_true() -> None:
    @tool
    def t(x: Annotated[int, Param("Count", required=True)] = 3) -> None: ...

    [specification] = tool_specifications_from(t)

    assert specification.parameters == parameters([], x=described("integer", "Count"))


def test_optional_type_is_not_required_even_with_param_required_true() -> None:
    @tool
    def t(x: Annotated[int | None, Param(required=True)]) -> None: ...

    [specification] = tool_specifications_from(t)

    assert specification.parameters == parameters([], x="integer")


# ---------------------------------------------------------------------------------------------------
# Injected parameters
# ---------------------------------------------------------------------------------------------------


def test_injected_parameters_are_not_in_the_schema() -> None:
    # given
    @tool
    def t(
        params: InvocationParameters, city: str, context: InvocationContext, memory_id: ToolMemoryId
    ) -> str:
        return city

    # when
    definition = definition_of(t, "t")

    # then
    assert definition.specification.parameters == parameters(["city"], city="string")
    assert [(p.attribute, p.injected) for p in definition.parameters] == [
        ("params", InvocationParameters),
        ("city", None),
        ("context", InvocationContext),
        ("memory_id", ToolMemoryId),
    ]


def test_tool_with_only_injected_parameters_has_no_parameters() -> None:
    @tool
    def t(params: InvocationParameters, context: InvocationContext, memory_id: ToolMemoryId) -> str:
        return "ok"

    [specification] = tool_specifications_from(t)

    assert specification.parameters is None


def test_method_self_is_not_a_parameter() -> None:
    [specification] = [s for s in tool_specifications_from(WeatherTools()) if s.name == "forecast"]

    assert specification.parameters == parameters(["city"], city="string")


def test_optional_injected_parameter_is_not_in_the_schema() -> None:
    @tool
    def t(city: str, context: InvocationContext | None) -> str:
        return city

    [specification] = tool_specifications_from(t)

    assert specification.parameters == parameters(["city"], city="string")


# ---------------------------------------------------------------------------------------------------
# Registration errors
# ---------------------------------------------------------------------------------------------------


def test_default_that_cannot_be_converted_is_a_definition_error_naming_tool_and_parameter() -> None:
    # given
    @tool
    def countdown(x: int = "ten") -> None: ...  # type: ignore[assignment]

    # when / then
    with pytest.raises(ToolDefinitionError) as caught:
        tool_specifications_from(countdown)
    assert str(caught.value).startswith(
        """Parameter "x" of tool "countdown": default value 'ten' cannot be converted to int: """
    )


def test_default_on_an_injected_parameter_is_a_definition_error_naming_tool_and_parameter() -> None:
    @tool
    def t(city: str, memory_id: ToolMemoryId = ToolMemoryId("default")) -> None: ...  # noqa: B008

    with pytest.raises(ToolDefinitionError) as caught:
        tool_specifications_from(t)
    assert str(caught.value) == (
        'Parameter "memory_id" of tool "t" is injected (ToolMemoryId) and cannot have a default'
    )


def test_param_required_false_without_default_on_non_optional_type_is_a_definition_error() -> None:
    @tool
    def t(x: Annotated[int, Param(required=False)]) -> None: ...

    with pytest.raises(ToolDefinitionError) as caught:
        tool_specifications_from(t)
    assert str(caught.value) == (
        'Parameter "x" of tool "t" is declared Param(required=False) but has no default and its type '
        "int is not optional: give it a default or make it Optional"
    )


def test_registration_errors_use_the_llm_visible_tool_name() -> None:
    @tool(name="renamed")
    def t(x: Annotated[int, Param(required=False)]) -> None: ...

    with pytest.raises(ToolDefinitionError, match=r'^Parameter "x" of tool "renamed" '):
        tool_specifications_from(t)
