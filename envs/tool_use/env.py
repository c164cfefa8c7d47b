"""``AgentRL/ToolUse-v0``: answer a question by calling tools (ToolBrain's job).

Built-in tasks come from a seeded generator over mock tools a small model cannot replace by guessing
(three-digit multiplication, an inventory look-up, unit conversion, date arithmetic) and chains of two or three
calls. Task ``i`` is a pure function of ``i`` (:func:`make_task`), so the set is unbounded and reproducible;
the ``train`` split uses even indices, ``test`` odd ones, so test tasks never appear in training. The opt-in
procedural families (``families=["procedural_single", ...]``, never drawn by default) give each task its own
generated functions and grade its calls (:mod:`agentrl.envs.tool_use.procedural`).

Users bring their own tools and data::

    gymnasium.make("AgentRL/ToolUse-v0", tools=[my_fn, ...], dataset="tasks.jsonl")  # rows {query, answer}
    gymnasium.make("AgentRL/ToolUse-v0", tools=["my_tools:lookup"], dataset="train.jsonl",
                   test_dataset="test.jsonl")

Tools may be named by import path (``"package.module:function"``), so a JSON config or the command line carries
them (``agentrl train ... env_kwargs.tools='["my_tools:lookup"]' env_kwargs.dataset=train.jsonl``); rows with
``calls`` are demonstrations for an SFT cold start (docs/own-tools.md).

Reward: 1.0 correct (numeric equality for numbers, else normalised exact match), 0.0 wrong, -0.1 invalid
format or no answer.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.answers import answers_match
from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.datasets import DatasetError, TaskGenerator, check_split, located_rows
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.tool_use.axes import AXES, axis_generator, renamed_tools, transient_failure
from agentrl.envs.tool_use.dial import KNOBS, Dial, difficulty
from agentrl.envs.tool_use.procedural import FAMILIES as PROCEDURAL_FAMILIES
from agentrl.envs.tool_use.procedural import INSTRUCTIONS as PROCEDURAL_INSTRUCTIONS
from agentrl.envs.tool_use.procedural import calls_match, is_procedural, run_call
from agentrl.envs.tools import Tool, ToolSet, format_value, load_tools, tool

# ---------------------------------------------------------------------------------------------- mock tools

#: How many stock items the built-in tasks draw from by default (``items=``: t1 … t<items>).
ITEMS = 99
#: The largest ``items`` the in-memory store holds.
MAX_ITEMS = 999
#: ``call_credit_rule`` values: pay a reference call's credit at its turn, or once the episode goes on from it.
CALL_CREDIT_RULES = ("each", "continued")
#: The in-memory store behind ``stock``: item ids t1 … t999 with fixed quantities (t99 holds 100). The default
#: tasks ask about t1 … t99 only; ``items=999`` widens the question space of the stock families.
INVENTORY: dict[str, int] = {f"t{i}": (i * 37 + 11) % 190 + 5 for i in range(1, MAX_ITEMS + 1)} | {"t99": 100}

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
        raise KeyError(f"no item {item_id!r}; ids are t1 to t{MAX_ITEMS}")
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


def _call_key(name: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """A tool call as ``call_credit`` compares it: the name and the arguments with numbers (or numeric strings)
    read as floats and other values as stripped strings, so ``{"a": 13}`` equals ``{"a": "13.0"}``."""
    def norm(v: Any) -> Any:
        try:
            return float(v)
        except (TypeError, ValueError):
            return str(v).strip()

    args = arguments if isinstance(arguments, dict) else {}
    return str(name), repr(sorted((str(k), norm(v)) for k, v in args.items()))


def _item(r: np.random.Generator, items: int = ITEMS) -> str:
    return f"t{int(r.integers(1, items + 1))}"


def _fam_multiply(r):
    a, b = (int(x) for x in r.integers(12, 1000, size=2))
    return f"What is {a} multiplied by {b}?", [_call("multiply", a=a, b=b)]


def _fam_add(r):
    a, b = (int(x) for x in r.integers(1000, 100000, size=2))
    return f"What is {a} plus {b}?", [_call("add", a=a, b=b)]


def _fam_power(r):
    base, exp = int(r.integers(3, 20)), int(r.integers(3, 8))
    return f"What is {base} raised to the power {exp}?", [_call("power", base=base, exponent=exp)]


def _fam_stock(r, items=ITEMS):
    item = _item(r, items)
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


def _fam_stock_value(r, items=ITEMS):
    item, price = _item(r, items), int(r.integers(3, 60))
    first = _call("stock", item_id=item)
    return (f"Each unit of item {item} costs {price} dollars. What is the total value of its stock in dollars?",
            [first, _call("multiply", a=first[2], b=price)])


def _fam_stock_total(r, items=ITEMS):
    a, b = _item(r, items), _item(r, items)
    while b == a:
        b = _item(r, items)
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
#: The families that ask about stock items (their question space grows with ``items``).
ITEM_FAMILIES = ("stock", "stock_value", "stock_total")


@functools.cache
def generator(items: int = ITEMS, axis: str | None = None) -> TaskGenerator:
    """The task generator whose stock families draw items t1 … t<items> (:data:`GENERATOR` for the default),
    or that of a generalisation ``axis`` (:mod:`agentrl.envs.tool_use.axes`). Only the stock families' tasks
    depend on ``items``: task ``i`` of any other family is the same."""
    if not 2 <= items <= MAX_ITEMS:
        raise ValueError(f"items must be between 2 and {MAX_ITEMS}, got {items!r}")
    if axis is not None:
        return axis_generator(axis, items, _call, _item)
    if items == ITEMS:
        return GENERATOR
    return TaskGenerator({name: functools.partial(fn, items=items) if name in ITEM_FAMILIES else fn
                          for name, fn in FAMILIES.items()}, salt=GENERATOR.salt)


@functools.cache
def _with_procedural(items: int) -> TaskGenerator:
    return TaskGenerator({**generator(items).families, **PROCEDURAL_FAMILIES}, salt=GENERATOR.salt)


def _generator_for(items: int, axis: str | None, families: Sequence[str] | None) -> TaskGenerator:
    """The generator that draws ``families``: the procedural ones (opt-in, never drawn by default; see
    :mod:`agentrl.envs.tool_use.procedural`) join the default families only when ``families`` names others."""
    if axis is None and families and not set(families) <= set(FAMILIES):
        return _with_procedural(items)
    return generator(items, axis)


def make_task(index: int, families: Sequence[str] | None = None, items: int = ITEMS,
              axis: str | None = None) -> dict[str, Any]:
    """Built-in task number ``index`` (a pure function of ``index``, ``families``, ``items`` and ``axis``).

    The task holds ``id``, ``family``, ``query``, ``answer`` (a string) and ``calls`` — the tool calls
    ``[[name, arguments], ...]`` of a correct solution — and ``items`` when it is not the default. A task of an
    ``axis`` also holds ``axis``, ``chain_length`` and what the env needs to play it (``renames``, ``failures``).
    """
    family, drawn = _generator_for(items, axis, families).draw(index, families)
    if family in PROCEDURAL_FAMILIES:  # a row with its own tools, graded on its calls
        return {"id": f"{family}-{index}", "family": family, **drawn}
    query, calls, extra = drawn if axis is not None else (*drawn, None)
    return {
        "id": f"{family}-{index}",
        "family": family,
        "query": query,
        "answer": format_value(calls[-1][2]),
        "calls": [[name, args] for name, args, _ in calls],
        **({"items": items} if items != ITEMS else {}),
        **({"axis": axis, "chain_length": len(calls) - sum(extra.get("failures", {}).values()), **extra}
           if extra is not None else {}),
    }


def make_tasks(n: int, split: str = "test", families: Sequence[str] | None = None, start: int = 0,
               items: int = ITEMS, axis: str | None = None) -> list[dict]:
    """``n`` built-in tasks of a split (``train``: even indices, ``test``: odd), from position ``start``."""
    return generator(items, axis).many(functools.partial(make_task, items=items, axis=axis), n, split, families,
                                       start)


# ---------------------------------------------------------------------------------------------- env


def question_rows(source, name: str) -> list[dict[str, Any]]:
    """Your task rows, each with its question under ``query`` (the task key the env reads): a row may name it
    ``question`` (as Search's and every dataset's rows do) or ``query``; ``answer`` is required.

    Raises:
        DatasetError: a row without a question or an answer, naming the file and line (or the index).
    """
    rows = []
    for where, row in located_rows(source, (), name=name):
        missing = (([] if "query" in row or "question" in row else ["question"])
                   + ([] if "answer" in row else ["answer"]))
        if missing:
            raise DatasetError(f"{where}: missing key(s) {missing} (the question may also be named 'query')")
        rows.append(row if "query" in row else {**row, "query": row["question"]})
    return rows


class ToolUseEnv(TextEnv):
    """Answer a question by calling tools; see the module docstring."""

    difficulty_knobs = KNOBS

    def __init__(
        self,
        tools: ToolSet | str | Iterable[Tool | Callable | str] | None = None,
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        test_dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        families: Sequence[str] | None = None,
        items: int = ITEMS,
        split: str = "train",
        max_turns: int = 6,
        max_tool_calls: int = 4,
        max_obs_chars: int = 2_000,
        parser: ActionParser | None = None,
        tools_in_prompt: bool = True,
        render_mode: str | None = None,
        call_credit: float = 0.0,
        call_credit_rule: str = "each",
        axis: str | None = None,
        distractors: int = 0,
        failure_rate: float = 0.0,
    ):
        """
        Args:
            tools: your own tools (typed, documented functions or :class:`Tool`, their import paths
                ``"package.module:function"``, or a :class:`ToolSet` such as
                :func:`~agentrl.envs.mcp_tools.mcp_tools`, closed with the env; :func:`~agentrl.envs.tools.load_tools`);
                default: the mock tools.
            dataset: your tasks, as a JSONL path or a list of ``{"question", "answer"}`` rows (``question``, the
                name every env's rows use, or ``query``; optional ``id``, and ``calls`` — ``[[name, arguments],
                ...]`` — for demonstrations). Required with ``tools``.
            test_dataset: your test tasks (same row format), what :meth:`test_tasks` returns; with
                your own ``dataset`` and no ``test_dataset``, :meth:`test_tasks` refuses rather than
                evaluate on the mock tasks.
            families: restrict the built-in generator to these task families (see ``FAMILIES``), or name the
                opt-in procedural-tools families (each task brings its own generated functions and is graded on
                its calls; :mod:`agentrl.envs.tool_use.procedural`).
            items: the built-in stock families ask about items t1 … t<items> (2 to 999; default 99). 999 makes
                their question space large enough for test questions that training never sees
                (``benchmarks/heldout.py``'s ``tooluse_v3``).
            split: ``"train"`` or ``"test"`` — which built-in tasks ``reset`` samples.
            max_turns, max_tool_calls, max_obs_chars: the episode budgets.
            parser: the reply format (default: Hermes tool calls, ``Answer: ...``).
            tools_in_prompt: describe tools in the system prompt (False when the chat template does it).
            call_credit: partial credit (>= 0; default 0, outcome reward only): each tool call equal to one of the
                task's reference ``calls`` (same tool, same arguments; each reference call credited once) earns
                this reward at its turn, so a chain the policy gets partly right scores above one it gets wrong
                from the start. The answer's reward (1 correct, 0 wrong) and ``correct`` are unchanged.
            call_credit_rule: when a reference call's credit is paid. ``"each"``: at its turn, whatever follows
                (a policy can then keep it by answering right after one correct call). ``"continued"``: only once
                the episode goes on from it: paid at the next reference call, or added to a correct answer's
                reward; a credit the episode abandons (a wrong answer, a budget end) is lost, so stopping a chain
                early earns nothing that finishing it would not.
            axis: draw the built-in tasks of a generalisation axis instead of the default mixture (one of
                :data:`~agentrl.envs.tool_use.axes.AXES`: ``depth``, ``recombination``, ``rule_variants``,
                ``tool_failures``; ``families`` then names that axis's families). Whatever the axis, a task that
                carries ``renames`` or ``failures`` is played by its rule (a fixed set's rows, pinned at reset).
            distractors, failure_rate: the difficulty dial (:mod:`agentrl.envs.tool_use.dial`): 0 to 8 decoy tools
                beside the mock tools; each call fails transiently with this probability (0 to 1, seeded at reset).
        """
        if not call_credit >= 0:
            raise ValueError(f"call_credit must be >= 0, got {call_credit!r}")
        self.call_credit = float(call_credit)
        if call_credit_rule not in CALL_CREDIT_RULES:
            raise ValueError(f"call_credit_rule must be one of {CALL_CREDIT_RULES}, got {call_credit_rule!r}")
        self.call_credit_rule = call_credit_rule
        self._uncredited: list[tuple[str, str]] = []
        self._pending_credit = 0.0
        if tools is not None and dataset is None:
            raise ValueError("with your own tools, pass dataset= too (a JSONL path or a list of "
                             "{'question': ..., 'answer': ...} rows): the built-in tasks need the mock tools")
        self.split = check_split(split, ("train", "test"))
        self.rows = question_rows(dataset, "dataset") if dataset is not None else None
        self.test_rows = question_rows(test_dataset, "test_dataset") if test_dataset is not None else None
        if axis is not None and axis not in AXES:
            raise ValueError(f"axis must be one of {list(AXES)}, got {axis!r}")
        self.axis = axis
        self.items = items
        gen = _generator_for(items, axis, families)  # a bad value fails now
        self.families = gen.check(families) if families else None  # unknown names fail now, not at reset
        self._failures: dict[str, int] = {}
        self.dial = Dial(distractors, failure_rate, own_tools=tools is not None)  # a bad value fails now
        super().__init__(
            tools=load_tools(tools) if tools is not None else self.dial.tool_set(MOCK_TOOLS),
            parser=parser or ActionParser(),
            budgets=Budgets(max_turns=max_turns, max_tool_calls=max_tool_calls, max_obs_chars=max_obs_chars),
            rewards=Rewards(correct=1.0, wrong=0.0, invalid=-0.1),
            tools_in_prompt=tools_in_prompt,
            render_mode=render_mode,
        )
        self._base_tools = self.tools  # a task's ``renames`` rename these for its episode

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.rows is not None:
            i = int(rng.integers(len(self.rows)))
            return {"id": str(i), **self.rows[i]}
        return generator(self.items, self.axis).sample(functools.partial(make_task, items=self.items,
                                                                         axis=self.axis),
                                                       rng, self.split, self.families)

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """The first ``n`` rows of ``test_dataset`` when given, else the first ``n`` generated tasks of the
        ``test`` split (of ``families`` when given); ``seed`` is unused: the split is fixed.

        Raises:
            ValueError: the env was made with your own ``dataset`` but no ``test_dataset`` (the mock tasks
                would score your tools on questions they cannot answer).
        """
        if self.test_rows is not None:
            return [{"id": str(row.get("id", i)), **row} for i, row in enumerate(self.test_rows[:n])]
        if self.rows is not None:
            raise ValueError("AgentRL/ToolUse-v0 made with your own dataset= has no test tasks: pass "
                             "test_dataset= (a JSONL of {question, answer} rows) in env_kwargs, or evaluate "
                             "with --tasks-file")
        return make_tasks(n, split="test", families=self.families, items=self.items, axis=self.axis)

    def task_instructions(self, task: dict[str, Any]) -> str:
        if is_procedural(task):
            return PROCEDURAL_INSTRUCTIONS
        return ("You are an assistant that answers questions by calling tools. Call one tool per reply and "
                "wait for its result; do the arithmetic with the tools, not in your head.")

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        correct = calls_match(task, self.messages) if is_procedural(task) else answers_match(answer, task["answer"])
        held, self._pending_credit = self._pending_credit, 0.0  # "continued": the last credit, held until now
        return (self.rewards.correct + held if correct else self.rewards.wrong), correct

    def on_reset(self, task: dict[str, Any]) -> None:
        self.tools = renamed_tools(self._base_tools, task["renames"]) if task.get("renames") else self._base_tools
        self._failures = {str(k): int(v) for k, v in (task.get("failures") or {}).items()}
        if self.dial.start(self.np_random, task) or self._failures:
            self.metrics.extra["injected_failures"] = 0
        self._uncredited = [_call_key(n, a) for n, a in task.get("calls") or []] if self.call_credit else []
        self._pending_credit = 0.0
        if self.call_credit:
            self.metrics.extra["credited_calls"] = 0

    def run_tool(self, parsed: ParsedAction) -> str:
        name = parsed.name or ""
        if self._failures.get(name, 0) > 0 and name in self.tools:  # a task's injected transient failure
            self._failures[name] -= 1
        elif not (name in self.tools and self.dial.fails()):  # else the dial's failure_rate, one draw a call
            return super().run_tool(parsed)
        self.metrics.tool_errors += 1
        self.metrics.extra["injected_failures"] += 1
        return transient_failure(name).content

    def extra_info(self) -> dict[str, Any]:
        """``difficulty``: what makes the task hard under the dial (:func:`~agentrl.envs.tool_use.dial.difficulty`)."""
        return {"difficulty": difficulty(self.task, distractors=self.dial.distractors,
                                         failure_rate=self.dial.failure_rate)} if self.task is not None else {}

    def run_task_tool(self, name: str, arguments: dict[str, Any], task: dict[str, Any]) -> Any:
        return run_call(name, arguments) if is_procedural(task) else super().run_task_tool(name, arguments, task)

    def close(self) -> None:
        self.tools = self._base_tools
        super().close()

    def call_reward(self, name: str, arguments: dict[str, Any], task: dict[str, Any]) -> float:
        key = _call_key(name, arguments)
        if key not in self._uncredited:
            return 0.0
        self._uncredited.remove(key)
        self.metrics.extra["credited_calls"] += 1
        if self.call_credit_rule == "each":
            return self.call_credit
        paid, self._pending_credit = self._pending_credit, self.call_credit  # the chain went on: pay the last one
        return paid

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        calls = task.get("calls")
        if calls is None:
            return None
        answer = task["answer"][0] if isinstance(task["answer"], list) else task["answer"]
        if is_procedural(task):  # every call in one reply (a parallel task's calls together)
            return [self.parser.render_calls(calls)] * bool(calls) + [self.parser.render_answer(str(answer))]
        return [self.parser.render_call(n, a) for n, a in calls] + [self.parser.render_answer(str(answer))]
