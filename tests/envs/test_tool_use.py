"""AgentRL/ToolUse-v0 and the TextEnv protocol it inherits."""

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import agentrl.envs
from agentrl.envs import AnyText
from agentrl.envs.datasets import DatasetError
from agentrl.envs.tool_use.env import FAMILIES, INVENTORY, ToolUseEnv, make_task, make_tasks, multiply
from agentrl.envs.tools import ToolSet

gym.register_envs(agentrl.envs)


def call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def play(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


def test_module_prefix_make_without_import():
    code = "import gymnasium as g; e = g.make('agentrl.envs:AgentRL/ToolUse-v0'); print(e.reset(seed=0)[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ToolUseEnv().reset(seed=0)[0]


def test_text_space_contains_any_string_and_samples_varied_text():
    space = AnyText(max_length=50)
    assert space.contains("Answer: 5\n<tool_call>{\"a\": 1}</tool_call>"[:50])
    assert space.contains("ünïcödé 中文")
    assert not space.contains("x" * 51) and not space.contains(5)
    space.seed(0)
    samples = [space.sample() for _ in range(50)]
    assert len(set(samples)) >= 45
    assert any(not s.isalnum() for s in samples if s)


def test_reset_info_contract():
    env = gym.make("AgentRL/ToolUse-v0")
    obs, info = env.reset(seed=3)
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["messages"][1]["content"] == obs
    assert {t["function"]["name"] for t in info["tools"]} == {"multiply", "add", "power", "stock", "convert_units",
                                                             "days_between"}
    assert info["task_id"]
    assert "<tool_call>" in info["messages"][0]["content"]


@pytest.mark.parametrize("index", range(40))
def test_oracle_solves_every_family(index):
    env = ToolUseEnv()
    task = make_task(index)
    demo = env.demo(task)
    assert demo["reward"] == 1.0 and demo["correct"]
    roles = [m["role"] for m in demo["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert roles.count("tool") == len(task["calls"])


def test_all_families_have_demos_that_work():
    env = ToolUseEnv()
    for fam in FAMILIES:
        for task in make_tasks(5, "test", families=[fam]):
            assert task["family"] == fam
            assert env.demo(task)["reward"] == 1.0, task


def test_episode_step_by_step():
    env = gym.make("AgentRL/ToolUse-v0")
    task = {"id": "x", "query": "What is 12 times 13?", "answer": "156"}
    obs, info = env.reset(options={"task": task})
    assert obs == task["query"] and info["task_id"] == "x"
    obs, r, term, trunc, info = env.step("Let me use the tool.\n" + call("multiply", a=12, b=13))
    assert (obs, r, term, trunc) == ("156", 0.0, False, False)
    assert info["obs_role"] == "tool" and info["parsed"]["kind"] == "tool_call"
    assert info["messages"][-1] == {"role": "tool", "name": "multiply", "tool_call_id": "call00100", "content": "156"}
    assert info["messages"][-2]["tool_calls"] == [
        {"id": "call00100", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 12, "b": 13}'}}]
    obs, r, term, trunc, info = env.step("Answer: 156")
    assert (r, term, trunc) == (1.0, True, False)
    assert info["correct"] and info["format_ok"] and info["answer"] == "156" and info["termination"] == "answered"
    assert info["metrics"]["tool_calls"] == 1 and info["metrics"]["turns"] == 2


def test_wrong_answer_and_invalid_format_rewards():
    env = ToolUseEnv()
    task = make_task(1)
    env.reset(options={"task": task})
    _, r, term, _, info = env.step("Answer: definitely not it")
    assert (r, term, info["correct"], info["format_ok"]) == (0.0, True, False, True)
    env.reset(options={"task": task})
    obs, r, term, _, info = env.step("I don't know")
    assert (r, term, info["format_ok"], info["termination"]) == (-0.1, True, False, "invalid")
    assert obs.startswith("Invalid reply:")


def test_bad_tool_calls_are_observations_and_counted():
    env = ToolUseEnv()
    env.reset(options={"task": make_task(2)})
    steps = play(env, [call("multiply", a=1), call("teleport"), call("power", base=2, exponent=50)])
    assert [s[0] for s in steps] == [
        "Error: multiply() missing argument 'b'",
        "Error: unknown tool 'teleport'. Available tools: multiply, add, power, stock, convert_units, days_between",
        "Error: power() raised ValueError: exponent must be between 0 and 12",
    ]
    assert all(not s[2] and not s[3] for s in steps)
    m = steps[-1][4]["metrics"]
    assert (m["tool_calls"], m["tool_errors"], m["invalid_calls"]) == (3, 3, 2)


def test_tool_call_budget_truncates():
    env = ToolUseEnv(max_tool_calls=2, max_turns=10)
    env.reset(options={"task": make_task(0)})
    steps = play(env, [call("stock", item_id="t1")] * 5)
    assert len(steps) == 3
    _, r, term, trunc, info = steps[-1]
    assert (r, term, trunc, info["termination"]) == (-0.1, False, True, "budget")
    assert info["metrics"]["tool_calls"] == 2


def test_turn_budget_truncates():
    env = ToolUseEnv(max_turns=2, max_tool_calls=10)
    env.reset(options={"task": make_task(0)})
    steps = play(env, [call("stock", item_id="t1")] * 5)
    assert len(steps) == 2
    assert steps[-1][3] and steps[-1][4]["termination"] == "budget"


def test_step_after_end_does_not_raise():
    env = ToolUseEnv()
    env.reset(seed=0)
    env.step("Answer: 1")
    obs, r, term, trunc, _ = env.step(call("stock", item_id="t1"))
    assert term and r == 0.0 and "reset" in obs


def test_observation_is_clipped_from_the_head():
    env = ToolUseEnv(tools=[long_output], dataset=[{"query": "q", "answer": "a"}], max_obs_chars=100)
    env.reset(seed=0)
    obs = env.step(call("long_output"))[0]
    assert len(obs) == 100 and obs.endswith("END") and obs.startswith("...[truncated]")


def long_output() -> str:
    """Prints a lot."""
    return "x" * 10_000 + "END"


def test_seeding_is_reproducible_and_per_env():
    a, b = ToolUseEnv(), ToolUseEnv()
    qa = [a.reset(seed=7)[0]] + [a.reset()[0] for _ in range(5)]
    qb = [b.reset(seed=7)[0]] + [b.reset()[0] for _ in range(5)]
    assert qa == qb
    assert len(set(qa)) > 1
    c = ToolUseEnv()
    assert c.reset(seed=8)[0] != qa[0] or c.reset()[0] != qa[1]


def test_generator_is_pure_and_splits_are_disjoint():
    assert make_task(123) == make_task(123)
    train = {t["id"] for t in make_tasks(200, "train")}
    test = {t["id"] for t in make_tasks(200, "test")}
    assert not train & test
    env = ToolUseEnv(split="test")
    for s in range(20):
        env.reset(seed=s)
        assert int(env.task["id"].rsplit("-", 1)[1]) % 2 == 1


def test_inventory_example():
    assert INVENTORY["t99"] == 100
    env = ToolUseEnv()
    env.reset(seed=0)
    assert env.step(call("stock", item_id="t99"))[0] == "100"


def test_user_tools_and_dataset(tmp_path):
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: what to shout.
        """
        return text.upper()

    rows = [{"query": "Shout 'hey'.", "answer": "HEY", "calls": [["shout", {"text": "hey"}]]}]
    env = gym.make("AgentRL/ToolUse-v0", tools=[shout], dataset=rows)
    obs, info = env.reset(seed=0)
    assert obs == "Shout 'hey'." and [t["function"]["name"] for t in info["tools"]] == ["shout"]
    assert env.unwrapped.demo(env.unwrapped.task)["reward"] == 1.0

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps({"query": "x", "answer": "y"}) + "\n")
    env = ToolUseEnv(tools=[shout], dataset=path)
    assert len(env.rows) == 2


def test_rows_may_name_the_question_question_as_every_other_env_does():
    env = ToolUseEnv(dataset=[{"question": "What is 2 + 3?", "answer": "5"}],
                     test_dataset=[{"question": "What is 1 + 1?", "answer": "2", "id": "h"}])
    obs, _ = env.reset(seed=0)
    assert obs == "What is 2 + 3?"
    [task] = env.test_tasks(1)
    assert task["id"] == "h" and task["query"] == "What is 1 + 1?"


def test_bad_dataset_rows_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"query": "q", "answer": "a"}\n{"query": "no answer"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: missing key\(s\) \['answer'\]"):
        ToolUseEnv(dataset=path)
    path.write_text('{"query": "q", "answer": "a"}\nnot json\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not valid JSON"):
        ToolUseEnv(dataset=path)
    with pytest.raises(DatasetError, match=r"dataset\[1\]: expected a JSON object"):
        ToolUseEnv(dataset=[{"query": "q", "answer": "a"}, "row"])


def test_configuration_errors_say_what_to_do():
    with pytest.raises(ValueError, match="pass dataset="):
        ToolUseEnv(tools=[long_output])
    with pytest.raises(ValueError, match="unknown task families"):
        ToolUseEnv(families=["juggling"])


def test_env_bug_ends_episode_instead_of_raising(caplog):
    env = ToolUseEnv()
    env.reset(options={"task": {"id": "x", "query": "q"}})  # no "answer": score() will raise KeyError
    obs, r, term, trunc, info = env.step("Answer: 3")
    assert term and info["termination"] == "error" and info["metrics"]["env_errors"] == 1
    assert "KeyError" in caplog.text


def test_render_modes():
    env = ToolUseEnv(render_mode="ansi")
    env.reset(seed=0)
    env.step("Answer: 1")
    text = env.render()
    assert "[system]" in text and "[assistant]\nAnswer: 1" in text
    with pytest.raises(ValueError, match="render_mode"):
        ToolUseEnv(render_mode="rgb_array")




@pytest.mark.parametrize("kwargs", [{}, {"families": ["multiply", "stock_value"]}, {"families": []},
                                    {"split": "test"}])
def test_test_tasks_are_what_the_pipeline_used_to_take(kwargs):
    """make_tasks(n, split="test"), with families only when given (the old rule of algos' test_tasks)."""
    old = make_tasks(6, split="test", **({"families": kwargs["families"]} if kwargs.get("families") else {}))
    assert gym.make("AgentRL/ToolUse-v0", **kwargs).unwrapped.test_tasks(6, seed=10_007) == old


def test_your_own_dataset_is_evaluated_on_your_test_rows_never_on_the_mock_tasks(tmp_path):
    rows = [{"query": "q", "answer": "1"}]
    with pytest.raises(ValueError, match="pass test_dataset="):
        gym.make("AgentRL/ToolUse-v0", dataset=rows).unwrapped.test_tasks(6)
    test = tmp_path / "test.jsonl"
    test.write_text('{"query": "a?", "answer": "2"}\n{"id": "b", "query": "b?", "answer": "3"}\n')
    env = gym.make("AgentRL/ToolUse-v0", dataset=rows, test_dataset=str(test)).unwrapped
    assert env.test_tasks(6) == [{"id": "0", "query": "a?", "answer": "2"}, {"id": "b", "query": "b?", "answer": "3"}]
    assert env.test_tasks(1) == [{"id": "0", "query": "a?", "answer": "2"}]


def test_tools_by_import_path_are_the_same_tools_as_the_functions():
    """What a JSON config or the command line can carry: "module:function" refs, and a ref to a list of tools."""
    from agentrl.envs.tool_use.env import MOCK_TOOLS

    rows = [{"query": "6 times 7?", "answer": "42", "calls": [["multiply", {"a": 6, "b": 7}]]}]
    by_ref = gym.make("AgentRL/ToolUse-v0", tools=["agentrl.envs.tool_use.env:multiply"], dataset=rows).unwrapped
    by_fn = gym.make("AgentRL/ToolUse-v0", tools=[multiply], dataset=rows).unwrapped
    assert by_ref.tools.schemas() == by_fn.tools.schemas()
    by_ref.reset(options={"task": rows[0]})
    *_, reward = [by_ref.step(a)[1] for a in by_ref.demo_actions(rows[0])]
    assert reward == 1.0
    every = gym.make("AgentRL/ToolUse-v0", tools="agentrl.envs.tool_use.env:MOCK_TOOLS", dataset=rows).unwrapped
    assert every.tools.names == ToolSet(MOCK_TOOLS).names
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        gym.make("AgentRL/ToolUse-v0", tools=["agentrl.envs.tool_use.env:nope"], dataset=rows)
    with pytest.raises(ValueError, match="is not a tool"):
        gym.make("AgentRL/ToolUse-v0", tools=["agentrl.envs.tool_use.env:INVENTORY"], dataset=rows)


def test_parallel_calls_each_run_in_order_and_count_against_the_budgets():
    env = ToolUseEnv(max_tool_calls=3)
    env.reset(options={"task": {"id": "x", "query": "12*13 and 2+2?", "answer": "156"}})
    obs, r, term, trunc, info = env.step(call("multiply", a=12, b=13) + "\n" + call("add", a=2, b=2))
    assert (r, term, trunc) == (0.0, False, False)
    assert obs == "Result 1 (multiply):\n156\n\nResult 2 (add):\n4"
    tools = info["messages"][-2:]
    assert [(m["role"], m["name"], m["content"]) for m in tools] == [("tool", "multiply", "156"), ("tool", "add", "4")]
    calls = info["messages"][-3]["tool_calls"]
    assert [c["id"] for c in calls] == [m["tool_call_id"] for m in tools] and len({c["id"] for c in calls}) == 2
    assert info["metrics"]["tool_calls"] == 2 and info["metrics"]["turns"] == 1
    # two more calls in one reply: the first uses the last of the budget, the second ends the episode
    obs, r, term, trunc, info = env.step(call("add", a=1, b=1) + call("add", a=3, b=3))
    assert trunc and info["termination"] == "budget" and "budget of 3" in obs
    assert info["metrics"]["tool_calls"] == 3 and info["messages"][-1]["content"] == "2"


@pytest.mark.parametrize("fmt", ["llama3_json", "mistral"])
def test_use_call_format_switches_the_native_format_and_the_demo_follows(fmt):
    env = ToolUseEnv()
    assert env.use_call_format(fmt)
    task = make_task(3)
    demo = env.demo(task)
    assert demo["correct"] and demo["tools_in_prompt"] is True
    first = next(m for m in demo["messages"] if m["role"] == "assistant")
    assert "<tool_call>" not in first["content"] and first["tool_calls"]
    env.reset(options={"task": task})
    _, _, _, _, info = env.step("<tool_call>\n" + '{"name": "add", "arguments": {"a": 1, "b": 2}}' + "\n</tool_call>")
    assert info["parsed"]["kind"] != "tool_call"  # Hermes markup is not this format


def test_use_call_format_leaves_env_chosen_formats_alone():
    from agentrl.envs.parsing import ActionParser, TagCalls

    env = ToolUseEnv(parser=ActionParser(TagCalls("calc", "add", "a")))
    assert env.use_call_format("mistral") is False and isinstance(env.parser.calls, TagCalls)
    with pytest.raises(ValueError, match="call format must be one of"):
        env.use_call_format("xml")


def _stock_total():
    return next(t for t in make_tasks(40, split="train", items=999) if t["family"] == "stock_total")


def test_call_credit_rewards_each_reference_call_once_and_leaves_the_answer_reward_alone():
    task = _stock_total()
    (n1, a1), (n2, a2), (n3, a3) = task["calls"]
    env = ToolUseEnv(items=999, call_credit=0.1)
    env.reset(options={"task": task})
    steps = play(env, [call(n1, **a1), call(n1, **a1),                           # the same lookup twice: once
                       call("stock", item_id="t1"),                              # not a reference call: nothing
                       call(n2, **{k: str(v) for k, v in a2.items()}),          # arguments compared as values
                       f"Answer: {task['answer']}"])
    rewards = [s[1] for s in steps]
    assert rewards[:4] == [pytest.approx(0.1), 0.0, 0.0, pytest.approx(0.1)]
    assert rewards[4] == 1.0 and steps[-1][4]["correct"]  # the outcome reward is the plain one
    assert steps[-1][4]["metrics"]["credited_calls"] == 2
    # a wrong answer after a right chain keeps the credit earned, not more
    env.reset(options={"task": task})
    steps = play(env, [call(n1, **a1), call(n2, **a2), call(n3, **a3), "Answer: 0"])
    assert sum(s[1] for s in steps) == pytest.approx(0.3) and not steps[-1][4]["correct"]


def test_continued_call_credit_is_paid_only_when_the_episode_goes_on_from_the_call():
    task = _stock_total()
    (n1, a1), (n2, a2), (n3, a3) = task["calls"]
    env = ToolUseEnv(items=999, call_credit=0.1, call_credit_rule="continued")
    env.reset(options={"task": task})
    steps = play(env, [call(n1, **a1), call("stock", item_id="t1"), call(n2, **a2), call(n3, **a3),
                       f"Answer: {task['answer']}"])
    # each credit arrives with the next reference call (a detour in between does not cost it); the last with
    # the correct answer
    assert [s[1] for s in steps] == [0.0, 0.0, pytest.approx(0.1), pytest.approx(0.1), pytest.approx(1.1)]
    assert steps[-1][4]["correct"] and steps[-1][4]["metrics"]["credited_calls"] == 3
    # stopping after one correct call (the "each" rule's exploit) earns nothing; two calls then a wrong answer: 0.1
    env.reset(options={"task": task})
    assert sum(s[1] for s in play(env, [call(n1, **a1), f"Answer: {a1}"])) == 0.0
    env.reset(options={"task": task})
    assert sum(s[1] for s in play(env, [call(n1, **a1), call(n2, **a2), "Answer: 0"])) == pytest.approx(0.1)
    env = ToolUseEnv(items=999, call_credit=0.1, call_credit_rule="continued", max_turns=2)
    env.reset(options={"task": task})
    steps = play(env, [call(n1, **a1), call(n2, **a2)])  # the budget ends the chain: the held credit is lost
    assert steps[-1][4]["termination"] == "budget" and sum(s[1] for s in steps) == pytest.approx(0.1 - 0.1)
    with pytest.raises(ValueError, match="call_credit_rule must be one of"):
        ToolUseEnv(call_credit_rule="sometimes")


def test_without_call_credit_tool_calls_earn_nothing_and_budget_ends_keep_their_credit():
    task = _stock_total()
    (n1, a1), _, _ = task["calls"]
    env = ToolUseEnv(items=999)
    env.reset(options={"task": task})
    assert play(env, [call(n1, **a1)])[0][1] == 0.0 and "credited_calls" not in env.metrics.extra
    env = ToolUseEnv(items=999, call_credit=0.5, max_turns=1)
    env.reset(options={"task": task})
    [(_, r, _, trunc, info)] = play(env, [call(n1, **a1)])
    assert trunc and info["termination"] == "budget" and r == pytest.approx(-0.1 + 0.5)
    with pytest.raises(ValueError, match="call_credit must be >= 0"):
        ToolUseEnv(call_credit=-1)
