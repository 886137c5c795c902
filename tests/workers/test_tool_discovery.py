"""Finding tools: discovery in objects, classes, modules and functions, inheritance and static methods,
`@compensate_for` links, and `ToolRegistry`."""

import types

import pytest

from tests.workers._schemas import parameters
from tests.workers.tool_classes import (
    BankTools,
    ChildTools,
    CompensatedByPythonName,
    DuplicateNames,
    InheritedBankTools,
    NeedsArgs,
    NoArgTools,
    NoTools,
    OtherToolsX,
    ParentTools,
    StaticTools,
    ToolsX,
    WeatherTools,
    definition_of,
    names_of,
)
from workers import ToolDefinitionError, ToolRegistry, ToolSpecification, tool, tool_specifications_from

# ---------------------------------------------------------------------------------------------------
# Discovery: objects, classes, modules, functions
# ---------------------------------------------------------------------------------------------------


WEATHER_SPECIFICATIONS = [
    ToolSpecification("forecast", "Returns the forecast", parameters(["city"], city="string")),
    ToolSpecification(
        "temperature", "Returns the temperature.", parameters(["city"], city="string", days="integer")
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
        ToolSpecification("add", "Adds two numbers", parameters(["a", "b"], a="integer", b="integer")),
        *WEATHER_SPECIFICATIONS,
    ]


def test_specifications_from_a_single_decorated_function() -> None:
    @tool
    def add(a: int, b: int = 0) -> int:
        """Adds two numbers."""
        return a + b

    assert tool_specifications_from(add) == [
        ToolSpecification("add", "Adds two numbers.", parameters(["a"], a="integer", b="integer"))
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
    expected_parameters = parameters(["a", "b"], a="integer", b="integer")
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
