"""``AgentRL/ToolUse-v0``: answer a question by calling tools (ToolBrain's job).

Built-in tasks come from a seeded generator over mock tools a small model cannot replace by guessing
(three-digit multiplication, an inventory look-up, unit conversion, date arithmetic) and chains of two or three
calls. Task ``i`` is a pure function of ``i`` (:func:`make_task`), so the set is unbounded and reproducible;
the ``train`` split uses even indices, ``test`` odd ones, so held-out tasks never appear in training.

Users bring their own tools and data::

    gymnasium.make("AgentRL/ToolUse-v0", tools=[my_fn, ...], dataset="tasks.jsonl")  # rows {query, answer}
    gymnasium.make("AgentRL/ToolUse-v0", tools=["my_tools:lookup"], dataset="train.jsonl", heldout="test.jsonl")

Tools may be named by import path (``"package.module:function"``), so a JSON config or the command line carries
them (``agentrl train ... env_kwargs.tools='["my_tools:lookup"]' env_kwargs.dataset=train.jsonl``); rows with
``calls`` are demonstrations for an SFT cold start (docs/own-tools.md).

Reward: 1.0 correct (numeric equality for numbers, else normalised exact match), 0.0 wrong, -0.1 invalid
format or no answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.answers import answers_match
from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.datasets import TaskGenerator, check_split, load_rows
from agentrl.envs.parsing import ActionParser
from agentrl.envs.tools import Tool, ToolSet, format_value, load_tools, tool

# ---------------------------------------------------------------------------------------------- mock tools

#: The in-memory store behind ``stock``: item ids t1 … t99 with fixed quantities (t99 holds 100).
INVENTORY: dict[str, int] = {f"t{i}": (i * 37 + 11) % 190 + 5 for i in range(1, 99)} | {"t99": 100}

_LENGTH_M = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mi": 1609.344, "ft": 0.3048, "in": 0.0254}
_MASS_KG = {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125}


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first term.
        b: the second term.
    """
    return a + b


@tool
def power(base: int, exponent: int) -> int:
    """Raise an integer to a non-negative integer power (exponent at most 12).

    Args:
        base: the base.
        exponent: the exponent, 0 to 12.
    """
    if not 0 <= exponent <= 12:
        raise ValueError("exponent must be between 0 and 12")
    return base**exponent


@tool
def stock(item_id: str) -> int:
    """Look up how many units of an item are in stock.

    Args:
        item_id: the item's id, such as "t42".
    """
    if item_id not in INVENTORY:
        raise KeyError(f"no item {item_id!r}; ids are t1 to t99")
    return INVENTORY[item_id]


@tool
def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length (m, km, cm, mi, ft, in) or a mass (kg, g, lb, oz) between units.

    Args:
        value: the quantity to convert.
        from_unit: the unit of value.
        to_unit: the unit wanted.
    """
    for table in (_LENGTH_M, _MASS_KG):
        if from_unit in table and to_unit in table:
            return round(value * table[from_unit] / table[to_unit], 3)
    raise ValueError(f"cannot convert {from_unit!r} to {to_unit!r}")


@tool
def days_between(start: str, end: str) -> int:
    """Number of days from one date to another (negative if end is earlier).

    Args:
        start: the first date, YYYY-MM-DD.
        end: the second date, YYYY-MM-DD.
    """
    return (dt.date.fromisoformat(end) - dt.date.fromisoformat(start)).days


MOCK_TOOLS: list[Tool] = [multiply, add, power, stock, convert_units, days_between]

# ---------------------------------------------------------------------------------------------- task generator


def _call(name: str, **arguments) -> tuple[str, dict[str, Any], Any]:
    return name, arguments, {t.name: t for t in MOCK_TOOLS}[name].fn(**arguments)


def _item(r: np.random.Generator) -> str:
    return f"t{int(r.integers(1, 100))}"


def _fam_multiply(r):
    a, b = (int(x) for x in r.integers(12, 1000, size=2))
    return f"What is {a} multiplied by {b}?", [_call("multiply", a=a, b=b)]


def _fam_add(r):
    a, b = (int(x) for x in r.integers(1000, 100000, size=2))
    return f"What is {a} plus {b}?", [_call("add", a=a, b=b)]


def _fam_power(r):
    base, exp = int(r.integers(3, 20)), int(r.integers(3, 8))
    return f"What is {base} raised to the power {exp}?", [_call("power", base=base, exponent=exp)]


def _fam_stock(r):
    item = _item(r)
    return f"How many units of item {item} are in stock?", [_call("stock", item_id=item)]


_CONVERSIONS = [("km", "mi"), ("mi", "km"), ("m", "ft"), ("ft", "m"), ("in", "cm"), ("cm", "in"),
                ("kg", "lb"), ("lb", "kg"), ("oz", "g"), ("g", "oz")]


def _fam_convert(r):
    src, dst = _CONVERSIONS[int(r.integers(len(_CONVERSIONS)))]
    value = float(int(r.integers(2, 500)))
    return f"Convert {value:g} {src} to {dst}.", [_call("convert_units", value=value, from_unit=src, to_unit=dst)]


def _fam_days(r):
    start = dt.date(2020, 1, 1) + dt.timedelta(days=int(r.integers(0, 1500)))
    end = start + dt.timedelta(days=int(r.integers(1, 900)))
    return (f"How many days are there from {start.isoformat()} to {end.isoformat()}?",
            [_call("days_between", start=start.isoformat(), end=end.isoformat())])


def _fam_stock_value(r):
    item, price = _item(r), int(r.integers(3, 60))
    first = _call("stock", item_id=item)
    return (f"Each unit of item {item} costs {price} dollars. What is the total value of its stock in dollars?",
            [first, _call("multiply", a=first[2], b=price)])


def _fam_stock_total(r):
    a, b = _item(r), _item(r)
    while b == a:
        b = _item(r)
    first, second = _call("stock", item_id=a), _call("stock", item_id=b)
    return (f"How many units of items {a} and {b} are in stock together?",
            [first, second, _call("add", a=first[2], b=second[2])])


def _fam_add_multiply(r):
    a, b = (int(x) for x in r.integers(100, 1000, size=2))
    c = int(r.integers(12, 100))
    first = _call("add", a=a, b=b)
    return f"What is ({a} + {b}) multiplied by {c}?", [first, _call("multiply", a=first[2], b=c)]


FAMILIES: dict[str, Callable[[np.random.Generator], tuple[str, list]]] = {
    "multiply": _fam_multiply,
    "add": _fam_add,
    "power": _fam_power,
    "stock": _fam_stock,
    "convert": _fam_convert,
    "days": _fam_days,
    "stock_value": _fam_stock_value,
    "stock_total": _fam_stock_total,
    "add_multiply": _fam_add_multiply,
}


GENERATOR = TaskGenerator(FAMILIES, salt=0x7001)


def make_task(index: int, families: Sequence[str] | None = None) -> dict[str, Any]:
    """Built-in task number ``index`` (a pure function of ``index`` and ``families``).

    The task holds ``id``, ``family``, ``query``, ``answer`` (a string) and ``calls`` — the tool calls
    ``[[name, arguments], ...]`` of a correct solution.
    """
    family, (query, calls) = GENERATOR.draw(index, families)
    return {
        "id": f"{family}-{index}",
        "family": family,
        "query": query,
        "answer": format_value(calls[-1][2]),
        "calls": [[name, args] for name, args, _ in calls],
    }


def make_tasks(n: int, split: str = "test", families: Sequence[str] | None = None, start: int = 0) -> list[dict]:
    """``n`` built-in tasks of a split (``train``: even indices, ``test``: odd), from position ``start``."""
    return GENERATOR.many(make_task, n, split, families, start)


# ---------------------------------------------------------------------------------------------- env


class ToolUseEnv(TextEnv):
    """Answer a question by calling tools; see the module docstring."""

    def __init__(
        self,
        tools: ToolSet | str | Iterable[Tool | Callable | str] | None = None,
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        heldout: str | Path | Iterable[dict[str, Any]] | None = None,
        families: Sequence[str] | None = None,
        split: str = "train",
        max_turns: int = 6,
        max_tool_calls: int = 4,
        max_obs_chars: int = 2_000,
        parser: ActionParser | None = None,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ):
        """
        Args:
            tools: your own tools (typed, documented functions or :class:`Tool`, their import paths
                ``"package.module:function"``, or a :class:`ToolSet` such as
                :func:`~agentrl.envs.mcp_tools.mcp_tools`, closed with the env; :func:`~agentrl.envs.tools.load_tools`);
                default: the mock tools.
            dataset: your tasks, as a JSONL path or a list of ``{"query", "answer"}`` rows (optional ``id``,
                and ``calls`` — ``[[name, arguments], ...]`` — for demonstrations). Required with ``tools``.
            heldout: your held-out tasks (same row format), what :meth:`heldout_tasks` returns; with your own
                ``dataset`` and no ``heldout``, :meth:`heldout_tasks` refuses rather than evaluate on the mock tasks.
            families: restrict the built-in generator to these task families (see ``FAMILIES``).
            split: ``"train"`` or ``"test"`` — which built-in tasks ``reset`` samples.
            max_turns, max_tool_calls, max_obs_chars: the episode budgets.
            parser: the reply format (default: Hermes tool calls, ``Answer: ...``).
            tools_in_prompt: describe tools in the system prompt (False when the chat template does it).
        """
        if tools is not None and dataset is None:
            raise ValueError("with your own tools, pass dataset= too (a JSONL path or a list of "
                             "{'query': ..., 'answer': ...} rows): the built-in tasks need the mock tools")
        self.split = check_split(split, ("train", "test"))
        self.rows = load_rows(dataset, ("query", "answer")) if dataset is not None else None
        self.heldout = load_rows(heldout, ("query", "answer")) if heldout is not None else None
        self.families = GENERATOR.check(families) if families else None  # unknown names fail now, not at reset
        super().__init__(
            tools=load_tools(tools) if tools is not None else ToolSet(MOCK_TOOLS),
            parser=parser or ActionParser(),
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_tool_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=0.0, invalid=-0.1),
            tools_in_prompt=tools_in_prompt,
            render_mode=render_mode,
        )

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.rows is not None:
            i = int(rng.integers(len(self.rows)))
            return {"id": str(i), **self.rows[i]}
        return GENERATOR.sample(make_task, rng, self.split, self.families)

    def heldout_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """The first ``n`` rows of ``heldout`` when given, else the first ``n`` generated tasks of the ``test``
        split (of ``families`` when given); ``seed`` is unused: the split is fixed.

        Raises:
            ValueError: the env was made with your own ``dataset`` but no ``heldout`` (the mock tasks would
                score your tools on questions they cannot answer).
        """
        if self.heldout is not None:
            return [{"id": str(row.get("id", i)), **row} for i, row in enumerate(self.heldout[:n])]
        if self.rows is not None:
            raise ValueError("AgentRL/ToolUse-v0 made with your own dataset= has no held-out tasks: pass heldout= "
                             "(a JSONL of {query, answer} rows) in env_kwargs, or evaluate with --tasks-file")
        return make_tasks(n, split="test", families=self.families)

    def task_instructions(self, task: dict[str, Any]) -> str:
        return ("You are an assistant that answers questions by calling tools. Call one tool per reply and "
                "wait for its result; do the arithmetic with the tools, not in your head.")

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        correct = answers_match(answer, task["answer"])
        return (self.rewards.correct if correct else self.rewards.wrong), correct

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        calls = task.get("calls")
        if calls is None:
            return None
        answer = task["answer"][0] if isinstance(task["answer"], list) else task["answer"]
        return [self.parser.render_call(n, a) for n, a in calls] + [self.parser.render_answer(str(answer))]
