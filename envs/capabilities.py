"""The capabilities an env declares as class attributes of :class:`~agentrl.envs.core.TextEnv`, as one list that
every proxy of an env forwards."""

from __future__ import annotations

from typing import Any

#: The capabilities an env declares (what the code around it must know to drive it as the env means): one list,
#: read with :func:`capabilities`, that every proxy of an env forwards (the Ray executor's ``RemoteEnv``, the
#: OpenEnv server and client, the SkyRL and verifiers bridges), so a capability is not lost on the way.
CAPABILITIES = ("supports_text_only", "grades_cut_replies")


def capabilities(env: Any) -> dict[str, bool]:
    """The :data:`CAPABILITIES` ``env`` (or its ``unwrapped``, or a proxy that forwards them) declares."""
    inner = getattr(env, "unwrapped", env)
    return {name: bool(getattr(inner, name, False)) for name in CAPABILITIES}


__all__ = ["CAPABILITIES", "capabilities"]
