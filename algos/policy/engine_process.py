"""The lifetime of a server process this process starts (:class:`~agentrl.algos.policy.engine.VLLMEngine`): it must
not outlive this process, however this process ends.

- ``atexit`` and ``with`` cover a normal exit, an exception and Ctrl-C;
- :func:`exit_on_sigterm` covers SIGTERM (``timeout``, Slurm ``scancel``, ``docker stop``, Kubernetes), whose
  default ends Python at once, with no ``finally`` and no ``atexit``: while a server is held
  (:func:`hold_process`), SIGTERM raises ``SystemExit(143)`` instead;
- :func:`start_watchdog` covers the rest (SIGKILL, the OOM killer, a crash): a small process that ends the server's
  process group as soon as this process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

#: Seconds the watchdog waits after its SIGTERM before it kills the server's group (vLLM drains in a few).
WATCHDOG_GRACE_S = 10.0

#: What this process holds (:func:`hold_process`); while it holds anything, SIGTERM exits (:func:`exit_on_sigterm`).
_held: set[object] = set()


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """Make SIGTERM exit this process through ``finally`` blocks and ``atexit`` (``SystemExit(143)``), as Ctrl-C
    does. Only the main thread can set a handler (elsewhere this does nothing), and one set by someone else is
    kept."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def hold_process(owner: object) -> None:
    """``owner`` (an engine) runs a server this process must stop: SIGTERM exits through ``atexit`` from now on."""
    _held.add(owner)
    exit_on_sigterm()


def release_process(owner: object) -> None:
    """``owner``'s server is stopped; with nothing held any more, SIGTERM gets its default back (when this
    module set the handler)."""
    _held.discard(owner)
    if (not _held and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is _on_sigterm):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


_WATCHDOG = """
import os, signal, sys, time
parent, group, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def alive():
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
while os.getppid() == parent:
    if not alive():
        sys.exit(0)
    time.sleep(0.2)
try:
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def start_watchdog(group: int, grace_s: float = WATCHDOG_GRACE_S) -> subprocess.Popen:
    """A small process that ends the process group ``group`` (SIGTERM, then SIGKILL after ``grace_s``) as soon as
    this process dies without ending it first. It notices by its parent changing (checked 5 times a second), runs
    in its own session (a Ctrl-C in the terminal does not reach it) and exits by itself once the group is gone;
    :func:`kill_group` ends it when the server is stopped normally."""
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG, str(os.getpid()), str(group), str(grace_s)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of the process group ``proc`` leads, and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
