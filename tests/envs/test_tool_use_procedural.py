"""The procedural-tools families of ToolUse-v0: each task brings its own generated functions, is graded on its calls
(exact names and stated values, any order, optional values unstated may be left out or given their default), never
drawn by default, and shown to the policy as that task's tools (env prompt and native chat templates)."""

from __future__ import annotations

import copy
import json
import pathlib

import gymnasium as gym
import pytest
from helpers import ROOT, ScriptedPolicy

import agentrl.envs
from agentrl.algos import cli
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.envs.tool_use.env import FAMILIES, ToolUseEnv, make_task, make_tasks
from agentrl.envs.tool_use.procedural import FAMILIES as PROCEDURAL
from agentrl.envs.tool_use.procedural import function_names, run_call

gym.register_envs(agentrl.envs)
SHAPES = list(PROCEDURAL)


def names(task):
    return [t["function"]["name"] for t in task["tools"]]


def play(env, task, replies):
    """Reset on ``task``, play ``replies`` until the episode ends; the last step's ``(reward, info)``."""
    env.reset(options={"task": task})
    for reply in replies:
        _, reward, term, trunc, info = env.step(reply)
        if term or trunc:
            return reward, info
    raise AssertionError("the episode did not end")


def calls_reply(env, calls):
    return env.parser.render_calls([(n, a) for n, a in calls])


def answer(env):
    return env.parser.render_answer("Done.")


def first(shape, pred=lambda t: True, n=200):
    return next(t for t in make_tasks(n, "train", families=[shape]) if pred(t))


def props(task, name):
    return next(t["function"]["parameters"] for t in task["tools"] if t["function"]["name"] == name)


# ---------------------------------------------------------------------------------------------- generation


def test_tasks_are_a_pure_function_of_the_index_and_json_rows():
    for shape in SHAPES:
        a, b = make_task(7, [shape]), make_task(7, [shape])
        assert a == b and json.loads(json.dumps(a)) == a and a["family"] == shape and a["id"] == f"{shape}-7"
        assert make_task(9, [shape]) != a
    env = gym.make("AgentRL/ToolUse-v0", families=SHAPES)
    (o1, i1), (o2, i2) = env.reset(seed=3), env.reset(seed=3)
    assert o1 == o2 and i1["tools"] == i2["tools"] and i1["task_id"] == i2["task_id"]
    train = {t["query"] for t in make_tasks(100, "train", families=SHAPES)}
    test = {t["query"] for t in make_tasks(100, "test", families=SHAPES)}
    assert len(train) == 100 and not train & test


def test_shapes_have_what_they_promise():
    for t in make_tasks(60, "test", families=SHAPES):
        tools, calls = names(t), t["calls"]
        assert set(tools) <= function_names() and len(set(tools)) == len(tools)
        for tool in t["tools"]:
            params = tool["function"]["parameters"]
            assert 1 <= len(params["properties"]) <= 4 and params["required"]
            assert all("default" in p for k, p in params["properties"].items() if k not in params["required"])
        for name, args in calls:  # every required value is stated, as its own text, in the question
            assert set(props(t, name)["required"]) <= set(args)
            for key, v in args.items():
                words = key.replace("_", " ")
                if isinstance(v, bool):
                    stated = [f"{words} set to {json.dumps(v)}", f"{words} turned {'on' if v else 'off'}"]
                    assert any(s in t["query"] for s in stated), (key, v, t["query"])
                for s in (v if isinstance(v, list) else [v] if not isinstance(v, bool) else []):
                    assert str(s) in t["query"] and words in t["query"], (key, s, t["query"])
        family = t["family"]
        if family == "procedural_single":
            assert len(tools) == 1 and len(calls) == 1
        elif family == "procedural_choose":
            assert 2 <= len(tools) <= 4 and len(calls) == 1
        elif family == "procedural_parallel":
            assert 2 <= len(calls) <= 3 and {c[0] for c in calls} <= set(tools)
        else:
            assert calls == [] and tools


def test_not_drawn_by_default_and_the_default_tasks_are_unchanged():
    assert not set(PROCEDURAL) & set(FAMILIES)
    assert {t["family"] for t in make_tasks(300, "train")} <= set(FAMILIES)
    env = ToolUseEnv()
    assert all(env.reset(seed=s)[1]["task_id"].split("-")[0] in FAMILIES for s in range(40))
    # The default tasks are still those of the committed held-out set (drawn before these families existed).
    rows = [json.loads(line) for line in (ROOT / "benchmarks/heldout/tooluse.jsonl").read_text().splitlines()]
    assert len(rows) == 128 and all(make_task(int(r["id"].rsplit("-", 1)[1])) == r for r in rows)
    # A procedural family may be named beside default ones.
    mixed = [make_task(i, ["multiply", "procedural_single"]) for i in range(40)]
    assert {t["family"] for t in mixed} == {"multiply", "procedural_single"}
    assert all(t["query"].startswith("What is") for t in mixed if t["family"] == "multiply")
    with pytest.raises(ValueError, match=r"unknown task families \['procedural_x'\]; known: .*'procedural_none'"):
        ToolUseEnv(families=["procedural_x"])


def test_no_generated_name_is_a_bfcl_function_name():
    """Every function name the generator can produce, against every function name in the installed bfcl-eval's data
    (all categories, multi-turn function docs included)."""
    import bfcl_eval

    found: set[str] = set()

    def walk(obj):
        if isinstance(obj, dict):
            if isinstance(obj.get("name"), str) and isinstance(obj.get("parameters"), dict):
                found.add(obj["name"])
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    files = sorted((pathlib.Path(bfcl_eval.__file__).parent / "data").rglob("*.json"))
    for f in files:
        text = f.read_text(encoding="utf-8")
        try:
            walk(json.loads(text))
        except json.JSONDecodeError:  # JSON lines
            for line in filter(str.strip, text.splitlines()):
                walk(json.loads(line))
    assert len(files) > 20 and len(found) > 1000  # the data was read
    bfcl = found | {n.rsplit(".", 1)[-1] for n in found}
    ours = function_names()
    assert len(ours) > 100 and not ours & bfcl, sorted(ours & bfcl)
    assert {n for t in make_tasks(200, "test", families=SHAPES) for n in names(t)} <= ours


# ---------------------------------------------------------------------------------------------- grading


@pytest.mark.parametrize("shape", SHAPES)
def test_every_demonstration_scores_one(shape):
    env = ToolUseEnv(families=[shape])
    for t in make_tasks(25, "train", families=[shape]) + make_tasks(25, "test", families=[shape]):
        demo = env.demo(t)
        assert demo["reward"] == 1.0 and demo["correct"], t["id"]
        assert [x["function"]["name"] for x in demo["tools"]] == names(t)
        assistant = [m for m in demo["messages"] if m["role"] == "assistant"]
        assert len(assistant) == (2 if t["calls"] else 1)  # all calls in one reply, then the answer
        made = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in assistant[0].get("tool_calls", [])]
        assert made == [tuple(c) for c in t["calls"]]


def test_each_call_returns_a_generated_result_and_the_tools_are_the_tasks():
    env = gym.make("AgentRL/ToolUse-v0", families=["procedural_choose"])
    t = first("procedural_choose")
    _, info = env.reset(options={"task": t})
    assert names({"tools": info["tools"]}) == names(t) and all(f'"{n}"' in info["messages"][0]["content"]
                                                                for n in names(t))
    assert '"multiply"' not in info["messages"][0]["content"]
    (name, args), = t["calls"]
    obs, reward, term, *_ = env.step(env.unwrapped.parser.render_call(name, args))
    assert json.loads(obs) == run_call(name, args) and reward == 0.0 and not term
    assert json.loads(obs)["status"] == t["answer"].split()[0] or json.loads(obs)["reference"] in t["answer"]


def perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 2 + 1, 2)
    if isinstance(value, list):
        return [*value, "extra"]
    return value + "x"


@pytest.mark.parametrize("shape", ["procedural_single", "procedural_choose", "procedural_parallel"])
def test_a_wrong_name_or_value_or_a_missing_or_extra_call_scores_zero(shape):
    env = ToolUseEnv(families=[shape], max_tool_calls=8)
    for t in make_tasks(12, "test", families=[shape]):
        calls = [(n, dict(a)) for n, a in t["calls"]]
        assert play(env, t, [calls_reply(env, calls), answer(env)])[0] == 1.0  # the control
        for name in [calls[0][0] + "s", *(n for n in names(t) if n != calls[0][0])]:  # a made-up or another name
            assert play(env, t, [calls_reply(env, [(name, calls[0][1]), *calls[1:]]), answer(env)])[0] == 0.0
        for key in calls[0][1]:  # each stated value changed (the schema still accepts it)
            bad = copy.deepcopy(calls)
            bad[0][1][key] = perturb(bad[0][1][key])
            reward, info = play(env, t, [calls_reply(env, bad), answer(env)])
            assert reward == 0.0 and not info["correct"], (t["id"], key)
        for k in range(len(calls)):  # a call missing
            rest = calls[:k] + calls[k + 1:]
            assert play(env, t, [calls_reply(env, rest)] * bool(rest) + [answer(env)])[0] == 0.0
        assert play(env, t, [calls_reply(env, calls + calls[:1]), answer(env)])[0] == 0.0  # one made twice
        extra = [n for n in names(t) if n not in {c[0] for c in calls}]
        if extra:  # another of the task's functions called too (with valid arguments)
            schema = props(t, extra[0])
            args = {k: _valid(schema["properties"][k]) for k in schema["required"]}
            assert play(env, t, [calls_reply(env, calls), calls_reply(env, [(extra[0], args)]), answer(env)])[0] == 0
        assert play(env, t, [calls_reply(env, calls)] * 1 + ["no answer here"])[0] < 0  # calls right, no answer


def test_a_look_alike_function_runs_but_scores_zero():
    """A distractor with the target's very parameters accepts the call (a generated result comes back): only the
    name and description told them apart, and calling it is wrong."""
    def twin(t):
        want = props(t, t["calls"][0][0])["properties"].keys()
        return next((n for n in names(t) if n != t["calls"][0][0] and props(t, n)["properties"].keys() == want), None)

    env = ToolUseEnv(families=["procedural_choose"])
    t = first("procedural_choose", twin)
    (name, args), = t["calls"]
    env.reset(options={"task": t})
    obs, reward, term, _, info = env.step(calls_reply(env, [(twin(t), args)]))
    assert json.loads(obs) == run_call(twin(t), args) and info["metrics"]["invalid_calls"] == 0
    assert env.step(answer(env))[1] == 0.0


def _valid(schema):
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    return {"integer": 3, "number": 2.5, "boolean": True, "array": ["a"]}.get(kind, "abc")


def test_a_rejected_call_then_the_right_one_is_an_extra_call():
    env = ToolUseEnv(families=["procedural_single"])
    t = first("procedural_single")
    (name, args), = t["calls"]
    key = next(iter(args))
    broken = {**args, key: {"not": "valid"}}
    reward, info = play(env, t, [calls_reply(env, [(name, broken)]), calls_reply(env, [(name, args)]), answer(env)])
    assert reward == 0.0 and info["metrics"]["invalid_calls"] == 1


def test_no_relevant_function_rewards_answering_without_a_call():
    env = ToolUseEnv(families=["procedural_none"])
    for t in make_tasks(10, "test", families=["procedural_none"]):
        assert play(env, t, [env.parser.render_answer("None of these functions can do that.")])[0] == 1.0
        schema = t["tools"][0]["function"]
        args = {k: _valid(schema["parameters"]["properties"][k]) for k in schema["parameters"]["required"]}
        assert play(env, t, [calls_reply(env, [(schema["name"], args)]), answer(env)])[0] == 0.0


def test_optional_values_order_and_number_forms():
    env = ToolUseEnv(families=["procedural_parallel"])
    t = first("procedural_parallel", lambda t: len(t["calls"]) >= 2)
    calls = [(n, dict(a)) for n, a in t["calls"]]
    # Any order, and one call per reply, score like the demonstration.
    assert play(env, t, [calls_reply(env, calls[::-1]), answer(env)])[0] == 1.0
    assert play(env, t, [*(calls_reply(env, [c]) for c in calls[:2]), *(calls_reply(env, [c]) for c in calls[2:]),
                         answer(env)])[0] == 1.0
    # An optional value the question does not state: left out or given its default (not another value).
    single = ToolUseEnv(families=["procedural_single"])
    t = first("procedural_single", lambda t: set(props(t, t["calls"][0][0])["properties"]) - set(t["calls"][0][1]))
    (name, args), = t["calls"]
    p = props(t, name)
    key = next(k for k in p["properties"] if k not in args)
    default = p["properties"][key]["default"]
    assert play(single, t, [calls_reply(single, [(name, {**args, key: default})]), answer(single)])[0] == 1.0
    other = _valid(p["properties"][key]) if _valid(p["properties"][key]) != default else perturb(default)
    assert play(single, t, [calls_reply(single, [(name, {**args, key: other})]), answer(single)])[0] == 0.0
    # A stated optional value left out scores 0 (unless it equals the default).
    t = first("procedural_single", lambda t: any(
        k not in props(t, t["calls"][0][0])["required"] and v != props(t, t["calls"][0][0])["properties"][k]["default"]
        for k, v in t["calls"][0][1].items()))
    (name, args), = t["calls"]
    p = props(t, name)
    key = next(k for k, v in args.items() if k not in p["required"] and v != p["properties"][k]["default"])
    dropped = {k: v for k, v in args.items() if k != key}
    assert play(single, t, [calls_reply(single, [(name, dropped)]), answer(single)])[0] == 0.0
    # An integer written 3.0 is 3; a number written as an integer equals it.
    t = first("procedural_single", lambda t: any(isinstance(v, int) and not isinstance(v, bool)
                                                 for v in t["calls"][0][1].values()))
    (name, args), = t["calls"]
    as_float = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in args.items()}
    assert play(single, t, [calls_reply(single, [(name, as_float)]), answer(single)])[0] == 1.0


# ---------------------------------------------------------------------------------------------- consumers


@pytest.mark.parametrize("kind", ["chatml", "qwen", "llama3"])
def test_the_collector_renders_each_tasks_own_tools_in_the_native_template(template_tokenizers, kind):
    tok = template_tokenizers[kind]
    tasks = [make_task(i, [s]) for i, s in zip((1, 3, 5, 7), SHAPES, strict=True)]
    env = ToolUseEnv(families=SHAPES)
    policy = ScriptedPolicy(tok, [])
    env.use_call_format(policy.fmt.call_format)
    policy.actions = {t["query"]: env.demo_actions(t) for t in tasks}
    trajs = collect("AgentRL/ToolUse-v0", policy, tasks, group_size=2, env_kwargs={"families": SHAPES},
                    config=CollectorConfig(max_total_tokens=8192))
    assert len(trajs) == 8
    for tr in trajs:
        assert tr.reward == 1.0 and tr.termination == "answered", (kind, tr.task["id"])
        prompt = tok.decode(tr.token_ids[: tr.prompt_len])
        own = names(tasks[tr.group_id])
        assert all(prompt.count(f'"{n}"') == 1 for n in own), (kind, own)  # by the template or the env, not both
        others = {n for t in tasks for n in names(t)} - set(own)
        assert not [n for n in others if f'"{n}"' in prompt] and '"multiply"' not in prompt


def test_agentrl_eval_shows_each_task_its_own_functions(tiny_dir, tokenizer, tmp_path, capsys):
    out = tmp_path / "proc.jsonl"
    assert cli.main(["eval", "--env", "AgentRL/ToolUse-v0", "--env-kwargs", '{"families": ["procedural_choose"]}',
                     "--model", str(tiny_dir), "--tasks", "2", "--max-new-tokens", "4", "--out", str(out),
                     "--dtype", "fp32", "--device", "cpu"]) == 0
    trajs = [Trajectory.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert [t.task["id"] for t in trajs] == [t["id"] for t in make_tasks(2, "test", families=["procedural_choose"])]
    for tr in trajs:
        prompt = tokenizer.decode(tr.token_ids[: tr.prompt_len])
        assert all(f'"{n}"' in prompt for n in names(tr.task)) and '"multiply"' not in prompt
        assert tr.reward <= 0.0  # four random tokens make no call
    capsys.readouterr()
