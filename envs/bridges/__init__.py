"""Bridges between our environments and other frameworks' environment interfaces (docs/bridges/index.md).

Each peer has one file here, and each file goes both ways where the peer allows:

* :mod:`agentrl.envs.bridges.openenv` — OpenEnv (``openenv-core``): serve any registered env as an OpenEnv
  server (``agentrl-env serve ID --openenv``); :mod:`agentrl.envs.bridges.openenv_client` plays an OpenEnv server
  as a text env (``AgentRL/OpenEnv-v0``), so ``agentrl train`` runs on it.
* :mod:`agentrl.envs.bridges.verifiers` — verifiers (0.4.0, in its own virtualenv): any registered env as a
  verifiers environment, and a tool-less verifiers environment as a text env (``VerifiersTextEnv``).
* :mod:`agentrl.envs.bridges.skyrl` — SkyRL-gym: any registered env in ``skyrl_gym``'s registry.

The peers' packages are optional extras (``[openenv]``, ``[skyrl]``, ``[verifiers]``), imported only here.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import agentrl.envs
from agentrl.envs.core import TextEnv


def text_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> TextEnv:
    """The bare :class:`~agentrl.envs.core.TextEnv` behind a registered id, without gymnasium's wrappers (whose
    order check raises on a ``step`` before ``reset``: a bridge keeps the never-raise contract)."""
    gym.register_envs(agentrl.envs)
    env = gym.make(agentrl.envs.register_env_ref(env_id), **(env_kwargs or {})).unwrapped
    if not isinstance(env, TextEnv):
        env.close()
        raise TypeError(f"{env_id} is a {type(env).__name__}, not an agentrl TextEnv")
    return env
