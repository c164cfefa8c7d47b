"""The difficulty dial of ``AgentRL/ToolUse-v0``: decoy tools, a per-call failure rate, and what makes a task hard.

Two env keywords turn the built-in tasks harder without changing a task row (``make_task`` and every committed set
stay as they are):

* ``distractors=k`` (0 to 8) — ``k`` decoy tools join the mock tools in every episode: plausible neighbours of
  the tools the tasks need (``subtract`` beside ``add``, ``price(item_id)`` beside ``stock``, ``weeks_between``
  beside ``days_between`` ...), typed and documented like them. Calling one is legal (it runs and answers) and never
  needed: no task's solution uses one. The first ``k`` of :data:`DECOYS` are taken, each listed right after the
  tool it resembles.
* ``failure_rate=r`` (0 to 1) — every call of an env tool fails, independently, with probability ``r``: the
  observation is the transient error of the ``tool_failures`` axis
  (:func:`~agentrl.envs.tool_use.axes.transient_failure`: "the call did not run. Try the same call again."),
  counted in ``tool_errors`` and the ``injected_failures`` metric. The draws come from a generator seeded at
  ``reset`` from the env's ``np_random``, so an episode replays exactly under its reset seed, and how many calls
  an episode made does not change the tasks later resets draw.
  A task's own scripted ``failures`` (the ``tool_failures`` axis) come first; a call they fail draws nothing.

A task that brings its own tools (the procedural families) is played as it is: neither knob applies to it (its
grading counts every call, so a decoy or a retried call would make a correct episode wrong).

:func:`difficulty` says what makes one task hard under the dial; the env puts it in every step's
``info["difficulty"]``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.envs.tools import Tool, ToolSet, tool

__all__ = ["DECOYS", "KNOBS", "Dial", "difficulty"]

#: ToolUse-v0's difficulty knobs (its ``difficulty_knobs``): env keyword -> what turning it does.
KNOBS: dict[str, str] = {
    "families": "which task families are drawn: one-call families (multiply, add, ...), 2-3-call chains "
                "(stock_value, add_multiply, stock_total), or the opt-in procedural_* families (each task brings "
                "functions of its own to read)",
    "axis": "draw a generalisation axis instead of the default mixture: depth (3-4-call chains), recombination "
            "(known tools in new orders), rule_variants (tools renamed for the task), tool_failures (the first "
            "call fails once)",
    "items": "stock items the stock families ask about, 2 to 999 (default 99): more items, fewer repeated "
             "questions",
    "distractors": "0 to 8 decoy tools beside the mock tools (subtract, price, weeks_between, ...): legal to "
                   "call, never needed",
    "failure_rate": "0 to 1: each tool call fails transiently with this probability (the same call again may "
                    "work); replays under the reset seed",
}


# ---------------------------------------------------------------------------------------------- decoy tools

def _number(item_id: str) -> int:
    if not (item_id.startswith("t") and item_id[1:].isdigit() and 1 <= int(item_id[1:]) <= 999):
        raise KeyError(f"no item {item_id!r}; ids are t1 to t999")
    return int(item_id[1:])


@tool
def subtract(a: int, b: int) -> int:
    """Subtract one integer from another.

    Args:
        a: the integer to subtract from.
        b: the integer subtracted.
    """
    return a - b


@tool
def price(item_id: str) -> int:
    """Look up an item's catalogue price per unit, in dollars.

    Args:
        item_id: the item's id, such as "t42".
    """
    return (_number(item_id) * 53 + 7) % 90 + 2


@tool
def weeks_between(start: str, end: str) -> float:
    """Number of weeks from one date to another, to three decimals (negative if end is earlier).

    Args:
        start: the first date, YYYY-MM-DD.
        end: the second date, YYYY-MM-DD.
    """
    return round((dt.date.fromisoformat(end) - dt.date.fromisoformat(start)).days / 7, 3)


@tool
def divide(a: float, b: float) -> float:
    """Divide one number by another, to three decimals.

    Args:
        a: the dividend.
        b: the divisor (not 0).
    """
    if b == 0:
        raise ValueError("cannot divide by 0")
    return round(a / b, 3)


@tool
def convert_temperature(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a temperature between Celsius (C), Fahrenheit (F) and Kelvin (K).

    Args:
        value: the temperature to convert.
        from_unit: the unit of value: C, F or K.
        to_unit: the unit wanted: C, F or K.
    """
    to_c = {"C": lambda v: v, "F": lambda v: (v - 32) * 5 / 9, "K": lambda v: v - 273.15}
    from_c = {"C": lambda v: v, "F": lambda v: v * 9 / 5 + 32, "K": lambda v: v + 273.15}
    if from_unit not in to_c or to_unit not in from_c:
        raise ValueError(f"cannot convert {from_unit!r} to {to_unit!r}; the units are C, F and K")
    return round(from_c[to_unit](to_c[from_unit](value)), 3)


@tool
def square_root(value: float) -> float:
    """The square root of a non-negative number, to three decimals.

    Args:
        value: the number, at least 0.
    """
    if value < 0:
        raise ValueError("value must be at least 0")
    return round(math.sqrt(value), 3)


@tool
def reorder_level(item_id: str) -> int:
    """Look up the stock level at which an item is reordered.

    Args:
        item_id: the item's id, such as "t42".
    """
    return (_number(item_id) * 29 + 3) % 40 + 10


@tool
def add_days(start: str, days: int) -> str:
    """The date a number of days after another (before it when days is negative).

    Args:
        start: the date, YYYY-MM-DD.
        days: how many days to add.
    """
    return (dt.date.fromisoformat(start) + dt.timedelta(days=days)).isoformat()


#: The decoys in the order ``distractors=k`` takes them, each with the mock tool it is listed after.
DECOYS: list[tuple[str, Tool]] = [
    ("add", subtract), ("stock", price), ("days_between", weeks_between), ("multiply", divide),
    ("convert_units", convert_temperature), ("power", square_root), ("stock", reorder_level),
    ("days_between", add_days),
]


def with_decoys(tools: Sequence[Tool], k: int) -> ToolSet:
    """``tools`` with the first ``k`` decoys, each right after the tool it resembles (at the end when absent)."""
    decoys = DECOYS[:k]
    out = []
    for t in tools:
        out += [t] + [d for beside, d in decoys if beside == t.name]
    names = {t.name for t in tools}
    return ToolSet(out + [d for beside, d in decoys if beside not in names])


# ---------------------------------------------------------------------------------------------- the dial

class Dial:
    """An env's dial settings, checked (a bad value raises ``ValueError`` naming the key), and the per-episode
    failure draws."""

    def __init__(self, distractors: int = 0, failure_rate: float = 0.0, *, own_tools: bool = False):
        if isinstance(distractors, bool) or not isinstance(distractors, (int, np.integer)) \
                or not 0 <= distractors <= len(DECOYS):
            raise ValueError(f"distractors must be an integer from 0 to {len(DECOYS)}, got {distractors!r}")
        if isinstance(failure_rate, bool) or not isinstance(failure_rate, (int, float, np.floating, np.integer)) \
                or not 0.0 <= float(failure_rate) <= 1.0:
            raise ValueError(f"failure_rate must be a number from 0 to 1, got {failure_rate!r}")
        if distractors and own_tools:
            raise ValueError("distractors: the decoys are neighbours of the mock tools; with your own tools=, "
                             "add your own decoys to tools (or leave distractors at 0)")
        self.distractors = int(distractors)
        self.failure_rate = float(failure_rate)
        self._rng: np.random.Generator | None = None

    def tool_set(self, mock_tools: Sequence[Tool]) -> ToolSet:
        """The mock tools with this dial's decoys (the mock tools alone at ``distractors=0``)."""
        return with_decoys(mock_tools, self.distractors)

    def start(self, np_random: np.random.Generator, task: dict[str, Any]) -> bool:
        """Begin an episode of ``task``: seed its failure draws from ``np_random`` (one draw, only when the rate is
        above 0 and the task is played with the env's tools). Returns whether calls may fail at random."""
        self._rng = None
        if self.failure_rate > 0 and task.get("tools") is None:
            self._rng = np.random.default_rng(int(np_random.integers(2**63)))
        return self._rng is not None

    def fails(self) -> bool:
        """Whether the next call fails: one independent draw with probability ``failure_rate``."""
        return self._rng is not None and bool(self._rng.random() < self.failure_rate)


def difficulty(task: dict[str, Any], *, distractors: int = 0, failure_rate: float = 0.0) -> dict[str, Any]:
    """What makes ``task`` hard under the dial (a pure function of its arguments):

    * ``calls`` — tool calls in its reference solution, retries of scripted failures not counted (``None`` for a
      row without ``calls``);
    * ``renamed_tools`` — tools the task renames (the ``rule_variants`` axis);
    * ``injected_failures`` — calls the task fails on purpose (the ``tool_failures`` axis);
    * ``distractors``, ``failure_rate`` — the dial's settings as they apply to it (0 for a task with its own
      tools, which the dial leaves alone).
    """
    failures = sum(int(v) for v in (task.get("failures") or {}).values())
    calls = task.get("calls")
    own_tools = task.get("tools") is not None
    return {
        "calls": None if calls is None else int(task.get("chain_length", len(calls) - failures)),
        "renamed_tools": len(task.get("renames") or {}),
        "injected_failures": failures,
        "distractors": 0 if own_tools else int(distractors),
        "failure_rate": 0.0 if own_tools else float(failure_rate),
    }
