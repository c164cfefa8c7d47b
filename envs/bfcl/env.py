"""``AgentRL/BFCL-v0``: the Berkeley Function Calling Leaderboard's single-turn Python categories, graded by BFCL
(``category=`` one of the multi-turn ones makes a :class:`~agentrl.envs.bfcl.multi_turn.BFCLMultiTurnEnv`).

Each task is one BFCL entry: its functions are the episode's tools (the row's ``"tools"``: BFCL's function docs,
shown to the model as OpenAI schemas), its question the opening messages. The agent's first reply is graded:
its tool calls become BFCL's ``model_output`` (``[{"name": {"arg": value}}, ...]``) and BFCL's own
``ast_checker`` judges them against the task's ``possible_answer``; the irrelevance categories pass when the reply
calls nothing. Reward 1.0 when BFCL counts the task correct, else 0.0. Nothing is executed.

::

    import gymnasium as gym, agentrl.envs
    env = gym.make("AgentRL/BFCL-v0", category="multiple")
    obs, info = env.reset(seed=0)                  # info["tools"]: this task's functions
    reply = '<tool_call>\\n{"name": "...", "arguments": {...}}\\n</tool_call>'
    obs, reward, terminated, truncated, info = env.step(reply)

Needs the ``bfcl-eval`` package (its pinned pip command: :data:`~agentrl.envs.benchmark_packages.PACKAGES`).
"""

from __future__ import annotations

from typing import Any

from agentrl.envs.bfcl.base import BFCLBase
from agentrl.envs.bfcl.loading import MULTI_TURN, SINGLE_TURN, check_calls, checker
from agentrl.envs.core import Budgets
from agentrl.envs.parsing import ParsedAction

_NO_CALL = {"valid": False, "error": ["The reply holds no function call."], "error_type": "ast_decoder:decoder_failed"}


def pick_allowed(allowed: list[Any], *, omit_optional: bool = False) -> tuple[bool, Any]:
    """One value BFCL accepts for an argument, from its ``possible_answer`` list: ``(True, the first allowed
    value)``, nested dicts (and lists of dicts) filled the same way, or ``(False, None)``: leave the argument out
    (only ``""``, BFCL's "optional", is allowed, or ``omit_optional`` and ``""`` is among the allowed values)."""
    if omit_optional and "" in allowed:
        return False, None
    for value in allowed:
        if value == "":
            continue
        if isinstance(value, dict):
            return True, _pick_dict(value, omit_optional)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return True, [_pick_dict(v, omit_optional) for v in value]
        return True, value
    return False, None


def _pick_dict(options: dict[str, Any], omit_optional: bool) -> dict[str, Any]:
    out = {}
    for key, allowed in options.items():
        keep, value = (pick_allowed(allowed, omit_optional=omit_optional) if isinstance(allowed, list)
                       else (True, allowed))
        if keep:
            out[key] = value
    return out


def ground_truth_calls(task: dict[str, Any], *, omit_optional: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The calls of ``task``'s ``possible_answer`` with one allowed value per argument (the first; an argument
    whose only allowed value is ``""`` left out, and with ``omit_optional`` every one that allows ``""``); ``[]``
    for an irrelevance task."""
    return [(name, _pick_dict(options, omit_optional))
            for call in task.get("ground_truth") or [] for name, options in call.items()]


class BFCLEnv(BFCLBase):
    """BFCL single-turn tasks of one ``category``, graded by BFCL's AST checker (see the module docstring).

    ``BFCLEnv(category=...)`` with a multi-turn category (:data:`~agentrl.envs.bfcl.loading.MULTI_TURN`) returns
    a :class:`~agentrl.envs.bfcl.multi_turn.BFCLMultiTurnEnv` instead, so that the one registered id plays every
    covered category.

    Args:
        category: one of :data:`~agentrl.envs.bfcl.loading.SINGLE_TURN` (or of ``MULTI_TURN``, see above).
        call_format: the tool-call format (a name in :data:`~agentrl.envs.parsing.CALL_FORMATS`; the collector
            switches it to the policy's native one).
        tools_in_prompt: list the task's functions in the system prompt (set False when the chat template
            renders ``info["tools"]``).
        render_mode: ``"ansi"`` or ``"human"``.
    """

    CATEGORIES = SINGLE_TURN
    NOT_HERE = (f", or a multi-turn one: {', '.join(MULTI_TURN)} (memory, web_search, Java and JavaScript are not "
                "covered)")

    def __new__(cls, category: str = "simple_python", **kwargs: Any) -> Any:
        if cls is BFCLEnv and category in MULTI_TURN:
            from agentrl.envs.bfcl.multi_turn import BFCLMultiTurnEnv

            return BFCLMultiTurnEnv(category, **kwargs)
        return super().__new__(cls)

    def __init__(self, category: str = "simple_python", *, call_format: str = "hermes",
                 tools_in_prompt: bool = True, render_mode: str | None = None):
        super().__init__(category, call_format=call_format, tools_in_prompt=tools_in_prompt,
                         render_mode=render_mode, budgets=Budgets(max_turns=1))
        checker()

    # ------------------------------------------------------------------ prompts
    def task_instructions(self, task: dict[str, Any]) -> str:
        return ("You are given a question and a set of functions. Answer the question by calling one or more of "
                "the functions with the right arguments (several calls in one reply when it needs several). If "
                "none of the functions can be used, or the question lacks arguments a function requires, say so "
                "in plain text instead of calling.")

    def opening_messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        """The first turn of BFCL's question; a system message it holds follows our system prompt."""
        turn = task["question"][0]
        own = [str(m["content"]) for m in turn if m.get("role") == "system"]
        system = "\n\n".join([self.system_prompt(task), *own])
        return [{"role": "system", "content": system},
                *({"role": m["role"], "content": m["content"]} for m in turn if m.get("role") != "system")]

    # ------------------------------------------------------------------ grading
    def on_reset(self, task: dict[str, Any]) -> None:
        self.verdict = {}

    def grade_reply(self, parsed: ParsedAction, task: dict[str, Any]) -> tuple[float, bool]:
        """BFCL's verdict on the reply's calls (a text or unreadable reply calls nothing); the calls count in
        ``info["metrics"]["tool_calls"]`` though none runs."""
        calls = (parsed.calls or []) if parsed.kind == "tool_call" else []
        self.metrics.tool_calls = len(calls)
        output = [{c["name"]: c["arguments"]} for c in calls]
        category = task.get("category", self.category)
        if not output and "irrelevance" not in category:
            self.verdict = dict(_NO_CALL)
        else:
            self.verdict = check_calls({**task, "category": category}, output)
        ok = bool(self.verdict.get("valid"))
        return (self.rewards.correct if ok else self.rewards.wrong), ok

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """BFCL's ground truth as one reply (one allowed value per argument: the first, or none for the optional
        ones when the first choice fails BFCL's checker); a plain-text refusal for an irrelevance task. Five BFCL
        answers fail BFCL's own checker whatever is chosen (see docs/envs/bfcl.md)."""
        calls = ground_truth_calls(task)
        if not calls:
            return ["None of the given functions can answer this question."]
        if not check_calls(task, [{n: a} for n, a in calls])["valid"]:  # a few answers list a value out of spec
            calls = ground_truth_calls(task, omit_optional=True)
        return [self.parser.render_calls(calls)]
