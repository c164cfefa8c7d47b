"""CI runs what the README tells a contributor to run: `.ci/run`'s command is the README's test command."""

from __future__ import annotations

import re

from helpers import ROOT


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    at = text.find("**Run the tests**")
    assert at >= 0, "README.md no longer has its **Run the tests** paragraph"
    block = re.compile(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M).search(text, at)
    assert block, "README.md: no ```bash block after **Run the tests**"
    return block.group(1).strip()


def test_ci_runs_exactly_the_readmes_test_command():
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[-1] == _readme_test_command()


def test_the_test_command_lints_then_type_checks_then_tests_then_prints_the_speed_check():
    steps = [s.strip() for s in _readme_test_command().split("&&")]
    assert steps[-4:-1] == ["ruff check .", "mypy", 'python -m pytest -m "slow or not slow"']
    # the quick speed ratios beside the recorded history: printed, never failing (run_all never asserts)
    assert steps[-1].startswith("python benchmarks/run_all.py --quick --check")


def _readme_main_job_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    at = text.find("**Run the main job**")
    assert at >= 0, "README.md no longer has its **Run the main job** paragraph"
    return re.compile(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M).search(text, at).group(1).strip()


def test_both_readme_commands_install_into_a_venv_made_by_python3_with_cpu_torch():
    # a system Python under PEP 668 (Debian 12, Ubuntu >= 23.04) refuses `pip install` outside a venv, and a
    # fresh Debian has `python3` but no `python`
    for command in (_readme_main_job_command(), _readme_test_command()):
        steps = [s.strip() for s in command.split("&&")]
        venv = steps.index("python3 -m venv .venv")
        assert steps[venv + 1] == ". .venv/bin/activate"
        assert any(s.startswith("apt-get install -y") and "python3-venv" in s.split() for s in steps[:venv])
        first_python = next(i for i, s in enumerate(steps) if re.match(r"(pip|python|\.venv)\b", s))
        assert first_python > venv + 1, steps[first_python]  # nothing runs pip or python before the venv is on
        assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in steps
    assert _readme_main_job_command().endswith("&& agentrl main-job")
