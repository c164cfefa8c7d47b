"""``AgentRL/Search-v0``: answer a question, searching as often as you judge useful (Search-R1's task).

The agent may call one tool, ``search(query)``, as a native tool call; the observation lists the evidence::

    [1] Title: Victoria Falls
    Victoria Falls is a waterfall on the Zambezi River ...

    [2] Title: ...

and the episode ends with a line ``Answer: <short answer>``.

Reward (Search-R1's three levels): 1.0 when the answer matches any reference answer after normalisation
(lower case, no punctuation or articles, collapsed spaces), 0.0 for a wrong answer, -0.1 for an invalid reply
or no answer before a budget runs out. Budgets: ``max_searches`` (4), ``max_turns`` assistant replies (6),
``max_obs_chars`` per observation (each item's text is shortened so all ``topk`` items fit).

Search faults never end the episode: ``Search failed: rate limited (429) ...`` comes back as the observation
and is counted. Per-episode metrics (``info["metrics"]``): ``search_calls``, ``search_results``,
``search_errors`` and ``search_error_<kind>`` for every kind in
:data:`~agentrl.envs.search.types.ERROR_KINDS`.

``tools_enabled=False`` is the text-only baseline: no tool is offered (none in the prompt or in
``info["tools"]``), a call is answered with an ``Error: no tools are available`` observation (counted as an
invalid call, the episode goes on) and the model must answer from its own knowledge.

Usage::

    env = gymnasium.make("AgentRL/Search-v0")                                # offline BM25, bundled questions
    env = gymnasium.make("AgentRL/Search-v0", backend="wikipedia", split="dev")
    env = gymnasium.make("AgentRL/Search-v0", backend="local", backend_kwargs={"corpus": "my.jsonl"},
                         dataset="my_questions.jsonl")
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.answers import exact_match
from agentrl.envs.core import Budgets, TextEnv
from agentrl.envs.datasets import check_split, draw_row, seeded_draws
from agentrl.envs.parsing import ActionParser
from agentrl.envs.search.questions import SPLITS, load_bundled, load_questions
from agentrl.envs.search.registry import make_backend
from agentrl.envs.search.types import ERROR_KINDS, SearchBackend, SearchResult
from agentrl.envs.tools import Tool, ToolResult, ToolSet

#: The ``search`` tool's schema; each env binds it to its own backend (:meth:`SearchEnv.search`).
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what to search for: a few keywords or a question"}},
    "required": ["query"],
}
SEARCH_DESCRIPTION = ("Search the knowledge source and return the top matching passages, numbered, each with its "
                      "title.")


def format_results(result: SearchResult, query: str, max_chars: int) -> str:
    """The observation text of a search: numbered evidence, ``No results …`` or ``Search failed: …``.

    The items' texts are shortened (from the end, with ``…``) so that the whole observation fits in
    ``max_chars``; every item keeps its number and title.
    """
    if result.error is not None:
        return f"Search failed: {result.message}. Nothing was found for this query; you may search again or answer."
    if not result.items:
        return f'No results for "{query}". Try other words.'
    heads = [f"[{i}] Title: {it.title}\n" for i, it in enumerate(result.items, 1)]
    sep = "\n\n"
    room = max_chars - sum(len(h) for h in heads) - len(sep) * (len(heads) - 1)
    per_item = max(room // len(heads), 0)
    parts = []
    for head, it in zip(heads, result.items, strict=True):
        text = " ".join(it.text.split())
        if len(text) > per_item:
            text = text[: max(per_item - 1, 0)].rstrip() + "…" if per_item > 0 else ""
        parts.append(head + text)
    return sep.join(parts)


class SearchEnv(TextEnv):
    """Answer a question with a search tool; see the module docstring."""

    supports_text_only = True
    #: No hop-count knob: every bundled question (wiki_description, fanoutqa) needs one search; harder questions
    #: come from your own ``dataset``.
    difficulty_knobs = {
        "dataset": "the question set: the bundled questions are all single-hop (one search finds the evidence); "
                   "pass your own rows (e.g. multi-hop Search-R1 sets) for harder ones",
        "balance_sources": "draw each data_source equally often (the bundled fanoutqa source, 48 of 2048 train "
                           "questions, then gets half the draws)",
        "topk": "passages per search (default 3): fewer, less evidence per call",
    }

    def __init__(
        self,
        backend: str | SearchBackend = "local",
        dataset: str | Path | Iterable[dict[str, Any]] | None = None,
        *,
        split: str = "train",
        backend_kwargs: dict[str, Any] | None = None,
        topk: int | None = None,
        max_searches: int = 4,
        max_turns: int = 6,
        max_obs_chars: int = 3_000,
        tools_enabled: bool = True,
        parser: ActionParser | None = None,
        tools_in_prompt: bool = True,
        balance_sources: bool = False,
        render_mode: str | None = None,
    ):
        """
        Args:
            backend: ``"local"`` (default, offline BM25), ``"retriever"``, ``"wikipedia"``, ``"zhihu"``,
                ``"deepseek"``, or a :class:`SearchBackend` instance.
            dataset: questions (a JSONL/parquet path or rows; Search-R1 ``{question, golden_answers,
                data_source}`` or ``{question, answers}``); default: the bundled set.
            split: the bundled split to sample from when ``dataset`` is None: ``"train"`` or ``"dev"``.
            backend_kwargs: configuration of a named backend (e.g. ``{"corpus": "docs.jsonl"}``,
                ``{"url": "http://host:8000/retrieve"}``, ``{"timeout_s": 5}``).
            topk: results per search (a shortcut for ``backend_kwargs["topk"]``; default 3).
            max_searches, max_turns, max_obs_chars: the episode budgets.
            tools_enabled: offer the search tool (False: the text-only baseline, answer directly).
            parser: the reply format (default: Hermes tool calls, ``Answer: ...``).
            tools_in_prompt: describe the tool in the system prompt (False when the chat template does it).
            balance_sources: draw training questions (:meth:`sample_task`) source by source: a ``data_source``
                uniformly, then a question of it, so a small source is trained on as often as a large one (as
                Macro-EM, the mean of the per-source EMs, weighs them). Held-out questions are not affected.
            render_mode: ``"ansi"`` or ``"human"``.
        """
        check_split(split, SPLITS)
        kwargs = dict(backend_kwargs or {})
        if topk is not None:
            kwargs["topk"] = topk
        self.backend = make_backend(backend, **kwargs) if tools_enabled else None
        self._own_dataset = dataset is not None
        self.rows = load_questions(dataset) if dataset is not None else load_bundled(split)
        self.split = split
        self.balance_sources = balance_sources
        by_source: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            by_source.setdefault(row["data_source"], []).append(row)
        self._by_source = [by_source[k] for k in sorted(by_source)]
        self.tools_enabled = tools_enabled
        self._last_search: dict[str, Any] | None = None
        parser = parser or ActionParser()
        if tools_enabled:
            tools = ToolSet([Tool(name="search", description=SEARCH_DESCRIPTION, parameters=SEARCH_SCHEMA,
                                  fn=self.search)])
        else:
            tools = ToolSet(when_empty="Error: no tools are available in this mode; answer from your own "
                                       f"knowledge. {parser.answer_instructions()}")
        super().__init__(tools=tools, parser=parser, tools_in_prompt=tools_in_prompt, render_mode=render_mode,
                         budgets=Budgets(max_turns=max_turns, max_tool_calls=max_searches,
                                         max_obs_chars=max_obs_chars))

    # ------------------------------------------------------------------ task hooks
    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.balance_sources:
            return draw_row(self._by_source[int(rng.integers(len(self._by_source)))], rng)
        return draw_row(self.rows, rng)

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` questions drawn from the bundled ``dev`` split (or from your whole dataset), question ``k``
        with ``np.random.default_rng([seed, k])``."""
        rows = self.rows if self._own_dataset else load_bundled("dev")
        return seeded_draws(rows, n, seed)

    def task_instructions(self, task: dict[str, Any]) -> str:
        if not self.tools_enabled:
            return "Answer the question from your own knowledge. Give a short answer: a name, a number or a few words."
        return (f"Answer the question. You may call the search tool (at most {self.budgets.max_tool_calls} times, "
                "one call per reply) to find evidence, reading each result before you decide whether to search "
                "again. Give a short answer: a name, a number or a few words.")

    def system_prompt(self, task: dict[str, Any]) -> str:
        if not self.tools_enabled:
            return f"{self.task_instructions(task)}\n{self.parser.answer_instructions()}"
        return super().system_prompt(task)

    def user_prompt(self, task: dict[str, Any]) -> str:
        return f"Question: {task['question']}"

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        correct = exact_match(answer, list(task["golden_answers"]))
        return (self.rewards.correct if correct else self.rewards.wrong), correct

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """A search with the task's stored ``query`` (when it has one) and the first reference answer."""
        if not task.get("golden_answers"):
            return None
        answer = self.parser.render_answer(str(task["golden_answers"][0]))
        if not self.tools_enabled:
            return [answer]
        if not task.get("query"):
            return None
        return [self.parser.render_call("search", {"query": str(task["query"])}), answer]

    def on_reset(self, task: dict[str, Any]) -> None:
        if self.backend is not None:
            self.backend.prepare()  # loads the index now: a missing corpus raises from reset, not inside step
        self._last_search = None
        extra = {"search_calls": 0, "search_results": 0, "search_errors": 0}
        extra.update({f"search_error_{k}": 0 for k in ERROR_KINDS})
        self.metrics.extra.update(extra)

    def extra_info(self) -> dict[str, Any]:
        """``search``: this step's search (``{query, results, error, latency_s, urls}``, else ``None``);
        ``data_source``: the task's source."""
        info: dict[str, Any] = {"search": self._last_search}
        self._last_search = None  # this step's search only
        if self.task is not None:
            info["data_source"] = self.task.get("data_source", "")
        return info

    # ------------------------------------------------------------------ the tool
    def search(self, query: str) -> ToolResult:
        """Run one search with this env's backend: the observation text, and the call's metrics."""
        result = self.backend.search(query) if self.backend is not None else SearchResult.failure("bad_request")
        metrics = {"search_calls": 1, "search_results": len(result.items)}
        if result.error is not None:
            metrics.update({"search_errors": 1, f"search_error_{result.error}": 1})
        self._last_search = {"query": query, "results": len(result.items), "error": result.error,
                             "latency_s": result.latency_s, "urls": [it.url for it in result.items]}
        return ToolResult(format_results(result, query, self.budgets.max_obs_chars),
                          error_kind=None if result.ok else f"search_{result.error}", metrics=metrics)

    def search_text(self, query: str) -> str:
        """The observation text of one search (what the ``search`` tool returns)."""
        return self.search(query).content

    def close(self) -> None:
        """Leave shared backends open (other envs use them); nothing else to release."""
        super().close()
