"""AgentRL/BFCL-v0 grades exactly as BFCL grades: the benchmark's own ground truth, replayed as the agent's reply,
scores 1.0 on every task of every supported category (but five answers BFCL's own checker rejects), and perturbed
answers score what BFCL's ``ast_checker``, called here directly, gives the same ``model_output``."""

from __future__ import annotations

import copy
import json
import sys

import gymnasium as gym
import numpy as np
import pytest

import agentrl.envs  # noqa: F401
from agentrl.envs.benchmark_packages import PackageMissing
from agentrl.envs.bfcl.env import BFCLEnv, ground_truth_calls
from agentrl.envs.bfcl.loading import BFCL, SINGLE_TURN, load_category, require_bfcl

RELEVANT = [c for c in SINGLE_TURN if "irrelevance" not in c]
IRRELEVANT = [c for c in SINGLE_TURN if "irrelevance" in c]
#: BFCL answers that BFCL's own checker rejects whatever value is chosen (a required parameter allowed no value,
#: or named differently from the function doc); the test checks that they still fail it.
UNPASSABLE = {"live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_507-149-4", "live_multiple_862-181-3",
              "live_multiple_964-207-0"}


@pytest.fixture(scope="module")
def envs():
    return {c: BFCLEnv(category=c) for c in SINGLE_TURN}


def bfcl_verdict(task, model_output) -> bool:
    """BFCL's own ``ast_checker`` on ``model_output`` (imported from the package; the env imported it first with
    the stand-in model registry, which keeps dotted names)."""
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return bool(ast_checker(task["tools"], model_output, task["ground_truth"], Language.PYTHON, task["category"],
                            "agentrl-gym")["valid"])


def answer_calls(task, omit_optional):
    """The ground truth as calls, written here from ``possible_answer`` without the env's helper: the first allowed
    value of each argument (nested dicts alike), ``""`` (optional) left out, or every optional one left out."""
    def pick(allowed):
        if omit_optional and "" in allowed:
            return None
        for v in allowed:
            if v == "":
                continue
            if isinstance(v, dict):
                return {"v": fill(v)}
            if isinstance(v, list) and v and all(isinstance(d, dict) for d in v):
                return {"v": [fill(d) for d in v]}
            return {"v": v}
        return None

    def fill(options):
        out = {}
        for k, allowed in options.items():
            got = pick(allowed) if isinstance(allowed, list) else {"v": allowed}
            if got is not None:
                out[k] = got["v"]
        return out

    return [(name, fill(opts)) for call in task["ground_truth"] for name, opts in call.items()]


def play(env, task, reply):
    env.reset(options={"task": task})
    _, reward, terminated, truncated, info = env.step(reply)
    assert terminated and not truncated
    return reward, info


def reply_of(env, calls):
    return env.parser.render_calls(calls) if calls else "I cannot help with that using these functions."


@pytest.mark.parametrize("category", RELEVANT)
def test_ground_truth_scores_one_on_every_task(envs, category):
    env = envs[category]
    rows = load_category(category)
    passed = 0
    for task in rows:
        first, omitted = answer_calls(task, False), answer_calls(task, True)
        calls = first if bfcl_verdict(task, [{n: a} for n, a in first]) else omitted
        reward, info = play(env, task, reply_of(env, calls))
        assert reward == float(bfcl_verdict(task, [{n: a} for n, a in calls])), task["id"]
        if task["id"] in UNPASSABLE:
            assert reward == 0.0 and info["bfcl_error_type"], task["id"]
        else:
            assert reward == 1.0 and info["correct"] and info["bfcl_error_type"] == "", (task["id"], info)
            passed += 1
        assert info["metrics"]["tool_calls"] == len(calls)
    assert passed == len(rows) - len(UNPASSABLE & {r["id"] for r in rows}) > 0
    # The env's own demonstration is the same ground truth, and scores the same.
    for task in rows[:20]:
        assert env.demo(task)["reward"] == (0.0 if task["id"] in UNPASSABLE else 1.0)


def perturbations(task, rng):
    """(kind, calls) pairs: the ground truth with a wrong argument value, a call missing, a call added, a function
    renamed."""
    calls = answer_calls(task, False)
    if not bfcl_verdict(task, [{n: a} for n, a in calls]):
        calls = answer_calls(task, True)
    out = []
    k = int(rng.integers(len(calls)))
    name, args = calls[k]
    if args:
        key = sorted(args)[int(rng.integers(len(args)))]
        v = args[key]
        wrong = (not v if isinstance(v, bool) else v + 1000 if isinstance(v, (int, float)) else
                 v + "_zz" if isinstance(v, str) else [*v, v[0]] if isinstance(v, list) and v else
                 ["zz"] if isinstance(v, list) else {"zz": 1})
        out.append(("wrong_value", [*calls[:k], (name, {**args, key: wrong}), *calls[k + 1:]]))
    if len(calls) > 1:
        out.append(("missing_call", calls[:k] + calls[k + 1:]))
    out.append(("extra_call", [*calls, copy.deepcopy(calls[k])]))
    out.append(("wrong_name", [*calls[:k], (name + "_v2", args), *calls[k + 1:]]))
    return out


@pytest.mark.parametrize("category", RELEVANT)
def test_perturbed_answers_score_what_bfcl_gives_them(envs, category):
    env = envs[category]
    rng = np.random.default_rng(0)
    rows = [r for r in load_category(category) if r["id"] not in UNPASSABLE]
    sample = [rows[int(i)] for i in rng.permutation(len(rows))[:40]]
    zeros: dict[str, int] = {}
    for task in sample:
        for kind, calls in perturbations(task, rng):
            reward, _ = play(env, task, reply_of(env, calls))
            assert reward == float(bfcl_verdict(task, [{n: a} for n, a in calls])), (task["id"], kind, calls)
            zeros[kind] = zeros.get(kind, 0) + (reward == 0.0)
    assert zeros["wrong_name"] == len(sample) and zeros["extra_call"] > 0 and zeros["wrong_value"] > 0
    assert set(zeros) >= {"wrong_value", "extra_call", "wrong_name"}


@pytest.mark.parametrize("category", RELEVANT)
def test_a_text_reply_scores_zero_where_a_call_is_due(envs, category):
    env = envs[category]
    for task in load_category(category)[:10]:
        for reply, termination in (("I would call a function here.", "answered"),
                                   ("<tool_call>\nnot json\n</tool_call>", "invalid"), ("", "invalid")):
            reward, info = play(env, task, reply)
            assert reward == 0.0 and not info["correct"] and info["metrics"]["tool_calls"] == 0
            assert info["termination"] == termination and info["format_ok"] == (termination == "answered")
            assert info["metrics"]["invalid_calls"] == (termination == "invalid")


@pytest.mark.parametrize("category", IRRELEVANT)
def test_irrelevance_rewards_not_calling(envs, category):
    env = envs[category]
    rows = load_category(category)
    for task in rows:
        reward, info = play(env, task, "None of these functions can answer that.")
        assert reward == 1.0 and info["correct"], task["id"]
    for task in rows[:100]:
        fn = task["tools"][0]
        reward, info = play(env, task, reply_of(env, [(fn["name"], {})]))
        assert reward == 0.0 and info["bfcl_error_type"] == "irrelevance_error:decoder_success"
    assert env.demo(rows[0])["reward"] == 1.0


def test_task_tools_are_the_task_functions_as_openai_schemas(envs):
    env = envs["multiple"]
    task = load_category("multiple")[3]
    obs, info = env.reset(options={"task": task})
    assert obs == task["question"][0][-1]["content"]
    names = [t["function"]["name"] for t in info["tools"]]
    assert names == [f["name"] for f in task["tools"]]
    assert all(t["function"]["parameters"]["type"] == "object" for t in info["tools"])  # BFCL's "dict"
    assert all(n in info["messages"][0]["content"] for n in names)  # tools_in_prompt
    dotted = next(r for r in load_category("simple_python") if "." in r["tools"][0]["name"])
    _, info = envs["simple_python"].reset(options={"task": dotted})
    assert info["tools"][0]["function"]["name"] == dotted["tools"][0]["name"]  # dotted names kept
    reward, _ = play(envs["simple_python"], dotted, reply_of(env, ground_truth_calls(dotted)))
    assert reward == 1.0


def test_a_task_system_message_follows_ours():
    env = BFCLEnv(category="live_simple")
    task = next(r for r in env.rows if r["question"][0][0]["role"] == "system")
    _, info = env.reset(options={"task": task})
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["messages"][0]["content"].endswith(task["question"][0][0]["content"])


def test_tasks_draws_are_deterministic_and_reset_samples_the_category():
    env = gym.make("AgentRL/BFCL-v0", category="parallel").unwrapped
    a, b = env.test_tasks(10, seed=3), env.test_tasks(10, seed=3)
    assert [t["id"] for t in a] == [t["id"] for t in b] and len({t["id"] for t in a}) == 10
    assert [t["id"] for t in env.test_tasks(10, seed=4)] != [t["id"] for t in a]
    assert len(BFCLEnv(category="live_parallel").test_tasks(100)) == 16
    _, info = env.reset(seed=5)
    assert info["task_id"].startswith("parallel_")
    _, again = env.reset(seed=5)
    assert again["task_id"] == info["task_id"]
    _, pinned = env.reset(options={"task": {"id": "parallel_7"}})
    assert pinned["task_id"] == "parallel_7" and pinned["tools"]
    with pytest.raises(ValueError, match="parallel_999"):
        env.reset(options={"task": {"id": "parallel_999"}})
    with pytest.raises(ValueError, match="memory, web_search, Java and JavaScript are not covered"):
        BFCLEnv(category="simple_java")


def test_rows_survive_a_jsonl_round_trip(envs, tmp_path):
    """A row of test_tasks written to a --tasks-file and read back grades the same."""
    env = envs["parallel_multiple"]
    task = json.loads(json.dumps(env.test_tasks(1, seed=0)[0]))
    assert play(env, task, reply_of(env, ground_truth_calls(task)))[0] == 1.0


def test_the_checker_import_leaves_no_stand_in_behind(envs):
    assert "bfcl_eval.eval_checker.ast_eval.ast_checker" in sys.modules
    assert "bfcl_eval.constants.model_config" not in sys.modules


def test_missing_package_is_one_line_naming_the_pip_command(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("bfcl_eval.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    with pytest.raises(PackageMissing, match="^AgentRL/BFCL-v0 needs the bfcl-eval package: pip install --no-deps "
                                             "bfcl-eval==2026.3.23$") as e:
        require_bfcl()
    assert "\n" not in str(e.value) and BFCL.install in str(e.value)
    with pytest.raises(PackageMissing):
        BFCLEnv(category="multiple")


def test_a_missing_dependency_of_bfcl_is_named_with_its_pip_command(monkeypatch):
    for name in [m for m in sys.modules if m == "bfcl_eval.utils" or m.startswith("filelock")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "filelock", None)
    with pytest.raises(PackageMissing, match=r"^AgentRL/BFCL-v0: bfcl-eval needs filelock, which --no-deps skipped: "
                                          r"pip install filelock$"):
        require_bfcl()


@pytest.mark.parametrize("category", ["simple_python", "parallel_multiple", "live_irrelevance"])
def test_the_env_passes_the_contract_checker(category):
    from agentrl.envs.checker import check_text_env

    check_text_env("AgentRL/BFCL-v0", env_kwargs={"category": category}, episodes=30)
