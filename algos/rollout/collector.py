"""The episode collector: token-exact, batched, multi-turn rollouts of any text env with any policy backend.

::

    import agentrl.envs
    from agentrl.algos.rollout.collector import collect
    from agentrl.algos.models import load_model
    from agentrl.algos import HFPolicy
    from agentrl.envs.tool_use.env import make_tasks

    model, tokenizer = load_model()                       # SmolLM2-135M-Instruct, bf16 where supported
    trajectories = collect("AgentRL/ToolUse-v0", HFPolicy(model, tokenizer), make_tasks(8, "train"), group_size=4)

Every trajectory's request goes into one open generation of the policy (:meth:`Policy.session`: the backend
batches them; a group's shared prompt is prefilled once; a trajectory's KV cache survives its turns). A reply
that finishes is handed to its env in a thread pool while the others decode; once the env answers, the glue tokens
(end of turn, observation turn, next assistant header; see :mod:`agentrl.algos.rollout.chat`) are appended and
the trajectory's next request joins the running batch as soon as the backend admits newcomers
(``CollectorConfig.continuous``; with a backend that cannot, or ``continuous=False``, all of a round's replies
are sampled before any env steps). The sampled token ids go into the trajectory as they are; nothing is
re-tokenised.

Termination (``Trajectory.termination``): the env's own (``answered``, ``invalid``, ``budget``, ``error``), or the
collector's — ``truncated`` when a reply hits ``max_new_tokens`` without an end-of-turn token or the trajectory
reaches ``max_total_tokens`` (the reply is not sent to the env, unless the env's ``grades_cut_replies`` says it
grades cut replies, as BFCL does: then the env steps with it as with any reply), ``budget`` after ``max_turns``
replies, and ``error`` when ``env.step`` raises. Collector-ended episodes get the env's no-answer reward
(``env.unwrapped.rewards.invalid`` when it has one, else 0) with ``correct = format_ok = 0``.

Several envs in one call: pass ``env`` as a mapping ``name -> env id or factory`` (and ``env_kwargs`` as
``name -> kwargs``); each task names its env in ``task["env"]`` (:data:`TASK_ENV_KEY`). A group's episodes all
run in its task's env; the episodes of every env step together in the same rounds.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl.algos.policy.base import GenerationRequest, Policy, SamplingParams
from agentrl.algos.rollout.chat import ChatFormat, Conversation, prompt_tools
from agentrl.algos.rollout.env_factory import make_chat_env, resolve_call_format
from agentrl.algos.rollout.trajectory import Trajectory, Turn
from agentrl.envs.capabilities import capabilities

logger = logging.getLogger(__name__)

#: The task field naming the env of a task when ``collect`` gets a mapping of envs (a mixture).
TASK_ENV_KEY = "env"


@dataclass
class CollectorConfig:
    """Budgets and sampling of a rollout."""

    max_turns: int = 6
    """Assistant replies per trajectory; after the last the episode ends with ``budget`` (the env may end sooner)."""
    max_new_tokens: int = 256
    """Tokens per reply; a reply that reaches it without an end-of-turn token ends the episode ``truncated``."""
    max_total_tokens: int = 2048
    """Tokens per trajectory (prompt, replies, observations); reaching it ends the episode ``truncated``."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1 = off)."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    seed: int = 0
    """Seeds sampling and env resets; each trajectory's draws depend only on (seed, task index, sample, turn)."""
    env_threads: int = 8
    """Threads that run env resets and steps concurrently (bounds concurrent tool calls)."""
    reuse_cache: bool = True
    """Let the backend keep each trajectory's KV cache across turns (False: every turn re-encodes its prompt)."""
    continuous: bool = True
    """A trajectory's next turn joins the backend's running batch as soon as the backend would admit it
    (``Session.join_ready``: :class:`~agentrl.algos.policy.HFPolicy`; :class:`~agentrl.algos.policy.OpenAIPolicy`
    posts it at once) instead of waiting for every trajectory of the round to finish its reply. False, or a backend
    without a session of its own: rounds."""
    call_format: str = "auto"
    """Tool-call format of envs made from an id: "auto" (the one the chat template teaches), "env" (the env's own),
    or a format name (hermes, llama3_json, mistral). Env-chosen tag or fenced-code formats are never changed."""

    def sampling(self, stop_token_ids) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              stop_token_ids=tuple(stop_token_ids))


def _seed(*parts: int) -> int:
    """A 31-bit seed from ``parts`` (31 bits so every backend, e.g. a vLLM server, takes it as is)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] >> 1)


@dataclass
class _Episode:
    index: int
    group_id: int
    sample: int
    task: dict[str, Any]
    env: Any
    conv: Conversation | None = None
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_len: int = 0
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    termination: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    tool_latency: float = 0.0
    env_ended: bool = False
    """The env ended the episode (its final info holds ``correct`` and ``format_ok``)."""

    @property
    def done(self) -> bool:
        return self.termination is not None


class Collector:
    """Runs rollouts for one policy; keeps env instances and the thread pool across calls.

    Args:
        policy: the backend that samples replies (its ``tokenizer`` renders the chat template).
        config: budgets and sampling.
    """

    def __init__(self, policy: Policy, config: CollectorConfig | None = None):
        import agentrl.envs  # noqa: F401  (registers the env ids)

        self.policy = policy
        self.config = config or CollectorConfig()
        if policy.tokenizer is None:
            raise ValueError(f"{type(policy).__name__} has no tokenizer; the collector renders prompts with it")
        self.chat = ChatFormat(policy.tokenizer)
        self.call_format = resolve_call_format(self.config.call_format, self.chat)
        self._pool = ThreadPoolExecutor(self.config.env_threads, thread_name_prefix="env")
        self._envs: dict[Any, list[Any]] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for envs in self._envs.values():
            for e in envs:
                try:
                    e.close()
                except Exception:  # closing is best effort
                    logger.debug("env close failed", exc_info=True)
        self._envs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ envs
    def _make_env(self, env: str | Callable[[], Any], env_kwargs: dict[str, Any]):
        if not isinstance(env, str):
            return env()
        return make_chat_env(env, env_kwargs, template_tools=self.chat.supports_tools, call_format=self.call_format)

    def _get_envs(self, env, env_kwargs: dict[str, Any], n: int, tag: str | None = None) -> list[Any]:
        key = (env, repr(sorted(env_kwargs.items()))) if isinstance(env, str) else (id(env), None)
        pool = self._envs.setdefault((tag, *key), [])
        while len(pool) < n:
            pool.append(self._make_env(env, env_kwargs))
        return pool[:n]

    def _episode_envs(self, env, env_kwargs, tasks: list[dict[str, Any]], group_size: int) -> list[Any]:
        """One env instance per episode (task-major); with a mapping of envs, each group's from its task's env."""
        if not isinstance(env, Mapping):
            return self._get_envs(env, env_kwargs or {}, len(tasks) * group_size)
        kwargs = env_kwargs or {}
        names = []
        for i, task in enumerate(tasks):
            name = task.get(TASK_ENV_KEY)
            if name not in env:
                raise ValueError(f"tasks[{i}] names env {name!r} in its {TASK_ENV_KEY!r} field; the envs given are "
                                 f"{sorted(env)}")
            names.append(name)
        pools = {name: iter(self._get_envs(env[name], dict(kwargs.get(name) or {}), count * group_size, tag=name))
                 for name, count in Counter(names).items()}
        return [next(pools[name]) for name in names for _ in range(group_size)]

    def _template_tools(self, env, info: dict[str, Any]):
        """Tool schemas for the chat template, or None when the env's own prompt describes them."""
        if not self.chat.supports_tools:
            if info.get("tools") and getattr(getattr(env, "unwrapped", env), "tools_in_prompt", True) is False:
                logger.warning("the env was made with tools_in_prompt=False but chat template %s has no tools "
                               "section: the model is not told which tools exist", self.chat.name)
        in_prompt = bool(getattr(getattr(env, "unwrapped", env), "tools_in_prompt", False))
        return prompt_tools(self.chat.supports_tools, info.get("tools"), in_prompt)

    def _no_answer_reward(self, env) -> float:
        rewards = getattr(getattr(env, "unwrapped", env), "rewards", None)
        return float(getattr(rewards, "invalid", 0.0))

    # ------------------------------------------------------------------ the loop
    def collect(self, env: str | Callable[[], Any] | Mapping[str, str | Callable[[], Any]],
                tasks: list[dict[str, Any]], group_size: int, *,
                env_kwargs: dict[str, Any] | Mapping[str, dict[str, Any]] | None = None,
                progress: bool = False) -> list[Trajectory]:
        """Roll out ``group_size`` trajectories per task; see :func:`collect`."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        cfg = self.config
        n = len(tasks) * group_size
        if n == 0:
            return []
        envs = self._episode_envs(env, env_kwargs, tasks, group_size)
        episodes = [_Episode(i, i // group_size, i % group_size, tasks[i // group_size], envs[i]) for i in range(n)]

        def reset(ep: _Episode):
            return ep.env.reset(seed=_seed(cfg.seed, 1, ep.group_id, ep.sample), options={"task": ep.task})

        for ep, (_obs, info) in zip(episodes, self._pool.map(reset, episodes), strict=True):
            ep.conv = self.chat.start(info["messages"], self._template_tools(ep.env, info))
            ep.token_ids = list(ep.conv.prompt_ids)
            ep.loss_mask = [0] * len(ep.token_ids)
            ep.logprobs = [0.0] * len(ep.token_ids)
            ep.prompt_len = len(ep.token_ids)
            ep.info = info

        sampling = cfg.sampling(self.chat.stop_token_ids)
        bar = _progress(n, progress)
        keys = {ep.index: ("collect", id(self), time.monotonic_ns(), ep.index) for ep in episodes}
        asked: dict[int, tuple[_Episode, GenerationRequest]] = {}  # ticket -> the episode's open request
        stepping: dict[int, tuple[_Episode, Future]] = {}  # episode index -> its env step of the last reply

        def ask(ep: _Episode) -> None:
            budget = min(cfg.max_new_tokens, cfg.max_total_tokens - len(ep.token_ids))
            if budget <= 0:
                self._finish(ep, "truncated", self._no_answer_reward(ep.env), bar)
                self.policy.release([keys[ep.index]])
                return
            req = GenerationRequest(list(ep.token_ids), budget,
                                    seed=_seed(cfg.seed, 2, ep.group_id, ep.sample, len(ep.turns)),
                                    key=keys[ep.index] if cfg.reuse_cache else None)
            asked[session.add(req)] = (ep, req)

        try:
            with self.policy.session(sampling) as session:
                for ep in episodes:
                    ask(ep)
                while asked or stepping:
                    # Stepped episodes join when nothing is decoding (rounds) or, continuous, when the backend
                    # would admit them now; in episode order, so the batches do not depend on thread timing.
                    if stepping and (not session.pending or cfg.continuous and session.join_ready(len(stepping))):
                        for index in sorted(stepping):
                            ep, future = stepping.pop(index)
                            self._stepped(ep, future.result(), bar)
                            if not ep.done:
                                ask(ep)
                            else:
                                self.policy.release([keys[ep.index]])
                    if not session.pending:
                        continue
                    for ticket, res in session.step():
                        ep, req = asked.pop(ticket)
                        text = self._replied(ep, req, res, sampling, bar)
                        if text is None:
                            self.policy.release([keys[ep.index]])
                        else:
                            stepping[ep.index] = (ep, self._pool.submit(_safe_step, ep.env, text))
        finally:
            self.policy.release(keys.values())
            if bar is not None:
                bar.close()
        version = int(self.policy.version)
        return [self._trajectory(ep, version) for ep in episodes]

    def _finish(self, ep: _Episode, termination: str, reward: float | None = None, bar=None) -> None:
        ep.termination = termination
        if reward is not None:
            ep.reward += reward
            if ep.turns:
                ep.turns[-1].reward += reward
        if bar is not None:
            bar.update(1)

    def _replied(self, ep: _Episode, req: GenerationRequest, res, sampling: SamplingParams, bar) -> str | None:
        """Append a reply to its episode; returns the text to step the env with, or None when the episode ended."""
        stops = set(sampling.stop_token_ids)
        if not res.token_ids or len(res.token_ids) > req.max_new_tokens or len(res.logprobs) != len(res.token_ids):
            raise RuntimeError(f"{type(self.policy).__name__} returned {len(res.token_ids)} tokens / "
                               f"{len(res.logprobs)} logprobs for a budget of {req.max_new_tokens}")
        start = len(ep.token_ids)
        ep.token_ids.extend(res.token_ids)
        ep.loss_mask.extend([1] * len(res.token_ids))
        ep.logprobs.extend(float(x) for x in res.logprobs)
        body = res.token_ids[:-1] if res.token_ids[-1] in stops else res.token_ids
        text = self.policy.tokenizer.decode(body, skip_special_tokens=False)
        ep.turns.append(Turn(prompt_len=start, completion_len=len(res.token_ids), completion=text, parsed={},
                             finish_reason=res.finish_reason))
        if res.finish_reason != "stop" and not capabilities(ep.env)["grades_cut_replies"]:
            self._finish(ep, "truncated", self._no_answer_reward(ep.env), bar)
            return None
        return text

    def _stepped(self, ep: _Episode, outcome, bar) -> None:
        """Record the env's answer to the episode's last reply; end the episode or append the glue tokens."""
        obs, reward, terminated, truncated, info, error = outcome
        turn = ep.turns[-1]
        if error is not None:
            turn.parsed = {"kind": "error", "error": error}
            self._finish(ep, "error", 0.0, bar)
            return
        metrics = info.get("metrics") or {}
        latency = float(metrics.get("tool_latency_s", ep.tool_latency))
        turn.parsed = dict(info.get("parsed") or {})
        turn.observation = obs if isinstance(obs, str) else str(obs)
        turn.obs_role = info.get("obs_role", "tool")
        turn.tool_latency_s = max(0.0, latency - ep.tool_latency)
        ep.tool_latency = latency
        ep.info = info
        ep.reward += float(reward)
        turn.reward += float(reward)
        if terminated or truncated:
            ep.env_ended = True
            self._finish(ep, info.get("termination") or ("budget" if truncated else "answered"), None, bar)
            return
        if len(ep.turns) >= self.config.max_turns:
            self._finish(ep, "budget", self._no_answer_reward(ep.env), bar)
            return
        conv = ep.conv
        assert conv is not None  # built when the episode started
        glue = conv.glue(ep.token_ids[turn.prompt_len:], _observation_messages(obs, info))
        if len(ep.token_ids) + len(glue) >= self.config.max_total_tokens:
            self._finish(ep, "truncated", self._no_answer_reward(ep.env), bar)
            return
        ep.token_ids = ep.token_ids + glue
        ep.loss_mask.extend([0] * len(glue))
        ep.logprobs.extend([0.0] * len(glue))
        conv.check(ep.token_ids)

    def _trajectory(self, ep: _Episode, version: int) -> Trajectory:
        info = ep.info or {}
        metrics = {k: float(v) for k, v in (info.get("metrics") or {}).items() if isinstance(v, (int, float))}
        metrics["correct"] = float(bool(info.get("correct", False))) if ep.env_ended else 0.0
        metrics["format_ok"] = float(bool(info.get("format_ok", False))) if ep.env_ended else 0.0
        return Trajectory(token_ids=ep.token_ids, loss_mask=ep.loss_mask, logprobs=ep.logprobs,
                          prompt_len=ep.prompt_len, reward=ep.reward, group_id=ep.group_id, task=ep.task,
                          turns=ep.turns, termination=ep.termination or "error", metrics=metrics,
                          policy_version=version)


def _observation_messages(obs: Any, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The env's own messages after the reply (one tool message per call, so the template renders each with its
    name and ``tool_call_id``), else one plain message holding ``obs``."""
    role = info.get("obs_role", "tool")
    messages = info.get("messages") or []
    tail: list[dict[str, Any]] = []
    for m in reversed(messages):
        if m.get("role") != role:
            break
        tail.append(dict(m))
    tail.reverse()
    if tail and (len(tail) > 1 or tail[0].get("content") == obs):
        return tail
    return [{"role": role, "content": obs if isinstance(obs, str) else str(obs)}]


def _safe_step(env, text: str):
    """``env.step(text)``; an exception becomes an ``error`` record instead of killing the rollout."""
    try:
        obs, reward, terminated, truncated, info = env.step(text)
        return obs, reward, terminated, truncated, info or {}, None
    except Exception as e:
        logger.exception("env.step raised; the trajectory ends with termination='error'")
        return "", 0.0, True, False, {}, f"{type(e).__name__}: {e}"


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="rollout", unit="traj")


def collect(env: str | Callable[[], Any] | Mapping[str, str | Callable[[], Any]], policy: Policy,
            tasks: list[dict[str, Any]], group_size: int, config: CollectorConfig | None = None, *,
            env_kwargs: dict[str, Any] | Mapping[str, dict[str, Any]] | None = None,
            progress: bool = False) -> list[Trajectory]:
    """Roll out ``group_size`` trajectories for each task with ``policy``.

    Args:
        env: an env id (made with :func:`~agentrl.algos.rollout.env_factory.make_chat_env`: ``gymnasium.make(env,
            **env_kwargs)`` plus the ``tools_in_prompt`` rule) or a zero-argument factory returning a text env (see
            :mod:`agentrl.envs.core`), e.g. :func:`~agentrl.algos.rollout.env_factory.rollout_env`'s Ray pool; or a
            mapping ``name -> id or factory`` (a mixture), each task naming its env in ``task["env"]``.
        policy: the backend (:class:`~agentrl.algos.policy.HFPolicy`, :class:`~agentrl.algos.policy.OpenAIPolicy`
            or yours).
        tasks: task dicts, each passed to ``env.reset(options={"task": task})``.
        group_size: trajectories per task (a GRPO group).
        config: budgets and sampling (defaults: :class:`CollectorConfig`).
        env_kwargs: keyword arguments for ``gymnasium.make`` (with a mapping of envs: ``name -> kwargs``).
        progress: show a progress bar.

    Returns:
        ``len(tasks) * group_size`` trajectories ordered by task then sample; ``group_id`` is the task's index in
        ``tasks``, ``task`` the task dict, ``metrics`` the env's final ``info["metrics"]`` plus ``correct`` and
        ``format_ok`` (0/1).
    """
    with Collector(policy, config) as c:
        return c.collect(env, tasks, group_size, env_kwargs=env_kwargs, progress=progress)
