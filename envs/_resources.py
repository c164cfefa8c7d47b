"""Shared resources of the envs: handles that copies share, worker-process pools, process-wide defaults, and
stopping a worker process."""

from __future__ import annotations

import os
import subprocess
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedHandle:
    """Mixin for a handle on a shared resource (worker processes, an index, connections): copies are the very
    same object.

    ``gymnasium.make`` deep-copies the env spec's kwargs; without this, ``sandbox=<instance>`` or
    ``backend=<instance>`` would fail to copy (locks, processes) or be duplicated, splitting the resource's
    concurrency limit and statistics.
    """

    def __copy__(self):
        return self

    def __deepcopy__(self, memo: dict):
        return self


class WorkerPool(SharedHandle):
    """Mixin for a shared handle on worker processes that ``self._finalizer`` (a :class:`weakref.finalize`) stops:
    :meth:`close`, ``closed``, and use as a context manager. Set ``self._closed = False`` in ``__init__``."""

    _closed: bool
    _finalizer: weakref.finalize

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ProcessDefault(Generic[T]):
    """A process-wide instance, made by ``factory`` on first use and made again once it has been closed
    (an object with a true ``closed`` attribute). Thread-safe."""

    def __init__(self, factory: Callable[[], T]):
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None or getattr(self._value, "closed", False):
                self._value = self._factory()
            return self._value


def stop_process(proc: subprocess.Popen, *, wait_s: float) -> bool:
    """SIGKILL a worker started with ``start_new_session=True`` and its whole process group (the process alone
    if the group cannot be signalled), close its pipes and reap it. Returns whether it exited within
    ``wait_s``."""
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True
