"""What both BFCL envs share: one category's rows from the installed package, drawing and pinning tasks, and
BFCL's verdict in ``info``. :class:`~agentrl.envs.bfcl.env.BFCLEnv` (single-turn) and
:class:`~agentrl.envs.bfcl.multi_turn.BFCLMultiTurnEnv` derive from :class:`BFCLBase`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from agentrl.envs.bfcl.loading import load_category, require_bfcl
from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.datasets import seeded_subset
from agentrl.envs.parsing import ActionParser
from agentrl.envs.tools import ToolSet


class BFCLBase(TextEnv):
    """The rows of one BFCL ``category`` (one of :attr:`CATEGORIES`), drawn, pinned by id, and BFCL's verdict.

    Reward 1.0 when BFCL counts the task correct, else 0.0 (an unreadable reply is graded like any other).
    """

    #: The categories this env plays.
    CATEGORIES: ClassVar[tuple[str, ...]] = ()
    #: What the error says about the categories this env does not play.
    NOT_HERE: ClassVar[str] = ""
    #: BFCL grades whatever the model wrote within its token budget: a cut reply is graded like any other (on the
    #: irrelevance categories a cut reply that made no complete call is correct).
    grades_cut_replies: ClassVar[bool] = True

    def __init__(self, category: str, *, call_format: str = "hermes", tools_in_prompt: bool = True,
                 render_mode: str | None = None, budgets: Budgets | None = None):
        if category not in self.CATEGORIES:
            raise ValueError(f"BFCL category must be one of {', '.join(self.CATEGORIES)}; got {category!r}"
                             f"{self.NOT_HERE}")
        require_bfcl()  # a missing install fails here, in one line
        self.category = category
        self.rows = load_category(category)
        self._by_id = {r["id"]: r for r in self.rows}
        self.verdict: dict[str, Any] = {}
        super().__init__(tools=ToolSet(), parser=ActionParser(call_format, answer="text"), budgets=budgets,
                         rewards=Rewards(correct=1.0, wrong=0.0, invalid=0.0), tools_in_prompt=tools_in_prompt,
                         render_mode=render_mode)

    # ------------------------------------------------------------------ tasks
    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.rows[int(rng.integers(len(self.rows)))]

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` tasks of the category drawn without replacement by ``seed`` (all of them, in a seeded order, when
        the category has fewer; BFCL has no training split: never train on these)."""
        return seeded_subset(self.rows, n, seed, name=f"BFCL {self.category}")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """As :meth:`TextEnv.reset`; a pinned task may be just ``{"id": "simple_python_3"}`` (a row of this
        category, looked up)."""
        task = (options or {}).get("task")
        if isinstance(task, dict) and "question" not in task:
            if task.get("id") not in self._by_id:
                raise ValueError(f"options['task']: a BFCL task needs 'question' and 'tools', or an 'id' of "
                                 f"category {self.category} (got id {task.get('id')!r})")
            options = {**(options or {}), "task": self._by_id[task["id"]]}
        return super().reset(seed=seed, options=options)

    def user_prompt(self, task: dict[str, Any]) -> str:
        return next(str(m["content"]) for m in reversed(task["question"][0]) if m.get("role") == "user")

    # ------------------------------------------------------------------ grading
    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:  # every reply goes to grade_reply
        raise NotImplementedError(f"{type(self).__name__} grades every reply in grade_reply")

    def extra_info(self) -> dict[str, Any]:
        """``bfcl_error_type``: BFCL's error type of the graded task (``""`` when correct or not graded yet)."""
        return {"bfcl_error_type": "" if self.verdict.get("valid", True) else str(self.verdict.get("error_type"))}
