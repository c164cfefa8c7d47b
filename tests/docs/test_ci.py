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


def test_the_test_command_lints_then_type_checks_then_tests():
    steps = [s.strip() for s in _readme_test_command().split("&&")]
    assert steps[-3:] == ["ruff check .", "mypy", 'python -m pytest -m "slow or not slow"']
