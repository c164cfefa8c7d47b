"""Math answer equivalence with math-verify, in worker processes that are killed when they hang.

math-verify's own timeouts use ``signal.alarm``: they work only in a process's main thread, and a big-integer
expression such as ``9^{9^{9^{9}}}`` holds the GIL and freezes the whole process. A trainer checks answers from
many threads, so :class:`MathVerifier` runs math-verify in separate worker processes and, when one does not
answer within ``timeout_s``, kills it (SIGKILL) and starts a fresh one. A timeout scores as *not equivalent*.

Both sides are wrapped in ``$...$`` before parsing: bare strings give false positives (``1`` parses as
equivalent to ``1+x``), while LaTeX-delimited ones behave.

    >>> math_equal("\\\\frac{1}{2}", "0.5")   # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import logging
import queue
import re
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict

from agentrl.envs._resources import ProcessDefault, WorkerPool, stop_process

logger = logging.getLogger(__name__)

_WORKER_SOURCE = r"""
import json, sys
from math_verify import parse, verify
out = sys.stdout
sys.stdout = sys.stderr
internal = int(sys.argv[1])
out.write("ready\n"); out.flush()
for line in sys.stdin:
    gold, pred = json.loads(line)
    try:
        g = parse(gold, parsing_timeout=internal)
        p = parse(pred, parsing_timeout=internal)
        ok = bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=internal))
    except Exception:
        ok = False
    out.write("1\n" if ok else "0\n"); out.flush()
"""

_PLAIN_INT = re.compile(r"^[+-]?\d{1,50}$")


def wrap_latex(answer: str) -> str:
    """``answer`` as ``$...$`` (surrounding ``$`` removed first), unless it already holds ``\\boxed{}``."""
    s = str(answer).strip()
    if "\\boxed" in s:
        return s
    s = s.strip("$").strip()
    return f"${s}$"


class _Proc:
    def __init__(self, internal_timeout: int):
        self.internal_timeout = internal_timeout
        self.proc: subprocess.Popen | None = None

    def start(self, start_timeout: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE, str(self.internal_timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
            start_new_session=True,
        )
        line = self._readline(time.monotonic() + start_timeout)
        if line != "ready":
            self.kill()
            raise RuntimeError("the math-verify worker failed to start (is math-verify installed?)")

    def _readline(self, deadline: float) -> str | None:
        assert self.proc is not None and self.proc.stdout is not None
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([self.proc.stdout], [], [], left)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line.strip() if line else None

    def ask(self, gold: str, pred: str, timeout: float) -> bool | None:
        """True/False, or None when the worker timed out or died (the caller then kills it)."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps([gold, pred]) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._readline(time.monotonic() + timeout)
        if line not in ("0", "1"):
            return None
        return line == "1"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, wait_s=5)


def _kill_all(procs: list[_Proc]) -> None:
    for p in procs:
        p.kill()


class MathVerifier(WorkerPool):
    """A pool of math-verify worker processes with a hard per-comparison timeout; thread-safe.

    Args:
        num_workers: comparisons that may run at once (each worker is one process, ~100 MB).
        timeout_s: wall-clock limit of one comparison; past it the worker is killed and replaced, and the
            answer counts as not equivalent.
        cache_size: remembered ``(gold, prediction)`` results (a group of rollouts often repeats answers).
        start_timeout_s: how long a worker may take to import math-verify.
        internal_timeout_s: math-verify's own (signal-based) parse/verify timeouts inside a worker, in whole
            seconds; default ``max(1, int(timeout_s) - 1)`` so it usually answers before the hard kill.

    Workers start on first use; :meth:`close` (or garbage collection, or interpreter exit) stops them.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, cache_size: int = 4096,
                 start_timeout_s: float = 60.0, internal_timeout_s: int | None = None):
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        internal = internal_timeout_s if internal_timeout_s is not None else max(1, int(timeout_s) - 1)
        self._procs = [_Proc(internal) for _ in range(num_workers)]
        self._free: queue.SimpleQueue[_Proc] = queue.SimpleQueue()
        for p in self._procs:
            self._free.put(p)
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.timeouts = 0
        """Comparisons that hit ``timeout_s`` (their workers were killed)."""
        self._closed = False
        self._finalizer = weakref.finalize(self, _kill_all, self._procs)

    def equal(self, prediction: str, gold: str) -> bool:
        """Whether ``prediction`` is mathematically equivalent to ``gold`` (False on timeout or parse failure)."""
        prediction, gold = str(prediction).strip(), str(gold).strip()
        if not prediction or not gold:
            return False
        if prediction == gold:
            return True
        if _PLAIN_INT.match(prediction) and _PLAIN_INT.match(gold):
            return int(prediction) == int(gold)
        key = (gold, prediction)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        result = self._ask(wrap_latex(gold), wrap_latex(prediction))
        with self._lock:  # a timeout is remembered too: the same pair would hang again
            self._cache[key] = bool(result)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return bool(result)

    def _ask(self, gold: str, pred: str) -> bool | None:
        proc = self._free.get()
        try:
            if not proc.alive:
                proc.kill()
                proc.start(self.start_timeout_s)
            result = proc.ask(gold, pred, self.timeout_s)
            if result is None:
                with self._lock:
                    self.timeouts += 1
                logger.info("math-verify gave no answer within %.1fs for %r vs %r; worker replaced",
                            self.timeout_s, pred[:80], gold[:80])
                proc.kill()
            return result
        finally:
            self._free.put(proc)


_DEFAULT: ProcessDefault[MathVerifier] = ProcessDefault(MathVerifier)


def default_verifier() -> MathVerifier:
    """The process-wide shared :class:`MathVerifier`, created on first use (again after a close)."""
    return _DEFAULT.get()


def math_equal(prediction: str, gold: str) -> bool:
    """Equivalence through the shared :func:`default_verifier` (a hang or a timeout counts as False)."""
    return default_verifier().equal(prediction, gold)
