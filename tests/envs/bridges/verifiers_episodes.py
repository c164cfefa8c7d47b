"""Episodes played through verifiers 0.4.0's own API, run by tests/envs/bridges/test_verifiers.py with the python
of ``.venv-verifiers`` (verifiers pins mcp==2.0.0, so it cannot share the test suite's environment).

Reads ``{"cases": [...]}`` (JSON) on stdin and prints one JSON list of results on stdout's last line. A case:

* ``{"kind": "episode", "env_id", "env_kwargs", "task", "actions", "agent"?}``: ``load_environment`` with the
  one task, then ``env.run_episode`` inside ``env.serving()`` (what verifiers' eval runner does), the model
  being a real OpenAI-compatible HTTP server on 127.0.0.1 that replies ``actions`` in order;
* ``{"kind": "taskset", "env_id", "env_kwargs", "split", "num_tasks", "seed"}``: the task data of the taskset;
* ``{"kind": "native", "taskset_id", "task_id", "actions"}``: a verifiers env (tests/envs/bridges/vf_guess.py)
  played by verifiers itself, its seat pinned to our in-process chat harness (``agentrl-gym``), the model scripted;
* ``{"kind": "import", "taskset_id", "task_id", "guesses"}``: the same env played as our ``VerifiersTextEnv``,
  one scripted guess per ``step``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import verifiers.v1 as vf

from agentrl.envs.bridges.verifiers import PLUGIN_ID, VerifiersTextEnv, load_environment, plugin_module

HERE = os.path.dirname(os.path.abspath(__file__))


class ScriptedModel:
    """An OpenAI-compatible chat-completions server whose k-th reply of a conversation is ``script[k]``."""

    def __init__(self):
        self.script: list[str] = []
        self.requests: list[dict] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append({"path": self.path, "body": body})
                k = sum(m["role"] == "assistant" for m in body["messages"])
                text = model.script[k] if k < len(model.script) else "(the script has no more replies)"
                data = json.dumps({
                    "id": f"chatcmpl-{len(model.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body["model"], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        os.environ["SCRIPTED_MODEL_KEY"] = "unused"
        self.ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
            base_url=f"http://127.0.0.1:{self.server.server_address[1]}/v1", api_key_var="SCRIPTED_MODEL_KEY"))


async def episode(model: ScriptedModel, case: dict) -> dict:
    env = load_environment(case["env_id"], tasks=[case["task"]], agent=case.get("agent"), **case["env_kwargs"])
    [task] = list(env.taskset)
    model.script, model.requests = list(case["actions"]), []
    async with env.serving():
        ep = await env.run_episode(task, model.ctx)
    [trace] = ep.traces
    return {
        "ok": ep.ok, "errors": [e.message for e in [*ep.errors, *trace.errors]], "reward": trace.reward,
        "rewards": {k: None if r is None else r.value for k, r in trace.rewards.items()}, "metrics": trace.metrics,
        "info": trace.info["agentrl"], "stop_condition": trace.stop_condition, "num_turns": trace.num_turns,
        "task_data": trace.task.data if isinstance(trace.task.data, dict) else trace.task.data.model_dump(mode="json"),
        "env_id": ep.env.id, "requests": [r["body"]["messages"] for r in model.requests],
        "paths": [r["path"] for r in model.requests],
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
    model.script, model.requests = list(case["actions"]), []
    async with env.serving():
        ep = await env.run_episode(task, model.ctx)
    [trace] = ep.traces
    return {"ok": ep.ok, "reward": trace.reward, "metrics": trace.metrics,
            "requests": [r["body"]["messages"] for r in model.requests]}


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
        return {"steps": steps, "messages": info["messages"]}
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
