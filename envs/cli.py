"""``agentrl-env``: list the environments, play one by hand, and (with the search env) serve a retriever.

    agentrl-env list [--knobs]
    agentrl-env play AgentRL/ToolUse-v0 [--seed 0 | --task-id ID] [--env-kwargs '{"families": ["multiply"]}']
    agentrl-env serve-retriever [--corpus docs.jsonl] [--host 127.0.0.1] [--port 8000] [--cache-dir DIR]
    agentrl-env serve AgentRL/ToolUse-v0 --openenv [--host 127.0.0.1] [--port 8000] [--env-kwargs JSON]
                                                   [--max-sessions 64]

Each subcommand is a function ``cmd_<name>(args)`` plus its parser in :func:`build_parser`. A mistake of the
user's (bad JSON, an unknown id, a keyword the env refuses, a missing extra) ends in one line on stderr,
``agentrl-env <command>: error: ...``, and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import textwrap
from typing import Any

import gymnasium as gym

import agentrl.envs
from agentrl.envs import ENVS
from agentrl.envs.plugins import env_kwargs_problem

gym.register_envs(agentrl.envs)

TASK_ID_SEARCH = 2000
"""How many test tasks, then seeds, ``play --task-id`` looks through for the id."""


class UsageError(Exception):
    """A mistake in what the user typed; :func:`main` prints it as one line and exits with 2."""


class _Parser(argparse.ArgumentParser):
    """argparse without prefix matching (a mistyped flag is an error, never silently a longer one), whose errors
    are one line naming the command (``agentrl-env play: error: ...``), without the usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _env_table() -> dict[str, tuple[str, str]]:
    """The built-in environments, then those added by ``register_env`` or an entry point."""
    return {**ENVS, **agentrl.envs._ADDED}


def _env_id(text: str) -> str:
    """An env argument: a registered id, or ``package.module:Env-v0`` / ``package.module:factory``
    (:func:`agentrl.envs.register_env_ref`)."""
    try:
        agentrl.envs.register_env_ref(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if (text.partition(":")[2] if ":" in text else text) in gym.registry:
        return text
    close = closest_id(text, list(gym.registry))
    hint = f"did you mean {close!r}? " if close else ""
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; {hint}registered: {', '.join(_env_table())} (your own: "
        "'package.module:Env-v0' registered on import, or 'package.module:factory', an env class or a function "
        "returning an env)")


def closest_id(text: str, ids: list[str]) -> str | None:
    """The registered id ``text`` most likely meant: the closest by spelling, else ignoring case (``Tooluse-v0``,
    ``agentrl/tooluse-v0`` -> ``AgentRL/ToolUse-v0``), else one that differs only in its namespace
    (``ToolUse-v0``); None when nothing is close."""
    import difflib

    close = difflib.get_close_matches(text, ids, n=1, cutoff=0.8)
    if close:
        return close[0]
    lower = {i.lower(): i for i in ids}
    close = difflib.get_close_matches(text.lower(), list(lower), n=1, cutoff=0.6)
    if close:
        return lower[close[0]]
    named = [i for i in ids if i.rpartition("/")[2].lower() == text.rpartition("/")[2].lower()]
    return named[0] if named else None


def env_knobs(entry: Any) -> dict[str, str]:
    """The difficulty knobs an env declares (``TextEnv.difficulty_knobs``: keyword -> what turning it does); {} for
    one that declares none or whose module does not import here (a missing extra)."""
    from gymnasium.envs.registration import load_env_creator

    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # an env whose extra is missing lists no knobs; `list` lists it anyway
        return {}
    knobs = getattr(creator, "difficulty_knobs", None)
    return {str(k): str(v) for k, v in knobs.items()} if isinstance(knobs, dict) else {}


def cmd_list(args: argparse.Namespace) -> int:
    table = _env_table()
    width = max(map(len, table))
    for env_id, (entry, description) in table.items():
        print(f"{env_id:<{width}}  {description or entry}")
        if getattr(args, "knobs", False):
            knobs = env_knobs(entry)
            print("    difficulty knobs (env_kwargs):" if knobs else "    difficulty knobs: none declared")
            kw = max(map(len, knobs), default=0)
            for key, what in knobs.items():
                print(textwrap.fill(what, 116, initial_indent=f"      {key:<{kw}}  ", subsequent_indent=" " * (kw + 8)))
    return 0


def _read_reply(prompt: str) -> str | None:
    """Read one assistant reply: lines until a line with a single '.', or EOF."""
    print(prompt, end="", flush=True)
    lines = []
    for line in sys.stdin:
        if line.rstrip("\n") == ".":
            break
        lines.append(line)
    else:
        if not lines:
            return None
    return "".join(lines).rstrip("\n")


def json_object(text: str) -> dict[str, Any]:
    """``--env-kwargs '{"families": ["multiply"]}'`` -> a dict; anything else is a one-line usage error."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed ({{\"key\": value, ...}}), got {text!r}")
    return value


def _make(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gym.make(env_id, **kwargs)`` (a module:factory id was registered by :func:`_env_id`); a keyword or value
    the env refuses is a :class:`UsageError` naming the keywords."""
    problem = env_kwargs_problem(env_id, kwargs)  # a key the env does not take: named alone, with the accepted
    if problem is not None:
        raise UsageError(f"{env_id} refused --env-kwargs: {problem}")
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError, FileNotFoundError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        msg = msg.split(" was raised from the environment creator")[0]  # gymnasium's addition repeats the kwargs
        raise UsageError(f"{env_id} refused --env-kwargs {json.dumps(kwargs)}: {msg}") from None


def _find_task(env: gym.Env, task_id: str) -> tuple[dict[str, Any] | None, int | None]:
    """``(task, None)`` for a test-split task with id ``task_id`` (the ids ``agentrl eval`` writes), else
    ``(None, seed)`` for the first seed whose reset draws it; :class:`UsageError` when neither has it."""
    base = env.unwrapped
    if callable(getattr(base, "test_tasks", None)):
        try:
            for task in base.test_tasks(TASK_ID_SEARCH):
                if str(task.get("id", "")) == task_id:
                    return task, None
        except ValueError:  # e.g. your own dataset without a test_dataset: no test split to look in
            pass
    for seed in range(TASK_ID_SEARCH):
        if env.reset(seed=seed)[1]["task_id"] == task_id:
            return None, seed
    raise UsageError(f"no task {task_id!r} among the first {TASK_ID_SEARCH} test tasks or the tasks of seeds "
                     f"0-{TASK_ID_SEARCH - 1}; replay an episode with the --seed it printed")


def cmd_play(args: argparse.Namespace) -> int:
    env = _make(args.env_id, args.env_kwargs or {})
    task, seed = None, args.seed
    if args.task_id is not None:
        task, seed = _find_task(env, args.task_id)
    elif seed is None:
        seed = secrets.randbelow(2**31)  # printed below, so the episode can be replayed
    obs, info = env.reset(seed=seed, options={"task": task} if task is not None else None)
    task_id = info["task_id"]
    drawn = f"seed {seed} (replay: --seed {seed})" if task is None else f"test split (replay: --task-id {task_id})"
    print(f"=== {args.env_id} · task {info['task_id']} · {drawn} ===")
    print(f"--- system ---\n{info['messages'][0]['content']}\n")
    print(f"--- user ---\n{obs}\n")
    total = 0.0
    while True:
        reply = _read_reply("--- your reply as the assistant (end with a line '.') ---\n")
        if reply is None:
            print("\n(no input; episode abandoned)")
            return 1
        obs, reward, terminated, truncated, info = env.step(reply)
        total += reward
        parsed = info["parsed"]
        print(f"\n[parsed as {parsed['kind']}" + (f": {parsed['error']}" if parsed.get("error") else "") + "]")
        if obs:
            print(f"--- {info['obs_role']} ---\n{obs}\n")
        if terminated or truncated:
            print(f"=== episode over: {info['termination']} · reward {total:+.2f} · correct {info['correct']} · "
                  f"metrics {json.dumps(info['metrics'])} ===")
            return 0


def _check_port(host: str, port: int) -> None:
    """:class:`UsageError` when nothing could listen on ``host:port`` (in use, or not an address of this machine),
    said before the server starts and logs its own lines."""
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        why = str(e.strerror or e).split(" (while attempting")[0]  # create_server appends the address again
        raise UsageError(f"cannot listen on {host}:{port} ({why}); pass another --port or --host") from None


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    if args.corpus is not None and not Path(args.corpus).is_file():
        raise UsageError(f"--corpus {args.corpus}: no such file (a JSONL of {{id, title, text}} rows)")
    _check_port(args.host, args.port)

    from agentrl.envs.search.bm25 import LocalBackend
    from agentrl.envs.search.server import RetrieverServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    backend = LocalBackend(args.corpus, cache_dir=args.cache_dir)
    server = RetrieverServer(backend, host=args.host, port=args.port)
    print(f"serving {backend.index.num_docs} documents at {server.url} (POST {{queries, topk, return_scores}}); "
          "Ctrl-C to stop", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    try:
        from agentrl.envs.bridges.openenv import serve
    except ImportError as e:
        raise UsageError(str(e)) from None

    kwargs = args.env_kwargs or {}
    _make(args.env_id, kwargs).close()  # a refused keyword is said now, not at the first client's connection
    _check_port(args.host, args.port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    print(f"serving {args.env_id} as an OpenEnv env at http://{args.host}:{args.port} (WebSocket /ws, /schema, "
          f"/health); Ctrl-C to stop", flush=True)
    serve(args.env_id, kwargs, host=args.host, port=args.port, max_sessions=args.max_sessions)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="agentrl-env", description="agentrl text environments")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    listing = sub.add_parser("list", help="list the registered environments")
    listing.add_argument("--knobs", action="store_true",
                         help="under each env, its difficulty knobs: the env_kwargs that make its tasks harder")
    listing.set_defaults(func=cmd_list)
    play = sub.add_parser("play", help="play an environment by hand, as the assistant")
    play.add_argument("env_id", type=_env_id, help="a registered id (agentrl-env list) or package.module:factory")
    replay = play.add_mutually_exclusive_group()
    replay.add_argument("--seed", type=int, default=None,
                        help="the seed of reset (default: a random one, printed with the task id)")
    replay.add_argument("--task-id", default=None,
                        help="play this task: an id of the test split (as agentrl eval writes) or one a seed drew")
    play.add_argument("--env-kwargs", type=json_object, default=None, metavar="JSON",
                      help="JSON object of keyword arguments for gymnasium.make")
    play.set_defaults(func=cmd_play)
    serve = sub.add_parser("serve-retriever", help="serve the local BM25 index as a Search-R1 retrieval server")
    serve.add_argument("--corpus", default=None, help="JSONL of {id, title, text}; default: the Wikipedia summaries")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 to serve other machines)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--cache-dir", default=None, help="where the index is cached (default ~/.cache/agentrl)")
    serve.set_defaults(func=cmd_serve_retriever)
    env_server = sub.add_parser("serve", help="serve an environment to other frameworks (docs/bridges/openenv.md)")
    env_server.add_argument("env_id", type=_env_id, help="a registered id (agentrl-env list) or package.module:factory")
    protocol = env_server.add_mutually_exclusive_group(required=True)
    protocol.add_argument("--openenv", action="store_true", help="as an OpenEnv server (needs the [openenv] extra)")
    env_server.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 to serve other machines)")
    env_server.add_argument("--port", type=int, default=8000)
    env_server.add_argument("--env-kwargs", type=json_object, default=None, metavar="JSON",
                            help="JSON object of keyword arguments for gymnasium.make")
    env_server.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (one env each)")
    env_server.set_defaults(func=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"agentrl-env {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`agentrl-env list | head -3`): stop quietly, as `ls` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush raises nothing
        return 1


if __name__ == "__main__":
    sys.exit(main())
