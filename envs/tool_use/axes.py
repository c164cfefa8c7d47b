"""Generalisation axes of ``AgentRL/ToolUse-v0``: task families that test what training on the default mixture
did not show the policy (``gymnasium.make("AgentRL/ToolUse-v0", axis="depth")``).

Each axis is its own seeded generator (task ``i`` is a pure function of ``i``; ``train`` even indices, ``test``
odd), over the same mock tools, so the default mixture and every set drawn from it stay as they were:

* ``depth`` — chains of 3 and 4 calls of known tools (training chains have at most 2 in the axes experiment);
* ``recombination`` — two known tools in an order no default family uses (``multiply`` then ``add``,
  ``days_between`` then ``multiply``, ``power`` then ``add`` or ``multiply``);
* ``rule_variants`` — a rule stated in the question: tools (and their arguments) renamed for the task, or a
  stock counted in boxes of 6, 12 or 24 units;
* ``tool_failures`` — the first call of the task's first tool fails with a transient error; calling it again
  works (the demonstration retries).

A task carries what the env needs to play it, so a fixed set (``benchmarks/heldout/tooluse_axis_*.jsonl``) runs
on a plain ``ToolUse-v0``: ``renames`` (``{tool: [new name, {argument: new argument}]}``), ``failures``
(``{tool as called: how many calls fail first}``) and ``chain_length`` (calls in a solution, retries not
counted). ``calls`` name the tools as the agent must call them.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agentrl.envs.datasets import TaskGenerator
from agentrl.envs.tools import Tool, ToolResult, ToolSet

__all__ = ["AXES", "AXIS_FAMILIES", "FAILURE_TEXT", "renamed_tools", "transient_failure"]

Call = tuple[str, dict[str, Any], Any]
Family = Callable[..., tuple[str, list[Call], dict[str, Any]]]

#: The observation of an injected failure: the call did not run, the same call again will.
FAILURE_TEXT = "Error: {name}() is temporarily unavailable (HTTP 503); the call did not run. Try the same call again."


def _axis_families(call: Callable[..., Call], item: Callable[..., str]) -> dict[str, dict[str, Family]]:
    """The families of every axis; ``call(name, **args)`` runs a mock tool, ``item(r, items)`` draws an id."""

    def ints(r: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
        return [int(x) for x in r.integers(lo, hi, size=n)]

    # ---- depth: 3- and 4-call chains
    def add_multiply_add(r, items):
        a, b, d = ints(r, 100, 1000, 3)
        c = int(r.integers(12, 100))
        s = call("add", a=a, b=b)
        m = call("multiply", a=s[2], b=c)
        return (f"What is ({a} + {b}) multiplied by {c}, plus {d}?", [s, m, call("add", a=m[2], b=d)], {})

    def add_multiply_add_multiply(r, items):
        a, b, d = ints(r, 100, 1000, 3)
        c, e = int(r.integers(12, 100)), int(r.integers(3, 10))
        s = call("add", a=a, b=b)
        m = call("multiply", a=s[2], b=c)
        t = call("add", a=m[2], b=d)
        return (f"What is (({a} + {b}) multiplied by {c} plus {d}) multiplied by {e}?",
                [s, m, t, call("multiply", a=t[2], b=e)], {})

    def stock_value_fee(r, items):
        x, price, fee = item(r, items), int(r.integers(3, 60)), int(r.integers(10, 500))
        s = call("stock", item_id=x)
        v = call("multiply", a=s[2], b=price)
        return (f"Each unit of item {x} costs {price} dollars, and shipping the whole stock costs {fee} dollars more. "
                "What does its whole stock cost in dollars, shipping included?", [s, v, call("add", a=v[2], b=fee)],
                {})

    def stock_total_value(r, items):
        x = item(r, items)
        y = item(r, items)
        while y == x:
            y = item(r, items)
        price = int(r.integers(3, 60))
        s, t = call("stock", item_id=x), call("stock", item_id=y)
        n = call("add", a=s[2], b=t[2])
        return (f"Items {x} and {y} each cost {price} dollars per unit. What is the total value of their stock "
                "together in dollars?", [s, t, n, call("multiply", a=n[2], b=price)], {})

    # ---- recombination: known tools in an order no default family uses
    def multiply_add(r, items):
        a, b = ints(r, 12, 1000, 2)
        c = int(r.integers(100, 10000))
        m = call("multiply", a=a, b=b)
        return f"What is {a} multiplied by {b}, plus {c}?", [m, call("add", a=m[2], b=c)], {}

    def days_multiply(r, items):
        start = dt.date(2020, 1, 1) + dt.timedelta(days=int(r.integers(0, 1500)))
        end = start + dt.timedelta(days=int(r.integers(1, 900)))
        rate = int(r.integers(3, 200))
        d = call("days_between", start=start.isoformat(), end=end.isoformat())
        return (f"A rental costs {rate} dollars per day. What does it cost from {start.isoformat()} to "
                f"{end.isoformat()} (one charge per day between the dates)?", [d, call("multiply", a=d[2], b=rate)],
                {})

    def power_add(r, items):
        base, exp, c = int(r.integers(3, 20)), int(r.integers(3, 8)), int(r.integers(100, 100000))
        p = call("power", base=base, exponent=exp)
        return f"What is {base} raised to the power {exp}, plus {c}?", [p, call("add", a=p[2], b=c)], {}

    def power_multiply(r, items):
        base, exp, c = int(r.integers(3, 20)), int(r.integers(3, 8)), int(r.integers(12, 1000))
        p = call("power", base=base, exponent=exp)
        return (f"What is {base} raised to the power {exp}, multiplied by {c}?",
                [p, call("multiply", a=p[2], b=c)], {})

    # ---- rule variants stated in the question
    def renamed(base: str) -> Family:
        def family(r, items):
            query, calls = BASES[base](r, items)
            renames = {}
            for name in dict.fromkeys(c[0] for c in calls):
                new_name, args = RENAMES[name][int(r.integers(len(RENAMES[name])))]
                renames[name] = [new_name, args]
            rule = "; ".join(f"{old}() is called {new}() and takes " + ", ".join(f"{a!r} for {o!r}"
                                                                                   for o, a in args.items())
                             for old, (new, args) in renames.items())
            calls = [(renames[n][0], {renames[n][1][k]: v for k, v in a.items()}, out) for n, a, out in calls]
            return f"{query}\nRule for this task: the tools are renamed: {rule}.", calls, {"renames": renames}
        return family

    def stock_boxes(r, items):
        x, box = item(r, items), (6, 12, 24)[int(r.integers(3))]
        s = call("stock", item_id=x)
        return (f"How many single units of item {x} are in stock?\nRule for this task: the stock tool counts boxes "
                f"of {box} units, not single units.", [s, call("multiply", a=s[2], b=box)], {})

    # ---- injected tool failures: the first call of the first tool fails once
    def retried(base: str) -> Family:
        def family(r, items):
            query, calls = BASES[base](r, items)
            first = calls[0]
            return query, [first, *calls], {"failures": {first[0]: 1}}
        return family

    BASES: dict[str, Callable[..., tuple[str, list[Call]]]] = {
        "multiply": lambda r, items: _two(r, "multiply", 12, 1000, "What is {a} multiplied by {b}?", call),
        "add": lambda r, items: _two(r, "add", 1000, 100000, "What is {a} plus {b}?", call),
        "stock_value": lambda r, items: _stock_value(r, items, call, item),
        "add_multiply": lambda r, items: _add_multiply(r, call),
    }
    return {
        "depth": {"add_multiply_add": add_multiply_add, "add_multiply_add_multiply": add_multiply_add_multiply,
                  "stock_value_fee": stock_value_fee, "stock_total_value": stock_total_value},
        "recombination": {"multiply_add": multiply_add, "days_multiply": days_multiply, "power_add": power_add,
                          "power_multiply": power_multiply},
        "rule_variants": {**{f"renamed_{b}": renamed(b) for b in BASES}, "stock_boxes": stock_boxes},
        "tool_failures": {f"retry_{b}": retried(b) for b in BASES},
    }


def _two(r, name: str, lo: int, hi: int, text: str, call) -> tuple[str, list[Call]]:
    a, b = (int(x) for x in r.integers(lo, hi, size=2))
    return text.format(a=a, b=b), [call(name, a=a, b=b)]


def _stock_value(r, items: int, call, item) -> tuple[str, list[Call]]:
    x, price = item(r, items), int(r.integers(3, 60))
    s = call("stock", item_id=x)
    return (f"Each unit of item {x} costs {price} dollars. What is the total value of its stock in dollars?",
            [s, call("multiply", a=s[2], b=price)])


def _add_multiply(r, call) -> tuple[str, list[Call]]:
    a, b = (int(x) for x in r.integers(100, 1000, size=2))
    c = int(r.integers(12, 100))
    s = call("add", a=a, b=b)
    return f"What is ({a} + {b}) multiplied by {c}?", [s, call("multiply", a=s[2], b=c)]


#: What a rule variant may rename each tool to: ``(new name, {argument: new argument})``.
RENAMES: dict[str, list[tuple[str, dict[str, str]]]] = {
    "multiply": [("times", {"a": "x", "b": "y"}), ("product", {"a": "left", "b": "right"})],
    "add": [("plus", {"a": "x", "b": "y"}), ("total_of", {"a": "first", "b": "second"})],
    "stock": [("inventory_count", {"item_id": "sku"}), ("units_on_hand", {"item_id": "product"})],
}

#: Axis salts: each axis is its own generator, apart from the default mixture's (0x7001).
_SALTS = {"depth": 0x7A01, "recombination": 0x7A02, "rule_variants": 0x7A03, "tool_failures": 0x7A04}
AXES = tuple(_SALTS)


@functools.cache
def _families(call: Callable[..., Call], item: Callable[..., str]) -> dict[str, dict[str, Family]]:
    return _axis_families(call, item)


def axis_generator(axis: str, items: int, call: Callable[..., Call], item: Callable[..., str]) -> TaskGenerator:
    """The seeded generator of ``axis`` whose stock families draw items t1 … t<items>."""
    if axis not in _SALTS:
        raise ValueError(f"axis must be one of {list(AXES)}, got {axis!r}")
    fams = _families(call, item)[axis]
    return TaskGenerator({n: functools.partial(f, items=items) for n, f in fams.items()}, salt=_SALTS[axis],
                         noun=f"{axis} axis")


def _names() -> dict[str, tuple[str, ...]]:
    def nothing(*args, **kwargs):  # only the family names are read
        raise AssertionError

    return {axis: tuple(fams) for axis, fams in _axis_families(nothing, nothing).items()}


#: The family names of each axis.
AXIS_FAMILIES: dict[str, tuple[str, ...]] = _names()


def renamed_tools(tools: ToolSet, renames: Mapping[str, Any]) -> ToolSet:
    """``tools`` with the tools ``renames`` names renamed (``{tool: [new name, {argument: new argument}]}``);
    the others as they are. Raises ``ValueError`` naming a tool or argument the set does not have."""
    out = []
    for name in tools.names:
        t = tools[name]
        if name not in renames:
            out.append(t)
            continue
        new_name, args = renames[name]
        props = t.parameters.get("properties", {})
        unknown = sorted(set(args) - set(props))
        if unknown:
            raise ValueError(f"renames[{name!r}]: no argument(s) {unknown}; {name}() takes {sorted(props)}")
        back = {new: old for old, new in args.items()}
        params = {**t.parameters, "properties": {args.get(k, k): v for k, v in props.items()},
                  "required": [args.get(k, k) for k in t.parameters.get("required", [])]}
        out.append(Tool(name=new_name, description=t.description, parameters=params,
                        fn=functools.partial(_call_renamed, t.fn, back)))
    missing = sorted(set(renames) - set(tools.names))
    if missing:
        raise ValueError(f"renames: no tool(s) {missing}; the tools are {tools.names}")
    return ToolSet(out)


def _call_renamed(fn: Callable[..., Any], back: dict[str, str], **arguments: Any) -> Any:
    return fn(**{back.get(k, k): v for k, v in arguments.items()})


def transient_failure(name: str) -> ToolResult:
    """An injected failure of a call to ``name`` (error kind ``"transient"``: a tool error, not an invalid call)."""
    return ToolResult(FAILURE_TEXT.format(name=name), "transient", {"injected_failures": 1})
