"""docs/examples/*.py refuse bad input in one line on stderr (no traceback, no usage block) before anything loads."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys

import pytest
from helpers import ROOT

EXAMPLES = ROOT / "docs" / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_errors_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["trl_grpo", "trl_environment_factory"])
@pytest.mark.parametrize("argv,says", [(["--env", "AgentRL/ToolUsee-v0"], "did you mean 'AgentRL/ToolUse-v0'?"),
                                       (["--steps", "0"], "argument --steps: a whole number above 0 is needed"),
                                       (["--tasks", "many"], "argument --tasks: a whole number above 0"),
                                       (["--tiny", "--adapter", "/no/dir"], "adapter /no/dir: no such folder"),
                                       (["--stpes", "3"], "unrecognized arguments: --stpes 3")])
def test_trl_examples_refuse_bad_input_in_one_line(name, argv, says, capsys, no_loading):
    with pytest.raises(SystemExit) as e:
        _load(name).main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err and "usage:" not in err, err
    assert says in err


def _run_openai_example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / "openai_policy.py"), *args], capture_output=True,
                          text=True, timeout=120)


def test_openai_example_refuses_an_unknown_env_and_an_unreachable_server_in_one_line():
    out = _run_openai_example("--model", "m", "--env", "AgentRL/ToolUsee-v0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("openai_policy.py: error: --env:") and "Did you mean: `ToolUse`?" in out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    out = _run_openai_example("--model", "m", "--base-url", f"http://127.0.0.1:{port}", "--episodes", "1")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert f"the chat server at http://127.0.0.1:{port} failed" in out.stderr and "Traceback" not in out.stderr
