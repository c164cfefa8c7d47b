"""One managed engine per node in a data-parallel run: local rank 0 starts it, the node's other ranks use it.

Under ``torchrun`` (or ``accelerate launch``) with more than one process per node (``LOCAL_WORLD_SIZE``),
:func:`~agentrl.algos.policy.engine.start_engine_policy` starts the server on local rank 0 only and writes its
address to a folder of this node's temporary directory, named after the launcher's process (the parent every local
rank shares) and the node (``GROUP_RANK``); the other local ranks wait for that file and sample through the same
server. When its run ends, local rank 0 waits (up to :data:`DONE_TIMEOUT_S`) until the other local ranks have closed
their clients, then stops the server.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.algos._io import atomic_write_text

#: How long local rank 0 waits for the other local ranks to close their clients before it stops the server.
DONE_TIMEOUT_S = 120.0
SERVER_FILE = "server.json"


@dataclass(frozen=True)
class NodeShare:
    """This rank's part in sharing one engine per node."""

    local_rank: int
    local_world: int
    folder: Path
    """Where local rank 0 publishes the server and the other local ranks say they are done."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> NodeShare | None:
        """The share the launcher's variables describe; None with one process on this node."""
        env = os.environ if env is None else env
        local_world = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
        if local_world <= 1:
            return None
        name = f"launcher-{os.getppid()}-node{env.get('GROUP_RANK', '0')}"
        return cls(int(env.get("LOCAL_RANK", "0") or 0), local_world,
                   Path(tempfile.gettempdir()) / "agentrl-engines" / name)

    @property
    def starts(self) -> bool:
        """Local rank 0 starts (and stops) the node's server."""
        return self.local_rank == 0

    def publish(self, url: str, model: str) -> None:
        """Local rank 0: the server runs at ``url`` serving ``model``."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        atomic_write_text(self.folder / SERVER_FILE, json.dumps({"url": url, "model": model, "pid": os.getpid()}))

    def wait_for_server(self, timeout_s: float) -> dict[str, Any]:
        """Another local rank: the ``{"url", "model"}`` local rank 0 published, once its server lists the model.

        Raises:
            RuntimeError: nothing published and healthy within ``timeout_s`` (local rank 0's log says why).
        """
        import requests

        deadline = time.monotonic() + timeout_s
        path = self.folder / SERVER_FILE
        while time.monotonic() < deadline:
            try:
                info = json.loads(path.read_text())
                models = requests.get(f"{info['url']}/v1/models", timeout=5).json()["data"]
                if any(m.get("id") == info["model"] for m in models):
                    return info
            except (OSError, ValueError, KeyError, TypeError, AttributeError, requests.RequestException):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"local rank {self.local_rank}: local rank 0 published no running engine in {path} within "
                           f"{timeout_s:.0f} s (its engine log says why)")

    def done(self) -> None:
        """Another local rank: its client is closed; local rank 0 may stop the server."""
        try:
            (self.folder / f"done-{self.local_rank}").touch()
        except OSError:
            pass

    def wait_for_others(self, timeout_s: float = DONE_TIMEOUT_S) -> None:
        """Local rank 0: wait until every other local rank is :meth:`done` (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while (len(list(self.folder.glob("done-*"))) < self.local_world - 1 and time.monotonic() < deadline):
            time.sleep(0.2)

    def remove(self) -> None:
        """Local rank 0, after the server stopped: the folder goes."""
        shutil.rmtree(self.folder, ignore_errors=True)
