"""Check that an environment honours the text-env contract — what plugin authors run in their CI.

Gymnasium's :func:`gymnasium.utils.env_checker.check_env` checks the Env API; :func:`check_text_env` checks
what agentrl's trainers and evaluators rely on beyond it (the text-env protocol, ``docs/protocol.md``)::

    from agentrl.envs.checker import check_text_env

    check_text_env("MyPackage/MyEnv-v0")                      # a registered id (or "my_pkg.module:MyEnv")
    check_text_env("MyPackage/MyEnv-v0", env_kwargs={"split": "dev"}, episodes=50)

Like Gymnasium's checker it returns ``None`` when the env passes and raises at the first check that fails: an
:class:`EnvContractError` whose message names the check (``[fuzz]``, ``[reset]`` ...) and what was seen, so a
pytest test that calls it fails with that line. The checks, in order:

``spaces``        ``observation_space`` and ``action_space`` are ``gymnasium.spaces.Text``.
``gymnasium``     Gymnasium's own ``check_env`` passes without a warning.
``reset``         ``reset(seed=...)`` returns ``(str, dict)``; ``info`` holds ``messages`` (OpenAI-style,
                  ending with the user turn ``obs``), ``tools`` (OpenAI function schemas) and ``task_id``.
``fuzz``          ``step`` never raises, whatever the reply: seeded garbage (call syntax of every registered
                  call format, answers of every answer format, the env's tool names, random text); every step
                  returns ``(str, finite float, bool, bool, dict)`` with ``parsed``, ``obs_role`` and
                  ``metrics``, the last one ``correct``, ``format_ok``, ``answer`` and a ``termination``
                  that is not ``"error"`` (an env bug the base class caught); a
                  :class:`~agentrl.envs.core.TextEnv` also stays within its reward levels and budgets.
``determinism``   the same seed gives the same first observation and info: again, and in a fresh env made
                  through a pickled factory (what ``AsyncVectorEnv`` sends its workers; an id only).
``torch-free``    making the env and resetting it in a fresh process imports no torch, transformers or peft
                  (an id only; ``torch_free=False`` skips it).
``hooks``         what the env declares is true: ``supports_text_only`` matches a ``tools_enabled`` keyword
                  that offers no tool; ``test_tasks`` is a pure function of its seed whose tasks reset (or
                  says there is no test split); ``demo(task)`` is a correct solution or ``None``.

The fuzz is seeded (``seed``) and short by default (``episodes`` of up to four replies), so a CI run takes
seconds; raise ``episodes`` for a deeper search. Nothing here imports torch.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import pickle
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from agentrl.envs import register_env_ref
from agentrl.envs.core import TextEnv
from agentrl.envs.parsing import ANSWER_FORMATS, CALL_FORMATS

__all__ = ["EnvContractError", "check_text_env"]

#: Modules making an env must not import (the environments are torch-free).
HEAVY_MODULES = ("torch", "transformers", "peft")
#: How a step may end an episode; ``"error"`` means the env raised and :class:`TextEnv` caught it.
TERMINATIONS = ("answered", "invalid", "budget")

#: Pieces of replies the fuzz glues together: call syntax and its fragments, answers, broken JSON.
_PIECES = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<answer>", "</answer>", "```python\n", "```", "{",
    "}", "[", "]", ":", ",", "\n", " ", '"name"', '"arguments"', '"parameters"', "[TOOL_CALLS]", "null",
    "1e999", '{"a": 1}', "\\u0000", "\x00", "Answer:", "\\boxed{", "42", "\\frac{1}{2}", "x^2", "é中",
    "print(3)", "input()", "import sys", "1/0", "9" * 5000,
]
_ARGUMENT_KEYS = ["query", "code", "a", "b", "x", "item_id", "expression", ""]


class EnvContractError(AssertionError):
    """An env breaks the text-env contract; the message starts with the check that failed (``[fuzz] ...``)."""


def _fail(check: str, message: str) -> EnvContractError:
    return EnvContractError(f"[{check}] {message}")


def _short(text: Any, n: int = 160) -> str:
    text = repr(text)
    return text if len(text) <= n else text[:n] + "...'"


# ---------------------------------------------------------------------------------------------- shapes


def _check_spaces(env: gym.Env) -> None:
    for name in ("observation_space", "action_space"):
        space = getattr(env, name, None)
        if not isinstance(space, spaces.Text):
            raise _fail("spaces", f"{name} is {space!r}, not a gymnasium.spaces.Text")


def _check_reset_result(result: Any, call: str) -> tuple[str, dict[str, Any]]:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise _fail("reset", f"{call} returned {_short(result)}, not (obs, info)")
    obs, info = result
    if not isinstance(obs, str) or not isinstance(info, dict):
        raise _fail("reset", f"{call} returned ({type(obs).__name__}, {type(info).__name__}), "
                             "not (str, dict)")
    for key in ("messages", "tools", "task_id"):
        if key not in info:
            raise _fail("reset", f"{call}: info has no {key!r} (it has {sorted(info)})")
    messages, tools = info["messages"], info["tools"]
    if not (isinstance(messages, list) and messages
            and all(isinstance(m, dict) and "role" in m for m in messages)):
        raise _fail("reset", f"{call}: info['messages'] is not a non-empty list of messages with a 'role'")
    if messages[-1].get("role") != "user" or messages[-1].get("content") != obs:
        raise _fail("reset", f"{call}: the last message is {_short(messages[-1])}, not the user turn obs")
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function"
                                              and isinstance(t.get("function"), dict)
                                              and isinstance(t["function"].get("name"), str) for t in tools):
        raise _fail("reset", f"{call}: info['tools'] is not a list of OpenAI function schemas: "
                             f"{_short(tools)}")
    if not isinstance(info["task_id"], str):
        raise _fail("reset", f"{call}: info['task_id'] is a {type(info['task_id']).__name__}, not a str")
    return obs, info


def _check_step_result(env: gym.Env, result: Any, action: str, where: str) -> bool:
    """Check one step's return (and a TextEnv's bounds); returns whether the episode ended."""
    what = f"{where}, step({_short(action)})"
    if not (isinstance(result, tuple) and len(result) == 5):
        raise _fail("fuzz", f"{what} returned {_short(result)}, not "
                            "(obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = result
    if not isinstance(obs, str):
        raise _fail("fuzz", f"{what}: obs is a {type(obs).__name__}, not a str")
    if not isinstance(reward, float) or not math.isfinite(reward):
        raise _fail("fuzz", f"{what}: reward {reward!r} is not a finite float")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool) or (terminated and truncated):
        raise _fail("fuzz", f"{what}: terminated={terminated!r}, truncated={truncated!r} "
                            "(two bools, not both true)")
    if not isinstance(info, dict):
        raise _fail("fuzz", f"{what}: info is a {type(info).__name__}, not a dict")
    for key in ("parsed", "obs_role", "metrics"):
        if key not in info:
            raise _fail("fuzz", f"{what}: info has no {key!r} (it has {sorted(info)})")
    kind = info["parsed"].get("kind") if isinstance(info["parsed"], dict) else None
    if kind not in ("tool_call", "answer", "invalid"):
        raise _fail("fuzz", f"{what}: info['parsed'] kind is {kind!r}, "
                            "not 'tool_call', 'answer' or 'invalid'")
    ended = terminated or truncated
    if ended:
        missing = [k for k in ("correct", "format_ok", "answer", "termination") if k not in info]
        if missing:
            raise _fail("fuzz", f"{what}: the last step's info has no {missing}")
        if info["termination"] not in TERMINATIONS:
            raise _fail("fuzz", f"{what}: termination {info['termination']!r} (an exception inside the env, "
                                "logged above, if 'error'); expected one of " + ", ".join(TERMINATIONS))
    u = env.unwrapped
    if isinstance(u, TextEnv):
        low, high = min(u.rewards.invalid, u.rewards.wrong, 0.0), u.rewards.correct
        if not low <= reward <= high:
            raise _fail("fuzz", f"{what}: reward {reward} outside [{low}, {high}]")
        if info["obs_role"] == "tool" and len(obs) > u.budgets.max_obs_chars:
            raise _fail("fuzz", f"{what}: a tool observation of {len(obs)} chars > max_obs_chars "
                                f"{u.budgets.max_obs_chars}")
        metrics, budgets = info["metrics"], u.budgets
        if (metrics.get("turns", 0) > budgets.max_turns
                or metrics.get("tool_calls", 0) > budgets.max_tool_calls):
            raise _fail("fuzz", f"{what}: metrics {_short(metrics)} beyond the budgets {u.budgets}")
    return ended


# ---------------------------------------------------------------------------------------------- the fuzz


def _replies(rng: np.random.Generator, env: gym.Env, tool_names: list[str]) -> Callable[[], str]:
    """A source of seeded garbage replies for ``env``."""
    names = [*tool_names, "nope", ""]
    formats = [CALL_FORMATS.get(n)() for n in CALL_FORMATS]
    answers = [ANSWER_FORMATS.get(n) for n in ANSWER_FORMATS]
    parser = getattr(env.unwrapped, "parser", None)
    values: list[Any] = ["", "Victoria Falls", "print(1)", "1/0", 3, -7, 2.5, 10**30, None, [1, "x"],
                         {"a": 1}]

    def text(n: int = 40) -> str:
        return "".join(rng.choice(list("abc xyz{}[]<>\"':,\n\\é")) for _ in range(int(rng.integers(0, n))))

    def call() -> str:
        args = {str(rng.choice(_ARGUMENT_KEYS)): values[int(rng.integers(len(values)))]
                for _ in range(int(rng.integers(0, 3)))}
        name = str(rng.choice(names))
        fmt = formats[int(rng.integers(len(formats)))]
        try:
            if parser is not None and rng.random() < 0.5:
                return parser.render_call(name, args)
        except Exception:  # noqa: BLE001 - the env's renderer wants its own argument: a native call then
            pass
        return fmt.render(name, args)

    def answer() -> str:
        value = str(rng.choice(["42", "x", "", "1/2", "0", "Zambezi"]))
        if parser is not None and rng.random() < 0.7:
            return parser.render_answer(value)
        return answers[int(rng.integers(len(answers)))].render(value)

    def reply() -> str:
        kind = rng.random()
        if kind < 0.25:
            return call() if rng.random() < 0.7 else text() + call()
        if kind < 0.5:
            return answer() if rng.random() < 0.5 else text() + str(rng.choice(["\n", " "])) + answer()
        if kind < 0.8:
            pieces = [*_PIECES, *(f'"{n}"' for n in names)]
            return "".join(str(rng.choice(pieces)) if rng.random() < 0.7 else text(8)
                           for _ in range(int(rng.integers(0, 30))))
        if kind < 0.9:
            return env.action_space.sample()
        return text(300)

    return reply


def _fuzz(env: gym.Env, episodes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        episode_seed = seed + episode
        where = f"episode {episode} (reset(seed={episode_seed}))"
        try:
            _, info = env.reset(seed=episode_seed)
            replies = _replies(rng, env, [t["function"]["name"] for t in info["tools"]])
            for _ in range(int(rng.integers(1, 5))):
                action = replies()
                try:
                    result = env.step(action)
                except Exception as e:
                    raise _fail("fuzz", f"{where}: step({_short(action)}) raised "
                                        f"{type(e).__name__}: {e}") from e
                if _check_step_result(env, result, action, where):
                    break
        except EnvContractError:
            raise
        except Exception as e:
            raise _fail("fuzz", f"{where}: reset raised {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------------- the rest


def _same(a: Any, b: Any) -> bool:
    try:
        return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return a == b


def _check_determinism(env: gym.Env, make: Callable[[], gym.Env] | None) -> None:
    fresh = None
    if make is not None:
        try:
            factory = pickle.loads(pickle.dumps(make))
        except Exception as e:
            raise _fail("determinism", f"the env's factory does not pickle ({type(e).__name__}: {e}); "
                                       "AsyncVectorEnv sends it to its workers") from e
        fresh = factory()
    try:
        for seed in (0, 1, 12345):
            first = env.reset(seed=seed)
            if not _same(env.reset(seed=seed), first):
                raise _fail("determinism", f"reset(seed={seed}) twice gave two first observations or infos")
            if fresh is not None and not _same(fresh.reset(seed=seed), first):
                raise _fail("determinism", f"reset(seed={seed}) of a fresh env gave another first "
                                           "observation or info (sample tasks with self.np_random, never "
                                           "the global random)")
    finally:
        if fresh is not None:
            fresh.close()


def _spec(env_id: str):
    """The registration of ``env_id`` (``"module:Id"`` read as ``"Id"``)."""
    return gym.spec(env_id.split(":", 1)[-1])


def _entry_point(env_id: str) -> str | None:
    """``"module:Attribute"`` of an id's entry point, when another process can import it."""
    entry = _spec(env_id).entry_point
    if isinstance(entry, str):
        return entry
    path = f"{getattr(entry, '__module__', '')}:{getattr(entry, '__qualname__', '')}"
    return None if "<locals>" in path or path.startswith(("__main__:", ":")) else path


def _check_torch_free(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    entry = _entry_point(env_id)
    try:
        kwargs = json.dumps({**(_spec(env_id).kwargs or {}), **env_kwargs})
    except TypeError:
        entry = None
    if entry is None:
        warnings.warn(f"check_text_env: [torch-free] skipped for {env_id!r}: its entry point or kwargs "
                      "cannot reach another process", stacklevel=3)
        return
    code = ("import json, sys\nimport agentrl.envs\n"
            "from gymnasium.envs.registration import load_env_creator\n"
            f"env = load_env_creator({entry!r})(**json.loads({kwargs!r}))\nenv.reset(seed=0)\nenv.close()\n"
            f"print(json.dumps(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)))")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ,
                         timeout=300)
    if run.returncode != 0:
        raise _fail("torch-free", f"making {entry} in a fresh process failed: {run.stderr.strip()[-500:]}")
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    if loaded:
        raise _fail("torch-free", f"making {entry} imports {', '.join(loaded)}; import them lazily "
                                  "(inside the function that needs them)")


def _check_hooks(env: gym.Env, make_with: Callable[..., gym.Env] | None) -> None:
    u = env.unwrapped
    cls = type(u)
    declared = getattr(cls, "supports_text_only", None)
    if declared is not None:
        takes = "tools_enabled" in inspect.signature(cls).parameters
        if not isinstance(declared, bool) or takes != declared:
            raise _fail("hooks", f"supports_text_only is {declared!r} but the constructor "
                                 f"{'takes' if takes else 'does not take'} tools_enabled")
        if declared and make_with is not None:
            text_only = make_with(tools_enabled=False).unwrapped
            try:
                _, info = text_only.reset(seed=0)
                if info["tools"]:
                    raise _fail("hooks", f"tools_enabled=False still offers {len(info['tools'])} tools")
                obs, _, term, trunc, _ = text_only.step(CALL_FORMATS.get("hermes")().render("anything", {}))
                if term or trunc or not obs.startswith("Error:"):
                    raise _fail("hooks", f"with tools_enabled=False a tool call got {_short(obs)}, not an "
                                         "'Error: ...' observation that lets the episode go on")
            finally:
                text_only.close()
    tasks = None
    if hasattr(u, "test_tasks"):
        try:
            tasks = u.test_tasks(3, seed=7)
        except ValueError as e:  # the default: no test split
            if isinstance(u, TextEnv) and type(u).test_tasks is not TextEnv.test_tasks:
                raise _fail("hooks", f"test_tasks is overridden but raised ValueError: {e}") from e
        if tasks is not None:
            if len(tasks) != 3 or not all(isinstance(t, dict) and "id" in t for t in tasks):
                raise _fail("hooks", f"test_tasks(3) returned {_short(tasks)}, not 3 task dicts with an 'id'")
            if not _same(u.test_tasks(3, seed=7), tasks):
                raise _fail("hooks", "test_tasks(3, seed=7) twice gave two lists: it must be a function of "
                                     "the seed")
            _, info = _check_reset_result(u.reset(options={"task": tasks[0]}), "reset(options={'task': ...})")
            if info["task_id"] != str(tasks[0]["id"]):
                raise _fail("hooks", f"reset with test task {tasks[0]['id']!r} reports task_id "
                                     f"{info['task_id']!r}")
    if hasattr(u, "demo"):
        for seed in (0, 1):
            u.reset(seed=seed)
            task = getattr(u, "task", None)
            if task is None:
                break
            demo = u.demo(dict(task))
            if demo is not None and not (isinstance(demo, dict) and demo.get("correct") is True):
                raise _fail("hooks", f"demo(task {task.get('id')!r}) is not a correct solution: "
                                     f"{_short({k: demo.get(k) for k in ('reward', 'correct')})}")


def check_text_env(env: str | gym.Env, *, env_kwargs: Mapping[str, Any] | None = None, episodes: int = 100,
                   seed: int = 0, torch_free: bool = True) -> None:
    """Check that ``env`` honours the text-env contract (this module's docstring lists the checks).

    Args:
        env: a registered env id (``"module:Id"`` and ``"module:factory"`` too), made with ``env_kwargs``;
            or an env instance (the checks that need a fresh env, ``determinism``'s second half,
            ``torch-free`` and the text-only half of ``hooks``, are skipped).
        env_kwargs: keyword arguments of ``gymnasium.make`` (e.g. a small dataset that keeps the fuzz fast).
        episodes: fuzz episodes (up to four replies each).
        seed: seeds the fuzz and its episodes.
        torch_free: run the ``torch-free`` check (a fresh Python process, about a second).

    Raises:
        EnvContractError: the first check that fails (an ``AssertionError``), its message naming the check.
    """
    kwargs = dict(env_kwargs or {})
    if isinstance(env, str):
        env_id = register_env_ref(env)
        made = gym.make(env_id, **kwargs)
        make: Callable[..., gym.Env] | None = functools.partial(gym.make, env_id, **kwargs)
    else:
        env_id, made, make = None, env, None
    try:
        _check_spaces(made)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                check_env(made.unwrapped, skip_render_check=True)
                made.reset(seed=seed)
                made.step("Answer: 1")  # the passive checker on a real observation (':' and newlines)
            except Exception as e:
                raise _fail("gymnasium", f"gymnasium's check_env: {type(e).__name__}: {e}") from e
        _check_reset_result(made.reset(seed=seed), f"reset(seed={seed})")
        _fuzz(made, episodes, seed)
        _check_determinism(made, make)
        if torch_free and env_id is not None:
            _check_torch_free(env_id, kwargs)
        _check_hooks(made, make)
    finally:
        made.close()
