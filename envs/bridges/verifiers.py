"""Our environments as verifiers environments, and verifiers environments as ours (verifiers 0.4.0, whose API
is ``verifiers.v1``): ``load_environment("AgentRL/ToolUse-v0", split="test", num_tasks=8)`` is a ``vf.Env`` to
drive with ``env.serving()`` and ``env.run_episode(task, ctx)``; docs/bridges/verifiers.md has a whole script.

verifiers 0.4.0 pins ``mcp==2.0.0`` and our ``[mcp]`` extra needs ``mcp>=2.3``, so verifiers lives in a virtual
environment of its own (:data:`VERIFIERS_INSTALL`); this module imports it only inside functions.

A verifiers 0.4.0 environment is a *taskset* (the rows), an ``Env`` (how a task becomes an episode) and a
*harness* (the program that plays a seat by calling the model). Ours maps onto them so:

* **Dataset**: our env's tasks: your ``tasks`` rows, else ``num_tasks`` test tasks (``split="test"``) or
  training draws (``split="train"``, task ``k`` drawn with ``default_rng([seed, k])``). A task's data holds our
  row (``task``), its opening messages (``system_prompt``, ``prompt``) and the tool schemas (``tools``).
* **Turns are played by our env**, as verifiers' own game envs do: ``AgentRLEnv.run`` opens an
  ``agent.interaction(task)``, passes each model reply to our ``step`` (in a worker thread) and sends the
  observation back as the next user turn until our episode ends. Tool calls are read from the reply text in
  the env's call format (the system prompt states it and lists the tools); tool results return as user turns.
* **Harness**: ``AgentRLChatHarness``: one chat completion per segment, in-process, through the rollout's
  interception endpoint (the trace records every call); verifiers' own install a chat program with ``uv``.
* **Capabilities** (:data:`~agentrl.envs.capabilities.CAPABILITIES`): in each task's data, and honoured as our
  collector does: a cut reply (``finish_reason == "length"``) is stepped only if the env ``grades_cut_replies``
  (BFCL), else the episode ends ``truncated`` with the no-answer reward (``termination == "truncated"``).
* **Rubric**: the task's ``@vf.reward`` ``reward`` is our episode's reward, the sum of its steps' rewards (as
  our trainer sums them: partial credit of a tool call counts); ``@vf.metric`` ``agentrl_metrics`` records
  ``info["metrics"]`` plus ``correct``, ``format_ok``, ``truncated`` (0/1), unweighted. If verifiers ends the
  exchange first (its ``max_turns``, a model error), the reward is the steps' rewards so far plus the env's
  no-answer reward (``trace.info["agentrl"]["termination"] == "stopped"``).

verifiers imports a module named after the taskset id: :func:`plugin_module` builds ours (``agentrl_gym``, id
:data:`PLUGIN_ID`) here, so ``vf eval`` (a new process) cannot load it. :class:`VerifiersTextEnv`: the other way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import sys
import threading
import time
import types
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from agentrl.envs import make_text_env
from agentrl.envs.capabilities import capabilities
from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.tools import ToolSet

__all__ = ["PLUGIN_ID", "VERIFIERS_INSTALL", "VerifiersTextEnv", "load_environment", "plugin_module"]

logger = logging.getLogger(__name__)

#: The install line of verifiers' own virtual environment (the README's test command runs it).
VERIFIERS_INSTALL = "python -m venv .venv-verifiers && .venv-verifiers/bin/pip install -e . 'verifiers==0.4.0'"
#: The taskset id our verifiers environments carry (``trace.task`` / ``episode.env.id``).
PLUGIN_ID = "agentrl-gym"
_PLUGIN_MODULE = PLUGIN_ID.replace("-", "_")


def _verifiers():
    """``verifiers.v1``, or an ImportError that says how to install it."""
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise ImportError("the verifiers bridge needs verifiers 0.4.0, which pins mcp==2.0.0 (the [mcp] extra "
                          f"needs mcp>=2.3), so install it in a virtual environment of its own: {VERIFIERS_INSTALL}"
                          ) from e
    return vf


def _select_tasks(env: TextEnv, *, split: str, num_tasks: int, seed: int,
                 tasks: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The dataset of a taskset: ``tasks`` when given, else ``num_tasks`` test tasks or training draws."""
    if tasks is not None:
        rows = [dict(t) for t in tasks]
        for i, row in enumerate(rows):
            row.setdefault("id", str(i))
        return rows
    if split == "test":
        return env.test_tasks(num_tasks, seed=seed)
    if split == "train":
        return [env.sample_task(np.random.default_rng([seed, k])) for k in range(num_tasks)]
    raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def _outcome(env: TextEnv, step: tuple | None, stop_condition: str | None, total: float,
             ending: str = "stopped") -> dict[str, Any]:
    """What the rubric reads (``trace.info["agentrl"]``): the episode's reward (``total``, the sum of its steps'
    rewards, so partial credit of earlier steps counts), our last step's counters and ending; or, when verifiers
    stopped the exchange (``ending="stopped"``) or cut a reply our env does not grade (``"truncated"``) before our
    episode ended, ``total`` plus the no-answer reward."""
    if step is not None and (step[2] or step[3]):
        _, _, _, truncated, info = step
        return {"reward": float(total), "correct": bool(info.get("correct")), "format_ok": bool(info.get("format_ok")),
                "truncated": bool(truncated), "termination": info.get("termination"), "answer": info.get("answer"),
                "metrics": dict(info.get("metrics") or {})}
    return {"reward": float(total + env.rewards.invalid), "correct": False, "format_ok": False, "truncated": True,
            "termination": ending, "stop_condition": stop_condition, "answer": None,
            "metrics": env.metrics.as_dict()}


def _reply_text(segment) -> str:
    """The model's last reply of a segment, as sent (verifiers' ``last_reply`` strips it)."""
    from verifiers.v1.types import AssistantMessage, content_text

    for message in reversed(segment.messages):
        if isinstance(message, AssistantMessage):
            return content_text(message.content)
    return segment.last_reply


@functools.cache
def plugin_module() -> types.ModuleType:
    """The verifiers plugin module ``agentrl_gym`` (taskset, env, harness), built once and registered in
    ``sys.modules`` so verifiers' loader finds it by :data:`PLUGIN_ID`.

    Raises:
        ImportError: verifiers is not installed (the message gives :data:`VERIFIERS_INSTALL`).
    """
    vf = _verifiers()
    from openai import APIConnectionError, APIError, AsyncOpenAI
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE

    class AgentRLTasksetConfig(vf.TasksetConfig):
        """Which of our envs, and which of its tasks."""

        env_id: str = "AgentRL/ToolUse-v0"
        """The registered gymnasium id of the env that plays the turns."""
        env_kwargs: dict[str, Any] = {}
        """Its ``gymnasium.make`` keyword arguments."""
        split: Literal["train", "test"] = "train"
        """``test``: the env's test tasks (:meth:`~agentrl.envs.core.TextEnv.test_tasks`); ``train``: seeded
        draws from its training tasks."""
        num_tasks: int = 100
        """How many tasks (ignored with ``tasks``)."""
        seed: int = 0
        """Seeds the draws (and the test-task selection where an env uses one)."""
        tasks: list[dict[str, Any]] | None = None
        """Your task rows, instead of the env's own (each gets ``id`` = its position if it has none)."""

    class AgentRLData(vf.TaskData):
        """One task: our row, the env that scores it, the tool schemas the system prompt lists, its capabilities."""

        env_id: str
        task: dict[str, Any]
        tools: list[dict[str, Any]] = []
        capabilities: dict[str, bool] = {}

    class AgentRLTask(vf.Task[AgentRLData, vf.State, vf.TaskConfig]):
        """Scoring is our env's: the reward and counters its episode ended with (``trace.info["agentrl"]``)."""

        @vf.reward
        async def reward(self, trace) -> float:
            return float(trace.info["agentrl"]["reward"])

        @vf.metric
        async def agentrl_metrics(self, trace) -> dict[str, float]:
            done = trace.info["agentrl"]
            metrics = {k: float(v) for k, v in done["metrics"].items() if isinstance(v, (int, float))}
            metrics.update({k: float(bool(done[k])) for k in ("correct", "format_ok", "truncated")})
            return metrics

    class AgentRLTaskset(vf.Taskset[AgentRLTask, AgentRLTasksetConfig]):
        """Our env's tasks, each with the opening messages and tool schemas the env gives it."""

        def load(self):
            c = self.config
            env = make_text_env(c.env_id, c.env_kwargs)
            try:
                rows = _select_tasks(env, split=c.split, num_tasks=c.num_tasks, seed=c.seed, tasks=c.tasks)
                for row in rows:
                    _, info = env.reset(options={"task": row})
                    system, user = info["messages"][0]["content"], info["messages"][1]["content"]
                    yield AgentRLTask(AgentRLData(id=info["task_id"], prompt=user, system_prompt=system,
                                                  env_id=c.env_id, task=row, tools=info["tools"],
                                                  capabilities=capabilities(env)), c.task)
            finally:
                env.close()

    class AgentRLChatHarnessConfig(vf.HarnessConfig):
        """No knobs: one chat completion per segment."""

    class AgentRLChatHarness(vf.Harness[AgentRLChatHarnessConfig]):
        """One model reply per segment, requested in-process from the rollout's interception endpoint."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_RESUME = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
            system, prompt = self.resolve_prompt(data)
            messages = [{"role": "system", "content": system}] if system else []
            if isinstance(prompt, str):
                messages.append({"role": "user", "content": prompt})
            else:
                messages += [message_to_wire(m) for m in prompt or []]
            client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
            try:
                await client.chat.completions.create(model=ctx.model, messages=messages)
            except APIConnectionError as e:  # verifiers reads this exit code as an interception failure
                return vf.ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", str(e))
            except APIError as e:  # a refused turn (a limit, a @stop) or a provider error: the trace says which
                return vf.ProgramResult(1, "", str(e))
            finally:
                await client.close()
            return vf.ProgramResult(0, "", "")

    class AgentRLEnvConfig(vf.EnvConfig):
        """One seat, ``agent``, whose program runs on this machine (a subprocess runtime, no container)."""

        agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())

    class AgentRLEnv(vf.Env[AgentRLEnvConfig]):
        """Our env plays the user: each reply one ``step`` (see Capabilities above), each observation a user turn."""

        async def run(self, task, agents) -> None:
            c = self.taskset.config
            env = await asyncio.to_thread(make_text_env, task.data.env_id, c.env_kwargs)
            grades_cut = capabilities(env)["grades_cut_replies"]
            try:
                await asyncio.to_thread(env.reset, options={"task": dict(task.data.task)})
                async with agents.agent.interaction(task) as interaction:
                    step, total, ending = None, 0.0, "stopped"
                    try:
                        segment = await interaction.turn()
                        while not segment.terminated:
                            call = next((c for c in reversed(interaction.trace.calls) if c.error is None), None)
                            if not grades_cut and call is not None and call.finish_reason == "length":
                                ending = "truncated"  # a cut reply our env does not grade, as our collector does
                                break
                            step = await asyncio.to_thread(env.step, _reply_text(segment))
                            total += float(step[1])
                            if step[2] or step[3]:
                                break
                            segment = await interaction.turn(step[0])
                    finally:
                        interaction.trace.info["agentrl"] = _outcome(env, step, interaction.trace.stop_condition,
                                                                     total, ending)
            finally:
                await asyncio.to_thread(env.close)

    classes = [AgentRLTasksetConfig, AgentRLData, AgentRLTask, AgentRLTaskset, AgentRLChatHarnessConfig,
               AgentRLChatHarness, AgentRLEnvConfig, AgentRLEnv]
    module = types.ModuleType(_PLUGIN_MODULE, f"The verifiers plugin {PLUGIN_ID!r}, built by {__name__}.")
    for cls in classes:
        cls.__module__, cls.__qualname__ = _PLUGIN_MODULE, cls.__name__
        setattr(module, cls.__name__, cls)
    module.__all__ = ["AgentRLTaskset", "AgentRLChatHarness", "AgentRLEnv"]  # one of each kind, as verifiers asks
    existing = sys.modules.setdefault(_PLUGIN_MODULE, module)
    if existing is not module:
        raise ImportError(f"a module named {_PLUGIN_MODULE!r} is already imported ({existing!r}); the verifiers "
                          "bridge needs that name for its plugin")
    return module


def load_environment(env_id: str = "AgentRL/ToolUse-v0", *, split: Literal["train", "test"] = "train",
                     num_tasks: int = 100, seed: int = 0, tasks: Sequence[dict[str, Any]] | None = None,
                     agent: dict[str, Any] | None = None, **env_kwargs: Any):
    """A verifiers environment (``verifiers.v1.Env``) whose tasks are ``env_id``'s and whose turns it plays.

    Args:
        env_id: a registered id (``AgentRL/*``, or yours from :func:`~agentrl.envs.register_env`).
        split, num_tasks, seed, tasks: the dataset (:class:`AgentRLTasksetConfig`): your ``tasks`` rows, else
            ``num_tasks`` test tasks or seeded training draws.
        agent: fields of the ``agent`` seat's ``vf.AgentConfig`` (e.g. ``{"max_turns": 8}``, ``{"model": ...}``).
        **env_kwargs: ``gymnasium.make`` keyword arguments of the env.

    Raises:
        ImportError: verifiers is not installed (the message gives :data:`VERIFIERS_INSTALL`).
    """
    vf = _verifiers()
    gym.spec(env_id)  # an unknown id fails now, with gymnasium's message
    plugin = plugin_module()
    taskset = plugin.AgentRLTasksetConfig(id=PLUGIN_ID, env_id=env_id, env_kwargs=env_kwargs, split=split,
                                          num_tasks=num_tasks, seed=seed,
                                          tasks=None if tasks is None else [dict(t) for t in tasks])
    # a partial seat merges onto the declared default (a subprocess runtime), validated as verifiers does
    return vf.load_environment(plugin.AgentRLEnvConfig.model_validate({"taskset": taskset, "agent": agent or {}}))


# ============================================================================================ verifiers -> ours


class VerifiersTextEnv(TextEnv):
    """A verifiers 0.4.0 environment played as one of our text envs: ``reset`` starts one of its episodes,
    ``step(reply)`` is the model's reply, the observation is what the verifiers env says next, and the episode
    ends with the reward its rubric gives (``info["correct"]``: that reward reached ``correct_at``).

    The policy is this env's caller: the verifiers episode runs on a private event loop in a background thread
    and calls "the model" at an OpenAI-compatible endpoint this env serves on 127.0.0.1, whose reply is the
    next ``step``'s action. Each seat without a harness of its own gets :class:`AgentRLChatHarness` (one
    completion per segment) on a subprocess runtime, so the episode runs offline; a verifiers env whose tools
    are MCP tool sets needs a harness that runs them (installed with ``uv``), which this bridge does not bring.

    Args:
        env_config: the verifiers ``EnvConfig`` as a dict, e.g. ``{"taskset": {"id": "my-taskset"}}`` (its
            taskset id names an importable module, as verifiers requires).
        num_tasks: how many of the taskset's tasks to play (needed for an infinite taskset).
        max_turns: replies per episode; the budget ends an unfinished episode (``truncated``, reward 0).
        correct_at: the reward at or above which an episode counts as correct.
        turn_timeout_s: how long to wait for the verifiers env's next turn before ending the episode as an error.
    """

    grades_cut_replies = True
    """verifiers hands a reply cut by the token budget (``finish_reason == "length"``) to its env like any other
    (``trace.is_truncated`` only reports it): a trainer steps a cut reply here, and the verifiers rubric grades it."""

    def __init__(self, env_config: dict[str, Any] | None = None, *, num_tasks: int | None = None,
                 max_turns: int = 16, correct_at: float = 1.0, turn_timeout_s: float = 300.0,
                 render_mode: str | None = None):
        super().__init__(tools=ToolSet([]), parser=ActionParser(), budgets=Budgets(max_turns=max_turns),
                         rewards=Rewards(correct=1.0, wrong=0.0, invalid=0.0), tools_in_prompt=False,
                         render_mode=render_mode)
        vf = _verifiers()
        self.correct_at, self.turn_timeout_s = correct_at, turn_timeout_s
        self._vf_env = vf.load_environment(_seated(vf, env_config or {}))
        tasks = self._vf_env.taskset if num_tasks is None else self._vf_env.taskset.take(num_tasks)
        if not tasks.bounded:
            raise ValueError("the verifiers taskset is infinite: pass num_tasks=")
        self._tasks = list(tasks)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentrl-verifiers", daemon=True)
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        self._episode: asyncio.Future | None = None
        self._pending: tuple[dict, asyncio.Future] | None = None
        self._request: dict[str, Any] = {}
        self._ctx = self._call(self._open(vf))

    # ------------------------------------------------------------------ the background loop
    def _call(self, coro, timeout_s: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _open(self, vf):
        from aiohttp import web

        self._requests: asyncio.Queue = asyncio.Queue()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completion)
        runner = web.AppRunner(app)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        await self._stack.enter_async_context(self._vf_env.serving())
        return vf.ModelContext(model="agentrl-policy", client=vf.EvalClientConfig(
            base_url=f"http://127.0.0.1:{port}/v1", api_key_var="AGENTRL_VERIFIERS_UNUSED_KEY"))

    async def _completion(self, request):
        """A model call of the verifiers episode: hand it to the caller, answer with the next ``step``'s reply."""
        from aiohttp import web

        body = await request.json()
        reply = asyncio.get_running_loop().create_future()
        await self._requests.put((body, reply))
        text = await reply
        return web.json_response({
            "id": f"agentrl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", ""), "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

    async def _next(self, reply: str | None = None):
        """Send ``reply`` to the waiting model call (if any); return the next model call or the finished
        episode: ``("request", body)`` or ``("end", episode)``."""
        if reply is not None and self._pending is not None:
            self._pending[1].set_result(reply)
            self._pending = None
        getter = asyncio.ensure_future(self._requests.get())
        done, _ = await asyncio.wait({getter, self._episode}, timeout=self.turn_timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            self._pending = getter.result()
            return "request", self._pending[0]
        getter.cancel()
        if self._episode in done:
            return "end", self._episode.result()
        raise TimeoutError(f"the verifiers env did not answer within {self.turn_timeout_s}s")

    async def _start(self, task):
        await self._stop_episode()
        self._requests = asyncio.Queue()
        self._episode = asyncio.ensure_future(self._vf_env.run_episode(task, self._ctx))
        return await self._next()

    async def _stop_episode(self):
        if self._pending is not None:
            self._pending[1].cancel()
            self._pending = None
        if self._episode is not None and not self._episode.done():
            self._episode.cancel()
            await asyncio.gather(self._episode, return_exceptions=True)
        self._episode = None

    # ------------------------------------------------------------------ TextEnv hooks
    def _task_id(self, k: int) -> str:
        data = self._tasks[k].data
        return str(data.id if data.id is not None else data.idx)

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        k = int(rng.integers(len(self._tasks)))
        return {"id": self._task_id(k), "index": k}

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """The taskset's first ``n`` tasks (verifiers tasksets carry their own splits; ``seed`` is unused)."""
        return [{"id": self._task_id(k), "index": k} for k in range(min(n, len(self._tasks)))]

    def on_reset(self, task: dict[str, Any]) -> None:
        ids = [self._task_id(k) for k in range(len(self._tasks))]
        k = task["index"] if "index" in task else ids.index(str(task["id"])) if str(task.get("id")) in ids else None
        if k is None:
            raise KeyError(f"no task {task.get('id')!r} in the verifiers taskset (ids: {ids[:5]}...)")
        kind, value = self._call(self._start(self._tasks[k]), self.turn_timeout_s + 5)
        if kind == "end":
            raise RuntimeError(f"the verifiers episode ended before its first model call: "
                               f"{[e.message for t in value.traces for e in t.errors] or value.errors}")
        self._request = value

    def system_prompt(self, task: dict[str, Any]) -> str:
        return "\n\n".join(str(m["content"]) for m in self._request["messages"] if m["role"] == "system")

    def user_prompt(self, task: dict[str, Any]) -> str:
        return _since_last_reply(self._request["messages"])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self.messages = [dict(m) for m in self._request["messages"]]  # exactly what the model is asked
        info["messages"] = list(self.messages)
        return obs, info

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        raise NotImplementedError("a verifiers env scores its own episodes")

    def _step(self, action: str):
        action = action if isinstance(action, str) else "" if action is None else str(action)
        self.metrics.turns += 1
        self.messages.append({"role": "assistant", "content": action})
        parsed = ParsedAction(kind="answer", answer=action)
        kind, value = self._call(self._next(action), self.turn_timeout_s + 5)
        if kind == "end":
            traces, reward = value.traces, float(value.traces[0].reward) if value.traces else 0.0
            for trace in traces:
                self.metrics.extra.update({f"vf_{k}": float(v) for k, v in trace.metrics.items() if v is not None})
            if errors := [e.message for e in value.errors] + [e.message for t in traces for e in t.errors]:
                logger.warning("the verifiers episode ended with errors: %s", errors)
            return self._finish("", parsed, reward=reward, correct=reward >= self.correct_at, answer=action,
                                termination="answered" if value.ok else "error")
        obs = _since_last_reply(value["messages"])
        self.messages += [dict(m) for m in value["messages"][_last_reply(value["messages"]) + 1:]]
        if self.metrics.turns >= self.budgets.max_turns:
            self._call(self._stop_episode())
            return self._finish(obs, parsed, reward=self.rewards.invalid, termination="budget", truncated=True)
        return obs, 0.0, False, False, self._info(parsed, "user")

    def close(self) -> None:
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                self._call(self._stop_episode(), 30)
                self._call(self._stack.aclose(), 30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        super().close()


def _last_reply(messages: list[dict[str, Any]]) -> int:
    """Position of the last assistant message (-1 if none)."""
    return max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)


def _since_last_reply(messages: list[dict[str, Any]]) -> str:
    """The text of the non-system messages after the model's last reply: what the env said since."""
    return "\n\n".join(str(m.get("content") or "") for m in messages[_last_reply(messages) + 1:]
                        if m.get("role") != "system")


def _seated(vf, env_config: dict[str, Any]):
    """``env_config`` resolved, each seat without a harness given :class:`AgentRLChatHarness` on a local
    subprocess runtime (unless it names its own runtime)."""
    plugin = plugin_module()
    config = vf.resolve_env_config(env_config)
    from verifiers.v1.configs.agent import agent_config_fields

    update = {}
    for name, seat in agent_config_fields(config).items():
        if seat.harness is None:
            fields = {"harness": plugin.AgentRLChatHarnessConfig(id=PLUGIN_ID)}
            if "runtime" not in seat.model_fields_set:
                fields["runtime"] = vf.SubprocessConfig()
            update[name] = seat.model_copy(update=fields)
    return config.model_copy(update=update)
