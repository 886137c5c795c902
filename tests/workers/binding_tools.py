"""The tools the binding tests call, and what they received: SPEC §2 through `run_tool`.

Most tools here only declare parameters: `@echo` makes a tool whose body records the bound arguments
under the tool's name in `RECEIVED` (one value, or a tuple of several) and answers "ok", so a table of
(tool, arguments, expected value) can check what the model's JSON became.
"""

import enum
import functools
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from decimal import Decimal
from typing import Any, Literal, TypedDict

import pydantic

from workers import (
    InvocationContext,
    InvocationParameters,
    OutcomeKind,
    ToolExecutionRequest,
    ToolMemoryId,
    ToolOutcome,
    tool,
)
from workers.calls.invocation import Invocation
from workers.calls.runner import run_tool
from workers.tools import discover_tools

# What the tools of this module received in the last `call`, by tool name.
RECEIVED: dict[str, Any] = {}


def echo(function: Callable[..., Any]) -> Any:
    """A tool with `function`'s parameters that records what it received and answers "ok"."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def recording(*args: Any, **kwargs: Any) -> str:
        values = tuple(signature.bind(*args, **kwargs).arguments.values())
        RECEIVED[function.__name__] = values[0] if len(values) == 1 else values
        return "ok"

    return tool(recording)


def call(function: Callable[..., Any], arguments: str, invocation: Invocation | None = None) -> ToolOutcome:
    """Run the tool `function` on the model's `arguments`, as a worker does; `RECEIVED` starts empty."""
    RECEIVED.clear()
    definition = discover_tools(function)[0]
    request = ToolExecutionRequest("call-1", definition.name, arguments)
    return run_tool(definition, request, invocation)


def assert_same(received: Any, expected: Any, where: str = "value") -> None:
    """Equal and of the same type all the way down (`1 == 1.0` and `Decimal("1.5") == Decimal("1.50")`
    are not enough: a tool must get the declared type and the exact digits)."""
    assert type(received) is type(expected), (
        f"{where}: {type(received).__name__} is not {type(expected).__name__}"
    )
    if isinstance(expected, Decimal):
        assert received.as_tuple() == expected.as_tuple(), f"{where}: {received} is not {expected}"
    elif isinstance(expected, list | tuple):
        assert len(received) == len(expected), f"{where}: {received!r} is not {expected!r}"
        for index, (got, want) in enumerate(zip(received, expected, strict=True)):
            assert_same(got, want, f"{where}[{index}]")
    elif isinstance(expected, dict):
        assert list(received) == list(expected), f"{where}: {received!r} is not {expected!r}"
        for key, want in expected.items():
            assert_same(received[key], want, f"{where}[{key!r}]")
    elif is_dataclass(expected):
        for item in fields(expected):
            assert_same(getattr(received, item.name), getattr(expected, item.name), f"{where}.{item.name}")
    elif isinstance(expected, pydantic.BaseModel):
        for name in type(expected).model_fields:
            assert_same(getattr(received, name), getattr(expected, name), f"{where}.{name}")
    else:
        assert received == expected, f"{where}: {received!r} is not {expected!r}"


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"
    Kelvin = "k"


@dataclass
class Point:
    x: int
    y: int


@dataclass
class Route:
    start: Point
    stops: list[Point]
    name: str = "unnamed"


@dataclass
class Settings:
    tags: list[str] = field(default_factory=list)
    level: int = 1


class Item(pydantic.BaseModel):
    sku: str
    quantity: int
    price: Decimal


class Order(pydantic.BaseModel):
    customer: str
    items: list[Item]
    note: str | None = None


class Address(TypedDict):
    street: str
    number: int


@dataclass
class Circle:
    radius: float


@dataclass
class Square:
    side: float


class Cat(pydantic.BaseModel):
    type: Literal["cat"] = "cat"
    lives: int


class Dog(pydantic.BaseModel):
    type: Literal["dog"] = "dog"
    good: bool


# ---------------------------------------------------------------------------------------------------
# Tools


@tool
def ping() -> str:
    return "pong"


@tool
def add(a: int, b: str) -> str:
    RECEIVED["add"] = (a, b)
    return f"{a}|{b}"


@tool
def total(values: list[int]) -> int:
    RECEIVED["total"] = values
    return sum(values)


@tool
def greet(name: str, greeting: str = "Hello", title: str | None = None) -> str:
    RECEIVED["greet"] = (name, greeting, title)
    return f"{greeting}, {title} {name}" if title else f"{greeting}, {name}"


@tool
def append_to_list(items: list[str] = ["seed"]) -> list[str]:  # noqa: B006 - the default is the subject
    items.append("added")
    return items


@tool
def put_in_dict(mapping: dict[str, int] = {"seed": 1}) -> dict[str, int]:  # noqa: B006
    mapping["added"] = 2
    return mapping


@tool
def change_settings(settings: Settings = Settings(tags=["seed"])) -> Settings:  # noqa: B008
    settings.tags.append("added")
    settings.level += 1
    return settings


@echo
def integer(n: int) -> str: ...


@tool
def with_default_count(count: int = 10) -> int:
    return count


@echo
def real(x: float) -> str: ...


@echo
def flag(enabled: bool) -> str: ...


@echo
def temperature(unit: Unit) -> str: ...


@echo
def money(amount: Decimal) -> str: ...


@echo
def text(value: str) -> str: ...


@echo
def identify(id: uuid.UUID) -> str: ...


@echo
def place(point: Point) -> str: ...


@echo
def place_order(order: Order) -> str: ...


@echo
def collections_tool(numbers: list[int], labels: set[str], scores: dict[str, float]) -> str: ...


@echo
def travel(route: Route) -> str: ...


@echo
def deliver(address: Address) -> str: ...


@echo
def draw(shape: Circle | Square) -> str: ...


@echo
def adopt(pet: Cat | Dog) -> str: ...


@echo
def draw_many(shapes: list[Circle | Square]) -> str: ...


@echo
def introspect(
    query: str, parameters: InvocationParameters, context: InvocationContext, memory_id: ToolMemoryId
) -> str: ...


@tool
def write_parameters(parameters: InvocationParameters) -> str:
    parameters["k"] = "changed"
    parameters["added"] = [1, 2]
    return "ok"


@tool
def mutate_nested_parameter(parameters: InvocationParameters) -> str:
    parameters["cart"].append("book")
    return "ok"


@tool
def read_parameters(parameters: InvocationParameters) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(parameters.items()))


@tool
def untyped_list(values: list[Any]) -> int:
    return len(values)


def assert_arguments_error(outcome: ToolOutcome, text: str, *, prefix: bool = False) -> None:
    """The arguments were refused with `text` (or a text starting with it); the tool did not run."""
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.ARGUMENTS_ERROR, "ToolArgumentsError"), outcome
    assert outcome.text.startswith(text) if prefix else outcome.text == text, outcome.text
    assert RECEIVED == {}, "the tool ran"
