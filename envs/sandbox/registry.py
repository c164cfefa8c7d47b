"""The sandbox registry: :data:`SANDBOXES` and :func:`make_sandbox` (a sandbox by name, shared per config).

============  ===================================================================================
``bwrap``     :class:`~agentrl.envs.sandbox.pool.Sandbox`: local bubblewrap workers (the default).
``remote``    :class:`~agentrl.envs.sandbox.remote.RemoteSandbox`: a SandboxFusion service
              (``sandbox_kwargs={"url": "http://host:8080"}``).
============  ===================================================================================

The code envs take ``sandbox="remote"`` (a name) plus ``sandbox_kwargs={...}`` (the constructor's keyword
arguments), so JSON env kwargs (``--env-kwargs``, configs) can choose one. A third party adds a sandbox with
:func:`register_sandbox` or an entry point in the group ``agentrl.sandboxes``; what it makes must have the
:class:`~agentrl.envs.sandbox.protocol.CodeSandbox` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.envs.plugins import Registry, class_or_factory
from agentrl.envs.sandbox import bwrap
from agentrl.envs.sandbox.config import SandboxUnavailable
from agentrl.envs.sandbox.pool import Sandbox, default_sandbox
from agentrl.envs.sandbox.protocol import CodeSandbox

__all__ = ["SANDBOXES", "check_sandbox", "make_sandbox", "register_sandbox"]

#: Sandbox name -> a class (or factory) whose keyword arguments are ``sandbox_kwargs``; the contract: a class
#: with the :class:`CodeSandbox` methods, or a factory (what it makes is checked by :func:`make_sandbox`).
SANDBOXES: Registry[Callable[..., CodeSandbox]] = Registry("sandbox", "agentrl.sandboxes", {
    "bwrap": "agentrl.envs.sandbox.pool:Sandbox",
    "remote": "agentrl.envs.sandbox.remote:RemoteSandbox",
}, contract=class_or_factory(CodeSandbox))


def register_sandbox(name: str, sandbox: Callable[..., CodeSandbox] | str) -> None:
    """Make ``sandbox=name`` build ``sandbox`` (a class or factory, or its ``"module:Attr"`` import path) with
    the env's ``sandbox_kwargs``; it replaces a built-in of the same name."""
    SANDBOXES.register(name, sandbox)


#: What a code env without bubblewrap says (one line): the install command or the two alternatives as env kwargs.
NO_BWRAP = ("bubblewrap (bwrap) is not installed, so model-written code cannot run isolated: install it "
            "(`sudo apt-get install -y bubblewrap`), or run code on a SandboxFusion service "
            "(env kwargs {\"sandbox\": \"remote\", \"sandbox_kwargs\": {\"url\": \"http://HOST:8080\"}}), or, only for "
            "trusted code, without isolation ({\"sandbox_kwargs\": {\"isolation\": \"none\"}}); see "
            "docs/sandbox-security.md")


def check_sandbox(sandbox: str | CodeSandbox | None = "bwrap", sandbox_kwargs: dict[str, Any] | None = None) -> None:
    """Refuse at once a sandbox that cannot run code here: the bubblewrap ``"bwrap"`` (the default, ``None``)
    without the ``bwrap`` executable, unless ``sandbox_kwargs`` asks for ``isolation="none"``. Other sandboxes
    and instances are not checked (a remote one is reached on first use).

    Raises:
        SandboxUnavailable: with :data:`NO_BWRAP`, the install line and the alternatives.
    """
    if sandbox is not None and not isinstance(sandbox, str):
        return
    name = "bwrap" if sandbox is None else sandbox
    if name not in SANDBOXES or SANDBOXES.get(name) is not Sandbox:
        return
    if (sandbox_kwargs or {}).get("isolation", "bwrap") == "bwrap" and not bwrap.bwrap_available():
        raise SandboxUnavailable(NO_BWRAP)


def make_sandbox(sandbox: str | CodeSandbox = "bwrap", *, shared: bool = True, **config: Any) -> CodeSandbox:
    """A sandbox by name (built with ``config``) or the instance given.

    With ``shared=True`` (the default) one instance per (name, config) serves the whole process (made again
    once closed), so its concurrency limit and stats hold across every env that uses it; ``"bwrap"`` without
    config is the process-wide :func:`~agentrl.envs.sandbox.pool.default_sandbox`.

    Raises:
        ValueError: an unknown name (the message lists the registered ones), or ``config`` with an instance.
        TypeError: what the name made lacks the :class:`CodeSandbox` protocol.
    """
    if not isinstance(sandbox, str):
        if config:
            raise ValueError("sandbox_kwargs apply to a sandbox name, not to a sandbox instance")
        return sandbox
    factory = SANDBOXES.get(sandbox)
    if factory is Sandbox and not config and shared:
        return default_sandbox()
    inst = SANDBOXES.make(sandbox, shared=shared, **config)
    if not isinstance(inst, CodeSandbox):
        raise TypeError(f"sandbox {sandbox!r} made a {type(inst).__name__}, without the CodeSandbox "
                        "protocol (config.timeout_s, config.max_concurrency, run, stats, close)")
    return inst
