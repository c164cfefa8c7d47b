"""The bubblewrap command line of a worker: mounts, namespaces, the sandbox environment, per-slot uids."""

from __future__ import annotations

import functools
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

from agentrl.envs.sandbox.config import SandboxConfig, SandboxError

# ---------------------------------------------------------------------------------------------- uid slots

_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set[int] = set()


def _take_uid(base: int) -> int:
    """A uid no other slot of this process uses (base, base-1, ...), so RLIMIT_NPROC budgets stay apart."""
    with _UID_LOCK:
        uid = base
        while uid in _UIDS_IN_USE:
            uid -= 1
        if uid < 1000:
            raise SandboxError("ran out of sandbox uids; close unused Sandbox objects")
        _UIDS_IN_USE.add(uid)
        return uid


def _release_uid(uid: int) -> None:
    with _UID_LOCK:
        _UIDS_IN_USE.discard(uid)


# ---------------------------------------------------------------------------------------------- command line


def bwrap_available() -> bool:
    """Whether the ``bwrap`` executable is on ``PATH``."""
    return shutil.which("bwrap") is not None


_ASK_PATHS = ("import json, site, sys, sysconfig\n"
              "p = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]\n"
              "p += [sysconfig.get_path(k) for k in ('stdlib', 'platstdlib', 'purelib', 'platlib')]\n"
              "p += site.getsitepackages()\n"
              "print(json.dumps(p))")


@functools.lru_cache(maxsize=16)
def _paths_of_other_interpreter(python: str) -> tuple[str, ...]:
    """The prefixes and site-packages of an interpreter other than ours, as it reports them (``-I``, as the
    worker runs)."""
    try:
        out = subprocess.run([python, "-I", "-c", _ASK_PATHS], capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=True)
        return tuple(p for p in json.loads(out.stdout) if isinstance(p, str))
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise SandboxError(f"cannot ask the sandbox interpreter {python!r} for its paths: {e}") from None


def _interpreter_paths(python: str) -> list[str]:
    """Host directories the interpreter needs: its prefixes and site-packages (deduplicated, existing).

    A ``python`` other than the running one (another virtualenv, even one over the same base interpreter) is
    asked for its own paths."""
    real = os.path.realpath(python)
    cands = [os.path.dirname(os.path.dirname(real))]
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        cands += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        cands += [sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        try:
            cands += site.getsitepackages()
        except AttributeError:
            pass
        user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
        if user_site:
            cands.append(user_site)
    else:
        cands += _paths_of_other_interpreter(python)
    out: list[str] = []
    for p in cands:
        if not p or not os.path.isdir(p):
            continue
        p = os.path.realpath(p)
        if any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            continue
        out = [q for q in out if not q.startswith(p.rstrip("/") + "/")] + [p]
    return out


_SYSTEM_DIRS = ("/usr", "/etc")
_MERGED_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def build_bwrap_command(cfg: SandboxConfig, uid: int, python: str, worker_args: list[str]) -> tuple[list[str], dict]:
    """The bubblewrap command line of one worker, and the worker's file-system facts (workdir, wipe list)."""
    args = ["bwrap"]
    for d in _SYSTEM_DIRS:
        if os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for link in _MERGED_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    tmp_bytes = str(cfg.tmp_size_mb * 1024 * 1024)
    args += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    args += ["--dev", "/dev", "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    binds = _interpreter_paths(python) + [os.path.realpath(p) for p in cfg.extra_ro_paths]
    made: set[str] = {"/", "/tmp", "/dev", "/proc", *_SYSTEM_DIRS}
    keep_in_tmp: list[str] = []
    for p in binds:
        if any(p == d or p.startswith(d + "/") for d in _SYSTEM_DIRS):
            continue  # already visible read-only
        for anc in _ancestors(p):
            if anc in made or any(anc.startswith(d + "/") for d in _SYSTEM_DIRS):
                continue
            # Directories bwrap creates on the way are 0700 by default, which the unprivileged uid cannot
            # traverse (the interpreter under /root/.pyenv would not start): make them 0755, empty.
            args += ["--perms", "0755", "--dir", anc]
            made.add(anc)
        args += ["--ro-bind", p, p]
        made.add(p)
        if p.startswith("/tmp/"):
            keep_in_tmp.append(p)
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--hostname", "sandbox", "--new-session", "--die-with-parent", "--clearenv"]
    for k, v in _sandbox_env(python).items():
        args += ["--setenv", k, v]
    if os.geteuid() != 0:
        # Unprivileged: a user namespace maps us to `uid` inside; no nested namespaces for the code.
        args += ["--unshare-user", "--uid", str(uid), "--gid", str(uid), "--disable-userns"]
    args += ["--chdir", "/tmp", "--"]
    if os.geteuid() == 0:
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs"]
    args += [python, "-I", *worker_args]
    facts = {"workdir": "/tmp", "wipe": ["/tmp", "/dev/shm"], "keep": sorted(keep_in_tmp),
             "own_pid_namespace": True}
    return args, facts


def _sandbox_env(python: str) -> dict[str, str]:
    env = {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
    }
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
        env[k] = "1"
    return env
