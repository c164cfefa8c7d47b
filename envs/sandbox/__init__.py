"""An isolated, fast Python sandbox for model-written code (bubblewrap + a warm, forking worker).

    from agentrl.envs import Sandbox

    with Sandbox() as sb:
        r = sb.run("import numpy as np; print(np.arange(4).sum())", timeout=5)
        r.status, r.stdout          # ('ok', '6\\n')
        sb.stats()                  # calls, ok, errors, timeouts, latency percentiles, ...

Isolation (``isolation="bwrap"``, the default; see ``docs/sandbox-security.md``)
    Each :class:`Sandbox` keeps up to ``max_concurrency`` warm workers. A worker is one bubblewrap sandbox:
    new pid, network, ipc, uts (and cgroup) namespaces — so no network at all, not even loopback to the host;
    a read-only view of ``/usr``, ``/etc`` and the interpreter's prefix (the trainer's own Python, so numpy and
    sympy are there when installed); ``/root``, ``/home``, the project tree and the rest of the host file
    system absent; private size-capped tmpfs at ``/tmp`` and ``/dev/shm``; minimal ``/dev`` and ``/proc``; no
    ``/sys``; a new session; death with the parent; an empty environment (``PATH``, ``HOME=/tmp``, ``LANG``
    and thread caps of 1 for OpenMP/OpenBLAS/MKL only). As root, mounts are made as root, then ``setpriv``
    drops to an unprivileged uid with no capabilities and ``no_new_privs`` as the very last step (the user
    namespace is *not* unshared: with it, switching to the unprivileged uid fails). As an ordinary user,
    bubblewrap also unshares the user namespace and maps the user to the unprivileged uid inside it (this
    needs unprivileged user namespaces, on by default in current distributions); nested user namespaces are
    disabled.

Speed
    Interpreter start-up dominates a call, so the worker starts once, pre-imports ``preload`` modules (numpy,
    sympy when installed), and forks a fresh child per execution. Every execution still starts from a clean
    state — a new process with a fresh ``__main__``, its own rlimits, its own session — and afterwards every
    process it left behind is killed and everything it wrote to ``/tmp`` and ``/dev/shm`` is deleted.

Limits (per execution)
    wall-clock ``timeout`` (the process group is killed, then the rest of the sandbox's processes), CPU
    seconds, address space, file size, process count (``RLIMIT_NPROC`` counts per uid host-wide, so every
    worker slot runs under its own uid), open files; output goes to temp files and only the last
    ``max_output_bytes`` of each stream come back, so a program that prints forever cannot fill the trainer's
    memory. Output is sanitised (:func:`sanitize_output`) so chat-template special tokens cannot be smuggled
    into the conversation.

``isolation="none"`` runs the same worker as a plain subprocess (empty environment, rlimits, process-group
kill, private working directory) but with **no** file-system, network or user isolation; it must be asked for
explicitly and logs a warning. Without bubblewrap the default refuses with :class:`SandboxUnavailable`, whose
message says how to install it.

Any object with the :class:`CodeSandbox` protocol (``config.timeout_s``, ``config.max_concurrency``, ``run``,
``stats``, ``close``) can be given to the code envs' ``sandbox=``; :class:`RemoteSandbox` runs code on a
SandboxFusion service (macOS, clusters without bubblewrap).
"""
