"""AgentRL/Search-v0: the protocol, rewards, budgets, metrics, demonstrations, the text-only mode, fuzzing."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import agentrl.envs
from agentrl.envs.answers import normalize_answer
from agentrl.envs.search.env import SearchEnv, format_results
from agentrl.envs.search.questions import load_bundled
from agentrl.envs.search.types import ERROR_KINDS, SearchBackend, SearchError, SearchItem, SearchResult

gym.register_envs(agentrl.envs)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "agentrl-cache"))


def call(query) -> str:
    return f'<tool_call>\n{json.dumps({"name": "search", "arguments": {"query": query}})}\n</tool_call>'


QUESTION = {"id": "q1", "question": "On which river are the Victoria Falls?",
            "golden_answers": ["Zambezi", "Zambezi River"], "data_source": "test", "query": "Victoria Falls waterfall"}


class Scripted(SearchBackend):
    """A backend that returns canned results or errors, for budget and metric tests."""

    name = "scripted"

    def __init__(self, outcomes):
        super().__init__()
        self.outcomes = list(outcomes)
        self.queries = []

    def _search(self, query):
        self.queries.append(query)
        out = self.outcomes[min(len(self.queries) - 1, len(self.outcomes) - 1)]
        if isinstance(out, SearchError):
            raise out
        return out


def test_make_runs_offline_with_no_configuration():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("AgentRL/Search-v0")
        obs, info = env.reset(seed=0)
        assert obs.startswith("Question: ") and info["tools"][0]["function"]["name"] == "search"
        obs, r, term, trunc, info = env.step(call("Victoria Falls"))
        assert obs.startswith("[1] Title: ") and info["obs_role"] == "tool" and r == 0.0
        env.step("Answer: Zambezi")  # the passive checker on real observations
        env.close()


def test_module_prefix_make_and_import_stays_light():
    code = ("import sys, gymnasium as g; e = g.make('agentrl.envs:AgentRL/Search-v0'); "
            "assert 'bm25s' not in sys.modules and 'torch' not in sys.modules; "
            "o, _ = e.reset(seed=3); assert 'bm25s' in sys.modules; print(o)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == SearchEnv().reset(seed=3)[0]
    code = ("import sys, agentrl.envs, agentrl.envs.search; "
            "print(sorted({'torch', 'bm25s', 'requests', 'scipy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_correct_wrong_invalid_rewards():
    env = SearchEnv(dataset=[QUESTION])
    env.reset(options={"task": QUESTION})
    obs, r, term, trunc, info = env.step(call("Victoria Falls waterfall"))
    assert "[1] Title: Victoria Falls" in obs and not term
    _, r, term, trunc, info = env.step("<think>It is the Zambezi.</think>\nAnswer: the Zambezi river.")
    assert (r, term, trunc, info["correct"], info["termination"]) == (1.0, True, False, True, "answered")
    env.reset(options={"task": QUESTION})
    _, r, term, _, info = env.step("Answer: Nile")
    assert r == 0.0 and term and not info["correct"] and info["format_ok"]
    env.reset(options={"task": QUESTION})
    _, r, term, _, info = env.step("I think it is the Zambezi.")
    assert r == -0.1 and term and info["termination"] == "invalid" and not info["format_ok"]


def test_observation_format_and_length_limit():
    items = [SearchItem(f"Title {i}", "word " * 400, f"u{i}") for i in range(3)]
    obs = format_results(SearchResult(items=items), "q", 600)
    assert len(obs) <= 600
    assert ([line for line in obs.splitlines() if line.startswith("[")]
            == [f"[{i}] Title: Title {i - 1}" for i in (1, 2, 3)])
    assert obs.count("…") == 3
    assert format_results(SearchResult(), "xyz", 600) == 'No results for "xyz". Try other words.'
    env = SearchEnv(max_obs_chars=300)
    env.reset(options={"task": QUESTION})
    obs, *_ = env.step(call("Victoria Falls"))
    assert len(obs) <= 300 and obs.startswith("[1] Title: ")


def test_search_budget():
    env = SearchEnv(backend=Scripted([[SearchItem("A", "a")]]), dataset=[QUESTION], max_searches=2, max_turns=10)
    env.reset(options={"task": QUESTION})
    for _ in range(2):
        _, r, term, trunc, _ = env.step(call("x"))
        assert not (term or trunc)
    obs, r, term, trunc, info = env.step(call("x"))
    assert trunc and not term and r == -0.1 and info["termination"] == "budget" and "budget of 2" in obs
    assert info["metrics"]["search_calls"] == 2 and len(env.backend.queries) == 2  # the third never ran


def test_turn_budget():
    env = SearchEnv(backend=Scripted([[SearchItem("A", "a")]]), dataset=[QUESTION], max_searches=10, max_turns=3)
    env.reset(options={"task": QUESTION})
    env.step(call("x"))
    env.step(call("y"))
    obs, r, term, trunc, info = env.step(call("z"))
    assert trunc and r == -0.1 and info["termination"] == "budget" and info["metrics"]["turns"] == 3


def test_metrics_count_results_and_errors_by_kind():
    outcomes = [[SearchItem("A", "a"), SearchItem("B", "b")], SearchError("rate_limited", "HTTP 429"),
                SearchError("timeout", "15 s"), []]
    env = SearchEnv(backend=Scripted(outcomes), dataset=[QUESTION], max_searches=4, max_turns=6)
    env.reset(options={"task": QUESTION})
    obs = [env.step(call(q))[0] for q in "abcd"]
    assert obs[1] == ("Search failed: rate limited (429): HTTP 429. Nothing was found for this query; you may "
                      "search again or answer.")
    assert obs[2].startswith("Search failed: timed out") and obs[3].startswith("No results")
    _, _, _, _, info = env.step("Answer: Zambezi")
    m = info["metrics"]
    assert (m["search_calls"], m["search_results"], m["search_errors"]) == (4, 2, 2)
    assert m["search_error_rate_limited"] == 1 and m["search_error_timeout"] == 1
    assert all(m[f"search_error_{k}"] == 0 for k in ERROR_KINDS if k not in ("rate_limited", "timeout"))
    assert m["tool_errors"] == 2 and info["correct"]
    env.reset(options={"task": QUESTION})  # metrics are per episode
    assert env.metrics.extra["search_calls"] == 0


def test_bad_calls_are_observations_not_crashes():
    env = SearchEnv(dataset=[QUESTION])
    env.reset(options={"task": QUESTION})
    obs, r, term, _, info = env.step('<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>')
    assert obs.startswith("Error: search() missing argument 'query'") and not term
    obs, *_ = env.step('<tool_call>\n{"name": "browse", "arguments": {}}\n</tool_call>')
    assert obs.startswith("Error: unknown tool 'browse'")
    obs, r, term, trunc, info = env.step(call("   "))
    assert obs.startswith("Search failed: the query is empty") and info["metrics"]["search_error_bad_query"] == 1
    assert info["metrics"]["invalid_calls"] == 2


def test_demo_episodes_of_bundled_questions_are_correct():
    env = SearchEnv(split="dev")
    rows = load_bundled("dev")
    for task in rows[:: max(1, len(rows) // 60)] + [r for r in rows if r["data_source"] == "fanoutqa"]:
        demo = env.demo(task)
        assert demo is not None and demo["correct"] and demo["reward"] == 1.0, task
        evidence = demo["messages"][3]["content"]
        assert demo["messages"][3]["role"] == "tool" and evidence.startswith("[1] Title: ")
        assert any(normalize_answer(g) in normalize_answer(evidence) for g in task["golden_answers"]), task


def test_no_demo_without_a_known_query():
    env = SearchEnv(dataset=[{"question": "q?", "answers": ["a"]}])
    assert env.demo(env.rows[0]) is None


def test_text_only_mode():
    env = SearchEnv(tools_enabled=False, dataset=[QUESTION])
    obs, info = env.reset(seed=0)
    assert info["tools"] == [] and "tool_call" not in info["messages"][0]["content"]
    assert "search" not in info["messages"][0]["content"].lower()
    obs, r, term, trunc, info = env.step(call("Victoria Falls"))
    assert obs.startswith("Error: no tools are available") and not (term or trunc) and r == 0.0
    assert info["metrics"]["invalid_calls"] == 1 and info["metrics"]["search_calls"] == 0
    _, r, term, _, info = env.step("Answer: Zambezi")
    assert r == 1.0 and term
    assert env.demo(QUESTION)["correct"]
    assert env.backend is None  # no index is loaded for the baseline


def test_dataset_and_corpus_of_your_own(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [
        {"id": "1", "title": "Glorbia", "text": "Glorbia is a fictional country whose capital is Zintra."},
        {"id": "2", "title": "Plenk", "text": "Plenk is a fictional river."}]))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "What is the capital of Glorbia?", "answers": ["Zintra"],
                                     "query": "Glorbia capital"}) + "\n")
    env = gym.make("AgentRL/Search-v0", dataset=str(questions), backend_kwargs={"corpus": str(corpus)}, topk=1)
    env.reset(seed=0)
    obs, *_ = env.step(call("capital of Glorbia"))
    assert obs == "[1] Title: Glorbia\nGlorbia is a fictional country whose capital is Zintra."
    _, r, *_ = env.step("Answer: Zintra")
    assert r == 1.0


def test_bad_configuration_raises_at_construction():
    with pytest.raises(ValueError, match="split"):
        SearchEnv(split="test")
    with pytest.raises(ValueError, match="unknown search backend"):
        SearchEnv(backend="google")


def test_sampling_uses_the_env_generator():
    a, b = SearchEnv(split="dev"), SearchEnv(split="dev")
    assert [a.reset(seed=s)[1]["task_id"] for s in range(5)] == [b.reset(seed=s)[1]["task_id"] for s in range(5)]
    assert len({a.reset(seed=s)[1]["task_id"] for s in range(20)}) > 10




def test_make_with_a_backend_instance_shares_it():
    backend = Scripted([[SearchItem("Victoria Falls", "On the Zambezi.")]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("AgentRL/Search-v0", backend=backend, dataset=[QUESTION])
        assert env.unwrapped.backend is backend
        env.reset(seed=0)
        obs, *_ = env.step(call("falls"))
    assert obs == "[1] Title: Victoria Falls\nOn the Zambezi." and backend.queries == ["falls"]


def _old_heldout(env_kwargs, n, seed):
    """What algos' TaskSource drew for test tasks: the env made with split="dev", task k from
    default_rng([seed + 10_007, k])."""
    env = gym.make("AgentRL/Search-v0", **{**env_kwargs, "split": "dev"}).unwrapped
    return [env.sample_task(np.random.default_rng([seed + 10_007, k])) for k in range(n)]


@pytest.mark.parametrize("kwargs", [{}, {"split": "train"}, {"tools_enabled": False},
                                    {"dataset": [QUESTION, {**QUESTION, "id": "q2"}], "split": "train"}])
def test_test_tasks_are_what_the_pipeline_used_to_take(kwargs):
    env = gym.make("AgentRL/Search-v0", **kwargs).unwrapped
    for seed in (0, 3):
        assert env.test_tasks(8, seed=seed + 10_007) == _old_heldout(kwargs, 8, seed)


def test_balance_sources_draws_each_source_equally_and_leaves_heldout_alone():
    rows = [dict(QUESTION, id=f"big{i}", data_source="big") for i in range(97)] + \
           [dict(QUESTION, id=f"small{i}", data_source="small") for i in range(3)]
    plain = SearchEnv(backend=Scripted([SearchResult([])]), dataset=rows)
    balanced = SearchEnv(backend=Scripted([SearchResult([])]), dataset=rows, balance_sources=True)
    draws = [balanced.sample_task(np.random.default_rng([0, k]))["data_source"] for k in range(2000)]
    assert 0.45 < draws.count("small") / len(draws) < 0.55
    plain_draws = [plain.sample_task(np.random.default_rng([0, k]))["data_source"] for k in range(2000)]
    assert plain_draws.count("small") / len(plain_draws) < 0.06
    small = [balanced.sample_task(np.random.default_rng([1, k])) for k in range(400)]
    assert {r["id"] for r in small if r["data_source"] == "small"} == {"small0", "small1", "small2"}
    assert balanced.test_tasks(16) == plain.test_tasks(16)
