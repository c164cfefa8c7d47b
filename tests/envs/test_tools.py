"""The tool layer: schemas from typed functions, validation, errors as observations."""

from typing import Literal

import pytest

from agentrl.envs.tools import ToolSet, tool


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor,
            described on two lines.
    """
    return a * b


@tool(name="lookup", description="Find a thing.")
def _lookup(key: str, limit: int = 3, mode: Literal["fast", "exact"] = "fast", tags: list[str] | None = None,
            scale: float | None = None) -> dict:
    return {"key": key, "limit": limit, "mode": mode, "tags": tags, "scale": scale}


@tool
def boom(x: int) -> int:
    """Always fails."""
    raise RuntimeError("kaput")


TOOLS = ToolSet([multiply, _lookup, boom])


def test_schema_from_signature_and_docstring():
    s = multiply.schema()
    assert s["type"] == "function"
    f = s["function"]
    assert f["name"] == "multiply" and f["description"] == "Multiply two integers."
    assert f["parameters"] == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "the first factor."},
            "b": {"type": "integer", "description": "the second factor, described on two lines."},
        },
        "required": ["a", "b"],
    }


def test_schema_optional_literal_list():
    f = _lookup.schema()["function"]
    assert f["name"] == "lookup" and f["description"] == "Find a thing."
    props = f["parameters"]["properties"]
    assert props["limit"] == {"type": "integer"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"]}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["scale"] == {"type": "number"}
    assert f["parameters"]["required"] == ["key"]


def test_untyped_parameter_is_rejected_at_definition():
    with pytest.raises(TypeError, match="needs a type annotation"):
        @tool
        def bad(x):
            """No types."""


def test_tool_is_still_a_plain_function():
    assert multiply(6, 7) == 42


@pytest.mark.parametrize(
    "name, args, expected, kind",
    [
        ("multiply", {"a": 6, "b": 7}, "42", None),
        ("multiply", {"a": 6.0, "b": 7}, "42", None),  # integral floats are accepted as integers
        ("multiply", {"a": 6}, "Error: multiply() missing argument 'b'", "invalid_arguments"),
        ("multiply", {"a": 6, "b": 7, "c": 1}, "Error: multiply() got an unexpected argument 'c'", "invalid_arguments"),
        ("multiply", {"a": "6", "b": 7}, "Error: multiply() argument 'a' must be integer, got string",
         "invalid_arguments"),
        ("multiply", {"a": True, "b": 7}, "Error: multiply() argument 'a' must be integer, got boolean",
         "invalid_arguments"),
        ("multiply", {"a": 1.5, "b": 7}, "Error: multiply() argument 'a' must be integer, got number",
         "invalid_arguments"),
        ("multiply", [6, 7], "Error: multiply() arguments must be a JSON object, got array", "invalid_arguments"),
        ("lookup", {"key": "k", "mode": "slow"},
         'Error: lookup() argument \'mode\' must be one of "fast", "exact", got "slow"', "invalid_arguments"),
        ("lookup", {"key": "k", "tags": ["a", 1]},
         "Error: lookup() argument 'tags' must be array of string, got array", "invalid_arguments"),
        ("nope", {}, "Error: unknown tool 'nope'. Available tools: multiply, lookup, boom", "unknown_tool"),
        ("boom", {"x": 1}, "Error: boom() raised RuntimeError: kaput", "exception"),
    ],
)
def test_call_results(name, args, expected, kind):
    r = TOOLS.call(name, args)
    assert r.content == expected
    assert r.error_kind == kind
    assert r.ok is (kind is None)


def test_structured_results_are_json():
    r = TOOLS.call("lookup", {"key": "k", "tags": ["x"], "scale": 2})
    assert r.content == '{"key": "k", "limit": 3, "mode": "fast", "tags": ["x"], "scale": 2}'


def test_duplicate_names_rejected():
    with pytest.raises(ValueError, match="two tools are named"):
        ToolSet([multiply, multiply])
