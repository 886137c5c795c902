"""Declaring tools: `@tool`, `Param`, `@compensate_for`, discovery and registration rules."""

import dataclasses
import types
from typing import Annotated, Optional

import pytest

from workers import (
    InvocationContext,
    InvocationParameters,
    Param,
    ReturnBehavior,
    SearchBehavior,
    ToolDefinition,
    ToolDefinitionError,
    ToolMemoryId,
    ToolRegistry,
    ToolSpecification,
    compensate_for,
    tool,
    tool_specifications_from,
)


def definition_of(source: object, name: str) -> ToolDefinition:
    """The registered definition of the tool `name` of `source`."""
    definition = ToolRegistry([source]).get(name)
    assert definition is not None, f"no tool {name!r}"
    return definition


def names_of(source: object) -> list[str]:
    return [specification.name for specification in tool_specifications_from(source)]


# ---------------------------------------------------------------------------------------------------
# Helper classes (module level so their annotations resolve)
# ---------------------------------------------------------------------------------------------------


class WeatherTools:
    @tool("Returns the forecast")
    def forecast(self, city: str) -> str:
        return f"sunny in {city}"

    @tool
    def temperature(self, city: str, days: int = 1) -> float:
        """Returns the temperature."""
        return 21.5

    def helper(self) -> str:
        return "not a tool"

    @compensate_for("forecast")
    def unforecast(self, city: str) -> None: ...


class ParentTools:
    @tool("Parent greeting", pool="greeters", timeout=5)
    def greet(self, name: str) -> str:
        return f"parent {name}"

    @tool("Parent farewell")
    def farewell(self, name: str) -> str:
        return f"parent bye {name}"

    @tool
    def inherited(self) -> str:
        return "inherited"


class ChildTools(ParentTools):
    def greet(self, name: str) -> str:
        return f"child {name}"

    @tool("Child farewell", name="bye")
    def farewell(self, name: str) -> str:
        return f"child bye {name}"

    @tool
    def extra(self, x: int) -> int:
        return x


class StaticTools:
    @staticmethod
    @tool("Adds two numbers")
    def add(a: int, b: int) -> int:
        return a + b

    @tool("Multiplies two numbers")
    @staticmethod
    def multiply(a: int, b: int) -> int:
        return a * b


class BankTools:
    @tool
    def credit(self, name: str, amount: float) -> str:
        return "credited"

    @compensate_for("credit")
    def uncredit(self, name: str, amount: float) -> None: ...

    @tool(name="transfer_money")
    def transfer(self, to: str) -> str:
        return "sent"

    @compensate_for("transfer_money")
    def undo_transfer(self, to: str) -> None: ...


class InheritedBankTools(BankTools):
    def credit(self, name: str, amount: float) -> str:
        return "credited twice"


class CompensatedByPythonName:
    @tool(name="transfer_money")
    def transfer(self, to: str) -> str:
        return "sent"

    @compensate_for("transfer")
    def undo(self, to: str) -> None: ...


class NoTools:
    def helper(self) -> None: ...

    def __repr__(self) -> str:
        return "<NoTools>"


class DuplicateNames:
    @tool(name="x")
    def first(self) -> str:
        return "1"

    @tool(name="x")
    def second(self) -> str:
        return "2"


class ToolsX:
    @tool
    def x(self) -> str:
        return "a"


class OtherToolsX:
    @tool("Another x")
    def x(self) -> str:
        return "b"


class NoArgTools:
    def __init__(self) -> None:
        self.greeting = "hello"

    @tool
    def hello(self) -> str:
        return self.greeting


class NeedsArgs:
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @tool
    def hello(self) -> str:
        return self.greeting


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
        parameters={"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
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
        parameters={"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
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
    }
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
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city to stay in."},
                "nights": {"type": "integer", "description": "How many nights."},
            },
            "required": ["city"],
        },
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

    assert specification.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "Destination city"}},
        "required": ["city"],
    }


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
    assert definition.specification.parameters == {
        "type": "object",
        "properties": {"cityName": {"type": "string", "description": "The city"}},
        "required": ["cityName"],
    }
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

    assert specification.parameters == {
        "type": "object",
        "properties": {"x": {"type": "integer", "description": "Count"}},
        "required": [],
    }


def test_optional_type_is_not_required_even_with_param_required_true() -> None:
    @tool
    def t(x: Annotated[int | None, Param(required=True)]) -> None: ...

    [specification] = tool_specifications_from(t)

    assert specification.parameters == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": [],
    }


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
    assert definition.specification.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
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

    assert specification.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


def test_optional_injected_parameter_is_not_in_the_schema() -> None:
    @tool
    def t(city: str, context: InvocationContext | None) -> str:
        return city

    [specification] = tool_specifications_from(t)

    assert specification.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


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


# ---------------------------------------------------------------------------------------------------
# Discovery: objects, classes, modules, functions
# ---------------------------------------------------------------------------------------------------

WEATHER_SPECIFICATIONS = [
    ToolSpecification(
        name="forecast",
        description="Returns the forecast",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    ToolSpecification(
        name="temperature",
        description="Returns the temperature.",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    ),
]


def test_specifications_from_an_object_skip_plain_methods_and_compensations() -> None:
    specifications = tool_specifications_from(WeatherTools())

    assert sorted(specifications, key=lambda s: s.name) == WEATHER_SPECIFICATIONS


def test_specifications_from_a_class_equal_those_of_an_instance() -> None:
    specifications = tool_specifications_from(WeatherTools)

    assert sorted(specifications, key=lambda s: s.name) == WEATHER_SPECIFICATIONS


def test_specifications_from_a_module_include_functions_and_tool_objects() -> None:
    # given
    @tool("Adds two numbers")
    def add(a: int, b: int) -> int:
        return a + b

    def not_a_tool(a: int) -> int:
        return a

    module = types.ModuleType("fake_tools")
    module.add = add  # type: ignore[attr-defined]
    module.not_a_tool = not_a_tool  # type: ignore[attr-defined]
    module.weather = WeatherTools()  # type: ignore[attr-defined]
    module.answer = 42  # type: ignore[attr-defined]

    # when
    specifications = tool_specifications_from(module)

    # then
    assert sorted(specifications, key=lambda s: s.name) == [
        ToolSpecification(
            name="add",
            description="Adds two numbers",
            parameters={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        ),
        *WEATHER_SPECIFICATIONS,
    ]


def test_specifications_from_a_single_decorated_function() -> None:
    @tool
    def add(a: int, b: int = 0) -> int:
        """Adds two numbers."""
        return a + b

    assert tool_specifications_from(add) == [
        ToolSpecification(
            name="add",
            description="Adds two numbers.",
            parameters={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
            },
        )
    ]


def test_object_without_tools_fails_with_its_repr() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        tool_specifications_from(NoTools())
    assert str(caught.value) == "Object '<NoTools>' does not have any methods annotated with @tool"


def test_two_methods_with_one_tool_name_fail() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        tool_specifications_from(DuplicateNames())
    assert str(caught.value) == "Tool names must be unique. The tool 'x' appears several times"


# ---------------------------------------------------------------------------------------------------
# Inheritance and static methods
# ---------------------------------------------------------------------------------------------------


def test_subclass_inherits_parent_tools() -> None:
    assert sorted(names_of(ChildTools())) == ["bye", "extra", "greet", "inherited"]


def test_override_without_decorator_keeps_parent_options_but_runs_the_override() -> None:
    # given
    definition = definition_of(ChildTools(), "greet")

    # when / then
    assert definition.specification.description == "Parent greeting"
    assert definition.pool == "greeters"
    assert definition.timeout == 5
    assert definition.function("Ada") == "child Ada"


def test_override_with_its_own_decorator_wins() -> None:
    # given
    registry = ToolRegistry([ChildTools()])

    # when
    definition = registry.get("bye")

    # then
    assert "farewell" not in registry
    assert definition is not None
    assert definition.specification.description == "Child farewell"
    assert definition.pool == "default"
    assert definition.function("Ada") == "child bye Ada"


def test_parent_itself_is_unchanged_by_the_subclass() -> None:
    assert sorted(names_of(ParentTools())) == ["farewell", "greet", "inherited"]
    assert definition_of(ParentTools(), "greet").function("Ada") == "parent Ada"


@pytest.mark.parametrize("source", [StaticTools(), StaticTools], ids=["instance", "class"])
def test_static_method_tools_in_either_decorator_order(source: object) -> None:
    # when
    registry = ToolRegistry([source])

    # then
    assert sorted(names_of(source)) == ["add", "multiply"]
    add, multiply = registry.get("add"), registry.get("multiply")
    assert add is not None
    assert multiply is not None
    expected_parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    assert add.specification.parameters == expected_parameters
    assert multiply.specification.parameters == expected_parameters
    assert add.specification.description == "Adds two numbers"
    assert multiply.specification.description == "Multiplies two numbers"
    assert add.function(2, 3) == 5
    assert multiply.function(2, 3) == 6


# ---------------------------------------------------------------------------------------------------
# Compensations
# ---------------------------------------------------------------------------------------------------


def test_compensation_is_never_a_tool_and_is_linked_to_its_tool() -> None:
    # given
    bank = BankTools()

    # when
    definition = definition_of(bank, "credit")

    # then
    assert sorted(names_of(bank)) == ["credit", "transfer_money"]
    assert definition.compensation is not None
    assert definition.compensation.tool_name == "credit"
    assert definition.compensation.function.__func__ is BankTools.uncredit  # type: ignore[attr-defined]
    assert [p.name for p in definition.compensation.parameters] == ["name", "amount"]


def test_compensation_is_linked_to_a_renamed_tool_by_its_llm_visible_name() -> None:
    definition = definition_of(BankTools(), "transfer_money")

    assert definition.compensation is not None
    assert definition.compensation.tool_name == "transfer_money"
    assert definition.compensation.function.__func__ is BankTools.undo_transfer  # type: ignore[attr-defined]


def test_compensation_naming_the_python_name_of_a_renamed_tool_is_not_linked() -> None:
    definition = definition_of(CompensatedByPythonName(), "transfer_money")

    assert definition.compensation is None


def test_inherited_compensation_is_linked() -> None:
    # given
    definition = definition_of(InheritedBankTools(), "credit")

    # when / then
    assert definition.function("Ada", 1.0) == "credited twice"
    assert definition.compensation is not None
    assert definition.compensation.function.__func__ is BankTools.uncredit  # type: ignore[attr-defined]


def test_tool_without_compensation_has_none() -> None:
    assert definition_of(WeatherTools(), "temperature").compensation is None


# ---------------------------------------------------------------------------------------------------
# ToolRegistry
# ---------------------------------------------------------------------------------------------------


def test_registry_rejects_one_tool_name_from_two_objects() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        ToolRegistry([ToolsX(), OtherToolsX()])
    assert str(caught.value) == "Duplicated definition for tool: x"


def test_registry_rejects_one_tool_name_from_an_object_and_a_function() -> None:
    @tool
    def x() -> str:
        return "c"

    registry = ToolRegistry([ToolsX()])

    with pytest.raises(ToolDefinitionError) as caught:
        registry.add(x)
    assert str(caught.value) == "Duplicated definition for tool: x"
    assert len(registry) == 1


def test_registry_instantiates_a_class_without_constructor_arguments() -> None:
    # when
    registry = ToolRegistry([NoArgTools])

    # then
    definition = registry.get("hello")
    assert definition is not None
    assert definition.function() == "hello"
    assert [s.name for s in registry.specifications()] == ["hello"]


def test_registry_explains_a_class_that_needs_constructor_arguments() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        ToolRegistry([NeedsArgs])
    assert str(caught.value).startswith(
        "Class 'NeedsArgs' needs constructor arguments: pass an instance of it instead"
    )


def test_registry_accepts_an_instance_of_a_class_that_needs_constructor_arguments() -> None:
    definition = definition_of(NeedsArgs("bonjour"), "hello")

    assert definition.function() == "bonjour"


def test_registry_lists_everything_it_holds() -> None:
    # given
    @tool
    def ping() -> str:
        return "pong"

    # when
    registry = ToolRegistry([WeatherTools(), ping])

    # then
    assert sorted(d.name for d in registry) == ["forecast", "ping", "temperature"]
    assert len(registry) == 3
    assert "ping" in registry
    assert registry.get("missing") is None
