"""Classes holding tools, for the declaration and discovery tests (module level: annotations resolve)."""

from workers import ToolDefinition, ToolRegistry, compensate_for, tool, tool_specifications_from


def definition_of(source: object, name: str) -> ToolDefinition:
    """The registered definition of the tool `name` of `source`."""
    definition = ToolRegistry([source]).get(name)
    assert definition is not None, f"no tool {name!r}"
    return definition


def names_of(source: object) -> list[str]:
    return [specification.name for specification in tool_specifications_from(source)]


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
