"""Data-parallel ranks that sample through one server publish each adapter version there once, under one name.

After an optimizer step every rank of a data-parallel run holds the same LoRA weights (the gradients are summed
by one all-reduce, then every rank clips and steps the same optimizer on the same values; the ranks compare an
adapter digest when they start). So the ranks that share a server need one copy of each version there, not one
per rank competing for vLLM's ``--max-loras`` slots. :class:`ServerGroup` is this rank's part in that:

- **Who shares a server** is computed, not assumed: every rank contributes the server its policy samples from
  (:func:`server_key`: the URL after :func:`~agentrl.algos.policy.openai.rank_url`, plus the host name when the
  URL is a loopback address, which is a different server on every machine) through a collective, and the ranks
  with equal keys form a group. Two spellings of one server (``localhost`` and ``127.0.0.1``) make two groups:
  one extra load per version, never a wrong one.
- **The publisher** is the lowest rank of a group. It saves version ``v`` and loads it under
  ``<prefix>-<its run id>-v<v>`` (no rank in the name); the others wait for it (a collective of the whole run,
  which carries the publisher's error, if any, to every rank: no rank waits for a publisher that failed), check
  that their server lists the name (a vLLM-style ``GET /v1/models``) and sample with it.
- **The old version** is unloaded, and its folder deleted, by the publisher once every rank has checked the new
  one (a second collective; no rank samples while it is inside ``update_weights``). Only the publisher records
  what it loaded (``served-adapters-r<rank>.txt``), so ``--resume`` of a killed run unloads each leftover once;
  every rank still unloads what its own record lists from a killed predecessor.

A one-process run has no group and is unchanged.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from agentrl.algos.policy.openai import OpenAIPolicy

logger = logging.getLogger(__name__)

#: Host names that name the machine the request is made on.
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "0.0.0.0")


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (``127.x``, ``::1``, ``localhost``): the same URL is then another
    server on another node."""
    host = (urlsplit(url).hostname or "").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_key(url: str) -> tuple[str, str]:
    """What identifies the server behind ``url`` across the ranks of a run: the URL, and for a loopback URL the
    host name of this machine (ranks on one machine that name ``127.0.0.1:8000`` share it; ranks on two do not)."""
    return url.rstrip("/"), socket.gethostname() if is_loopback(url) else ""


#: A collective every rank of the run calls at once: each rank's object, in rank order.
Exchange = Callable[[Any], list[Any]]


@dataclass(frozen=True)
class ServerGroup:
    """This rank's place among the ranks that sample through the same server."""

    rank: int
    members: tuple[int, ...]
    """The ranks sharing this rank's server, in order (this one included)."""
    prefix: str
    """The shared adapter prefix (the publisher's, without a rank): names are ``f"{prefix}-v{N}"``."""
    exchange: Exchange

    @property
    def publisher(self) -> int:
        """The rank that saves and loads each version on the group's server: the lowest."""
        return self.members[0]

    @property
    def publishes(self) -> bool:
        return self.rank == self.publisher

    @classmethod
    def build(cls, everyone: Sequence[dict[str, Any]], rank: int, exchange: Exchange) -> ServerGroup:
        """This rank's group from every rank's ``{"server": server_key(...), "prefix": ...}`` (rank order)."""
        mine = everyone[rank]["server"]
        members = tuple(r for r, info in enumerate(everyone) if info["server"] == mine)
        return cls(rank, members, everyone[members[0]]["prefix"], exchange)

    def switch(self, policy: OpenAIPolicy, name: str, produce: Callable[[], Path], *, owned: bool) -> None:
        """Every rank of the run calls this for the same version at the same time (after the same optimizer step):
        the publisher gets the adapter's folder from ``produce`` (saving it, when ``owned``) and loads it as
        ``name``; then every rank samples with ``name``, and the publisher unloads the previous version.

        Raises:
            RuntimeError: on every rank, when any publisher could not save or load its version, or a rank's
                server does not list the version its publisher loaded (the message names both).
        """
        error, folder = None, None  # folder: the version's folder when this rank wrote it (it deletes it)
        if self.publishes:
            try:
                path = produce()
                policy._load(name, path, owned=owned)
                folder = str(path) if owned else None
            except Exception as e:  # noqa: BLE001 - carried to every rank, raised there
                error = f"rank {self.rank} could not publish adapter {name} on {policy.base_url}: {e}"
        elif policy._left_over:
            policy._unload_left_over()
        self._raise_any(self.exchange(error))
        problem = None if self.publishes else self._missing(policy, name)
        try:
            self._raise_any(self.exchange(problem))
        except RuntimeError:
            if self.publishes:  # nobody samples with it: it goes
                policy._unload(name, folder)
            raise
        old = policy._take(name, folder, loaded_here=self.publishes)
        if self.publishes:  # every rank has left sampling and switched: the previous version goes
            policy._unload(*old)

    @staticmethod
    def _raise_any(problems: Sequence[str | None]) -> None:
        for problem in problems:
            if problem is not None:
                raise RuntimeError(problem)

    def _missing(self, policy: OpenAIPolicy, name: str) -> str | None:
        """Why this rank cannot sample with ``name`` (None: its server lists it, or lists no adapters to check)."""
        if policy.lora_api != "vllm":
            return None
        import requests

        try:
            r = requests.get(f"{policy.base_url}/models", timeout=30,
                             headers={"Authorization": f"Bearer {policy.api_key}"} if policy.api_key else {})
            listed = [m.get("id") for m in r.json().get("data", [])]
        except (requests.RequestException, ValueError, AttributeError) as e:
            return f"rank {self.rank} could not list the adapters of {policy.base_url}: {e}"
        if name in listed:
            return None
        return (f"rank {self.rank}: {policy.base_url}/models does not list adapter {name}, which rank "
                f"{self.publisher} loaded on what the ranks took for the same server; give servers that differ "
                f"URLs that differ (--policy-url with {{node_rank}} or a list)")
