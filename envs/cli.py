"""``agentrl-env``: list the environments, play one by hand, and (with the search env) serve a retriever.

    agentrl-env list
    agentrl-env play AgentRL/ToolUse-v0 [--seed 0] [--env-kwargs '{"families": ["multiply"]}']
    agentrl-env serve-retriever [--corpus docs.jsonl] [--host 127.0.0.1] [--port 8000] [--cache-dir DIR]
    agentrl-env serve AgentRL/ToolUse-v0 --openenv [--host 127.0.0.1] [--port 8000] [--env-kwargs JSON]
                                                   [--max-sessions 64]

Each subcommand is a function ``cmd_<name>(args)`` plus its parser in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

import gymnasium as gym

import agentrl.envs
from agentrl.envs import ENVS

gym.register_envs(agentrl.envs)


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
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; registered: {', '.join(_env_table())} (your own: 'package.module:Env-v0' "
        "registered on import, or 'package.module:factory', an env class or a function returning an env)")


def cmd_list(args: argparse.Namespace) -> int:
    table = _env_table()
    width = max(map(len, table))
    for env_id, (entry, description) in table.items():
        print(f"{env_id:<{width}}  {description or entry}")
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


def cmd_play(args: argparse.Namespace) -> int:
    kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    env = gym.make(args.env_id, **kwargs)  # a module:factory id was registered by _env_id
    obs, info = env.reset(seed=args.seed)
    print(f"=== {args.env_id} · task {info['task_id']} ===")
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


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    import logging

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

    from agentrl.envs.bridges.openenv import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    print(f"serving {args.env_id} as an OpenEnv env at http://{args.host}:{args.port} (WebSocket /ws, /schema, "
          f"/health); Ctrl-C to stop", flush=True)
    serve(args.env_id, kwargs, host=args.host, port=args.port, max_sessions=args.max_sessions)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl-env", description="agentrl text environments", allow_abbrev=False)
    # no prefix matching: a mistyped or missing flag is an error, never silently a longer one
    sub = p.add_subparsers(dest="command", required=True,
                           parser_class=functools.partial(argparse.ArgumentParser, allow_abbrev=False))
    sub.add_parser("list", help="list the registered environments").set_defaults(func=cmd_list)
    play = sub.add_parser("play", help="play an environment by hand, as the assistant")
    play.add_argument("env_id", type=_env_id, help="a registered id (agentrl-env list) or package.module:factory")
    play.add_argument("--seed", type=int, default=None)
    play.add_argument("--env-kwargs", default=None, help="JSON object of keyword arguments for gymnasium.make")
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
    env_server.add_argument("--env-kwargs", default=None, help="JSON object of keyword arguments for gymnasium.make")
    env_server.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (one env each)")
    env_server.set_defaults(func=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
