"""The OpenEnv bridge against the real ``openenv-core`` and real servers on 127.0.0.1 (docs/bridges/openenv.md).

Export: our envs served with OpenEnv's ``create_app``, played with its ``GenericEnvClient``, give what ``gym.make``
gives. Import: ``AgentRL/OpenEnv-v0`` plays envs we did not write (an ``MCPEnvironment``; the env ``openenv init``
generates) and our exported env. Training: a GRPO step of ours and one of TRL's ``GRPOTrainer``, over OpenEnv.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest
import requests
import uvicorn
from fastmcp import FastMCP
from gymnasium.envs.registration import load_env_creator
from helpers import free_port, make_template_tokenizer, save_model_dir, tiny_train_model
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State
from openenv.core.generic_client import GenericEnvClient

import agentrl.envs
from agentrl.envs import ENVS
from agentrl.envs.bridges.openenv import TextAction, TextEnvironment, make_app, wait_until_serving
from agentrl.envs.bridges.openenv_client import OpenEnvTextEnv
from agentrl.envs.code_tool import CodeToolEnv
from agentrl.envs.core import Budgets
from agentrl.envs.parsing import ActionParser
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks

gym.register_envs(agentrl.envs)

OURS = [pytest.param(i, marks=pytest.mark.needs_bwrap) if issubclass(load_env_creator(e), CodeToolEnv) else i
        for i, (e, _) in ENVS.items() if i != "AgentRL/OpenEnv-v0"]
SPEED = {"AgentRL/PythonMath-v0": {"code_timeout_s": 5}, "AgentRL/Coding-v0": {"code_timeout_s": 5}}


@contextlib.contextmanager
def serving(app):
    """``app`` under uvicorn in a thread on a free 127.0.0.1 port; yields its URL, stops it after."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the OpenEnv server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextlib.contextmanager
def server_process(cmd: list[str], port: int, log, cwd=None):
    """``cmd`` (a server on ``port``) as a process logging to ``log``, once its ``/health`` answers; stopped after."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            wait_until_serving(f"http://127.0.0.1:{port}", proc)
        except RuntimeError as e:
            pytest.fail(f"{cmd[2:5]} did not come up ({e}): {open(log).read()[-2000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def servers():
    """``env_id -> URL`` of our envs served with :func:`make_app`, started on first use."""
    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}

        def url(env_id: str) -> str:
            if env_id not in urls:
                urls[env_id] = stack.enter_context(serving(make_app(env_id, SPEED.get(env_id))))
            return urls[env_id]

        yield url


def comparable(value):
    """``value`` without timings (``*_s`` keys at any depth) and TauBench-v0's ``user_seed`` (drawn per unseeded
    episode, as ``tau2 run`` draws one per trial): all that differs between two runs of an episode."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if not k.endswith("_s") and k != "user_seed"}
    return value


# ============================================================================================ export


#: A reply the env reads as invalid, where plain text is not (BFCL-v0 grades any text reply as "no call").
INVALID_REPLY = {"AgentRL/BFCL-v0": "<tool_call>\n{no json\n</tool_call>"}


@pytest.mark.parametrize("env_id", OURS)
def test_a_scripted_episode_through_openenvs_client_matches_gym_make(servers, env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=3)
    task = env.task
    actions = env.demo_actions(task)
    local = gym.make(env_id, **SPEED.get(env_id, {}))
    _, info0 = local.reset(options={"task": task})
    steps = [local.step(a) for a in actions]
    with GenericEnvClient(base_url=servers(env_id)).sync() as client:
        first = client.reset(task=task).observation
        assert first["text"] == info0["messages"][-1]["content"] and first["task_id"] == info0["task_id"]
        assert first["tools"] == info0["tools"] == env.episode_tools.schemas()  # the tool schemas survive the trip
        assert first["messages"] == info0["messages"]
        for action, (obs, reward, terminated, truncated, info) in zip(actions, steps, strict=True):
            result = client.step({"text": action})
            o = result.observation
            assert (o["text"], result.reward, result.done, o["truncated"]) == (obs, reward, terminated or truncated,
                                                                                truncated)
            assert comparable(o["metrics"]) == comparable(info["metrics"])
            assert (o["parsed"], o["obs_role"], o["messages"]) == (info["parsed"], info["obs_role"], info["messages"])
        assert result.done and o["correct"] is True and info["correct"] is True
        assert o["termination"] == info["termination"] == "answered" and result.reward == steps[-1][1]

    # the same episode through AgentRL/OpenEnv-v0: the whole info (the env's own keys too) as gym.make gives it
    remote = gym.make("AgentRL/OpenEnv-v0", url=servers(env_id))
    assert remote.reset(options={"task": task})[1] == info0
    for action, want in zip(actions, steps, strict=True):
        got = remote.step(action)
        assert got[:4] == want[:4] and comparable(got[4]) == comparable(want[4])
    remote.close()

    with GenericEnvClient(base_url=servers(env_id)).sync() as client:
        # an invalid reply, a non-text one, and a step after the end: observations, never server errors
        bad = INVALID_REPLY.get(env_id, "no idea")
        local.reset(seed=11)
        expected = local.step(bad)
        client.reset(seed=11)
        result = client.step({"text": bad})
        assert (result.observation["text"], result.reward, result.done) == expected[:3]
        assert result.observation["termination"] == expected[4]["termination"] == "invalid"
        after = client.step({"text": {"not": "text"}})
        assert after.done and after.observation["text"] == local.step('{"not": "text"}')[0]
        client.reset(seed=11)
        odd = client.step({"text": 12345})
        local.reset(seed=11)
        want = local.step("12345")  # the text the server makes of it (invalid, or BFCL-v0's "no call" answer)
        assert odd.done and odd.observation["termination"] == want[4]["termination"] and odd.reward == want[1]


def test_the_exported_env_is_openenvs_and_serves_concurrent_sessions(servers):
    url = servers("AgentRL/ToolUse-v0")
    schema = requests.get(f"{url}/schema", timeout=10).json()
    assert schema["action"]["title"] == "TextAction" and "text" in schema["action"]["properties"]
    assert requests.get(f"{url}/health", timeout=10).json()["status"] == "healthy"
    assert requests.get(f"{url}/metadata", timeout=10).json()["name"] == "AgentRL/ToolUse-v0"
    # OpenEnv's stateless HTTP /step (a fresh env per request, no reset): an observation, not a 500
    reply = requests.post(f"{url}/step", json={"action": {"text": "Answer: 3"}}, timeout=10)
    assert reply.status_code == 200 and reply.json()["done"] is True
    # two sessions at once keep their own episodes
    a, b = GenericEnvClient(base_url=url).sync(), GenericEnvClient(base_url=url).sync()
    with a, b:
        ta, tb = a.reset(seed=1).observation, b.reset(seed=2).observation
        assert ta["task_id"] != tb["task_id"]
        assert a.step({"text": "Answer: x"}).done and not b.state().get("step_count")
        assert b.reset(seed=1).observation["task_id"] == ta["task_id"]
    with pytest.raises(RuntimeError, match="unknown arguments"), GenericEnvClient(base_url=url).sync() as c:
        c.reset(taks={})  # a typo in reset: a clear error
    before_reset = TextEnvironment("AgentRL/ToolUse-v0").step(TextAction(text="hi"))
    assert before_reset.done and "reset()" in before_reset.text
    gym.register("Test/RaisesInStep-v0", entry_point=RaisesInStep, disable_env_checker=True)
    try:  # an env outside the never-raise contract: its exception is still an observation
        env = TextEnvironment("Test/RaisesInStep-v0")
        env.reset(seed=0)
        broken = env.step(TextAction(text="hi"))
        assert (broken.done, broken.reward, broken.termination) == (True, 0.0, "error")
    finally:
        gym.registry.pop("Test/RaisesInStep-v0")


class RaisesInStep(ToolUseEnv):
    def step(self, action):
        raise RuntimeError("a bug in an env")


# ============================================================================================ import


def test_round_trip_our_env_exported_then_imported_matches_gym_make(servers):
    url = servers("AgentRL/ToolUse-v0")
    remote = gym.make("AgentRL/OpenEnv-v0", url=url)
    assert isinstance(remote.unwrapped, OpenEnvTextEnv) and remote.unwrapped.mode == "agentrl"
    local = gym.make("AgentRL/ToolUse-v0")
    for seed in (0, 5):
        assert remote.reset(seed=seed) == local.reset(seed=seed)  # obs and info: messages, tools, task_id
        actions = local.unwrapped.demo_actions(local.unwrapped.task)
        for a in actions:
            got, want = remote.step(a), local.step(a)
            assert got[:4] == want[:4] and comparable(got[4]) == comparable(want[4])
        assert got[1] == 1.0 and got[4]["correct"] is True
    remote.reset(seed=9), local.reset(seed=9)
    got, want = remote.step("no idea"), local.step("no idea")
    assert got[:4] == want[:4] and got[4]["termination"] == "invalid"
    assert remote.step("again")[0] == local.step("again")[0]  # after the end: the env's own answer
    # a drawn task pins the same remote task for every episode of a group; options forward to the remote env
    env = remote.unwrapped
    task = env.sample_task(env.np_random)
    assert env.reset(seed=1, options={"task": task}) == env.reset(seed=2, options={"task": task})
    env.tools_in_prompt = False
    env.use_call_format("llama3_json")
    local = gym.make("AgentRL/ToolUse-v0", tools_in_prompt=False, parser=ActionParser("llama3_json"))
    assert env.reset(seed=4) == local.reset(seed=4)
    remote.close()


def test_declared_capabilities_travel_through_the_openenv_server_and_client(servers, tokenizer):
    # issue 60 (N3): BFCL grades a reply cut by the token budget; exported and imported again through OpenEnv the
    # client must say so, or the collector ends the same episodes truncated at reward 0
    from agentrl.algos.models import tiny_model
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.envs.capabilities import capabilities

    env_id = "AgentRL/BFCL-v0"
    url = servers(env_id)
    remote, local = gym.make("AgentRL/OpenEnv-v0", url=url), gym.make(env_id)
    try:
        remote.reset(options={"task": {"id": "simple_python_133"}})
        assert capabilities(remote)["grades_cut_replies"] is True
        assert capabilities(remote)["grades_cut_replies"] == capabilities(local)["grades_cut_replies"]
    finally:
        remote.close()
        local.close()
    policy = HFPolicy(tiny_model(tokenizer, hidden_size=32), tokenizer)
    tasks = [{"id": "simple_python_133"}, {"id": "simple_python_202"}]
    cfg = CollectorConfig(max_new_tokens=4, temperature=0.0)  # every reply is cut
    here = collect(env_id, policy, tasks, 1, cfg)
    there = collect("AgentRL/OpenEnv-v0", policy, tasks, 1, cfg, env_kwargs={"url": url})
    assert all(t.turns[-1].finish_reason != "stop" for t in here)
    assert [(t.termination, t.reward) for t in there] == [(t.termination, t.reward) for t in here]
    assert all(t.termination != "truncated" for t in there)


def test_openenv_v0_refuses_clearly_without_a_url_or_a_server():
    with pytest.raises(ValueError, match="url=.*agentrl-env serve"):
        gym.make("AgentRL/OpenEnv-v0")
    with pytest.raises(ConnectionError, match="no OpenEnv server answers at http://127.0.0.1"):
        gym.make("AgentRL/OpenEnv-v0", url=f"http://127.0.0.1:{free_port()}", connect_timeout_s=2)


def test_a_server_that_goes_away_ends_the_episode_and_the_next_reset_says_so():
    with serving(make_app("AgentRL/ToolUse-v0")) as url:
        env = gym.make("AgentRL/OpenEnv-v0", url=url, timeout_s=10)
        env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Answer: 1")  # the server is gone: an observation
    assert (reward, terminated, truncated, info["termination"]) == (0.0, True, False, "error")
    assert obs.startswith(f"The OpenEnv server at {url} did not answer") and info["metrics"]["openenv_errors"] == 1
    with pytest.raises(ConnectionError, match=url):
        env.reset(seed=0)
    env.close()


def test_the_bridge_imports_no_torch():
    code = ("import sys, agentrl.envs.bridges.openenv, agentrl.envs.bridges.openenv_client\n"
            "print(sorted(m for m in ('torch', 'agentrl.algos') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_agentrl_env_serve_openenv_serves_an_env(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "agentrl.envs.cli", "serve", "AgentRL/ToolUse-v0", "--openenv", "--port", str(port),
           "--env-kwargs", json.dumps({"families": ["multiply"]})]
    with server_process(cmd, port, tmp_path / "serve.log") as url, GenericEnvClient(base_url=url).sync() as client:
        assert client.reset(seed=0).observation["task_id"].startswith("multiply")  # --env-kwargs reached the env
    bad = subprocess.run([sys.executable, "-m", "agentrl.envs.cli", "serve", "AgentRL/ToolUse-v0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--openenv" in bad.stderr


class QuestionObservation(Observation):
    question: str = ""


class MultiplyEnv(MCPEnvironment):
    """An env written against OpenEnv's MCP API (not ours): a product to find, tools to multiply and to submit;
    ``submit`` ends the episode with reward 1 when right (OpenEnv's pattern: the env scores in its own step)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("multiply")

        @mcp.tool()
        def multiply(a: int, b: int) -> int:
            """Multiply two integers."""
            return a * b

        @mcp.tool()
        def submit(answer: str) -> str:
            """Submit the final answer."""
            return "submitted"

        super().__init__(mcp)
        self.numbers = (0, 0)
        self._state = State()

    def reset(self, seed=None, episode_id=None, digits=2, **kwargs):
        rng = random.Random(seed)
        low, high = 10 ** (digits - 1) + 1, 10**digits - 1
        self.numbers = (rng.randint(low, high), rng.randint(low, high))
        self._state = State(episode_id=episode_id, step_count=0)
        return QuestionObservation(question="What is {} times {}?".format(*self.numbers))

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return QuestionObservation(question="Call a tool.")

    async def step_async(self, action, timeout_s=None, **kwargs):
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            right = str(action.arguments.get("answer", "")).strip() == str(self.numbers[0] * self.numbers[1])
            return QuestionObservation(done=True, reward=1.0 if right else 0.0)
        return obs

    @property
    def state(self):
        return self._state


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_an_mcp_environment_we_did_not_write_plays_as_a_text_env():
    with serving(create_app(MultiplyEnv, CallToolAction, CallToolObservation, max_concurrent_envs=4)) as url:
        env = gym.make("AgentRL/OpenEnv-v0", url=url, answer_tool="submit").unwrapped
        assert env.mode == "mcp"
        obs, info = env.reset(seed=7)
        rng = random.Random(7)
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        assert obs == f"What is {a} times {b}?" and info["messages"][-1] == {"role": "user", "content": obs}
        names = [t["function"]["name"] for t in info["tools"]]
        assert names == ["multiply", "submit"] and info["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
        assert '"multiply"' in info["messages"][0]["content"]  # the tools are described in the system prompt
        # a tool call runs on the server; bad arguments and unknown tools are observations, the episode goes on
        obs, reward, term, trunc, info = env.step(hermes("multiply", {"a": a, "b": b}))
        assert (obs, reward, term, trunc, info["obs_role"]) == (str(a * b), 0.0, False, False, "tool")
        obs, *_, info = env.step(hermes("multiply", {"a": "x", "b": 2}))
        assert obs.startswith("Error: multiply()") and info["metrics"]["invalid_calls"] == 1
        obs, *_, info = env.step(hermes("divide", {"a": 1}))
        assert obs.startswith("Error: unknown tool 'divide'") and info["metrics"]["invalid_calls"] == 2
        # the final answer goes to the answer tool; the server's reward comes back
        obs, reward, term, trunc, info = env.step(f"Answer: {a * b}")
        assert (reward, term, trunc, info["correct"], info["termination"]) == (1.0, True, False, True, "answered")
        env.reset(seed=7)
        assert env.step("Answer: 1")[1:3] == (0.0, True) and env.step("more")[2] is True
        # calling submit as a tool: the server ends the episode; an unreadable reply gets the format penalty
        env.reset(seed=7)
        _, reward, term, _, info = env.step(hermes("submit", {"answer": str(a * b)}))
        assert (reward, term, info["correct"], info["termination"]) == (1.0, True, True, "answered")
        env.reset(seed=7)
        _, reward, term, _, info = env.step("I am not sure")
        assert (reward, term, info["termination"]) == (env.rewards.invalid, True, "invalid")
        for junk in ["", "<tool_call>", hermes("submit", {}), '{"name": 3}', "\x00" * 9,
                     hermes("multiply", {"a": 1e999})]:
            env.reset(seed=1)
            assert math.isfinite(env.step(junk)[1])
        # a task's reset_kwargs reach the server's reset
        obs, info = env.reset(options={"task": {"id": "big", "seed": 7, "reset_kwargs": {"digits": 3}}})
        assert info["task_id"] == "big" and all(int(n) > 100 for n in obs[8:-1].split(" times "))
        env.close()


@pytest.fixture(scope="module")
def template_server(tmp_path_factory):
    """The env ``openenv init`` generates from OpenEnv's own template (an echo env), run as its own server process
    (``uvicorn server.app:app``); its ``max_concurrent_envs`` raised from 1 as the template's comment says to."""
    root = tmp_path_factory.mktemp("openenv_template")
    subprocess.run([sys.executable, "-m", "openenv.cli", "init", "echo_env", "--output-dir", str(root)],
                   check=True, capture_output=True, text=True, timeout=300)
    env_dir = root / "echo_env"
    app_py = env_dir / "server" / "app.py"
    source = app_py.read_text()
    assert "max_concurrent_envs=1," in source
    app_py.write_text(source.replace("max_concurrent_envs=1,", "max_concurrent_envs=16,"))
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning"]
    with server_process(cmd, port, root / "server.log", cwd=env_dir) as url:
        yield url


def test_openenvs_template_env_plays_as_a_text_env(template_server):
    env = gym.make("AgentRL/OpenEnv-v0", url=template_server, budgets=Budgets(max_turns=2)).unwrapped
    assert (env.mode, env.action_field) == ("text", "message")
    obs, info = env.reset(seed=0)
    assert obs == "Echo Env environment ready!" and info["tools"] == []
    obs, reward, term, trunc, info = env.step("hello")
    assert (obs, reward, term, trunc) == ("hello", pytest.approx(0.5), False, False)
    assert info["messages"][-2:] == [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hello"}]
    obs, reward, term, trunc, info = env.step("")  # any reply, even an empty one, is the env's action
    assert (reward, term, trunc, info["termination"]) == (0.0, False, True, "budget")
    env.close()


# ============================================================================================ training


def test_one_grpo_step_of_our_trainer_on_an_imported_openenv_env(template_server, tokenizer, tmp_path):
    """The documented command, ``agentrl train --env AgentRL/OpenEnv-v0 --env-kwargs '{"url": ...}'``, with a tiny
    random model: its episodes are played over WebSocket with the template echo env (0.1 reward per character)."""
    from agentrl.algos import cli

    model_dir = save_model_dir(tmp_path / "tiny", tiny_train_model(tokenizer), tokenizer)
    run = tmp_path / "run"
    assert cli.main(["train", "--algo", "grpo", "--env", "AgentRL/OpenEnv-v0", "--env-kwargs",
                     json.dumps({"url": template_server}), "--model", str(model_dir), "--out", str(run), "steps=1",
                     "tasks_per_step=2", "group_size=4", "collector.max_new_tokens=8", "collector.max_turns=1",
                     "lr=0.01", "progress=false", "report_to=none", "dtype=fp32"]) == 0
    [m] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert m["step"] == 1 and m["train/optimizer_steps"] == 1 and m["train/loss_tokens"] > 0
    assert all(math.isfinite(m[k]) for k in ("train/loss", "train/grad_norm", "reward/mean"))
    # replies went to the server (the env never ends an episode: the collector's one-turn budget did) and its
    # reward came back: 0.1 per character, so the mean is above the no-answer penalty (-0.1) that alone remains
    # when no reply reaches the env
    assert m["rollout/budget_rate"] > 0 and m["reward/mean"] > -0.1
    assert (run / "adapter" / "adapter_config.json").is_file()


def test_one_step_of_trls_grpo_trainer_on_our_env_through_openenv(servers, tokenizer, tmp_path):
    """TRL's documented OpenEnv path: ``environment_factory`` objects that hold an OpenEnv client; their tools are
    the tool schemas our server sends; TRL's own tool loop calls them; the reward is the server's."""
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.algos.integrations.trl_env import tasks_dataset, tool_method
    from agentrl.algos.models import tiny_model

    url = servers("AgentRL/ToolUse-v0")
    tasks = make_tasks(2, "train", families=["multiply"])
    with GenericEnvClient(base_url=url).sync() as probe:
        schemas = probe.reset(task=tasks[0]).observation["tools"]

    class RemoteToolUse:
        """One rollout's env for TRL: an OpenEnv session with our server."""

        def __init__(self):
            self.client = GenericEnvClient(base_url=url).sync()
            self.client.connect()
            made.append(self)
            self.reward, self.done = 0.0, True

        def reset(self, **row) -> str:
            self.reward, self.done = 0.0, False
            return self.client.reset(task=json.loads(row["task"]), tools_in_prompt=False).observation["text"]

        def _call(self, name, arguments) -> str:
            observation = self._step(hermes(name, arguments))
            calls.append((name, observation))
            return observation

        def _step(self, text: str) -> str:
            result = self.client.step({"text": text})
            if result.done and not self.done:
                self.done, self.reward = True, float(result.reward)
            return result.observation["text"]

    for schema in schemas:
        setattr(RemoteToolUse, schema["function"]["name"], tool_method(schema))

    def server_reward(completions, environments, **kwargs):
        for completion, env in zip(completions, environments, strict=True):
            last = completion[-1]
            if not env.done:  # the final reply (no tool call) is the answer
                env._step(last["content"] if last["role"] == "assistant" and not last.get("tool_calls") else "")
        return [env.reward for env in environments]

    answers = {t["query"]: t for t in tasks}
    calls: list[tuple[str, str]] = []
    made: list = []
    turns = {"first": 0}

    class Scripted(GRPOTrainer):
        """Each task's solution instead of sampling: its tool call, then the answer, right or (every other one)
        wrong."""

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            out = []
            for ids in prompt_ids:
                text = self.processing_class.decode(ids, skip_special_tokens=False)
                task = answers[next(q for q in answers if q in text)]
                (name, args), = task["calls"]
                if text.count("<|im_start|>assistant") == 1:
                    reply = ("Right: " if turns["first"] % 2 == 0 else "Wrong: ") + hermes(name, args)
                    turns["first"] += 1
                else:
                    reply = f"Answer: {task['answer'] if 'Right: ' in text else -1}"
                out.append(self.processing_class(reply, add_special_tokens=False)["input_ids"]
                           + [self.processing_class.eos_token_id])
            return out, None

    qwen = make_template_tokenizer(tokenizer, "qwen2_5")
    model = tiny_model(qwen)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=128, max_steps=1, logging_steps=1,
                      save_strategy="no", learning_rate=1e-2, seed=0, dataloader_num_workers=0)
    trainer = Scripted(model=model, processing_class=qwen, reward_funcs=[server_reward],
                       train_dataset=tasks_dataset(tasks), environment_factory=RemoteToolUse, args=args)
    try:
        trainer.train()
    finally:
        for env in made:
            env.client.close()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and logs[0]["rewards/server_reward/mean"] == pytest.approx(0.5)  # right 1.0, wrong 0.0, per group
    assert math.isfinite(logs[0]["loss"])
    # TRL's tool loop called each rollout's tool once; the server's env ran it (the task's answer came back)
    assert sorted(calls) == sorted((t["calls"][0][0], str(t["answer"])) for t in tasks for _ in range(2))
    assert sum((p.detach() - before[n]).abs().sum().item() for n, p in model.named_parameters()) > 0
