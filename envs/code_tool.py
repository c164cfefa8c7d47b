"""The sandboxed ``code_interpreter(code)`` tool and :class:`CodeToolEnv`, the base of the envs that offer it
(``AgentRL/PythonMath-v0``, ``AgentRL/Coding-v0``).

Every call runs in a fresh, isolated process (:mod:`agentrl.envs.sandbox`). The observation is the program's
stdout on success; on an error, what it printed before failing followed by the traceback; on a timeout, what it
printed before it was stopped followed by a timeout notice (:func:`exec_observation`).
Each call counts ``code_calls``, ``exec_ok`` / ``exec_error`` / ``exec_timeout`` and ``exec_latency_s`` in
the episode's metrics; a failed execution is a tool error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.envs.core import Budgets, Rewards, TextEnv
from agentrl.envs.parsing import ActionParser, FencedCodeCalls, HermesCalls
from agentrl.envs.sandbox import registry as sandboxes
from agentrl.envs.sandbox.config import ExecResult
from agentrl.envs.sandbox.protocol import CodeSandbox
from agentrl.envs.tools import Tool, ToolResult, ToolSet, ToolUnavailable, tool

#: The metric keys every execution counts (set to 0 at each reset by :class:`CodeToolEnv`).
EXEC_METRICS: dict[str, float] = {"code_calls": 0, "exec_ok": 0, "exec_error": 0, "exec_timeout": 0,
                                  "exec_latency_s": 0.0}
_STATUS_METRIC = {"ok": "exec_ok", "timeout": "exec_timeout"}


def exec_observation(result: ExecResult, timeout_s: float) -> str:
    """The observation text of one execution, as a notebook cell would show it.

    * ok: stdout (a hint to print() when there is none);
    * error: stdout so far, then stderr (the traceback), or ``Error: the program exited with status N.`` when
      stderr is empty;
    * timeout: stdout and stderr so far, then ``Error: the code did not finish within T seconds and was
      stopped.`` (output is line-buffered, so every finished line printed before the kill is there);
    * sandbox_error: a fixed message.

    The streams come back tail-capped by the sandbox (``max_output_bytes``); the env cuts the whole
    observation to ``max_obs_chars`` from the head, so the end (the traceback, the notice) survives.
    """
    if result.status == "ok":
        return result.stdout if result.stdout.strip() else "[no output: print() the values you want to see]"
    if result.status == "sandbox_error":
        return "Error: the code could not be run to completion (the interpreter was stopped)."
    if result.status == "timeout":
        printed = _join(result.stdout, result.stderr)
        return _join(printed, f"Error: the code did not finish within {timeout_s:g} seconds and was stopped.")
    tail = result.stderr if result.stderr.strip() else f"Error: the program exited with status {result.returncode}."
    return _join(result.stdout, tail)


def _join(first: str, second: str) -> str:
    """``first`` then ``second``, on a new line when ``first`` does not end with one."""
    if not first:
        return second
    return first + ("" if first.endswith("\n") else "\n") + second


def recovered_from_error(history: Sequence[str]) -> bool:
    """Whether an execution failed (error or timeout) and a later one succeeded."""
    first_fail = next((i for i, s in enumerate(history) if s != "ok"), None)
    return first_fail is not None and "ok" in history[first_fail + 1:]


class CodeInterpreter:
    """The state behind one ``code_interpreter`` tool: the sandbox, the time limit, the statuses so far.

    Args:
        sandbox: where code runs: any :class:`~agentrl.envs.sandbox.protocol.CodeSandbox` (e.g. a
            :class:`~agentrl.envs.sandbox.remote.RemoteSandbox`), or a name in
            :data:`~agentrl.envs.sandbox.registry.SANDBOXES` (``"bwrap"``, ``"remote"``, or registered) built
            with ``sandbox_kwargs``; default ``"bwrap"``: without ``sandbox_kwargs`` the process-wide
            :func:`~agentrl.envs.sandbox.pool.default_sandbox`. Made on first use, one per name and kwargs.
        timeout_s: wall-clock limit of one execution; default the sandbox's ``config.timeout_s``.
        sandbox_kwargs: keyword arguments of the named sandbox (JSON-able, e.g. ``{"url": ...}``).

    Raises:
        ValueError: an unknown sandbox name, or ``sandbox_kwargs`` with a sandbox instance.
    """

    def __init__(self, sandbox: CodeSandbox | str | None = None, timeout_s: float | None = None,
                 sandbox_kwargs: dict[str, Any] | None = None):
        if isinstance(sandbox, str) and sandbox not in sandboxes.SANDBOXES:
            sandboxes.SANDBOXES.get(sandbox)  # raises, naming the registered sandboxes
        if sandbox_kwargs and sandbox is not None and not isinstance(sandbox, str):
            raise ValueError("sandbox_kwargs apply to a sandbox name, not to a sandbox instance")
        self._sandbox: CodeSandbox | str = "bwrap" if sandbox is None else sandbox
        self._sandbox_kwargs = dict(sandbox_kwargs or {})
        self.timeout_s = timeout_s
        self.history: list[str] = []
        """The status of every execution since the last :meth:`reset` (``"ok"``, ``"error"``, ...)."""

    @property
    def sandbox(self) -> CodeSandbox:
        if isinstance(self._sandbox, str):
            self._sandbox = sandboxes.make_sandbox(self._sandbox, **self._sandbox_kwargs)
        return self._sandbox

    def reset(self) -> None:
        self.history = []

    def run(self, code: str) -> ToolResult:
        """Run Python code and return what it prints. Each run starts fresh: no variables, files or imports persist.

        Args:
            code: a complete Python program; print() the values you want to see.
        """
        try:
            sandbox = self.sandbox
            timeout = sandbox.config.timeout_s if self.timeout_s is None else self.timeout_s
            result = sandbox.run(code, timeout=timeout)
        except Exception as e:  # the sandbox itself is broken: an infrastructure fault, not the agent's
            raise ToolUnavailable(f"the code sandbox failed: {type(e).__name__}: {e}") from e
        self.history.append(result.status)
        metrics = {"code_calls": 1, "exec_latency_s": result.latency_s,
                   _STATUS_METRIC.get(result.status, "exec_error"): 1}
        return ToolResult(exec_observation(result, timeout), error_kind=None if result.ok else result.status,
                          metrics=metrics)

    def as_tool(self) -> Tool:
        """This interpreter as the ``code_interpreter`` tool."""
        return tool(self.run, name="code_interpreter")


#: A stand-alone ``code_interpreter`` on the shared :func:`~agentrl.envs.sandbox.pool.default_sandbox`,
#: e.g. for ``AgentRL/ToolUse-v0(tools=[code_interpreter, ...])``; code envs build their own on their sandbox.
code_interpreter: Tool = CodeInterpreter().as_tool()


class CodeToolEnv(TextEnv):
    """A :class:`TextEnv` whose one tool, ``code_interpreter(code)``, runs in a sandbox (a
    :class:`~agentrl.envs.sandbox.protocol.CodeSandbox`: the local bubblewrap ``"bwrap"`` by default, or e.g.
    ``sandbox="remote", sandbox_kwargs={"url": ...}``; see :class:`CodeInterpreter`).

    The tool adds the execution metrics (``code_calls``, ``exec_ok``, ``exec_error``, ``exec_timeout``,
    ``exec_latency_s``) to ``info["metrics"]``; the statuses of the episode's executions are in
    ``self.exec_history`` for subclasses.

    Raises:
        SandboxUnavailable: the default bubblewrap sandbox without ``bwrap`` installed (the message gives the
            install line and the alternatives, :func:`~agentrl.envs.sandbox.registry.check_sandbox`).
    """

    def __init__(self, *, sandbox: CodeSandbox | str | None, code_timeout_s: float, call_format: str,
                 answer: str, budgets: Budgets, rewards: Rewards, tools_in_prompt: bool,
                 render_mode: str | None, sandbox_kwargs: dict[str, Any] | None = None):
        if call_format == "hermes":
            calls = HermesCalls()
        elif call_format == "fenced":
            calls = FencedCodeCalls(tool="code_interpreter", argument="code")
        else:
            raise ValueError(f"call_format must be 'hermes' or 'fenced', got {call_format!r}")
        if code_timeout_s <= 0:
            raise ValueError("code_timeout_s must be positive")
        self.code_timeout_s = float(code_timeout_s)
        sandboxes.check_sandbox(sandbox, sandbox_kwargs)  # no bubblewrap: refuse now, not at every code call
        self.interpreter = CodeInterpreter(sandbox, self.code_timeout_s, sandbox_kwargs)
        super().__init__(tools=ToolSet([self.interpreter.as_tool()]), parser=ActionParser(calls=calls, answer=answer),
                         budgets=budgets, rewards=rewards, tools_in_prompt=tools_in_prompt,
                         render_mode=render_mode)

    @property
    def sandbox(self) -> CodeSandbox:
        """The sandbox the code runs in (the shared default sandbox unless one was chosen)."""
        return self.interpreter.sandbox

    @property
    def exec_history(self) -> list[str]:
        """The status of each execution of this episode."""
        return self.interpreter.history

    def on_reset(self, task: dict[str, Any]) -> None:
        self.interpreter.reset()
        self.metrics.extra.update(EXEC_METRICS)
