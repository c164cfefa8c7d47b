"""agentrl-env: list the environments and play one from the terminal."""

import os
import re
import socket
import subprocess
import sys

import pytest

from agentrl.envs import ENVS, cli
from agentrl.envs.tool_use.env import ToolUseEnv


def run_cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "agentrl.envs.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_list_names_every_env():
    out = run_cli("list")
    assert out.returncode == 0
    for env_id in ENVS:
        assert env_id in out.stdout


def test_play_a_whole_episode_from_stdin():
    env = ToolUseEnv()
    env.reset(seed=5)
    task = env.task
    replies = env.demo_actions(task)
    stdin = "".join(r + "\n.\n" for r in replies)
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "5", stdin=stdin)
    assert out.returncode == 0, out.stderr
    assert task["query"] in out.stdout and "--- system ---" in out.stdout
    assert "[parsed as tool_call]" in out.stdout
    assert "episode over: answered · reward +1.00 · correct True" in out.stdout


def test_play_reports_invalid_replies_and_eof():
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "0", stdin="no idea\n.\n")
    assert "[parsed as invalid: no tool call and no final answer found]" in out.stdout
    assert "reward -0.10" in out.stdout
    out = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "0", stdin="")
    assert out.returncode == 1 and "episode abandoned" in out.stdout


def test_play_an_unregistered_env_factory_by_module_reference(tmp_path):
    (tmp_path / "my_play_env.py").write_text(
        "from agentrl.envs.tool_use.env import ToolUseEnv\n\n\n"
        "def make(**kw):\n    return ToolUseEnv(families=['multiply'], **kw)\n")
    env = ToolUseEnv(families=["multiply"])
    env.reset(seed=3)
    stdin = "".join(r + "\n.\n" for r in env.demo_actions(env.task))
    out = subprocess.run([sys.executable, "-m", "agentrl.envs.cli", "play", "my_play_env:make", "--seed", "3"],
                         input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr  # was refused: env_id had to be one of the registered ids
    assert env.task["query"] in out.stdout and "correct True" in out.stdout
    out = run_cli("play", "AgentRL/ToolUsee-v0")
    assert out.returncode == 2 and "unknown environment 'AgentRL/ToolUsee-v0'" in out.stderr
    assert "package.module:factory" in out.stderr


# ---------------------------------------------------------------------------------------------- one-line errors


def _one_line(out, command: str) -> str:
    """The single stderr line of a refused command: exit code 2, no traceback."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"agentrl-env {command}: error: ") or lines[0].startswith("agentrl-env: error: ")
    return lines[0]


@pytest.mark.parametrize("command", ["play", "serve"])
@pytest.mark.parametrize("kwargs,says", [("{bad", "argument --env-kwargs: not JSON"),
                                         ("[1, 2]", "a JSON object is needed"),
                                         ('{"famlies": ["multiply"]}', "unknown keyword 'famlies' (did you mean "
                                                                       "'families'?); it accepts axis, call_credit"),
                                         ('{"families": ["nope"]}', "unknown task families ['nope']")])
def test_bad_env_kwargs_are_one_line(command, kwargs, says):
    extra = ["--openenv"] if command == "serve" else []
    line = _one_line(run_cli(command, "AgentRL/ToolUse-v0", *extra, "--env-kwargs", kwargs), command)
    assert says in line


def test_an_env_kwarg_typo_names_only_the_bad_key_and_the_accepted_ones(capsys):
    """The good key beside it is not blamed; the accepted keys come from the env's signature (and make's own)."""
    assert cli.main(["play", "AgentRL/ToolUse-v0", "--env-kwargs", '{"tools": [], "datset": [], "zzz": 1}']) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("agentrl-env play: error: AgentRL/ToolUse-v0 refused --env-kwargs: unknown keywords "
                           "'datset' (did you mean 'dataset'?), 'zzz'; it accepts axis, ")
    accepted = line.split("; it accepts ", 1)[1].split(", ")
    assert "'tools'" not in line.split(";")[0] and "tools" in accepted and "max_episode_steps" in accepted
    assert accepted == sorted(accepted) and "\n" not in line


@pytest.mark.parametrize("typed", ["AgentRL/Tooluse-v0", "agentrl/tooluse-v0", "ToolUse-v0", "AgentRL/ToolUsee-v0"])
def test_a_mistyped_id_gets_the_registered_one_suggested(typed, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["play", typed])
    assert e.value.code == 2
    assert "did you mean 'AgentRL/ToolUse-v0'?" in capsys.readouterr().err


def test_an_id_nothing_resembles_gets_no_guess():
    assert cli.closest_id("Nonsense", ["AgentRL/ToolUse-v0", "CartPole-v1"]) is None


@pytest.mark.parametrize("argv", [["play", "AgentRL/ToolUsee-v0"], ["serve", "AgentRL/ToolUsee-v0", "--openenv"],
                                  ["list", "AgentRL/ToolUse-v0"], ["play"], ["lst"]])
def test_unknown_ids_missing_and_extra_arguments_are_one_line(argv):
    line = _one_line(run_cli(*argv), argv[0])
    assert "(see agentrl-env" in line  # where the usage is


def test_serve_without_the_openenv_extra_is_one_line_naming_the_install(monkeypatch, capsys):
    for name in [m for m in sys.modules if m.split(".")[0] == "openenv"] + ["openenv"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if openenv-core were not installed (nor imported before)
    monkeypatch.delitem(sys.modules, "agentrl.envs.bridges.openenv", raising=False)
    assert cli.main(["serve", "AgentRL/ToolUse-v0", "--openenv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agentrl-env serve: error: the OpenEnv bridge needs openenv-core")
    assert "pip install openenv-core" in err and "pip install -e '.[openenv]'" in err


def test_play_prints_its_seed_and_replays_an_episode_by_seed_or_task_id():
    first = run_cli("play", "AgentRL/ToolUse-v0", stdin="")  # no --seed: a random one, printed
    header = first.stdout.splitlines()[0]
    m = re.fullmatch(r"=== AgentRL/ToolUse-v0 · task (\S+) · seed (\d+) \(replay: --seed \2\) ===", header)
    assert m, header
    again = run_cli("play", "AgentRL/ToolUse-v0", "--seed", m.group(2), stdin="")
    assert again.stdout == first.stdout  # the same task, the same prompts
    seeded = run_cli("play", "AgentRL/ToolUse-v0", "--seed", "7", stdin="")
    task_id = re.search(r"· task (\S+) ·", seeded.stdout).group(1)
    by_id = run_cli("play", "AgentRL/ToolUse-v0", "--task-id", task_id, stdin="")  # found as seed 7's task
    assert by_id.stdout.split("--- user ---")[1] == seeded.stdout.split("--- user ---")[1]
    test_task = ToolUseEnv().test_tasks(3)[2]  # an id agentrl eval writes: a task of the test split
    out = run_cli("play", "AgentRL/ToolUse-v0", "--task-id", test_task["id"], stdin="")
    assert f"task {test_task['id']} · test split (replay: --task-id {test_task['id']})" in out.stdout
    assert test_task["query"] in out.stdout
    line = _one_line(run_cli("play", "AgentRL/ToolUse-v0", "--task-id", "no-such-task"), "play")
    assert "no task 'no-such-task'" in line and "--seed" in line
    line = _one_line(run_cli("play", "AgentRL/ToolUse-v0", "--task-id", "x", "--seed", "1"), "play")
    assert "not allowed with argument" in line


def test_serve_refuses_a_port_in_use_and_serve_retriever_a_missing_corpus_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for argv in (["serve", "AgentRL/ToolUse-v0", "--openenv"], ["serve-retriever"]):
            line = _one_line(run_cli(*argv, "--port", port), argv[0])  # was uvicorn's log lines, exit status 3
            assert line.endswith(f"cannot listen on 127.0.0.1:{port} (Address already in use); pass another --port "
                                 "or --host")
    line = _one_line(run_cli("serve-retriever", "--corpus", str(tmp_path / "docs.jsonl")), "serve-retriever")
    assert f"--corpus {tmp_path / 'docs.jsonl'}: no such file" in line  # was a FileNotFoundError traceback


def test_list_into_a_closed_pipe_prints_no_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.envs.cli", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # as `agentrl-env list | head -0`: the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1 and "Traceback" not in err and "BrokenPipeError" not in err, err
