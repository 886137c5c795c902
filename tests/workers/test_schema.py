"""Python types -> JSON schema, pinned through the public path.

Every test declares a tool with `@tool` and reads `tool_specifications_from(fn)[0].parameters`, so the
root object shape (`type`, `properties`, `required`, and `$defs` only when needed) is pinned with the
schema of the type under test. Most types are rows of one table: a tool with one parameter `x` of the
type, and the schema it must get, compared as JSON text (so the order of keys is pinned too: a tag
comes first in each option of a union).

This module deliberately does not use `from __future__ import annotations`: annotations of tools
declared inside tests are evaluated eagerly, so local helper types resolve.
"""

import collections.abc
import datetime as dt
import json
import typing
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pytest
from pydantic import BaseModel, Field

from tests.workers._schemas import described, obj
from workers import Param, ToolDefinitionError, tool, tool_specifications_from


def parameters_of(fn: Any) -> dict[str, Any] | None:
    """The JSON-schema parameters of the single tool `fn`."""
    [specification] = tool_specifications_from(fn)
    return specification.parameters


def single(name: str, schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    """The root object of a tool with one parameter `name` whose schema is `schema`."""
    return {"type": "object", "properties": {name: schema}, "required": [name] if required else []}


# ---------------------------------------------------------------------------------------------------
# Helper types (module level so string forward references resolve)
# ---------------------------------------------------------------------------------------------------


class Color(Enum):
    RED = "r"
    GREEN = 2
    BLUE = "blue value"


@dataclass
class Address:
    street: str
    zip_code: int = 0


class Person(BaseModel):
    name: str = Field(description="Full name")
    age: int = 0


@dataclass
class AnnotatedFields:
    city: Annotated[str, Param("The city")]
    days: int = field(default=1, metadata={"description": "How many days"})


@dataclass
class DocumentedFields:
    street: str
    """The street and number."""
    floor: int = 0
    """Floor, 0 is the ground floor."""


class DocumentedModel(BaseModel):
    title: str
    """The title of the book."""


@dataclass
class DescriptionPriority:
    value: Annotated[int, Param("from Param")] = field(metadata={"description": "from metadata"})
    """from the attribute docstring"""


class Totals(TypedDict):
    count: int
    label: str


class PartialTotals(TypedDict, total=False):
    count: int
    label: str


class MixedTotals(TypedDict):
    count: int
    label: NotRequired[str]


class StringNotRequired(TypedDict):
    count: int
    label: "NotRequired[str]"


@dataclass
class Item:
    sku: str
    quantity: int = 1


@dataclass
class Order:
    shipping: Address
    items: list[Item]
    note: str | None = None


@dataclass
class Cat:
    lives: int


@dataclass
class Dog:
    good: bool = True


class PCat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int


class PDog(BaseModel):
    kind: Literal["dog"] = "dog"
    good: bool


class PetOwner(BaseModel):
    pet: PCat | PDog = Field(discriminator="kind")


@dataclass
class TreeNode:
    value: int
    children: "list[TreeNode]" = field(default_factory=list)


@dataclass
class Leaf:
    value: int


@dataclass
class Branch:
    children: "list[Leaf | Branch]"


@dataclass
class Blob:
    data: bytes


@dataclass
class Route:
    origin: Address
    destination: Address


ADDRESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"street": {"type": "string"}, "zip_code": {"type": "integer"}},
    "required": ["street"],
    "additionalProperties": False,
}


def one_parameter_tool(annotation: Any) -> Any:
    """The tool `t(x)`, with `x` of type `annotation`."""

    def t(x: Any) -> None: ...

    t.__annotations__["x"] = annotation
    return tool(t)


TAGGED_PETS: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["cat"]}, "lives": {"type": "integer"}},
            "required": ["kind", "lives"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["dog"]}, "good": {"type": "boolean"}},
            "required": ["kind", "good"],
            "additionalProperties": False,
        },
    ]
}


COUNT_AND_LABEL = {"count": {"type": "integer"}, "label": {"type": "string"}}
INTEGER_ARRAY = {"type": "array", "items": {"type": "integer"}}

SCHEMAS = [
    # scalars
    pytest.param(str, {"type": "string"}, id="str"),
    pytest.param(uuid.UUID, {"type": "string", "description": "String in a UUID format"}, id="uuid"),
    pytest.param(
        Annotated[uuid.UUID, Param("The order id")],
        {"type": "string", "description": "The order id"},
        id="uuid's description replaced by the parameter's",
    ),
    pytest.param(int, {"type": "integer"}, id="int"),
    pytest.param(float, {"type": "number"}, id="float"),
    pytest.param(Decimal, {"type": "number"}, id="Decimal"),
    pytest.param(bool, {"type": "boolean"}, id="bool"),
    pytest.param(dt.date, {"type": "string", "format": "date"}, id="date"),
    pytest.param(dt.datetime, {"type": "string", "format": "date-time"}, id="datetime"),
    pytest.param(
        Color, {"type": "string", "enum": ["RED", "GREEN", "BLUE"]}, id="Enum: member names, not values"
    ),
    pytest.param(Literal["small", "large"], {"type": "string", "enum": ["small", "large"]}, id="str Literal"),
    pytest.param(Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}, id="int Literal"),
    pytest.param(
        Literal[Color.RED, Color.BLUE], {"type": "string", "enum": ["RED", "BLUE"]}, id="Literal of members"
    ),
    # collections
    pytest.param(list[int], INTEGER_ARRAY, id="list"),
    pytest.param(set[int], INTEGER_ARRAY, id="set"),
    pytest.param(frozenset[int], INTEGER_ARRAY, id="frozenset"),
    pytest.param(tuple[int, ...], INTEGER_ARRAY, id="tuple-ellipsis"),
    pytest.param(collections.abc.Sequence[int], INTEGER_ARRAY, id="abc-Sequence"),
    pytest.param(typing.Sequence[int], INTEGER_ARRAY, id="typing-Sequence"),
    pytest.param(list[Address], {"type": "array", "items": ADDRESS_SCHEMA}, id="list of models"),
    pytest.param(dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}, id="dict"),
    pytest.param(
        dict[str, Address], {"type": "object", "additionalProperties": ADDRESS_SCHEMA}, id="dict of models"
    ),
    # objects: dataclasses, pydantic models, TypedDicts
    pytest.param(Address, ADDRESS_SCHEMA, id="dataclass: fields without default required"),
    pytest.param(
        Person,
        obj({"name": described("string", "Full name"), "age": {"type": "integer"}}, ["name"]),
        id="pydantic model with field descriptions",
    ),
    pytest.param(Totals, obj(COUNT_AND_LABEL, ["count", "label"]), id="TypedDict: total"),
    pytest.param(PartialTotals, obj(COUNT_AND_LABEL, []), id="TypedDict: total=False"),
    pytest.param(MixedTotals, obj(COUNT_AND_LABEL, ["count"]), id="TypedDict: NotRequired"),
    # the form every module with `from __future__ import annotations` produces
    pytest.param(StringNotRequired, obj(COUNT_AND_LABEL, ["count"]), id="TypedDict: NotRequired as a string"),
    # field descriptions
    pytest.param(
        AnnotatedFields,
        obj(
            {"city": described("string", "The city"), "days": described("integer", "How many days")}, ["city"]
        ),
        id="descriptions from Param and field metadata",
    ),
    pytest.param(
        DocumentedFields,
        obj(
            {
                "street": described("string", "The street and number."),
                "floor": described("integer", "Floor, 0 is the ground floor."),
            },
            ["street"],
        ),
        id="dataclass descriptions from attribute docstrings",
    ),
    pytest.param(
        DocumentedModel,
        obj({"title": described("string", "The title of the book.")}, ["title"]),
        id="pydantic description from an attribute docstring",
    ),
    pytest.param(
        DescriptionPriority,
        obj({"value": described("integer", "from metadata")}, ["value"]),
        id="field metadata wins over Param and the attribute docstring",
    ),
    # nesting and unions
    pytest.param(
        Order,
        obj(
            {
                "shipping": ADDRESS_SCHEMA,
                "items": {
                    "type": "array",
                    "items": obj({"sku": {"type": "string"}, "quantity": {"type": "integer"}}, ["sku"]),
                },
                "note": {"type": "string"},
            },
            ["shipping", "items"],
        ),
        id="nested models are inlined",
    ),
    pytest.param(
        Cat | Dog,
        {
            "anyOf": [
                obj(
                    {"type": {"type": "string", "enum": ["Cat"]}, "lives": {"type": "integer"}},
                    ["type", "lives"],
                ),
                obj({"type": {"type": "string", "enum": ["Dog"]}, "good": {"type": "boolean"}}, ["type"]),
            ]
        },
        id="union of models: a type tag with class names, first",
    ),
    pytest.param(
        Annotated[PCat | PDog, Field(discriminator="kind")],
        TAGGED_PETS,
        id="pydantic union: the declared tags",
    ),
    pytest.param(PetOwner, obj({"pet": TAGGED_PETS}, ["pet"]), id="pydantic union inside a model"),
    pytest.param(int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}, id="union of primitives"),
]


@pytest.mark.parametrize(("annotation", "schema"), SCHEMAS)
def test_a_parameter_type_has_its_schema(annotation: Any, schema: dict[str, Any]) -> None:
    # given a tool `t(x)` with `x` of the type, when its specification is read
    parameters = parameters_of(one_parameter_tool(annotation))
    # then
    assert json.dumps(parameters) == json.dumps(single("x", schema))


def test_optional_union_of_primitives_is_any_of_and_not_required() -> None:
    parameters = parameters_of(one_parameter_tool(int | str | None))
    assert parameters == single("x", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, required=False)


def test_pipe_none_has_the_schema_of_its_type_and_is_not_required() -> None:
    @tool
    def t(a: str, x: int | None) -> None: ...

    assert parameters_of(t) == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "x": {"type": "integer"}},
        "required": ["a"],
    }


def test_typing_optional_has_the_schema_of_its_type_and_is_not_required() -> None:
    @tool
    def t(a: str, x: Optional[Address]) -> None: ...  # noqa: UP045

    assert parameters_of(t) == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "x": ADDRESS_SCHEMA},
        "required": ["a"],
    }


def test_recursive_model_is_a_ref_into_root_defs() -> None:
    # given
    @tool
    def t(tree: TreeNode) -> None: ...

    # when / then
    assert parameters_of(t) == {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/TreeNode"}},
        "required": ["tree"],
        "$defs": {
            "TreeNode": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/TreeNode"}},
                },
                "required": ["value"],
                "additionalProperties": False,
            }
        },
    }


def test_recursive_model_parameter_keeps_its_description_next_to_the_ref() -> None:
    @tool
    def t(tree: Annotated[TreeNode, Param("The whole tree")]) -> None: ...

    parameters = parameters_of(t)

    assert parameters is not None
    assert parameters["properties"] == {"tree": {"$ref": "#/$defs/TreeNode", "description": "The whole tree"}}
    assert list(parameters["$defs"]) == ["TreeNode"]


def test_model_recursive_through_a_union_is_a_ref_into_root_defs() -> None:
    # given
    @tool
    def t(tree: Branch) -> None: ...

    # when
    parameters = parameters_of(t)

    # then
    # then: the tree is inlined; inside the union the recursive option is a $ref to its tagged form
    assert parameters is not None
    options = parameters["properties"]["tree"]["properties"]["children"]["items"]["anyOf"]
    assert options[1] == {"$ref": "#/$defs/Branch"}
    branch = parameters["$defs"]["Branch"]
    assert branch["properties"]["type"] == {"type": "string", "enum": ["Branch"]}
    assert branch["properties"]["children"]["items"]["anyOf"][1] == {"$ref": "#/$defs/Branch"}


def test_model_used_twice_without_recursion_is_inlined_both_times() -> None:
    # given
    @tool
    def t(route: Route, home: Address) -> None: ...

    # when / then: no "$defs" at all
    assert parameters_of(t) == {
        "type": "object",
        "properties": {
            "route": {
                "type": "object",
                "properties": {"origin": ADDRESS_SCHEMA, "destination": ADDRESS_SCHEMA},
                "required": ["origin", "destination"],
                "additionalProperties": False,
            },
            "home": ADDRESS_SCHEMA,
        },
        "required": ["route", "home"],
    }


# ---------------------------------------------------------------------------------------------------
# Unsupported types
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (bytes, 'Parameter "x" of tool "t": Type bytes cannot be described to the model as JSON'),
        (Blob, 'Parameter "x" of tool "t": Type bytes cannot be described to the model as JSON'),
        (
            dict[int, str],
            'Parameter "x" of tool "t": Mapping keys must be str to be JSON object keys, got int',
        ),
    ],
    ids=["bytes", "bytes inside a model", "dict with non-str keys"],
)
def test_a_type_json_cannot_describe_is_a_definition_error(annotation: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        parameters_of(one_parameter_tool(annotation))
    assert str(caught.value) == message
