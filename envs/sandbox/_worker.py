"""The warm worker that runs inside the sandbox (standard library only; never imported by agentrl).

:mod:`agentrl.envs.sandbox` starts this file's source with ``python -I -c <source> <config-json>`` inside
bubblewrap, already dropped to an unprivileged uid. The worker imports the configured modules once (numpy,
sympy, ...), then serves requests read from fd 0 and answers on fd 1, both as frames: a 4-byte big-endian
length followed by UTF-8 JSON. For every request it forks a fresh child that

* starts a new session (so the child and its descendants form one process group),
* gets its own rlimits (CPU seconds, address space, file size, processes, open files, no core files),
* reads stdin from, and writes stdout/stderr to, anonymous temp files (``O_TMPFILE``) in the private ``/tmp``,
  both line-buffered, so what a program printed before it was killed (a timeout) is in the files,
* executes the code as ``python -c`` would (fresh ``__main__``, ``sys.argv == ['-c']``).

The worker waits for the child with a wall-clock deadline, kills the whole process group when it passes, then
kills every other process left in the sandbox (detached daemons included), reaps them, reads at most
``max_output_bytes`` from the *tail* of each output file, and deletes everything the code left in ``/tmp`` and
``/dev/shm``, so the next execution starts from a clean state.

The worker makes itself non-dumpable, so code running as the same uid cannot ptrace it or open its
``/proc/<pid>/fd`` entries (where the pipes to the trainer are); it can still kill the worker, in which case the
trainer side sees end-of-file and starts a new one.
"""

import errno
import json
import os
import select
import signal
import struct
import sys
import time

_HEADER = struct.Struct(">I")
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_SIGNAL_NOTES = {
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGXFSZ: "output/file size limit exceeded",
    signal.SIGKILL: "killed",
    signal.SIGSEGV: "segmentation fault (possibly the memory limit)",
}


def _prctl(option, value):
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0)
    except Exception:  # best effort: a missing prctl only weakens defence in depth
        return -1


def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, n - got)
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _read_frame(fd):
    head = _read_exact(fd, _HEADER.size)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    body = _read_exact(fd, n)
    return None if body is None else json.loads(body.decode("utf-8"))


def _write_frame(fd, obj):
    body = json.dumps(obj).encode("utf-8")
    data = _HEADER.pack(len(body)) + body
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _tail(fd, cap):
    """(text, total_bytes, truncated) — at most ``cap`` bytes from the end of the file behind ``fd``."""
    size = os.fstat(fd).st_size
    start = max(0, size - cap)
    os.lseek(fd, start, os.SEEK_SET)
    data = b""
    while len(data) < size - start:
        b = os.read(fd, size - start - len(data))
        if not b:
            break
        data += b
    return data.decode("utf-8", errors="replace"), size, start > 0


def _anon_file(workdir):
    try:
        return os.open(workdir, os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError:  # a filesystem without O_TMPFILE: create and unlink at once
        path = os.path.join(workdir, f".sbx-{os.getpid()}-{time.monotonic_ns()}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
        return fd


def _wipe(path, keep=()):
    """Delete everything under ``path`` (not ``path`` itself), except the paths in ``keep`` (the read-only
    mounts of the interpreter) and the directories that lead to them, which are wiped around them."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        full = entry.path
        if full in keep:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                try:
                    os.chmod(full, 0o700)
                except OSError:
                    pass
                _wipe(full, keep)
                if not any(k.startswith(full + "/") for k in keep):
                    os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------- the child


def _child(req, cfg, fds):
    """Runs in the forked child; never returns."""
    rc = 1
    try:
        os.setsid()
        in_fd, out_fd, err_fd = fds
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 65536)
        for stream in (sys.stdout, sys.stderr):  # a killed child loses at most an unfinished line
            stream.reconfigure(line_buffering=True)
        import resource

        limits = req["limits"]
        cpu = int(limits["cpu_s"])
        for res, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (limits["memory_bytes"],) * 2),
            (resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2),
            (resource.RLIMIT_NPROC, (limits["max_processes"],) * 2),
            (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            try:
                resource.setrlimit(res, value)
            except (ValueError, OSError):
                if res in (resource.RLIMIT_CPU, resource.RLIMIT_AS):
                    raise
        os.chdir(cfg["workdir"])
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if "numpy" in sys.modules:  # forked children would otherwise share the worker's global RNG state
            try:
                sys.modules["numpy"].random.seed()
            except Exception:
                pass
        rc = _run_code(req["code"])
    except BaseException:  # a failure before the code ran (e.g. an rlimit the kernel refused)
        try:
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(rc)


def _run_code(code):
    import builtins
    import linecache
    import traceback
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    lines = code.splitlines(True)
    linecache.cache["<string>"] = (len(code), None, lines, "<string>")  # tracebacks show the offending line
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        rc = 0
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this frame
        if isinstance(e, SyntaxError):
            tb = None
        traceback.print_exception(type(e), e, tb)
        rc = 1
    try:
        import threading

        threading._shutdown()  # wait for non-daemon threads, as the interpreter does at exit
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    return rc


# ---------------------------------------------------------------------------------------------- the worker


def _living_children():
    me = str(os.getpid())
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == me:
            pids.append(int(name))
    return pids


def _kill_everything_else(cfg):
    """Kill and reap every process the code left behind (the worker is their subreaper)."""
    for _ in range(1000):
        if cfg["own_pid_namespace"] and os.getuid() != 0:
            try:
                os.kill(-1, signal.SIGKILL)  # every process of this uid in this pid namespace but us
            except ProcessLookupError:
                pass
        else:  # no pid namespace of our own: only the worker's own descendants (reparented to it)
            for pid in _living_children():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        reaped_any = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            reaped_any = True
        if not reaped_any:
            time.sleep(0.001)


def _execute(req, cfg):
    workdir = cfg["workdir"]
    fds = [_anon_file(workdir) for _ in range(3)]
    in_fd, out_fd, err_fd = fds
    stdin = req.get("stdin")
    if stdin:
        os.write(in_fd, stdin.encode("utf-8"))
        os.lseek(in_fd, 0, os.SEEK_SET)
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in fds:
            os.close(fd)
        return {"status": "sandbox_error", "returncode": None, "stdout": "", "stderr": f"fork failed: {e}",
                "stdout_bytes": 0, "stderr_bytes": 0, "truncated": False, "exec_s": 0.0}
    if pid == 0:
        _child(req, cfg, fds)
    timed_out = False
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    deadline = t0 + float(req["timeout"])
    status_word = None
    while status_word is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if pidfd is not None:
            try:
                select.select([pidfd], [], [], left)
            except InterruptedError:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                status_word = status
        else:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                status_word = status
            else:
                time.sleep(min(left, 0.002))
    if status_word is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status_word = os.waitpid(pid, 0)
    exec_s = time.monotonic() - t0
    if pidfd is not None:
        os.close(pidfd)
    _kill_everything_else(cfg)

    cap = int(cfg["max_output_bytes"])
    stdout, out_bytes, out_trunc = _tail(out_fd, cap)
    stderr, err_bytes, err_trunc = _tail(err_fd, cap)
    for fd in fds:
        os.close(fd)
    for path in cfg["wipe"]:
        _wipe(path, keep=cfg["keep"])

    if os.WIFSIGNALED(status_word):
        rc = -os.WTERMSIG(status_word)
    else:
        rc = os.WEXITSTATUS(status_word)
    if timed_out:
        status = "timeout"
    elif rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and exec_s >= float(req["limits"]["cpu_s"])):
        status = "timeout"
    elif rc == 0:
        status = "ok"
    else:
        status = "error"
    if rc < 0 and not timed_out:
        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        note = _SIGNAL_NOTES.get(sig, "terminated")
        stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "")
                  + f"Process terminated by {name} ({note}).\n")
    return {"status": status, "returncode": rc, "stdout": stdout, "stderr": stderr, "stdout_bytes": out_bytes,
            "stderr_bytes": err_bytes, "truncated": out_trunc or err_trunc, "exec_s": exec_s}


def main():
    cfg = json.loads(sys.argv[1])
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # stray prints of the preloaded modules must not corrupt the frame stream
    os.close(devnull)
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    # What every child needs, imported once here rather than in each child.
    import atexit  # noqa: F401
    import builtins  # noqa: F401
    import importlib
    import importlib.util
    import linecache  # noqa: F401
    import resource  # noqa: F401
    import threading  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401

    loaded = []

    for name in cfg["preload"]:
        try:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
                loaded.append(name)
        except Exception as e:  # an optional module that fails to import is simply not preloaded
            print(f"sandbox worker: preloading {name} failed: {e!r}", file=sys.stderr)
    _write_frame(wfd, {"ready": True, "preloaded": loaded, "pid": os.getpid(), "uid": os.getuid()})
    while True:
        try:
            req = _read_frame(rfd)
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            return
        if req is None:
            return
        _write_frame(wfd, _execute(req, cfg))


if __name__ == "__main__":
    main()
