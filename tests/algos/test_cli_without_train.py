"""``agentrl`` without the ``[train]`` extra, and an ``--out`` it cannot write: one line that says what to do, exit
status 2, no traceback.

The commands run as the installed ``agentrl`` script in a subprocess whose interpreter cannot import the module
under test: a ``sitecustomize.py`` on ``PYTHONPATH`` sets ``sys.modules[name] = None`` before the script starts,
which makes ``import torch`` raise ``ModuleNotFoundError`` and ``importlib.util.find_spec`` answer None, as in a
venv where it was never installed. (A real venv of the base install, without torch, is what
tests/test_installed_wheel.py builds; making one per test here would cost minutes.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.algos import cli

#: Every command as a user would first type it (the check comes before any parsing).
COMMANDS = [[], ["--help"], ["main-job"], ["train", "--algo", "grpo", "--env", "AgentRL/ToolUse-v0"],
            ["eval", "--env", "AgentRL/ToolUse-v0"], ["plot", "runs/x"], ["export-model", "models/x"],
            ["config-docs"]]
AGENTRL = Path(sys.executable).with_name("agentrl")


def _run_without(module: str, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}
    command = [str(AGENTRL)] if AGENTRL.is_file() else [sys.executable, "-m", "agentrl.algos.cli"]
    return subprocess.run([*command, *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "agentrl")
def test_every_command_without_torch_is_one_line_naming_the_install(argv, tmp_path):
    r = _run_without("torch", argv, tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("agentrl: error: agentrl needs the [train] extra (no module named 'torch')")
    assert "pip install -e '.[train]'" in lines[0] and "pip install torch==2.13.0" in lines[0]
    assert r.stdout == ""


def test_agentrl_env_needs_no_train_extra(tmp_path):
    """The environments' command works where torch is missing: what the line above tells such a user to use."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}
    script = AGENTRL.with_name("agentrl-env")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "agentrl.envs.cli"]
    r = subprocess.run([*command, "list"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0 and "AgentRL/ToolUse-v0" in r.stdout, r.stderr


@pytest.mark.parametrize("module", ["transformers", "peft"])
def test_without_another_module_of_the_train_extra_the_line_names_it(module, tmp_path):
    r = _run_without(module, ["train", "--algo", "grpo"], tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"(no module named {module!r})" in r.stderr


def test_the_check_finds_what_is_installed_and_names_what_is_not(monkeypatch):
    assert cli.missing_train_module() is None  # this venv has the [train] extra
    monkeypatch.setitem(sys.modules, "peft", None)
    assert cli.missing_train_module() == "peft"


def test_a_train_module_missing_at_import_time_is_the_same_line(capsys, monkeypatch):
    """Found by the check but failing to import later (a broken install) is still one line, not a traceback; an
    ImportError of anything else (a bug of ours) keeps its traceback."""
    def broken(args):
        raise ModuleNotFoundError("No module named 'torch._C'", name="torch._C")

    monkeypatch.setattr(cli, "cmd_config_docs", broken)
    assert cli.main(["config-docs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentrl: error: agentrl needs the [train] extra (no module named 'torch._C')")

    def bug(args):
        raise ImportError("cannot import name 'nope' from 'agentrl.algos'")

    monkeypatch.setattr(cli, "cmd_config_docs", bug)
    with pytest.raises(ImportError, match="nope"):
        cli.main(["config-docs"])


# ---------------------------------------------------------------------------------------------- --out


@pytest.mark.parametrize("command", [["main-job"], ["train", "--algo", "grpo"], ["eval"]])
def test_an_out_under_a_file_is_one_line_before_anything_loads(command, capsys, no_loading, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    assert cli.main([*command, "--out", str(a_file / "run" / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"agentrl {command[0]}: error: --out {a_file / 'run' / 'x.jsonl'}: {a_file} is a file, "
                           "not a folder")


def test_an_out_where_nothing_can_be_written_is_one_line(capsys, no_loading, monkeypatch, tmp_path):
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.tempfile, "TemporaryFile", read_only)
    assert cli.main(["train", "--algo", "grpo", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"agentrl train: error: --out {tmp_path / 'run'}: cannot write in {tmp_path} (permission denied); "
                   "pass a folder you can write to")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_in_proc_is_one_line_not_an_errno(capsys, no_loading):
    assert cli.main(["main-job", "--out", "/proc/agentrl-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentrl main-job: error: --out /proc/agentrl-run: cannot write in /proc (")
    assert "[Errno" not in err


def test_eval_out_that_is_a_folder_is_refused_and_a_new_file_is_fine(tmp_path):
    with pytest.raises(ValueError, match="is a folder; agentrl eval writes episodes to a file"):
        cli.check_out(str(tmp_path), file=True)
    cli.check_out(str(tmp_path / "new" / "deeper" / "eval.jsonl"), file=True)  # missing folders: the run makes them
    cli.check_out(str(tmp_path / "run"))
    assert sorted(tmp_path.iterdir()) == []  # the check writes nothing


def test_an_os_error_of_a_path_reads_as_the_path_and_the_reason():
    assert cli._errno_text(FileNotFoundError(2, "No such file or directory", "/x/y")) == \
        "/x/y: no such file or directory"
    assert cli._errno_text(FileNotFoundError("trian.jsonl: no such file")) == "trian.jsonl: no such file"
