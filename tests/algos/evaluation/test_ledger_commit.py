"""``agentrl eval --ledger`` names the commit it started from (issue 60: the audit's defect 9 was fixed, read at
the start of ``cmd_eval``, with no test that fails without it): a commit made while the evaluation runs is not
what its ledger row names."""

from __future__ import annotations

import shutil
import subprocess

from helpers import ROOT

from agentrl.algos import cli
from agentrl.algos.evaluation import evaluate as evaluate_module
from agentrl.algos.evaluation import ledger


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_eval_ledger_rows_name_the_commit_the_command_started_from(tiny_dir, tmp_path, monkeypatch):
    repo = tmp_path / "checkout"  # a checkout of its own, so no earlier read of the commit is cached for it
    sets = repo / "sets"
    sets.mkdir(parents=True)
    for suffix in (".jsonl", ".json"):
        shutil.copyfile(ROOT / "benchmarks" / "heldout" / f"tooluse{suffix}", sets / f"tooluse{suffix}")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "the code the evaluation starts from")
    started_at = _git(repo, "rev-parse", "HEAD")
    real = evaluate_module.evaluate

    def commit_meanwhile(*args, **kwargs):  # someone commits while the (long) evaluation runs
        (repo / "later.txt").write_text("later\n")
        _git(repo, "add", "later.txt")
        _git(repo, "commit", "-q", "-m", "a commit made while it runs")
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "evaluate", commit_meanwhile)
    assert cli.main(["eval", "--env", "AgentRL/ToolUse-v0", "--model", str(tiny_dir), "--tasks-file",
                     str(sets / "tooluse.jsonl"), "--tasks", "1", "--max-new-tokens", "2", "--dtype", "fp32",
                     "--device", "cpu", "--ledger", str(sets / "ledger.jsonl")]) == 0
    [row] = ledger.read(sets / "ledger.jsonl")
    assert _git(repo, "rev-parse", "HEAD") != started_at  # the commit was made during the run
    assert row["commit"] == started_at
