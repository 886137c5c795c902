"""`ToolSpecification` JSON form, the OpenAI strict rendering, and safe tool-name aliases."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from tests.workers._schemas import variant
from workers import ToolSpecification, tool, tool_specifications_from
from workers.tools.specification import ToolNameAliases, strict_schema

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# A parameters schema using every element the schema builder produces.
FULL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "traveler": {"type": "string", "description": "Full name of the traveler"},
        "cabin": {"type": "string", "enum": ["ECONOMY", "BUSINESS"]},
        "stops": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "zip_code": {"type": "integer", "description": "Postal code"},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        "payment": {
            "anyOf": [
                variant("Card", ["type", "number"], number="string"),
                variant("Cash", ["type"], amount="number"),
            ]
        },
        "itinerary": {"$ref": "#/$defs/Leg", "description": "The first leg"},
        "budgets": {"type": "object", "additionalProperties": {"type": "number"}},
        "when": {"type": "string", "format": "date-time"},
        "flexible": {"type": "boolean"},
    },
    "required": ["traveler", "cabin", "address", "payment"],
    "$defs": {
        "Leg": {
            "type": "object",
            "properties": {
                "destination": {"type": "string"},
                "next": {"$ref": "#/$defs/Leg"},
            },
            "required": ["destination"],
            "additionalProperties": False,
        }
    },
}

FULL = ToolSpecification(
    name="book_trip",
    description="Réserve un voyage — books a trip",
    parameters=FULL_PARAMETERS,
    metadata={"owner": "travel", "cost": 3, "tags": ["slow", "paid"], "limits": {"per_day": 5}},
)


# ---------------------------------------------------------------------------------------------------
# to_json / from_json
# ---------------------------------------------------------------------------------------------------


def test_object_to_text_to_object_round_trips_exactly() -> None:
    # when
    restored = ToolSpecification.from_json(FULL.to_json())

    # then
    assert restored == FULL
    assert restored.parameters == FULL_PARAMETERS
    assert restored.metadata == {
        "owner": "travel",
        "cost": 3,
        "tags": ["slow", "paid"],
        "limits": {"per_day": 5},
    }


def test_canonical_text_to_object_to_text_round_trips_exactly() -> None:
    # given: compact, keys in the order name, description, parameters, metadata; non-ASCII kept
    canonical = json.dumps(
        {
            "name": "book_trip",
            "description": "Réserve un voyage — books a trip",
            "parameters": FULL_PARAMETERS,
            "metadata": {"owner": "travel", "cost": 3, "tags": ["slow", "paid"], "limits": {"per_day": 5}},
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )

    # when / then
    assert ToolSpecification.from_json(canonical).to_json() == canonical
    assert FULL.to_json() == canonical


def test_to_json_is_compact_and_keeps_non_ascii_text() -> None:
    # given
    specification = ToolSpecification(
        name="获取天气",
        description="Wetter für eine Stadt",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        metadata={"k": 1},
    )

    # when / then
    assert specification.to_json() == (
        '{"name":"获取天气","description":"Wetter für eine Stadt",'
        '"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},'
        '"metadata":{"k":1}}'
    )


def test_round_trip_of_a_specification_built_from_a_tool() -> None:
    # given
    @tool("Adds two numbers", metadata={"category": "math"})
    def add(a: int, b: int = 0) -> int:
        return a + b

    [specification] = tool_specifications_from(add)

    # when / then
    assert ToolSpecification.from_json(specification.to_json()) == specification


def test_from_json_accepts_an_already_parsed_dict() -> None:
    # given
    data = json.loads(FULL.to_json())

    # when / then
    assert ToolSpecification.from_json(data) == FULL


def test_from_json_of_a_dict_copies_it() -> None:
    # given
    data = json.loads(FULL.to_json())
    specification = ToolSpecification.from_json(data)

    # when
    data["parameters"]["properties"].clear()
    data["metadata"]["owner"] = "someone else"

    # then
    assert specification == FULL


def test_absent_description_parameters_and_metadata_are_omitted_and_read_back_as_defaults() -> None:
    # given
    specification = ToolSpecification(name="ping")

    # when
    text = specification.to_json()

    # then
    assert text == '{"name":"ping"}'
    assert ToolSpecification.from_json(text) == ToolSpecification(
        name="ping", description=None, parameters=None, metadata={}
    )


@pytest.mark.parametrize(
    ("parameters", "type_name"),
    [(["city"], "list"), ("object", "str"), (42, "int"), (True, "bool")],
)
def test_from_json_rejects_parameters_that_are_not_an_object(parameters: Any, type_name: str) -> None:
    # given
    data = {"name": "weather", "parameters": parameters}

    # when / then
    with pytest.raises(ValueError) as caught:
        ToolSpecification.from_json(data)
    assert str(caught.value) == f"Tool 'weather': 'parameters' must be a JSON-schema object, got {type_name}"


def test_from_json_rejects_parameters_whose_schema_type_is_not_object() -> None:
    with pytest.raises(ValueError, match="parameters"):
        ToolSpecification.from_json({"name": "weather", "parameters": {"type": "string"}})


@pytest.mark.parametrize(
    "data",
    [{"description": "no name"}, {"name": ""}, {"name": None}, {"name": 7}],
    ids=["missing", "empty", "null", "number"],
)
def test_from_json_rejects_a_missing_or_empty_name(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as caught:
        ToolSpecification.from_json(data)
    assert str(caught.value) == "A tool specification needs a non-empty string 'name'"


def test_from_json_rejects_text_that_is_not_an_object() -> None:
    with pytest.raises(ValueError) as caught:
        ToolSpecification.from_json('["weather"]')
    assert str(caught.value) == "A tool specification must be a JSON object, got list"


def test_tool_without_visible_parameters_has_no_parameters() -> None:
    # given
    @tool
    def ping() -> str:
        """Checks the service is alive."""
        return "pong"

    # when
    [specification] = tool_specifications_from(ping)

    # then
    assert specification == ToolSpecification(name="ping", description="Checks the service is alive.")
    assert specification.parameters is None
    assert "parameters" not in json.loads(specification.to_json())
    assert specification.to_json() == '{"name":"ping","description":"Checks the service is alive."}'


# ---------------------------------------------------------------------------------------------------
# strict_schema
# ---------------------------------------------------------------------------------------------------

STRICT_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["CELSIUS", "FAHRENHEIT"]},
        "days": {"type": "integer"},
        "home": {"$ref": "#/$defs/Place", "description": "Where the traveler lives"},
        "stops": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "note": {"type": "string"}},
                "required": ["name"],
            },
        },
        "pet": {"anyOf": [variant("Cat", ["type"], lives="integer"), variant("Dog", ["type"])]},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "floor": {"type": "integer"}},
            "required": ["street"],
        },
    },
    "required": ["city", "stops", "address"],
    "$defs": {
        "Place": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "parent": {"$ref": "#/$defs/Place"}},
            "required": ["name"],
        }
    },
}

STRICT_EXPECTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": ["string", "null"], "enum": ["CELSIUS", "FAHRENHEIT", None]},
        "days": {"type": ["integer", "null"]},
        "home": {
            "anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}],
            "description": "Where the traveler lives",
        },
        "stops": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "note": {"type": ["string", "null"]}},
                "required": ["name", "note"],
                "additionalProperties": False,
            },
        },
        "pet": {
            "anyOf": [
                variant("Cat", ["type", "lives"], lives={"type": ["integer", "null"]}),
                variant("Dog", ["type"]),
                {"type": "null"},
            ]
        },
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "floor": {"type": ["integer", "null"]}},
            "required": ["street", "floor"],
            "additionalProperties": False,
        },
    },
    "required": ["city", "unit", "days", "home", "stops", "pet", "address"],
    "additionalProperties": False,
    "$defs": {
        "Place": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "parent": {"anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}]},
            },
            "required": ["name", "parent"],
            "additionalProperties": False,
        }
    },
}


def test_strict_schema_requires_everything_makes_optional_nullable_and_forbids_extras() -> None:
    # when
    strict = strict_schema(STRICT_INPUT)

    # then
    assert strict == STRICT_EXPECTED


def test_strict_schema_lists_required_in_property_order() -> None:
    strict = strict_schema(STRICT_INPUT)

    assert strict["required"] == list(STRICT_INPUT["properties"])
    assert strict["properties"]["stops"]["items"]["required"] == ["name", "note"]


def test_strict_schema_does_not_mutate_its_input() -> None:
    # given
    before = copy.deepcopy(STRICT_INPUT)

    # when
    strict_schema(STRICT_INPUT)

    # then
    assert before == STRICT_INPUT


def test_strict_schema_of_a_tool_with_an_optional_parameter() -> None:
    # given
    @tool
    def forecast(city: str, days: int | None = None) -> str: ...

    [specification] = tool_specifications_from(forecast)
    assert specification.parameters is not None

    # when / then
    assert strict_schema(specification.parameters) == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------------------------------------
# ToolNameAliases
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["get_weather", "getWeather", "tool-1", "A" * 64])
def test_valid_names_are_sent_as_they_are(name: str) -> None:
    aliases = ToolNameAliases()

    assert aliases.alias(name) == name
    assert aliases.original(name) == name


def test_chinese_name_gets_a_safe_alias_that_maps_back() -> None:
    # given
    aliases = ToolNameAliases()

    # when
    alias = aliases.alias("获取天气")

    # then
    assert OPENAI_NAME.fullmatch(alias)
    assert alias != "获取天气"
    assert aliases.original(alias) == "获取天气"


def test_alias_is_stable_for_a_name() -> None:
    aliases = ToolNameAliases(["获取天气"])

    assert aliases.alias("获取天气") == aliases.alias("获取天气")
    assert aliases.original(aliases.alias("获取天气")) == "获取天气"


def test_different_invalid_names_never_share_an_alias() -> None:
    # given: names whose ASCII parts are all the same (or empty)
    names = ["获取天气", "获取新闻", "查询天气", "weather 1", "weather/1", "weather.1", "weather?1"]
    aliases = ToolNameAliases(names)

    # when
    sent = [aliases.alias(name) for name in names]

    # then
    assert len(set(sent)) == len(names)
    assert all(OPENAI_NAME.fullmatch(alias) for alias in sent)
    assert [aliases.original(alias) for alias in sent] == names


def test_long_name_gets_an_alias_of_at_most_64_characters() -> None:
    # given
    name = "lookup_" + "x" * 93
    assert len(name) == 100
    aliases = ToolNameAliases()

    # when
    alias = aliases.alias(name)

    # then
    assert len(alias) <= 64
    assert OPENAI_NAME.fullmatch(alias)
    assert aliases.original(alias) == name


def test_unknown_alias_maps_to_itself() -> None:
    aliases = ToolNameAliases(["获取天气"])

    assert aliases.original("never_seen") == "never_seen"


def test_name_with_a_trailing_newline_gets_an_alias() -> None:
    aliases = ToolNameAliases()

    alias = aliases.alias("get_weather\n")

    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", alias)
    assert aliases.original(alias) == "get_weather\n"
