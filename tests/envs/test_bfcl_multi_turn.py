"""AgentRL/BFCL-v0's multi-turn categories grade exactly as BFCL grades: BFCL's ground-truth call sequences, played
turn by turn through the env, score 1.0 on every entry of the four categories (BFCL's own checker accepts every one
of them on its own ground truth), and perturbed sequences (a call dropped, an argument changed, an extra call from a
later turn that changes the state, the next turn's first call made a turn early) score what BFCL's
``multi_turn_checker``, called here directly, gives the same calls (on 12 entries per category and kind, drawn
with a fixed seed). Invalid calls are observations; the collector plays
the env with native chat templates and with a tiny random model."""

from __future__ import annotations

import copy
import json
import os
import random
import sys
import uuid

import gymnasium as gym
import pytest
from helpers import ScriptedPolicy

import agentrl.envs  # noqa: F401
from agentrl.envs.benchmark_packages import PackageMissing
from agentrl.envs.bfcl.env import BFCLEnv
from agentrl.envs.bfcl.loading import MULTI_TURN, call_string_converter, load_category
from agentrl.envs.bfcl.multi_turn import DONE, BFCLMultiTurnEnv, ground_truth_turns, step_limit
from agentrl.envs.checker import check_text_env

#: Entries per category and perturbation kind whose perturbed answers are compared with BFCL's checker.
SAMPLE = 12


@pytest.fixture(scope="module")
def envs():
    return {c: BFCLEnv(category=c) for c in MULTI_TURN}


def bfcl_utils():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils


def bfcl_verdict(task, decoded) -> dict:
    """BFCL's own ``multi_turn_checker`` on ``decoded`` (per turn, per step, call strings), with objects of its own
    (dropped after)."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    name = f"test_{uuid.uuid4().hex}"
    try:
        return multi_turn_checker(decoded, task["ground_truth"], task, task["category"], name)
    finally:
        for key in [k for k in vars(bfcl_utils()) if k.startswith(name)]:
            del vars(bfcl_utils())[key]


def as_strings(turns) -> list[list[list[str]]]:
    """``(name, arguments)`` calls per turn as BFCL's decoded form: one step per turn that makes calls, each call
    written by BFCL's own ``convert_to_function_call``."""
    convert = call_string_converter()
    return [[convert([{n: a} for n, a in calls])] if calls else [] for calls in turns]


def play(env, task, turns):
    """Play ``turns`` (``(name, arguments)`` calls per turn; one reply making a turn's calls, then ``Done.``)."""
    env.reset(options={"task": task})
    replies = [r for calls in turns for r in ([env.parser.render_calls(calls), DONE] if calls else [DONE])]
    for k, reply in enumerate(replies):
        _, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            assert k == len(replies) - 1, f"{task['id']}: ended after reply {k} of {len(replies)}"
            return reward, info
    raise AssertionError(f"{task['id']}: the episode did not end after its last turn")


@pytest.mark.parametrize("category", MULTI_TURN)
def test_ground_truth_scores_1_on_every_entry(envs, category):
    env = envs[category]
    rows = load_category(category)
    assert len(rows) == 200
    rejected = [t["id"] for t in rows if not bfcl_verdict(t, [[s] if s else [] for s in t["ground_truth"]])["valid"]]
    assert rejected == []  # BFCL's checker accepts its own ground truth on every entry: none is left out below
    for task in rows:
        demo = env.demo(task)
        assert demo is not None and demo["reward"] == 1.0 and demo["correct"], (task["id"], env.verdict)
        users = [m for m in demo["messages"] if m["role"] == "user"]
        assert len(users) == len(task["question"])  # every user turn was played
    assert not [k for k in vars(bfcl_utils()) if k.startswith("agentrl_")]  # every episode's objects dropped


def changes_state(task, turns, t: int, call) -> bool:
    """Whether ``call``, made after the ground truth's turns up to ``t``, changes the public state of BFCL's objects
    (run by BFCL's own executor on objects of the test's own, dropped after)."""
    utils, name = bfcl_utils(), f"test_{uuid.uuid4().hex}"
    try:
        def run(strings):
            return utils.execute_multi_turn_func_call(strings, task["initial_config"], task["involved_classes"], name,
                                                      task["id"], long_context="long_context" in task["id"])[1]
        before = {c: copy.deepcopy({k: v for k, v in vars(o).items() if not k.startswith("_")})
                  for c, o in run([s for step in as_strings(turns[: t + 1]) if step for s in step[0]]).items()}
        after = run(as_strings([[call]])[0][0])
        return any({k: v for k, v in vars(o).items() if not k.startswith("_")} != before[c] for c, o in after.items())
    finally:
        for key in [k for k in vars(utils) if k.startswith(name)]:
            del vars(utils)[key]


def perturb(task, kind: str, rng: random.Random):
    """``task``'s ground truth with one change of ``kind``, or None when the entry has no place for it."""
    turns = copy.deepcopy(ground_truth_turns(task))
    spots = [(t, k) for t, calls in enumerate(turns) for k, (_, args) in enumerate(calls) if kind != "argument" or args]
    if kind == "early":
        spots = [(t, 0) for t in range(len(turns) - 1) if turns[t + 1]]
    if kind == "extra":  # a later turn's call that changes the state, made at the end of an earlier turn
        spots = [(t, k) for t in range(len(turns) - 1) for k, call in enumerate(c for calls in turns[t + 1:]
                                                                                for c in calls)
                 if changes_state(task, turns, t, call)]
    if not spots:
        return None
    t, k = rng.choice(spots)
    if kind == "extra":
        turns[t].append([c for calls in turns[t + 1:] for c in calls][k])
    elif kind == "drop":
        del turns[t][k]
    elif kind == "argument":
        args = turns[t][k][1]
        key = rng.choice(sorted(args))
        value = args[key]
        args[key] = (not value if isinstance(value, bool) else value + 1 if isinstance(value, (int, float))
                     else value + "_x" if isinstance(value, str) else value[:-1] if value else ["x"])
    elif kind == "early":
        turns[t].append(turns[t + 1][0])
    return turns


@pytest.mark.parametrize("kind", ["drop", "argument", "extra", "early"])
@pytest.mark.parametrize("category", MULTI_TURN)
def test_perturbed_answers_score_what_bfcl_checker_gives(envs, category, kind):
    env = envs[category]
    rng = random.Random(f"{category}/{kind}")
    rows = rng.sample(load_category(category), SAMPLE)
    failed = 0
    for task in rows:
        turns = perturb(task, kind, rng)
        if turns is None:
            continue
        verdict = bfcl_verdict(task, as_strings(turns))
        reward, info = play(env, task, turns)
        assert reward == (1.0 if verdict["valid"] else 0.0), (task["id"], verdict.get("error_type"), turns)
        assert info["bfcl_error_type"] == ("" if verdict["valid"] else verdict["error_type"]), task["id"]
        failed += not verdict["valid"]
    # Not all harmless (a call made a turn early is often a read-only one, which BFCL accepts): failures to match.
    assert failed >= (SAMPLE // 2 if kind != "early" else SAMPLE // 4)


def test_calls_bfcl_would_not_run_are_observations_and_the_rest_runs_as_bfcl_runs_it(envs, tmp_path):
    env = envs["multi_turn_base"]
    task = env.rows[0]  # a file system and a posting API
    env.reset(options={"task": task})
    target = tmp_path / "written"

    def call(name, arguments):
        return env.step(env.parser.render_calls([(name, arguments)]))

    obs, *_ = call("no_such_function", {"x": 1})
    assert obs == "Error during execution: name 'no_such_function' is not defined"  # BFCL's own error
    for name, arguments, says in [
        ("open", {"file": str(target), "mode": "w"}, "not one of this task's functions"),
        ("method", {}, "not one of this task's functions"),  # a local of BFCL's executor
        ("__import__('os').system('true') or ls", {}, "is not a function name"),
        ("cd", {"folder='x', b": 1}, "is not an identifier"),
    ]:
        obs, reward, terminated, truncated, info = call(name, arguments)
        assert says in obs and "nothing was run" in obs and not (terminated or truncated), name
    assert not target.exists()
    obs, *_ = call("cd", {"folder": "no_such_folder"})
    assert "error" in json.loads(obs)  # the class's own error dict
    obs, *_ = call("ls", {"a": "yes"})
    assert "Error" not in obs
    # Then the ground truth, the first turn ended by an unreadable reply: it passes, as in BFCL (the calls that ran
    # and failed change no state; the refused ones are not graded).
    turns = ground_truth_turns(task)
    env.step(env.parser.render_calls(turns[0]))
    _, _, _, _, info = env.step("Garbled <tool_call>{not json</tool_call>")
    assert info["obs_role"] == "user" and info["bfcl_turn"] == 1 and info["metrics"]["invalid_calls"] == 5
    for calls in turns[1:]:
        env.step(env.parser.render_calls(calls))
        _, reward, terminated, _, info = env.step(DONE)
    convert = call_string_converter()
    ran = [[convert([{n: a}])[0]] for n, a in [("no_such_function", {"x": 1}), ("cd", {"folder": "no_such_folder"}),
                                               ("ls", {"a": "yes"})]]
    verdict = bfcl_verdict(task, [ran + as_strings(turns)[0], *as_strings(turns)[1:]])
    assert terminated and verdict["valid"] and reward == 1.0


def test_a_turn_past_bfcls_step_limit_force_quits_the_entry(envs):
    env = envs["multi_turn_base"]
    task = next(t for t in env.rows if len(t["question"]) > 1)
    env.reset(options={"task": task})
    for _ in range(step_limit() + 1):  # BFCL quits after the 21st step with calls in one turn
        _, _, terminated, _, info = env.step(env.parser.render_calls([("pwd", {})]))
        assert not terminated
    _, reward, terminated, truncated, info = env.step(DONE)
    assert (reward, terminated, truncated, info["bfcl_error_type"]) == (0.0, True, False, "multi_turn:force_terminated")


def test_held_back_functions_join_at_the_turn_bfcl_adds_them(envs):
    env = envs["multi_turn_miss_func"]
    task = env.rows[0]
    turn = int(next(iter(task["missed_function"])))
    held = {d["name"] for docs in task["missed_function"].values() for d in docs}
    _, info = env.reset(options={"task": task})
    names = {t["function"]["name"] for t in info["tools"]}
    assert held and not held & names and not [n for n in held if f'"{n}"' in info["messages"][0]["content"]]
    for reply in env.demo_actions(task):
        obs, _, _, _, info = env.step(reply)
        if info["obs_role"] == "user" and info["bfcl_turn"] == turn:
            break
    assert obs.endswith("I have updated some more functions you can choose from. What about now?")
    assert all(f'"{n}"' in obs for n in held)
    assert held <= {t["function"]["name"] for t in info["tools"]}


def test_rows_round_trip_and_unsupported_categories_are_named(envs, tmp_path):
    env = envs["multi_turn_miss_func"]
    task = json.loads(json.dumps(env.test_tasks(1, seed=3)[0]))  # a row written to a --tasks-file and read back
    assert env.demo(task)["reward"] == 1.0
    made = gym.make("AgentRL/BFCL-v0", category="multi_turn_long_context")
    assert isinstance(made.unwrapped, BFCLMultiTurnEnv)
    _, info = made.reset(options={"task": {"id": "multi_turn_long_context_7"}})
    assert info["task_id"] == "multi_turn_long_context_7"
    for category in ("memory_kv", "web_search_base"):
        with pytest.raises(ValueError, match="multi_turn_miss_param.*memory, web_search.*not covered"):
            BFCLEnv(category=category)
    with pytest.raises(ValueError, match=r"'x': a BFCL multi-turn task needs ground_truth, initial_config, "
                                         r"involved_classes \(a row of test_tasks, or just its 'id'\)"):
        env.reset(options={"task": {"id": "x", "question": [[]], "tools": []}})
    with pytest.raises(ValueError, match="single-turn categories are BFCLEnv's"):
        BFCLMultiTurnEnv(category="simple_python")


def test_a_module_a_bfcl_class_needs_is_named_with_its_pip_command(monkeypatch):
    monkeypatch.delitem(sys.modules, "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api", raising=False)
    monkeypatch.setitem(sys.modules, "mpmath", None)
    with pytest.raises(PackageMissing, match=r"^AgentRL/BFCL-v0: BFCL's MathAPI needs mpmath, which --no-deps skipped: "
                                          r"pip install mpmath$"):
        BFCLEnv(category="multi_turn_base")


def test_the_multi_turn_env_honours_the_text_env_contract():
    check_text_env("AgentRL/BFCL-v0", env_kwargs={"category": "multi_turn_miss_func"}, episodes=40)


def test_the_collector_plays_every_turn_in_native_templates(template_tokenizers):
    from agentrl.algos.rollout.collector import CollectorConfig, collect

    tok = template_tokenizers["qwen"]
    env = BFCLEnv(category="multi_turn_miss_func")
    tasks = env.test_tasks(2, seed=1)
    policy = ScriptedPolicy(tok, [])
    env.use_call_format(policy.fmt.call_format)
    policy.actions = {t["question"][0][0]["content"]: env.demo_actions(t) for t in tasks}
    trajs = collect("AgentRL/BFCL-v0", policy, tasks, group_size=1, env_kwargs={"category": "multi_turn_miss_func"},
                    config=CollectorConfig(max_turns=60, max_new_tokens=512, max_total_tokens=32768))
    for tr, task in zip(trajs, tasks, strict=True):
        assert (tr.reward, tr.termination) == (1.0, "answered"), tr.task["id"]
        assert len(tr.turns) == len(env.demo_actions(task))
        assert [t.obs_role for t in tr.turns[:-1]].count("user") == len(task["question"]) - 1
        held = [d["name"] for docs in task["missed_function"].values() for d in docs]
        prompt, text = tok.decode(tr.token_ids[: tr.prompt_len]), tok.decode(tr.token_ids)
        assert held and all(f'"{n}"' not in prompt and f'"{n}"' in text for n in held)  # shown at their turn only


def test_a_cut_reply_is_stepped_and_the_entry_plays_to_its_end(template_tokenizers):
    # Every reply stops at the token budget without its end-of-turn token: BFCL still runs its calls and the
    # collector closes the turn itself (its glue adds the end token; the token stream is checked at each turn).
    from agentrl.algos.rollout.collector import CollectorConfig, collect

    tok = template_tokenizers["qwen"]
    env = BFCLEnv(category="multi_turn_base")
    tasks = env.test_tasks(1, seed=2)
    policy = ScriptedPolicy(tok, [], end_token=False)
    env.use_call_format(policy.fmt.call_format)
    policy.actions = {t["question"][0][0]["content"]: env.demo_actions(t) for t in tasks}
    [tr] = collect("AgentRL/BFCL-v0", policy, tasks, group_size=1, env_kwargs={"category": "multi_turn_base"},
                   config=CollectorConfig(max_turns=60, max_new_tokens=512, max_total_tokens=32768))
    assert {t.finish_reason for t in tr.turns} == {"length"}
    assert (tr.reward, tr.termination) == (1.0, "answered") and len(tr.turns) == len(env.demo_actions(tasks[0]))


def test_the_collector_runs_a_tiny_random_model_to_the_end_of_each_entry(tokenizer):
    from agentrl.algos.models import tiny_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import CollectorConfig, collect

    tasks = BFCLEnv(category="multi_turn_base").test_tasks(2, seed=0)
    policy = HFPolicy(tiny_model(tokenizer, hidden_size=32, end_scale=8.0), tokenizer)  # replies end at once
    trajs = collect("AgentRL/BFCL-v0", policy, tasks, group_size=1, env_kwargs={"category": "multi_turn_base"},
                    config=CollectorConfig(max_turns=60, max_new_tokens=8, max_total_tokens=16384, seed=0))
    for tr, task in zip(trajs, tasks, strict=True):
        # The env ended the episode (an empty last reply reads as invalid) and graded it: no call, no credit.
        assert tr.termination in ("answered", "invalid") and tr.reward == 0.0, (tr.termination, tr.task["id"])
        assert [t.obs_role for t in tr.turns].count("user") == len(task["question"])  # each turn, then the end
    assert os.environ.get("BFCL_PROJECT_ROOT")  # the package's output folders point outside site-packages
