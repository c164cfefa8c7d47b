"""AgentRL/TauBench-v0 in solo mode never imports litellm (τ²'s llm_utils imports it for the user simulator and
the NL-assertion judge, which solo mode does not call): making the env, an episode and its grading run without it.
With a user simulator it is imported when the env is made, and a missing litellm is the one-line install error
there. Each check runs in a fresh interpreter (another test may have imported litellm into this one)."""

from __future__ import annotations

import json
import subprocess
import sys

SOLO = """
import json, sys, time
start = time.perf_counter()
import gymnasium as gym, agentrl.envs
gym.register_envs(agentrl.envs)
env = gym.make("AgentRL/TauBench-v0", domain="mock")
made = time.perf_counter() - start
env.reset(seed=0)
demo = env.unwrapped.demo(dict(env.unwrapped.task))
print(json.dumps({"litellm": "litellm" in sys.modules, "made_s": made, "reward": demo["reward"]}))
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_a_solo_episode_is_made_played_and_graded_without_importing_litellm():
    r = _run(SOLO)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["litellm"] is False and got["reward"] == 1.0, got


def test_the_stand_in_calls_the_real_function_on_first_use():
    code = ("import sys\nfrom agentrl.envs.tau_bench.loader import tau2_modules\ntau2_modules()\n"
            "from tau2.utils.llm_utils import get_cost\n"
            "assert 'litellm' not in sys.modules\n"
            "print(get_cost([]), 'litellm' in sys.modules, sys.modules['tau2.utils.llm_utils'].get_cost.__module__)\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["(0,", "0)", "True", "tau2.utils.llm_utils"], r.stdout  # τ²'s get_cost of nothing


def test_with_a_user_simulator_a_missing_litellm_is_the_install_line_at_make():
    code = ("import socket, sys; sys.modules['litellm'] = None\n"
            "import gymnasium, agentrl.envs\n"
            "gymnasium.register_envs(agentrl.envs)\n"
            "gymnasium.make('AgentRL/TauBench-v0', domain='mock')  # solo: fine without it\n"
            "server = socket.create_server(('127.0.0.1', 0))  # something listens at user_url (else: refused first)\n"
            "url = f'http://127.0.0.1:{server.getsockname()[1]}'\n"
            "try:\n    gymnasium.make('AgentRL/TauBench-v0', domain='mock', user_url=url)\n"
            "except ImportError as e:\n    print(e)\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr[-3000:]
    line = r.stdout.strip()
    assert line.startswith("AgentRL/TauBench-v0") and "litellm" in line and "pip install" in line, line
    assert "\n" not in line
