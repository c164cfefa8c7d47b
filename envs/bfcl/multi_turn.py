"""``AgentRL/BFCL-v0`` with ``category=`` one of BFCL's multi-turn categories, played turn by turn as BFCL's own
harness plays them and graded by BFCL's multi-turn checker.

Each task is one BFCL entry: a few user turns over one simulated system (a file system, a trading bot, travel
booking, a vehicle, messaging, posting, tickets, math), whose state BFCL's own classes hold (made per episode from
the entry's ``initial_config`` and ``involved_classes``, run by BFCL's ``execute_multi_turn_func_call``).

* ``reset`` opens with the first user turn; the tools are the entry's functions.
* A reply with tool calls: each call runs against this episode's objects; its result is the observation.
* A reply without a call (plain text, or a call the parser cannot read) ends the agent's turn: the next user
  message is the observation (``obs_role`` "user"). In ``multi_turn_miss_func`` the turn where BFCL adds the
  held-back functions brings them (described in that message, and in ``info["tools"]`` from then on).
* After the last turn the episode ends: BFCL's ``multi_turn_checker`` compares the state and the results of the
  calls made in each turn (in BFCL's string form ``fn(arg=value)``) with its ground truth. Reward 1.0 when BFCL
  counts the entry valid, else 0.0; ``info["bfcl_error_type"]`` is BFCL's error type.
* As in BFCL, a turn that reaches 21 steps with calls (past BFCL's ``MAXIMUM_STEP_LIMIT`` of 20) force-quits the
  entry: the next reply ends the episode, graded as BFCL grades a force-quit entry (valid only in the last turn).

::

    import gymnasium as gym, agentrl.envs
    env = gym.make("AgentRL/BFCL-v0", category="multi_turn_base")
    obs, info = env.reset(seed=0)                   # the first user turn; info["tools"]: the entry's functions
    obs, reward, terminated, truncated, info = env.step('<tool_call>\\n{"name": "ls", "arguments": {}}\\n</tool_call>')
    obs, reward, terminated, truncated, info = env.step("Done.")   # the next user turn (or the grade)
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import json
import keyword
import uuid
from typing import Any

from agentrl.envs.bfcl.base import BFCLBase
from agentrl.envs.bfcl.loading import BFCL, MULTI_TURN, call_string_converter, require_bfcl
from agentrl.envs.core import MAX_TEXT_LENGTH, Budgets
from agentrl.envs.parsing import ParsedAction
from agentrl.envs.step_loop import CallResults, run_each, tally
from agentrl.envs.tools import ToolResult

#: The keys a multi-turn task row needs (a row of :func:`~agentrl.envs.bfcl.loading.load_category`).
TASK_KEYS = ("id", "question", "tools", "ground_truth", "initial_config", "involved_classes")
#: Tool calls per episode: BFCL sets no limit; this only keeps a runaway reply finite.
MAX_TOOL_CALLS = 10_000
#: What the demonstration says to end a turn, and to decline one whose ground truth calls nothing.
DONE, DECLINE = "Done.", "I cannot do that with the functions I have and the details given."


def _utils() -> Any:
    require_bfcl()
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils


def step_limit() -> int:
    """BFCL's ``MAXIMUM_STEP_LIMIT`` (20): a turn with more steps with calls than this force-quits the entry."""
    require_bfcl()
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    return int(MAXIMUM_STEP_LIMIT)


def require_classes(rows: list[dict[str, Any]]) -> None:
    """Import BFCL's classes that ``rows`` involve.

    Raises:
        PackageMissing: a module a class imports is not installed (``--no-deps`` skipped it); the message names it.
    """
    mapping = _utils().CLASS_FILE_PATH_MAPPING
    for name in sorted({c for row in rows for c in row["involved_classes"]}):
        try:
            importlib.import_module(mapping[name])
        except ImportError as e:
            raise BFCL.missing(e, needed_by=f"BFCL's {name}") from None


def _long_context(task: dict[str, Any]) -> bool:
    """BFCL's flag for ``_load_scenario``, from the entry's id as its harness derives it."""
    category = str(task["id"]).rsplit("_", 1)[0]
    return "long_context" in category or "composite" in category


def execute(calls: list[str], task: dict[str, Any], session: str) -> tuple[list[str], dict[str, Any]]:
    """Run BFCL call strings on ``session``'s objects of ``task`` (made from its ``initial_config`` at the first
    call of the session, kept after) with BFCL's ``execute_multi_turn_func_call``: ``(results, instances)``."""
    return _utils().execute_multi_turn_func_call(calls, task["initial_config"], task["involved_classes"], session,
                                                 task["id"], long_context=_long_context(task), is_evaL_run=False)


def forget(session: str) -> None:
    """Drop the objects BFCL keeps for ``session`` (it stores them as globals of ``multi_turn_utils``)."""
    if session:
        namespace = vars(_utils())
        for key in [k for k in namespace if k.startswith(f"{session}_")]:
            namespace.pop(key, None)


def grade(task: dict[str, Any], decoded: list[list[list[str]]]) -> dict[str, Any]:
    """BFCL's verdict on an entry: ``decoded`` holds per turn the call strings of each step that made calls.

    As BFCL's eval runner does, an entry with fewer turns than its ground truth (force-quit) fails whole; any
    other goes to ``multi_turn_checker`` (state and execution results after each turn), with objects of its own.
    """
    require_bfcl()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    truth = task["ground_truth"]
    if len(decoded) != len(truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"Model was force-terminated after turn {len(decoded) - 1} of {len(truth)}."}
    session = f"agentrl_{uuid.uuid4().hex}"
    try:
        return dict(multi_turn_checker(decoded, truth, task, str(task["id"]).rsplit("_", 1)[0], session))
    finally:
        forget(session)


@functools.cache
def _reserved() -> frozenset[str]:
    """Names BFCL's ``eval`` of a call string would resolve to something other than a task's function: builtins,
    ``multi_turn_utils``' globals and the executing function's locals. A call by such a name is not run."""
    utils = _utils()
    return frozenset(vars(builtins)) | frozenset(vars(utils)) | frozenset(
        utils.execute_multi_turn_func_call.__code__.co_varnames)


def _methods(instances: dict[str, Any]) -> frozenset[str]:
    return frozenset(n for obj in instances.values() for n, _ in inspect.getmembers(obj, inspect.ismethod)
                     if not n.startswith("_"))


def ground_truth_turns(task: dict[str, Any]) -> list[list[tuple[str, dict[str, Any]]]]:
    """``task``'s ground truth as ``(name, arguments)`` calls per turn: BFCL's strings read with ``ast``, each
    positional argument named after the parameter of BFCL's method it fills."""
    utils = _utils()
    classes = [getattr(importlib.import_module(utils.CLASS_FILE_PATH_MAPPING[c]), c) for c in task["involved_classes"]]
    turns = []
    for strings in task["ground_truth"]:
        calls = []
        for text in strings:
            node = ast.parse(text, mode="eval").body
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), text
            name = node.func.id
            method = next(getattr(c, name) for c in classes if hasattr(c, name))
            params = [p for p in inspect.signature(method).parameters if p != "self"]
            args = {params[k]: ast.literal_eval(a) for k, a in enumerate(node.args)}
            args.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg})
            calls.append((name, args))
        turns.append(calls)
    return turns


class BFCLMultiTurnEnv(BFCLBase):
    """BFCL multi-turn entries of one ``category`` (see the module docstring). ``gym.make("AgentRL/BFCL-v0",
    category=...)`` (and ``BFCLEnv(category=...)``) make this env for a multi-turn category.

    Args:
        category: one of :data:`~agentrl.envs.bfcl.loading.MULTI_TURN`.
        call_format: the tool-call format (a name in :data:`~agentrl.envs.parsing.CALL_FORMATS`; the collector
            switches it to the policy's native one).
        tools_in_prompt: list the entry's functions in the system prompt (set False when the chat template
            renders ``info["tools"]``).
        render_mode: ``"ansi"`` or ``"human"``.
        max_obs_chars: a call result longer than this is cut from the head (BFCL cuts none; the long-context
            category's results are long on purpose).
    """

    CATEGORIES = MULTI_TURN
    NOT_HERE = " (the single-turn categories are BFCLEnv's; memory and web_search are not covered)"

    def __init__(self, category: str = "multi_turn_base", *, call_format: str = "hermes",
                 tools_in_prompt: bool = True, render_mode: str | None = None, max_obs_chars: int = MAX_TEXT_LENGTH):
        self.max_obs_chars = max_obs_chars
        super().__init__(category, call_format=call_format, tools_in_prompt=tools_in_prompt,
                         render_mode=render_mode, budgets=Budgets(max_obs_chars=max_obs_chars))
        call_string_converter()
        require_classes(self.rows)
        self.session = ""
        self.turn = 0
        self.steps = 0
        self.record: list[list[list[str]]] = []
        self.methods: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ prompts
    def task_instructions(self, task: dict[str, Any]) -> str:
        return ("You act on a simulated system through the functions below, for a user who asks for several "
                "things, one turn at a time. In each turn, call functions (several calls in one reply when they do "
                "not depend on each other) until the request is done, then reply in plain text without a call: "
                "that ends your turn and the user's next message follows. If no function can do what is asked, or "
                "a detail a function needs is missing, say so in plain text instead of calling.")

    # ------------------------------------------------------------------ an episode
    def on_reset(self, task: dict[str, Any]) -> None:
        missing = [k for k in TASK_KEYS if k not in task]
        if missing:
            raise ValueError(f"options['task'] {task.get('id')!r}: a BFCL multi-turn task needs "
                             f"{', '.join(missing)} (a row of test_tasks, or just its 'id')")
        forget(self.session)
        self.session = f"agentrl_{uuid.uuid4().hex}"
        self.turn, self.steps, self.record, self.verdict = 0, 0, [[]], {}
        self.methods = _methods(execute([], task, self.session)[1])
        # Every reply BFCL's harness could take: per turn, the steps with calls and one more.
        self.budgets = Budgets(max_turns=(step_limit() + 2) * len(task["question"]), max_tool_calls=MAX_TOOL_CALLS,
                               max_obs_chars=self.max_obs_chars)

    def grade_reply(self, parsed: ParsedAction, task: dict[str, Any]) -> tuple[float, bool] | None:
        """BFCL's grade after the last turn (a reply without a readable call ends it), or at once past BFCL's step
        limit (the reply is not run); else ``None``: calls run, another reply ends the turn (:meth:`user_turn`)."""
        if self.steps > step_limit():
            return self._grade(task)
        if _has_calls(parsed) or self.turn + 1 < len(task["question"]):
            return None
        return self._grade(task)

    def user_turn(self, parsed: ParsedAction, task: dict[str, Any]) -> str | None:
        """A reply without a readable call ends the turn: the next user message (an unreadable reply counts as an
        invalid call). In ``multi_turn_miss_func`` the turn where BFCL adds the held-back functions brings them:
        they join the episode's tools and the message describes them."""
        if _has_calls(parsed):
            return None
        self.metrics.invalid_calls += parsed.kind == "invalid"
        from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC as ADDED

        self.turn, self.steps = self.turn + 1, 0
        self.record.append([])
        added = (task.get("missed_function") or {}).get(str(self.turn), [])
        if added:  # BFCL's turn with no user message, where the held-back functions join
            self.episode_tools = self.task_tools({**task, "tools": [*task["tools"], *added]})
            return f"{self.parser.describe_tools(self.episode_tools.schemas()[-len(added):])}\n{ADDED}"
        return "\n\n".join(str(m["content"]) for m in task["question"][self.turn])

    def run_calls(self, calls: list[dict[str, Any]]) -> CallResults:
        """BFCL's call runner: the reply is one step of the turn, and each call runs as BFCL's harness runs it —
        its string form, evaluated against this episode's objects, with no schema check (BFCL makes none, and its
        grade counts what ran); an error (BFCL's ``Error during execution: ...`` or a class's ``{"error": ...}``)
        is the observation, counted. A call BFCL would not resolve to a task function (a non-identifier or
        builtin name) is refused, not run or graded."""
        self.steps += 1
        self.record[-1].append([])  # this step's call strings
        return run_each(self, calls, lambda name, arguments: tally(self.metrics, self._execute(name, arguments)))

    def _execute(self, name: str, args: Any) -> ToolResult:
        refusal = self._refusal(name, args)
        if refusal is not None:
            return ToolResult(refusal, "invalid_arguments")
        assert self.task is not None and isinstance(args, dict)
        call = call_string_converter()([{name: args}])[0]
        self.record[-1][-1].append(call)
        result = str(execute([call], self.task, self.session)[0][0])
        return ToolResult(result, "execution_error" if _is_error(result) else None)

    def _refusal(self, name: str, args: Any) -> str | None:
        if not name.isidentifier() or keyword.iskeyword(name):
            return f"Error: {name!r} is not a function name; nothing was run."
        if not isinstance(args, dict):
            return f"Error: {name}() arguments must be a JSON object; nothing was run."
        bad = [k for k in args if not (isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k))]
        if bad:
            return f"Error: {name}() argument name {bad[0]!r} is not an identifier; nothing was run."
        if name not in self.methods and name in _reserved():
            return f"Error: {name}() is not one of this task's functions; nothing was run."
        return None

    def _grade(self, task: dict[str, Any]) -> tuple[float, bool]:
        self.verdict = grade(task, [[step for step in turn if step] for turn in self.record])
        forget(self.session)
        ok = bool(self.verdict.get("valid"))
        return (self.rewards.correct if ok else self.rewards.wrong), ok

    def extra_info(self) -> dict[str, Any]:
        """BFCL's verdict (``bfcl_error_type``, ``bfcl_error``: its message) and the user turn the episode is in
        (``bfcl_turn``, from 0). ``info["tools"]`` holds the functions offered so far (held-back ones from their
        turn): the episode's tools."""
        return {**super().extra_info(), "bfcl_error": str(self.verdict.get("error_message", "")),
                "bfcl_turn": self.turn}

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """BFCL's ground truth: per turn one reply making the turn's calls, then ``"Done."`` (a turn whose ground
        truth calls nothing gets a plain-text refusal)."""
        replies = []
        for calls in ground_truth_turns(task):
            replies += [self.parser.render_calls(calls), DONE] if calls else [DECLINE]
        return replies

    def close(self) -> None:
        forget(self.session)
        super().close()


def _has_calls(parsed: ParsedAction) -> bool:
    return parsed.kind == "tool_call" and bool(parsed.calls)


def _is_error(result: str) -> bool:
    if result.startswith("Error during execution"):
        return True
    try:
        value = json.loads(result)
    except ValueError:
        return False
    return isinstance(value, dict) and "error" in value
