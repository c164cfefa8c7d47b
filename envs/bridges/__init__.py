"""Bridges between our environments and other frameworks' environment interfaces (docs/bridges/index.md).

Each peer has one file here, and each file goes both ways where the peer allows:

* :mod:`agentrl.envs.bridges.openenv` — OpenEnv (``openenv-core``): serve any registered env as an OpenEnv
  server (``agentrl-env serve ID --openenv``); :mod:`agentrl.envs.bridges.openenv_client` plays an OpenEnv server
  as a text env (``AgentRL/OpenEnv-v0``), so ``agentrl train`` runs on it.
* :mod:`agentrl.envs.bridges.verifiers` — verifiers (0.4.0, in its own virtualenv): any registered env as a
  verifiers environment, and a tool-less verifiers environment as a text env (``VerifiersTextEnv``).
* :mod:`agentrl.envs.bridges.skyrl` — SkyRL-gym: any registered env in ``skyrl_gym``'s registry.

The peers' packages are optional extras (``[openenv]``, ``[skyrl]``, ``[verifiers]``), imported only here.
The bare env behind an id, which every bridge plays, is :func:`agentrl.envs.make_text_env`.
"""
