"""The verifiers bridge (envs/bridges/verifiers.py) with the real verifiers 0.4.0, in its own virtualenv
``.venv-verifiers`` (verifiers pins mcp==2.0.0; our [mcp] extra needs mcp>=2.3): every registered env played
through verifiers' own API (``load_environment``, ``env.serving()``, ``env.run_episode``, the task's reward and
metric hooks), the model a scripted OpenAI-compatible server on 127.0.0.1, gives what ``gymnasium.make`` gives;
and a verifiers env played as our ``VerifiersTextEnv`` gives the reward verifiers gives it.

The virtualenv must exist (the README's test command makes it): without it these tests fail, they never skip.
The episodes run in one subprocess (tests/envs/bridges/verifiers_episodes.py) with that virtualenv's python.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import load_env_creator

import agentrl.envs
from agentrl.envs import ENVS
from agentrl.envs.bridges.verifiers import PLUGIN_ID, VERIFIERS_INSTALL, load_environment
from agentrl.envs.capabilities import capabilities
from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.search.bm25 import load_corpus

gym.register_envs(agentrl.envs)

ROOT = Path(__file__).resolve().parents[3]
VENV_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
SCRIPT = Path(__file__).with_name("verifiers_episodes.py")
BAD_CALL = '<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>'
INVALID = ["", "<tool_call>\n{not json\n</tool_call>"]
_TMP = tempfile.TemporaryDirectory(prefix="agentrl-verifiers-test-")


@functools.cache
def corpus_jsonl() -> str:
    """The default search corpus (a package of this environment, not of verifiers'), as a JSONL file."""
    path = Path(_TMP.name) / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in load_corpus()), encoding="utf-8")
    return str(path)


def env_kwargs(env_id: str) -> dict:
    """The same ``gymnasium.make`` kwargs on both sides; Search reads the default corpus from a file."""
    return {"backend_kwargs": {"corpus": corpus_jsonl()}} if env_id == "AgentRL/Search-v0" else {}


#: The built-in envs a scripted episode plays offline: all but AgentRL/OpenEnv-v0, which plays a running OpenEnv
#: server (tests/envs/bridges/test_openenv.py).
SCRIPTABLE = tuple(i for i in ENVS if i != "AgentRL/OpenEnv-v0")


def env_ids() -> list:
    return [pytest.param(i, marks=pytest.mark.needs_bwrap) if issubclass(load_env_creator(ENVS[i][0]), CodeToolEnv)
            else i for i in SCRIPTABLE]


def play_gym(env_id: str, task: dict, actions: list[str], max_steps: int | None = None,
             kwargs: dict | None = None) -> dict:
    """Our episode of ``actions``: the opening messages, the observations and how it ended; ``reward`` is the
    episode's, the sum of its steps' rewards (what a trainer sums)."""
    env = gym.make(env_id, **(env_kwargs(env_id) if kwargs is None else kwargs))
    try:
        _, info = env.reset(options={"task": task})
        out = {"messages": info["messages"], "tools": info["tools"], "observations": []}
        total = 0.0
        for a in actions[:max_steps]:
            obs, reward, term, trunc, info = env.step(a)
            total += reward
            out["observations"].append(obs)
            if term or trunc:
                break
        return {**out, "reward": total, "correct": bool(info.get("correct")), "termination": info.get("termination"),
                "format_ok": bool(info.get("format_ok")), "truncated": trunc, "metrics": info["metrics"]}
    finally:
        env.close()


#: ToolUse with partial credit per correct tool call: the demonstration's three steps are worth 0.2 + 0.2 + 1.0.
CREDIT = {"call_credit": 0.2, "families": ["add_multiply"]}


def scripted(env_id: str, kwargs: dict | None = None) -> tuple[dict, list[str]]:
    env = gym.make(env_id, **(env_kwargs(env_id) if kwargs is None else kwargs)).unwrapped
    # the first test task with a known solution (TauBench-v0 has none for a task that wants facts told to a user)
    return next((t, a) for t in env.test_tasks(8) if (a := env.demo_actions(t)))


def episode(env_id: str, actions: list[str], task: dict | None = None, **extra) -> dict:
    task = task if task is not None else scripted(env_id)[0]
    return {"kind": "episode", "env_id": env_id, "env_kwargs": env_kwargs(env_id), "task": task, "actions": actions,
            **extra}


#: One env that grades cut replies (BFCL) and one that does not: every scripted reply ends with finish_reason "length".
CUT = ("AgentRL/ToolUse-v0", "AgentRL/BFCL-v0")
GUESSES = {"solved": ["5", "two", "2", "3"], "unsolved": ["1", "2", "4", "5", "6"], "budget": ["1", "2", "4"]}


@pytest.fixture(scope="module")
def results() -> dict:
    """Every case, run in one subprocess with the python of ``.venv-verifiers``."""
    if not VENV_PYTHON.is_file():
        pytest.fail(f"verifiers' virtualenv is missing ({VENV_PYTHON}); make it with: {VERIFIERS_INSTALL}")
    cases: dict[str, dict] = {}
    for env_id in SCRIPTABLE:
        task, demo = scripted(env_id)
        cases[f"demo {env_id}"] = episode(env_id, demo, task)
        for k, reply in enumerate(INVALID):
            cases[f"invalid{k} {env_id}"] = episode(env_id, [reply], task)
    task, demo = scripted("AgentRL/ToolUse-v0")
    cases["bad call"] = episode("AgentRL/ToolUse-v0", [BAD_CALL, *demo], task)
    cases["stopped"] = episode("AgentRL/ToolUse-v0", demo, task, agent={"max_turns": 1})
    task, demo = scripted("AgentRL/ToolUse-v0", CREDIT)
    cases["credit"] = episode("AgentRL/ToolUse-v0", demo, task, env_kwargs=CREDIT)
    cases["credit stopped"] = episode("AgentRL/ToolUse-v0", demo, task, env_kwargs=CREDIT, agent={"max_turns": 2})
    for env_id in CUT:
        task, demo = scripted(env_id)
        cases[f"cut {env_id}"] = episode(env_id, demo, task, finish_reasons=["length"] * len(demo))
    for split, seed in (("test", 0), ("train", 5)):
        cases[f"taskset {split}"] = {"kind": "taskset", "env_id": "AgentRL/ToolUse-v0", "env_kwargs": {},
                                     "split": split, "num_tasks": 3, "seed": seed}
    for name, guesses in GUESSES.items():
        cases[f"native {name}"] = {"kind": "native", "taskset_id": "vf-guess", "task_id": "guess-0",
                                   "actions": guesses}
        cases[f"import {name}"] = {"kind": "import", "taskset_id": "vf-guess", "task_id": "guess-0",
                                   "guesses": guesses, **({"max_turns": 2} if name == "budget" else {})}
    cases["native cut solved"] = {**cases["native solved"], "finish_reasons": ["length"] * len(GUESSES["solved"])}
    proc = subprocess.run([str(VENV_PYTHON), str(SCRIPT)], input=json.dumps({"cases": list(cases.values())}),
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True))


def _without_latency(metrics: dict) -> dict:
    return {k: float(v) for k, v in metrics.items() if not k.endswith("latency_s")}


def assert_same_episode(got: dict, want: dict) -> None:
    """A verifiers trace against our episode: reward, ending, counters, and what the model was sent."""
    assert got["ok"], got["errors"]
    assert got["reward"] == want["reward"] and got["rewards"] == {"reward": want["reward"]}
    info = got["info"]
    assert (info["correct"], info["format_ok"], info["truncated"], info["termination"]) == (
        want["correct"], want["format_ok"], want["truncated"], want["termination"])
    assert _without_latency(info["metrics"]) == _without_latency(want["metrics"])
    flags = {k: float(want[k]) for k in ("correct", "format_ok", "truncated")}
    assert _without_latency(got["metrics"]) == {**_without_latency(want["metrics"]), **flags}  # metric-only signals
    first = got["requests"][0]
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["content"] for m in first] == [m["content"] for m in want["messages"]]
    # each observation of an unfinished step is the next user turn the model sees
    sent_back = [r[-1]["content"] for r in got["requests"][1:]]
    assert sent_back == want["observations"][:len(sent_back)]
    assert len(got["requests"]) == got["num_turns"] == len(want["observations"])


@pytest.mark.parametrize("env_id", env_ids())
def test_a_scripted_episode_through_verifiers_gives_the_gymnasium_reward(results, env_id):
    task, demo = scripted(env_id)
    got, want = results[f"demo {env_id}"], play_gym(env_id, task, demo)
    assert want["reward"] == 1.0 and want["correct"]  # the demo solves the task: the comparison has teeth
    assert_same_episode(got, want)
    assert got["env_id"] == PLUGIN_ID and got["stop_condition"] == "user_closed"
    assert got["paths"] == ["/v1/chat/completions"] * len(demo)
    # the tool schemas and our task row survive into the trace
    data = got["task_data"]
    assert data["tools"] == want["tools"] and data["tools"]
    assert data["task"] == json.loads(json.dumps(task)) and data["id"] == str(task["id"])
    assert data["env_id"] == env_id and data["prompt"] == want["messages"][1]["content"]


@pytest.mark.parametrize("env_id", env_ids())
@pytest.mark.parametrize("k", range(len(INVALID)))
def test_an_invalid_reply_scores_as_in_gymnasium(results, env_id, k):
    task, _ = scripted(env_id)
    want = play_gym(env_id, task, [INVALID[k]])
    assert want["termination"] == "invalid" and not want["format_ok"]
    assert_same_episode(results[f"invalid{k} {env_id}"], want)


def test_a_bad_tool_call_is_an_observation_and_the_episode_goes_on(results):
    task, demo = scripted("AgentRL/ToolUse-v0")
    got, want = results["bad call"], play_gym("AgentRL/ToolUse-v0", task, [BAD_CALL, *demo])
    assert want["observations"][0].startswith("Error") and want["metrics"]["invalid_calls"] == 1
    assert_same_episode(got, want)


def test_verifiers_ending_the_exchange_first_gives_the_no_answer_reward(results):
    got = results["stopped"]
    assert got["stop_condition"] == "max_turns" and got["num_turns"] == 1
    assert got["reward"] == gym.make("AgentRL/ToolUse-v0").unwrapped.rewards.invalid
    assert got["info"]["termination"] == "stopped" and got["metrics"]["truncated"] == 1.0
    assert got["info"]["metrics"]["tool_calls"] == 1  # our env ran the one call it was sent


def test_an_episode_s_reward_is_the_sum_of_its_steps_rewards(results):
    """With partial credit per tool call the steps before the answer carry reward too: the trace reports the
    whole episode's (what ``gymnasium.make`` sums, and what our trainer trains on), not the last step's."""
    task, demo = scripted("AgentRL/ToolUse-v0", CREDIT)
    want = play_gym("AgentRL/ToolUse-v0", task, demo, kwargs=CREDIT)
    assert len(demo) == 3 and want["reward"] == pytest.approx(1.4) and want["correct"]
    assert_same_episode(results["credit"], want)
    # stopped by verifiers after two replies: the credit earned so far plus the no-answer reward
    stopped = results["credit stopped"]
    invalid = gym.make("AgentRL/ToolUse-v0", **CREDIT).unwrapped.rewards.invalid
    assert stopped["info"]["termination"] == "stopped" and stopped["num_turns"] == 2
    assert stopped["reward"] == pytest.approx(0.2 + 0.2 + invalid)


@pytest.mark.parametrize("env_id", CUT)
def test_the_env_s_capabilities_travel_and_a_cut_reply_is_graded_only_where_the_env_says_so(results, env_id):
    """Issue 60 (N3): the declared capabilities are in the task data, and a reply cut by the token budget is
    handled as our collector handles it in process: stepped when the env grades cut replies (BFCL), else the
    episode ends there, truncated, with the no-answer reward."""
    local = gym.make(env_id).unwrapped
    task, demo = scripted(env_id)
    got = results[f"cut {env_id}"]
    assert got["task_data"]["capabilities"] == capabilities(local)
    assert capabilities(local)["grades_cut_replies"] is (env_id == "AgentRL/BFCL-v0")
    if capabilities(local)["grades_cut_replies"]:
        want = play_gym(env_id, task, demo)
        assert want["reward"] == 1.0  # graded as any reply: the comparison has teeth
        assert_same_episode(got, want)
    else:
        assert got["num_turns"] == 1 and got["info"]["termination"] == "truncated"
        assert got["reward"] == local.rewards.invalid and got["info"]["truncated"] and not got["info"]["correct"]
        assert got["info"]["metrics"]["tool_calls"] == 0  # the cut reply never reached our env


def test_the_dataset_is_the_env_s_tasks(results):
    env = gym.make("AgentRL/ToolUse-v0").unwrapped
    test = env.test_tasks(3)
    train = [env.sample_task(np.random.default_rng([5, k])) for k in range(3)]
    for split, tasks in (("test", test), ("train", train)):
        data = results[f"taskset {split}"]
        assert [d["task"] for d in data] == json.loads(json.dumps(tasks))
        assert [d["id"] for d in data] == [t["id"] for t in tasks]
        assert [d["prompt"] for d in data] == [t["query"] for t in tasks]
        assert all(d["tools"] == env.tools.schemas() for d in data)


@pytest.mark.parametrize("name", ["solved", "unsolved"])
def test_a_verifiers_env_played_as_our_text_env_gets_the_reward_verifiers_gives(results, name):
    native, imported = results[f"native {name}"], results[f"import {name}"]
    steps = imported["steps"]
    first, last = steps[0], steps[-2]
    assert native["ok"] and last["reward"] == native["reward"] == (1.0 if name == "solved" else 0.0)
    assert last["terminated"] and not last["truncated"] and last["termination"] == "answered"
    assert last["correct"] is (name == "solved")
    assert last["metrics"]["vf_guesses"] == native["metrics"]["guesses"]
    # the model saw the same conversation: the native run's requests are our messages, turn for turn
    assert imported["messages"] == native["requests"][-1] + [{"role": "assistant", "content": GUESSES[name][-1]}]
    assert first["messages"] == native["requests"][0] and first["task_id"] == "guess-0" and first["tools"] == []
    assert first["obs"] == native["requests"][0][-1]["content"]
    assert [s["obs"] for s in steps[1:-2]] == [r[-1]["content"] for r in native["requests"][1:]]
    assert all(s["reward"] == 0.0 and not s["terminated"] for s in steps[1:-2])
    assert steps[-1]["after_end"][1:] == [0.0, True, False]  # a step after the end is answered, not raised


def test_a_verifiers_env_played_as_ours_grades_cut_replies_as_verifiers_does(results):
    """Issue 60: verifiers hands a reply cut by the token budget to its env like any other (the trace only reports
    it: ``is_truncated``), so ``VerifiersTextEnv`` declares ``grades_cut_replies`` and a trainer steps its cut
    replies instead of ending the episode with the no-answer reward."""
    cut, whole = results["native cut solved"], results["native solved"]
    assert cut["finish_reasons"] == ["length"] * len(GUESSES["solved"]) and cut["is_truncated"]
    assert not whole["is_truncated"]
    assert cut["ok"] and cut["reward"] == whole["reward"] == 1.0  # the cut replies were graded, the last solved it
    assert cut["requests"] == whole["requests"]  # the same turns: no cut reply ended the exchange
    assert results["import solved"]["capabilities"]["grades_cut_replies"] is True


def test_a_non_number_reply_is_the_verifiers_env_s_business_and_the_budget_ends_an_episode(results):
    steps = results["import solved"]["steps"]
    assert steps[2]["obs"] == "Reply with one whole number." and not steps[2]["terminated"]
    budget = results["import budget"]["steps"]
    assert [s["obs"] for s in budget[1:-1]] == ["higher", "higher"]
    assert budget[-2]["truncated"] and budget[-2]["termination"] == "budget" and budget[-2]["reward"] == 0.0


def test_without_verifiers_the_error_names_the_virtualenv_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)  # what an environment without verifiers sees
    monkeypatch.delitem(sys.modules, "verifiers.v1", raising=False)
    with pytest.raises(ImportError, match=r"mcp==2\.0\.0.*\.venv-verifiers/bin/pip install -e \. 'verifiers==0\.4\.0'"):
        load_environment("AgentRL/ToolUse-v0")
