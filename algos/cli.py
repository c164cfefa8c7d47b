"""``agentrl``: train, evaluate and plot.

::

    agentrl main-job                                            # base eval -> SFT cold start -> GRPO -> eval
    agentrl main-job stages.rl.steps=20 eval_tasks=64 --out runs/main  # the main job, resized
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo steps=50 grpo.beta=0.04 lora.r=8 --out runs/g
    agentrl train --config run.yaml --resume                    # a file of TrainConfig keys, continued
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --async asynchronous.max_staleness=2   # overlap rollouts
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --device cuda --dtype bf16    # default --device auto
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --policy-url http://127.0.0.1:8000   # rollouts on vLLM
    agentrl train --env AgentRL/ToolUse-v0 --algo grpo --engine vllm     # starts vLLM itself (docs/engines.md)
    agentrl export-model models/smollm2 [--model NAME]          # a model folder an engine loads
    agentrl eval --env AgentRL/ToolUse-v0 --adapter runs/g/adapter --n 4 --out results.jsonl [--no-tools]
    agentrl plot runs/g
    agentrl config-docs > docs/configuration.md

Overrides are ``key=value`` with dotted keys into the config (``collector.max_new_tokens=128``); values are
read as JSON when they parse (``env_kwargs.families=["multiply"]``, ``grpo.scale_std=false``), else as text.
Every key and value is checked against the config's declared types before anything runs
(:func:`agentrl.algos.config.config_from_dict`): ``group_size=abc`` or a typo (``grup_size=3``) is an error
naming the key, the expected type and the nearest valid key. ``agentrl train --help`` lists the keys.

This module is the entry point (:func:`main`, :func:`build_parser`); the commands live beside it:
``cli_train`` (main-job, train), ``cli_eval`` (eval, plot) and ``cli_policy`` (what the commands that run a
model share: preflight checks, ``--device``/``--policy-url``/``--engine``; export-model).
"""


from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import os
import select
import signal
import sys
import tempfile
from pathlib import Path

from agentrl.envs.plugins import ContractError

#: What the ``[train]`` extra installs, by import name: every ``agentrl`` command needs them, so without one the
#: command stops with :data:`INSTALL_TRAIN` before it imports anything of the trainers (the commands' own modules
#: are imported inside :func:`build_parser`, after that check).
TRAIN_MODULES = ("torch", "transformers", "peft", "gguf", "accelerate", "tqdm", "matplotlib", "yaml")
INSTALL_TRAIN = ("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu, then in an agentrl-gym "
                 "checkout pip install -e '.[train]' (the environments alone need neither: agentrl-env, import "
                 "agentrl.envs)")


def missing_train_module() -> str | None:
    """The first module of the ``[train]`` extra this interpreter cannot find (looked up, not imported), or None."""
    for name in TRAIN_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):  # a parent that fails to import; a module set to None in sys.modules
            return name
    return None


def _missing_module_line(e: ImportError) -> str | None:
    """One line for an import that failed for want of a package: a module of the ``[train]`` extra, or a guard
    of ours whose message already says what to install (``--report-to wandb``: ``pip install wandb``); None for
    any other ImportError (a bug: its traceback is shown)."""
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] in TRAIN_MODULES:
        return f"agentrl needs the [train] extra (no module named {e.name!r}): {INSTALL_TRAIN}"
    return str(e).splitlines()[0] if "pip install" in str(e) else None


def cmd_config_docs(args: argparse.Namespace) -> int:
    from agentrl.algos.config_reference import config_docs

    print(config_docs())
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse without prefix matching: ``--adapter`` on a command that has only ``--adapter-dir`` is an error, not
    silently that other flag. Its errors are one line naming the command (``agentrl train: error: ...``), without
    the usage block (``agentrl train --algo grpoo`` printed 11 lines of usage first), as ``agentrl-env``'s are."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """``agentrl`` and its commands, in the order ``agentrl --help`` lists them."""
    from agentrl.algos.cli_eval import add_eval_command, add_plot_command
    from agentrl.algos.cli_policy import add_export_command
    from agentrl.algos.cli_train import add_training_commands

    parser = _Parser(prog="agentrl", description="Train and evaluate LLM agents on agentrl envs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add_training_commands(sub)  # main-job, train
    add_eval_command(sub)
    add_export_command(sub)
    add_plot_command(sub)
    p = sub.add_parser("config-docs", help="print the configuration reference (markdown)")
    p.set_defaults(func=cmd_config_docs)
    return parser


def _other_commands_flags(parser: argparse.ArgumentParser, args, extra: list[str]) -> str:
    """A hint for flags this command does not take but another does (``main-job --adapter``: train's and eval's)."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    hints = []
    for flag in (x.split("=", 1)[0] for x in extra if x.startswith("--")):
        owners = [name for name, p in subs.items() if name != args.command and flag in p._option_string_actions]
        if owners:
            hints.append(f"{flag} is a flag of {' and '.join(owners)}, not of {args.command}")
    return f" ({'; '.join(hints)})" if hints else ""


def main(argv: list[str] | None = None) -> int:
    missing = missing_train_module()
    if missing is not None:
        print(f"agentrl: error: agentrl needs the [train] extra (no module named {missing!r}): {INSTALL_TRAIN}",
              file=sys.stderr)
        return 2
    try:
        try:
            return _run(argv)
        except ImportError as e:
            line = _missing_module_line(e)
            if line is None:
                raise
            print(f"agentrl: error: {line}", file=sys.stderr)
            return 2
        finally:
            sys.stdout.flush()  # a reader that stopped early (`agentrl config-docs | head`) shows here, not at exit
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe (a server's socket): an error like any other
        # as Unix tools do: no traceback, the status of a process ended by SIGPIPE; what is still buffered goes
        # to /dev/null, so the interpreter's last flush at exit does not fail too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reading end is closed (poll reports an error on its writing end)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test's captured stream)
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


def _run(argv: list[str] | None) -> int:
    try:
        parser = build_parser()  # lists every registered algorithm's keys: a broken registration shows here
    except ContractError as e:
        print(f"agentrl: error: {e}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides may come after options (argparse stops collecting positionals there)
        if args.command not in ("train", "main-job") or any(x.startswith("-") or "=" not in x for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}{_other_commands_flags(parser, args, extra)}")
        args.overrides = list(args.overrides) + extra
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as under `python -m`: "my_tools:lookup" refs import from here
    try:
        if getattr(args, "out", None):
            check_out(args.out, file=args.command == "eval")
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, ContractError) as e:
        print(f"agentrl {args.command}: error: {_errno_text(e)}", file=sys.stderr)
        return 2


def _errno_text(e: Exception) -> str:
    """An OSError of a path as ``path: what went wrong`` (not ``[Errno 2] ...: 'path'``); anything else as it says."""
    if isinstance(e, OSError) and e.errno is not None and e.filename is not None:
        return f"{e.filename}: {(e.strerror or '').lower()}"
    return str(e)


def check_out(out: str, *, file: bool = False) -> None:
    """Refuse an ``--out`` that cannot be written, before anything loads (``ValueError``, one line naming the path
    and why): a folder where a file is needed or the reverse, a file where a folder must be made, a place this
    user may not write to. ``file``: ``--out`` names a file (``agentrl eval``), else a run folder. Missing folders
    are fine (the run makes them)."""
    path = Path(out)
    if file and path.is_dir():
        raise ValueError(f"--out {out}: is a folder; agentrl eval writes episodes to a file ({out}/eval.jsonl?)")
    folder = path.parent if file else path
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {out}: {folder} is a file, not a folder")
    existing = folder
    while not existing.exists():  # the deepest folder that exists: the run creates the ones below it
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out {out}: {existing} is a file, not a folder")
    try:  # try it: os.access says yes to root on read-only mounts and on /proc
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        why = {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.EROFS: "a read-only file system"}.get(e.errno, (e.strerror or str(e)).lower())
        raise ValueError(f"--out {out}: cannot write in {existing} ({why}); pass a folder you can write to") from None


if __name__ == "__main__":
    sys.exit(main())
