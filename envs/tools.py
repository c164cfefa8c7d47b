"""Tools: typed Python functions the agent may call, with OpenAI-format JSON schemas.

>>> @tool
... def multiply(a: int, b: int) -> int:
...     '''Multiply two integers.
...
...     Args:
...         a: the first factor.
...         b: the second factor.
...     '''
...     return a * b
>>> multiply.schema()["function"]["parameters"]["required"]
['a', 'b']
>>> ToolSet([multiply]).call("multiply", {"a": 6}).content
"Error: multiply() missing argument 'b'"

A call never raises for what the agent sent: unknown tools, bad arguments and exceptions inside the tool come
back as a :class:`ToolResult` whose ``content`` starts with ``Error:`` and whose ``error_kind`` says which
(only :class:`ToolUnavailable`, a broken installation, goes through).

A tool may carry state and report its own metrics: build it from a bound method or a closure (``tool(obj.run,
name="run")``) and return a :class:`ToolResult` with ``metrics`` (and an ``error_kind`` when the call failed);
:class:`~agentrl.envs.core.TextEnv` adds the metrics into the episode's ``info["metrics"]``.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.envs.plugins import load_object

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


@dataclass
class ToolResult:
    """What a tool call produced: observation text, an error kind when it failed, and the call's metrics.

    A tool function may return a ``ToolResult`` itself (instead of a value to format) to set ``error_kind``
    for a failure it reports as text, or to count ``metrics``.
    """

    content: str
    error_kind: str | None = None
    """``None`` on success; else ``"unknown_tool" | "invalid_arguments" | "exception"``, or a kind of the
    tool's own (``"timeout"``, ...). Every error kind counts as a tool error; the first two also as an
    invalid call."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Counters of this call that the env adds into the episode's metrics (``{"search_calls": 1, ...}``)."""

    @property
    def ok(self) -> bool:
        return self.error_kind is None


@dataclass
class Tool:
    """A callable tool: a function plus its JSON schema. Build one with :func:`tool`."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: Any) -> tuple[dict[str, Any] | None, str | None]:
        """Check ``arguments`` against the schema; returns ``(coerced_arguments, None)`` or ``(None, error)``."""
        if not isinstance(arguments, dict):
            return None, f"Error: {self.name}() arguments must be a JSON object, got {_json_type(arguments)}"
        props = self.parameters.get("properties", {})
        for key in self.parameters.get("required", []):
            if key not in arguments:
                return None, f"Error: {self.name}() missing argument '{key}'"
        out = {}
        for key, value in arguments.items():
            if key not in props:
                return None, f"Error: {self.name}() got an unexpected argument '{key}'"
            ok, coerced = _check_type(value, props[key])
            if not ok:
                got = json.dumps(value) if "enum" in props[key] else _json_type(value)
                return None, f"Error: {self.name}() argument '{key}' must be {_describe(props[key])}, got {got}"
            out[key] = coerced
        return out, None

    def __call__(self, *args, **kwargs):
        """Call the underlying function directly (no validation) — tools stay usable as plain functions."""
        return self.fn(*args, **kwargs)


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None):
    """Turn a typed function with a docstring into a :class:`Tool`.

    Parameter types come from the annotations (``int``, ``float``, ``str``, ``bool``, ``list[...]``,
    ``dict``, ``Literal[...]``, ``X | None``); a parameter with a default is optional. The description is
    the docstring's first paragraph; per-parameter descriptions come from a Google-style ``Args:`` section.
    Use as ``@tool`` or ``@tool(name=..., description=...)``.
    """

    def build(f: Callable) -> Tool:
        doc = inspect.getdoc(f) or ""
        summary, arg_docs = _parse_docstring(doc)
        hints = typing.get_type_hints(f)
        props: dict[str, Any] = {}
        required = []
        for pname, param in inspect.signature(f).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {f.__name__}: *args/**kwargs cannot be described by a JSON schema")
            if pname not in hints:
                raise TypeError(f"tool {f.__name__}: parameter '{pname}' needs a type annotation")
            schema = _schema_for(hints[pname], f"{f.__name__}.{pname}")
            if pname in arg_docs:
                schema["description"] = arg_docs[pname]
            props[pname] = schema
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        params = {"type": "object", "properties": props, "required": required}
        return Tool(name=name or f.__name__, description=description or summary, parameters=params, fn=f)

    return build(fn) if fn is not None else build


class ToolUnavailable(RuntimeError):
    """Raised by a tool whose infrastructure is broken (a sandbox that cannot start): not the agent's fault, so
    :meth:`ToolSet.call` lets it through and the env ends the episode with ``termination="error"``."""


#: Error kinds that mean the agent called wrongly (counted as invalid calls as well as tool errors).
INVALID_CALL_KINDS = ("unknown_tool", "invalid_arguments")


class ToolSet:
    """An ordered collection of tools with one entry point, :meth:`call`, that never raises.

    Args:
        tools: :class:`Tool` objects, or typed documented functions (wrapped with :func:`tool`).
        when_empty: the ``Error: ...`` observation of any call when the set holds no tool (an env's text-only
            mode); default: the unknown-tool error.
    """

    def __init__(self, tools: Iterable[Tool | Callable] = (), *, when_empty: str | None = None):
        self.when_empty = when_empty
        self._tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else tool(t)
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t
        self._schemas = [t.schema() for t in self._tools.values()]

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @classmethod
    def from_schemas(cls, schemas: Any, run: Callable[[str, dict[str, Any]], Any], *,
                     where: str = "tools") -> ToolSet:
        """Tools known only by their schemas (a task's own tools), each call run by ``run(name, arguments)``
        after the arguments passed the schema (``run`` returns a value or a :class:`ToolResult`).

        ``schemas`` is a list of OpenAI function schemas or BFCL function docs, in any mix (see
        :func:`function_schema`); ``where`` names them in errors (``"task 'x' key 'tools'"``).

        Raises:
            ValueError: not a list, a malformed schema, or two tools of one name (the message names ``where``).
        """
        if not isinstance(schemas, list):
            raise ValueError(f"{where} must be a list of function schemas, got {type(schemas).__name__}")
        tools = []
        for k, spec in enumerate(schemas):
            fn = function_schema(spec, where=f"{where}[{k}]")["function"]
            tools.append(Tool(name=fn["name"], description=fn.get("description", ""),
                              parameters=fn["parameters"], fn=_Runner(run, fn["name"])))
        try:
            return cls(tools)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def schemas(self) -> list[dict[str, Any]]:
        """The tools' OpenAI-format schemas (``info["tools"]``). Do not mutate the returned list."""
        return self._schemas

    def close(self) -> None:
        """Release what the tools hold (a remote session); a plain tool set holds nothing. Idempotent."""

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Validate and run one call. Errors come back as ``Error: ...`` text, never as exceptions (except
        :class:`ToolUnavailable`, a broken installation)."""
        t = self._tools.get(name)
        if t is None and not self._tools and self.when_empty is not None:
            return ToolResult(self.when_empty, "unknown_tool")
        if t is None:
            known = ", ".join(self._tools) or "none"
            return ToolResult(f"Error: unknown tool '{name}'. Available tools: {known}", "unknown_tool")
        args, err = t.validate(arguments)
        if args is None:  # (None, error)
            return ToolResult(str(err), "invalid_arguments")
        try:
            value = t.fn(**args)
        except ToolUnavailable:
            raise
        except Exception as e:  # a tool's failure is an observation, not a crash
            return ToolResult(f"Error: {name}() raised {type(e).__name__}: {e}", "exception")
        return value if isinstance(value, ToolResult) else ToolResult(format_value(value))


@dataclass
class _Runner:
    """The function of a schema-only tool: hands its keyword arguments to ``run(name, arguments)``."""

    run: Callable[[str, dict[str, Any]], Any]
    name: str

    def __call__(self, **arguments: Any) -> Any:
        return self.run(self.name, arguments)


#: BFCL's type names (Python-flavoured) -> JSON-schema types; the JSON names map to themselves.
DIALECT_TYPES: dict[str, str | None] = {
    "dict": "object", "float": "number", "tuple": "array", "any": None, "list": "array", "bool": "boolean",
    "int": "integer", "str": "string", "object": "object", "number": "number", "array": "array",
    "integer": "integer", "string": "string", "boolean": "boolean", "null": "null"}


def function_schema(spec: Any, *, where: str = "tool") -> dict[str, Any]:
    """One tool schema in OpenAI function format, from an OpenAI schema (``{"type": "function", "function":
    {...}}``) or a bare function doc (``{"name", "description", "parameters"}``, BFCL's form).

    Types of BFCL's dialect are rewritten as JSON-schema types, at every depth (``properties``, ``items``):
    ``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> no type (any value);
    other keys (``description``, ``enum``, ``default``, ``required``) stay. Dotted names (``math.factorial``)
    are kept as they are. The input is not modified.

    Raises:
        ValueError: a schema without a string ``name``, ``parameters`` that is not an object, or a type name
            outside :data:`DIALECT_TYPES` (the message names ``where`` and the parameter).
    """
    fn = spec.get("function") if isinstance(spec, dict) and spec.get("type") == "function" else spec
    if not isinstance(fn, dict):
        raise ValueError(f"{where}: a tool schema must be an object with a 'name', got {type(fn).__name__}")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a tool schema needs a non-empty string 'name'")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise ValueError(f"{where} ({name}): 'parameters' must be an object, got {type(params).__name__}")
    params = _json_schema(params, f"{where} ({name}) parameters")
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    out = {"name": name, "description": str(fn.get("description") or ""), "parameters": params}
    return {"type": "function", "function": out}


def _json_schema(schema: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        if kind not in DIALECT_TYPES:
            raise ValueError(f"{where}: unknown type {kind!r}; accepted: {', '.join(DIALECT_TYPES)}")
        mapped = DIALECT_TYPES[kind]
        if mapped is None:
            del out["type"]
        else:
            out["type"] = mapped
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _json_schema(v, f"{where}.{k}") if isinstance(v, dict) else v
                             for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _json_schema(out["items"], f"{where}[]")
    return out


def format_value(value: Any) -> str:
    """Tool output as observation text: strings as they are, everything else as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


# ---------------------------------------------------------------------------------------------- helpers
def _schema_for(hint: Any, where: str) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _schema_for(non_none[0], where)
        return {"anyOf": [_schema_for(a, where) for a in non_none]}
    if origin is Literal:
        return {"type": _JSON_TYPES[type(args[0])], "enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        schema: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _schema_for(args[0], where)
        return schema
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if hint is Any:
        return {}
    raise TypeError(f"tool parameter {where}: cannot express {hint!r} in a JSON schema")


def _check_type(value: Any, schema: dict[str, Any]) -> tuple[bool, Any]:
    if "anyOf" in schema:
        for sub in schema["anyOf"]:
            ok, v = _check_type(value, sub)
            if ok:
                return True, v
        return False, value
    if "enum" in schema and value not in schema["enum"]:
        return False, value
    kind = schema.get("type")
    if kind is None:
        return True, value
    if kind == "integer":
        if isinstance(value, bool):
            return False, value
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():  # JSON writers often emit 3.0 for 3
            return True, int(value)
        return False, value
    if kind == "number":
        return (isinstance(value, (int, float)) and not isinstance(value, bool)), value
    if kind == "string":
        return isinstance(value, str), value
    if kind == "boolean":
        return isinstance(value, bool), value
    if kind == "object":
        return isinstance(value, dict), value
    if kind == "array":
        if not isinstance(value, list):
            return False, value
        item = schema.get("items")
        if item is None:
            return True, value
        out = []
        for v in value:
            ok, c = _check_type(v, item)
            if not ok:
                return False, value
            out.append(c)
        return True, out
    return True, value


def _describe(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_describe(s) for s in schema["anyOf"])
    if schema.get("type") == "array" and "items" in schema:
        return f"array of {_describe(schema['items'])}"
    return schema.get("type", "any value")


_JSON_NAMES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"))  # bool before int: True is an int too


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for t, name in _JSON_NAMES if isinstance(value, t)), type(value).__name__)


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (first paragraph, {arg: description})."""
    lines = doc.splitlines()
    summary_lines = []
    for line in lines:
        if not line.strip():
            break
        summary_lines.append(line.strip())
    arg_docs: dict[str, str] = {}
    in_args = False
    current, indent = None, 0
    for line in lines:
        if _ARGS_HEADER.match(line.strip()) and not line.startswith(" "):
            in_args = True
            continue
        if not in_args:
            continue
        if line.strip() and not line.startswith((" ", "\t")):  # next section
            break
        m = _ARG_LINE.match(line)
        if m and (current is None or len(line) - len(line.lstrip()) <= indent):
            current, indent = m.group(1).lstrip("*"), len(line) - len(line.lstrip())
            arg_docs[current] = m.group(3).strip()
        elif current and line.strip():
            arg_docs[current] += " " + line.strip()
    return " ".join(summary_lines), arg_docs


def load_tools(spec: ToolSet | str | Iterable[Tool | Callable | str]) -> ToolSet:
    """The :class:`ToolSet` a ``tools=`` argument stands for, in every form a user writes it.

    ``spec`` is a :class:`ToolSet` (kept as is), or tools, typed documented functions and **import paths**
    (``"package.module:function"``, or a path naming a list of them or a :class:`ToolSet`) — the form a JSON
    config or the command line can carry (``env_kwargs.tools='["my_tools:lookup", "my_tools:convert"]'``).

    Raises:
        ValueError: a path that names nothing importable (the message says which part failed), or a
            :class:`ToolSet` given beside other tools.
    """
    items = [spec] if isinstance(spec, (str, ToolSet)) else list(spec)
    loaded: list[Any] = [load_object(s) if isinstance(s, str) else s for s in items]
    sets = [t for t in loaded if isinstance(t, ToolSet)]
    if sets:
        if len(loaded) > 1:
            raise ValueError("tools=: a ToolSet (e.g. MCP tools) must be the only entry; got it beside "
                             f"{len(loaded) - 1} other tool(s)")
        return sets[0]
    flat = [t for obj in loaded for t in (obj if isinstance(obj, (list, tuple)) else [obj])]
    for t in flat:
        if not (isinstance(t, Tool) or callable(t)):
            raise ValueError(f"tools=: {t!r} is not a tool (a typed, documented function or a Tool)")
    return ToolSet(flat)


def openai_tool_calls(calls: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """The ``tool_calls`` field of an assistant message (OpenAI's shape) for ``calls`` (``name``, ``arguments``)
    under ``ids``."""
    return [{"id": i, "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for i, c in zip(ids, calls, strict=True)]
