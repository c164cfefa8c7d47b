"""Tools per task: a task row's own ``"tools"`` (OpenAI schemas or BFCL's function docs) are that episode's tools,
in ``info["tools"]``, in the system prompt, in validation and in calls; rows without them keep the env's tools."""

from __future__ import annotations

import pytest

from agentrl.envs.core import TextEnv
from agentrl.envs.parsing import ActionParser
from agentrl.envs.tool_use.env import ToolUseEnv
from agentrl.envs.tools import ToolResult, ToolSet, function_schema, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first term.
        b: the second term.
    """
    return a + b


BFCL_DOC = {"name": "math.factorial", "description": "Factorial of a number.", "parameters": {
    "type": "dict", "required": ["number"], "properties": {
        "number": {"type": "integer", "description": "The number."},
        "scale": {"type": "float", "description": "A factor.", "default": 1.0},
        "pair": {"type": "tuple", "items": {"type": "float"}, "description": "Two numbers."},
        "extra": {"type": "any", "description": "Anything."},
        "options": {"type": "dict", "properties": {"deep": {"type": "float"}}, "description": "Nested."}}}}
OPENAI_LOOKUP = {"type": "function", "function": {
    "name": "lookup_code", "description": "The code of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_bfcl_dialect_becomes_json_schema_at_every_depth():
    fn = function_schema(BFCL_DOC)["function"]
    props = fn["parameters"]["properties"]
    assert fn["name"] == "math.factorial" and fn["parameters"]["type"] == "object"
    assert props["number"]["type"] == "integer" and props["scale"] == {"type": "number", "description": "A factor.",
                                                                       "default": 1.0}
    assert props["pair"]["type"] == "array" and props["pair"]["items"]["type"] == "number"
    assert "type" not in props["extra"] and props["extra"]["description"] == "Anything."
    assert props["options"]["type"] == "object" and props["options"]["properties"]["deep"]["type"] == "number"
    assert BFCL_DOC["parameters"]["type"] == "dict"  # the input is left alone
    assert function_schema(OPENAI_LOOKUP) == OPENAI_LOOKUP


@pytest.mark.parametrize("spec, match", [
    ({"description": "no name"}, r"tools\[0\]: a tool schema needs a non-empty string 'name'"),
    ({"name": "f", "parameters": []}, r"tools\[0\] \(f\): 'parameters' must be an object"),
    ({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "HashMap"}}}},
     r"tools\[0\] \(f\) parameters.x: unknown type 'HashMap'; accepted: dict, float"),
    ("f", r"tools\[0\]: a tool schema must be an object"),
])
def test_a_malformed_schema_is_one_line_naming_it(spec, match):
    with pytest.raises(ValueError, match=match):
        ToolSet.from_schemas([spec], lambda name, args: None)


class TaskToolsEnv(TextEnv):
    """One env-level tool (``add``); tasks may bring their own; the answer 'ok' is correct."""

    def __init__(self, tools_in_prompt: bool = True):
        super().__init__(tools=ToolSet([add]), parser=ActionParser(), tools_in_prompt=tools_in_prompt)
        self.ran: list[tuple[str, dict]] = []

    def sample_task(self, rng):
        return {"id": "plain", "query": "Add 2 and 3."}

    def score(self, answer, task):
        return (1.0, True) if answer == "ok" else (0.0, False)

    def run_task_tool(self, name, arguments, task):
        if name == "lookup_code":
            self.ran.append((name, arguments))
            return {"Paris": "PAR"}.get(arguments["city"], ToolResult("Error: no such city", "not_found"))
        return super().run_task_tool(name, arguments, task)


def call(env, name, arguments):
    return env.step(env.parser.render_call(name, arguments))


def test_a_row_with_tools_gets_exactly_those_for_its_episode():
    env = TaskToolsEnv()
    task = {"id": "t1", "query": "What is the code of Paris?", "tools": [OPENAI_LOOKUP, BFCL_DOC]}
    _, info = env.reset(options={"task": task})
    assert [t["function"]["name"] for t in info["tools"]] == ["lookup_code", "math.factorial"]
    system = info["messages"][0]["content"]
    assert "lookup_code" in system and "math.factorial" in system and '"name": "add"' not in system
    obs, reward, term, _, info = call(env, "lookup_code", {"city": "Paris"})
    assert (obs, reward, term) == ("PAR", 0.0, False) and env.ran == [("lookup_code", {"city": "Paris"})]
    assert [t["function"]["name"] for t in info["tools"]] == ["lookup_code", "math.factorial"]
    # Calls are validated against the task's schemas; the env's own tool is not offered.
    obs, _, term, _, info = call(env, "add", {"a": 1, "b": 2})
    assert obs.startswith("Error: unknown tool 'add'. Available tools: lookup_code, math.factorial") and not term
    obs, *_ = call(env, "lookup_code", {"town": "Paris"})
    assert obs == "Error: lookup_code() missing argument 'city'"
    obs, *_, info = call(env, "math.factorial", {"number": "five"})
    assert obs == "Error: math.factorial() argument 'number' must be integer, got string"
    assert info["metrics"]["invalid_calls"] == 3 and len(env.ran) == 1
    # A schema-only tool the env cannot run is an observation, never an exception.
    env.budgets.max_tool_calls = 10
    obs, *_, info = call(env, "math.factorial", {"number": 5})
    assert obs.startswith("Error: math.factorial() cannot be run") and info["metrics"]["tool_errors"] == 4
    # The next row without tools is back on the env's tools.
    _, info = env.reset(options={"task": {"id": "plain", "query": "Add 2 and 3."}})
    assert [t["function"]["name"] for t in info["tools"]] == ["add"]
    assert call(env, "add", {"a": 2, "b": 3})[0] == "5"


def test_a_task_tool_named_like_an_env_tool_runs_the_env_tool():
    env = TaskToolsEnv()
    schema = {"name": "add", "description": "Sum.", "parameters": {"type": "dict", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}
    env.reset(options={"task": {"id": "t", "query": "q", "tools": [schema]}})
    assert call(env, "add", {"a": 4, "b": 5})[0] == "9"


def test_tools_not_in_prompt_leaves_them_to_the_template():
    env = TaskToolsEnv(tools_in_prompt=False)
    _, info = env.reset(options={"task": {"id": "t", "query": "q", "tools": [OPENAI_LOOKUP]}})
    assert "lookup_code" not in info["messages"][0]["content"] and info["tools"][0] == OPENAI_LOOKUP


def test_a_malformed_row_is_a_one_line_error_naming_the_task():
    env = TaskToolsEnv()
    with pytest.raises(ValueError, match=r"task 'bad' key 'tools' must be a list"):
        env.reset(options={"task": {"id": "bad", "query": "q", "tools": {"name": "f"}}})
    with pytest.raises(ValueError, match=r"task 'dup' key 'tools': two tools are named 'lookup_code'"):
        env.reset(options={"task": {"id": "dup", "query": "q", "tools": [OPENAI_LOOKUP, OPENAI_LOOKUP]}})


def test_tool_use_rows_with_tools_and_their_demo():
    env = ToolUseEnv()
    task = {"id": "x", "query": "What is 6 times 7?", "answer": "42", "calls": [["multiply", {"a": 6, "b": 7}]],
            "tools": [{"name": "multiply", "description": "Product.", "parameters": {
                "type": "dict", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]}}]}
    demo = env.demo(task)
    assert demo["reward"] == 1.0 and [t["function"]["name"] for t in demo["tools"]] == ["multiply"]
    assert demo["messages"][2]["tool_calls"][0]["function"]["name"] == "multiply"


def test_the_text_only_baseline_offers_no_tool_even_to_a_row_with_tools():
    env = TaskToolsEnv()
    env.tools, env.tools_enabled = ToolSet(when_empty="Error: no tools in this mode"), False
    _, info = env.reset(options={"task": {"id": "t", "query": "q", "tools": [OPENAI_LOOKUP]}})
    assert info["tools"] == [] and "lookup_code" not in info["messages"][0]["content"]
    assert call(env, "lookup_code", {"city": "Paris"})[0] == "Error: no tools in this mode" and env.ran == []
