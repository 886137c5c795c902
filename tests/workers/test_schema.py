"""Python types -> JSON schema, pinned through the public path.

Every test declares a tool with `@tool` and reads `tool_specifications_from(fn)[0].parameters`, so the
root object shape (`type`, `properties`, `required`, and `$defs` only when needed) is pinned with the
schema of the type under test. Whole dicts are compared with `==`.

This module deliberately does not use `from __future__ import annotations`: annotations of tools
declared inside tests are evaluated eagerly, so local helper types resolve.
"""

import collections.abc
import datetime as dt
import typing
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pytest
from pydantic import BaseModel, Field

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
class Route:
    origin: Address
    destination: Address


ADDRESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"street": {"type": "string"}, "zip_code": {"type": "integer"}},
    "required": ["street"],
    "additionalProperties": False,
}


# ---------------------------------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------------------------------


def test_str_is_a_string() -> None:
    # given
    @tool
    def t(x: str) -> None: ...

    # when / then
    assert parameters_of(t) == {
        "type": "object",
        "properties": {"x": {"type": "string"}},
        "required": ["x"],
    }


def test_uuid_is_a_string_described_as_a_uuid() -> None:
    @tool
    def t(x: uuid.UUID) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "description": "String in a UUID format"})


def test_uuid_description_is_replaced_by_the_parameter_description() -> None:
    @tool
    def t(x: Annotated[uuid.UUID, Param("The order id")]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "description": "The order id"})


def test_int_is_an_integer() -> None:
    @tool
    def t(x: int) -> None: ...

    assert parameters_of(t) == single("x", {"type": "integer"})


def test_float_is_a_number() -> None:
    @tool
    def t(x: float) -> None: ...

    assert parameters_of(t) == single("x", {"type": "number"})


def test_decimal_is_a_number() -> None:
    @tool
    def t(x: Decimal) -> None: ...

    assert parameters_of(t) == single("x", {"type": "number"})


def test_bool_is_a_boolean() -> None:
    @tool
    def t(x: bool) -> None: ...

    assert parameters_of(t) == single("x", {"type": "boolean"})


def test_date_is_a_string_in_date_format() -> None:
    @tool
    def t(x: dt.date) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "format": "date"})


def test_datetime_is_a_string_in_date_time_format() -> None:
    @tool
    def t(x: dt.datetime) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "format": "date-time"})


def test_enum_is_a_string_enum_of_member_names_ignoring_values() -> None:
    @tool
    def t(x: Color) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "enum": ["RED", "GREEN", "BLUE"]})


def test_string_literal_is_a_string_enum() -> None:
    @tool
    def t(x: Literal["small", "large"]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "enum": ["small", "large"]})


def test_integer_literal_is_an_integer_enum() -> None:
    @tool
    def t(x: Literal[1, 2, 3]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "integer", "enum": [1, 2, 3]})


def test_literal_of_enum_members_uses_member_names() -> None:
    @tool
    def t(x: Literal[Color.RED, Color.BLUE]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "string", "enum": ["RED", "BLUE"]})


# ---------------------------------------------------------------------------------------------------
# Collections
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "annotation",
    [
        list[int],
        set[int],
        frozenset[int],
        tuple[int, ...],
        collections.abc.Sequence[int],
        typing.Sequence[int],
    ],
    ids=["list", "set", "frozenset", "tuple-ellipsis", "abc-Sequence", "typing-Sequence"],
)
def test_homogeneous_collections_are_arrays_with_items(annotation: Any) -> None:
    # given
    def t(x: int) -> None: ...

    t.__annotations__["x"] = annotation
    tool(t)

    # when / then
    assert parameters_of(t) == single("x", {"type": "array", "items": {"type": "integer"}})


def test_list_of_models_has_object_items() -> None:
    @tool
    def t(x: list[Address]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "array", "items": ADDRESS_SCHEMA})


def test_dict_with_str_keys_is_an_object_with_additional_properties() -> None:
    @tool
    def t(x: dict[str, int]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "object", "additionalProperties": {"type": "integer"}})


def test_dict_with_model_values_has_object_additional_properties() -> None:
    @tool
    def t(x: dict[str, Address]) -> None: ...

    assert parameters_of(t) == single("x", {"type": "object", "additionalProperties": ADDRESS_SCHEMA})


def test_dict_with_non_str_keys_is_a_definition_error() -> None:
    # given
    @tool
    def t(x: dict[int, str]) -> None: ...

    # when / then
    with pytest.raises(ToolDefinitionError) as caught:
        parameters_of(t)
    assert (
        str(caught.value)
        == 'Parameter "x" of tool "t": Mapping keys must be str to be JSON object keys, got int'
    )


# ---------------------------------------------------------------------------------------------------
# Optional
# ---------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------
# Objects: dataclasses, pydantic models, TypedDicts
# ---------------------------------------------------------------------------------------------------


def test_dataclass_is_an_object_requiring_fields_without_default() -> None:
    @tool
    def t(x: Address) -> None: ...

    assert parameters_of(t) == single("x", ADDRESS_SCHEMA)


def test_pydantic_model_is_an_object_with_field_descriptions() -> None:
    @tool
    def t(x: Person) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Full name"},
                "age": {"type": "integer"},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    )


def test_typeddict_requires_every_key_when_total() -> None:
    @tool
    def t(x: Totals) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "label": {"type": "string"}},
            "required": ["count", "label"],
            "additionalProperties": False,
        },
    )


def test_typeddict_total_false_requires_nothing() -> None:
    @tool
    def t(x: PartialTotals) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "label": {"type": "string"}},
            "required": [],
            "additionalProperties": False,
        },
    )


def test_typeddict_not_required_key_is_not_required() -> None:
    @tool
    def t(x: MixedTotals) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "label": {"type": "string"}},
            "required": ["count"],
            "additionalProperties": False,
        },
    )


def test_typeddict_not_required_key_with_string_annotation_is_not_required() -> None:
    # given: the form every module with `from __future__ import annotations` produces
    @tool
    def t(x: StringNotRequired) -> None: ...

    # when / then
    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "label": {"type": "string"}},
            "required": ["count"],
            "additionalProperties": False,
        },
    )


# ---------------------------------------------------------------------------------------------------
# Field descriptions
# ---------------------------------------------------------------------------------------------------


def test_dataclass_field_descriptions_from_param_and_field_metadata() -> None:
    @tool
    def t(x: AnnotatedFields) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "days": {"type": "integer", "description": "How many days"},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    )


def test_dataclass_field_descriptions_from_attribute_docstrings() -> None:
    @tool
    def t(x: DocumentedFields) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {
                "street": {"type": "string", "description": "The street and number."},
                "floor": {"type": "integer", "description": "Floor, 0 is the ground floor."},
            },
            "required": ["street"],
            "additionalProperties": False,
        },
    )


def test_pydantic_field_description_from_attribute_docstring() -> None:
    @tool
    def t(x: DocumentedModel) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"title": {"type": "string", "description": "The title of the book."}},
            "required": ["title"],
            "additionalProperties": False,
        },
    )


def test_field_metadata_description_wins_over_param_and_attribute_docstring() -> None:
    @tool
    def t(x: DescriptionPriority) -> None: ...

    assert parameters_of(t) == single(
        "x",
        {
            "type": "object",
            "properties": {"value": {"type": "integer", "description": "from metadata"}},
            "required": ["value"],
            "additionalProperties": False,
        },
    )


# ---------------------------------------------------------------------------------------------------
# Nesting, unions, recursion
# ---------------------------------------------------------------------------------------------------


def test_nested_models_are_inlined() -> None:
    @tool
    def t(order: Order) -> None: ...

    assert parameters_of(t) == single(
        "order",
        {
            "type": "object",
            "properties": {
                "shipping": ADDRESS_SCHEMA,
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
                        "required": ["sku"],
                        "additionalProperties": False,
                    },
                },
                "note": {"type": "string"},
            },
            "required": ["shipping", "items"],
            "additionalProperties": False,
        },
    )


def test_union_of_models_gets_default_type_discriminator_with_class_names() -> None:
    # given
    @tool
    def t(pet: Cat | Dog) -> None: ...

    # when
    parameters = parameters_of(t)

    # then
    assert parameters == single(
        "pet",
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": ["Cat"]},
                        "lives": {"type": "integer"},
                    },
                    "required": ["type", "lives"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": ["Dog"]},
                        "good": {"type": "boolean"},
                    },
                    "required": ["type"],
                    "additionalProperties": False,
                },
            ]
        },
    )
    assert parameters is not None
    for option in parameters["properties"]["pet"]["anyOf"]:
        assert next(iter(option["properties"])) == "type"
        assert option["required"][0] == "type"


def test_pydantic_discriminated_union_uses_the_declared_tags() -> None:
    # given
    @tool
    def t(pet: Annotated[PCat | PDog, Field(discriminator="kind")]) -> None: ...

    # when
    parameters = parameters_of(t)

    # then
    assert parameters == single(
        "pet",
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["cat"]},
                        "lives": {"type": "integer"},
                    },
                    "required": ["kind", "lives"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["dog"]},
                        "good": {"type": "boolean"},
                    },
                    "required": ["kind", "good"],
                    "additionalProperties": False,
                },
            ]
        },
    )
    assert parameters is not None
    for option in parameters["properties"]["pet"]["anyOf"]:
        assert next(iter(option["properties"])) == "kind"
        assert option["required"][0] == "kind"


def test_pydantic_discriminated_union_inside_a_model_uses_the_declared_tags() -> None:
    # given
    @tool
    def t(owner: PetOwner) -> None: ...

    # when / then
    assert parameters_of(t) == single(
        "owner",
        {
            "type": "object",
            "properties": {
                "pet": {
                    "anyOf": [
                        {
                            "type": "object",
                            "properties": {
                                "kind": {"type": "string", "enum": ["cat"]},
                                "lives": {"type": "integer"},
                            },
                            "required": ["kind", "lives"],
                            "additionalProperties": False,
                        },
                        {
                            "type": "object",
                            "properties": {
                                "kind": {"type": "string", "enum": ["dog"]},
                                "good": {"type": "boolean"},
                            },
                            "required": ["kind", "good"],
                            "additionalProperties": False,
                        },
                    ]
                }
            },
            "required": ["pet"],
            "additionalProperties": False,
        },
    )


def test_union_of_primitives_is_any_of() -> None:
    @tool
    def t(x: int | str) -> None: ...

    assert parameters_of(t) == single("x", {"anyOf": [{"type": "integer"}, {"type": "string"}]})


def test_optional_union_of_primitives_is_any_of_and_not_required() -> None:
    @tool
    def t(x: int | str | None) -> None: ...

    assert parameters_of(t) == single(
        "x", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, required=False
    )


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


def test_bytes_is_a_definition_error() -> None:
    # given
    @tool
    def t(x: bytes) -> None: ...

    # when / then
    with pytest.raises(ToolDefinitionError) as caught:
        parameters_of(t)
    assert (
        str(caught.value) == 'Parameter "x" of tool "t": Type bytes cannot be described to the model as JSON'
    )


def test_unsupported_type_nested_in_a_model_is_a_definition_error() -> None:
    # given
    @dataclass
    class Blob:
        data: bytes

    @tool
    def t(x: Blob) -> None: ...

    # when / then
    with pytest.raises(
        ToolDefinitionError, match=r"^Parameter \"x\" of tool \"t\": Type bytes cannot be described"
    ):
        parameters_of(t)
