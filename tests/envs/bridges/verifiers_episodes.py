"""Episodes played through verifiers 0.4.0's own API, run by tests/envs/bridges/test_verifiers.py with the python
of ``.venv-verifiers`` (verifiers pins mcp==2.0.0, so it cannot share the test suite's environment).

Reads ``{"cases": [...]}`` (JSON) on stdin and prints one JSON list of results on stdout's last line. A case:

* ``{"kind": "episode", "env_id", "env_kwargs", "task", "actions", "agent"?, "finish_reasons"?}``:
  ``load_environment`` with the one task, then ``env.run_episode`` inside ``env.serving()`` (what verifiers' eval
  runner does), the model being a real OpenAI-compatible HTTP server on 127.0.0.1 that replies ``actions`` in
  order, each with its ``finish_reasons`` entry (default ``"stop"``; ``"length"``: cut by the token budget);
* ``{"kind": "taskset", "env_id", "env_kwargs", "split", "num_tasks", "seed"}``: the task data of the taskset;
* ``{"kind": "native", "taskset_id", "task_id", "actions", "finish_reasons"?}``: a verifiers env
  (tests/envs/bridges/vf_guess.py) played by verifiers itself, its seat pinned to our in-process chat harness
  (``agentrl-gym``), the model scripted;
* ``{"kind": "import", "taskset_id", "task_id", "guesses"}``: the same env played as our ``VerifiersTextEnv``,
  one scripted guess per ``step``, and the capabilities it declares.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import verifiers.v1 as vf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/
from chat_server import ScriptedChatServer  # noqa: E402

from agentrl.envs.bridges.verifiers import PLUGIN_ID, VerifiersTextEnv, load_environment, plugin_module
from agentrl.envs.capabilities import capabilities

HERE = os.path.dirname(os.path.abspath(__file__))


class ScriptedModel(ScriptedChatServer):
    """The scripted chat server (tests/chat_server.py) and the verifiers model context that points at it."""

    def __init__(self):
        super().__init__()
        os.environ["SCRIPTED_MODEL_KEY"] = "unused"
        self.ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
            base_url=f"{self.url}/v1", api_key_var="SCRIPTED_MODEL_KEY"))


async def episode(model: ScriptedModel, case: dict) -> dict:
    env = load_environment(case["env_id"], tasks=[case["task"]], agent=case.get("agent"), **case["env_kwargs"])
    [task] = list(env.taskset)
    model.replies, model.requests, model.paths = list(case["actions"]), [], []
    model.finish_reasons = list(case.get("finish_reasons", []))
    async with env.serving():
        ep = await env.run_episode(task, model.ctx)
    [trace] = ep.traces
    return {
        "ok": ep.ok, "errors": [e.message for e in [*ep.errors, *trace.errors]], "reward": trace.reward,
        "rewards": {k: None if r is None else r.value for k, r in trace.rewards.items()}, "metrics": trace.metrics,
        "info": trace.info["agentrl"], "stop_condition": trace.stop_condition, "num_turns": trace.num_turns,
        "task_data": trace.task.data if isinstance(trace.task.data, dict) else trace.task.data.model_dump(mode="json"),
        "env_id": ep.env.id, "requests": [body["messages"] for body in model.requests],
        "paths": list(model.paths),
    }


def taskset(case: dict) -> list[dict]:
    env = load_environment(case["env_id"], split=case["split"], num_tasks=case["num_tasks"], seed=case["seed"],
                           **case["env_kwargs"])
    return [t.data.model_dump(mode="json") for t in env.taskset]


async def native(model: ScriptedModel, case: dict) -> dict:
    plugin_module()  # registers the harness id
    env = vf.load_environment(vf.resolve_env_config({
        "taskset": {"id": case["taskset_id"]},
        "agent": {"harness": {"id": PLUGIN_ID}, "runtime": {"type": "subprocess"}}}))
    [task] = [t for t in env.taskset if t.data.id == case["task_id"]]
    model.replies, model.requests, model.paths = list(case["actions"]), [], []
    model.finish_reasons = list(case.get("finish_reasons", []))
    async with env.serving():
        ep = await env.run_episode(task, model.ctx)
    [trace] = ep.traces
    return {"ok": ep.ok, "reward": trace.reward, "metrics": trace.metrics, "is_truncated": trace.is_truncated,
            "finish_reasons": [c.finish_reason for c in trace.calls],
            "requests": [body["messages"] for body in model.requests]}


def play_imported(case: dict) -> dict:
    env = VerifiersTextEnv({"taskset": {"id": case["taskset_id"]}}, max_turns=case.get("max_turns", 16))
    try:
        obs, info = env.reset(seed=0, options={"task": {"id": case["task_id"]}} if "task_id" in case else None)
        steps = [{"obs": obs, "task_id": info["task_id"], "messages": info["messages"], "tools": info["tools"]}]
        for guess in case["guesses"]:
            obs, reward, terminated, truncated, info = env.step(guess)
            steps.append({"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated,
                          **{k: info.get(k) for k in ("correct", "termination", "metrics", "obs_role")}})
            if terminated or truncated:
                break
        steps.append({"after_end": env.step("one more")[:4]})
        return {"steps": steps, "messages": info["messages"], "capabilities": capabilities(env)}
    finally:
        env.close()


async def main() -> None:
    sys.path.insert(0, HERE)  # vf_guess.py: a verifiers taskset plugin, found by its id as verifiers requires
    cases = json.loads(sys.stdin.read())["cases"]
    model = ScriptedModel()
    results = []
    for case in cases:
        if case["kind"] == "episode":
            results.append(await episode(model, case))
        elif case["kind"] == "taskset":
            results.append(taskset(case))
        elif case["kind"] == "native":
            results.append(await native(model, case))
        else:
            results.append(await asyncio.to_thread(play_imported, case))
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    asyncio.run(main())
