"""``agentrl eval --env AgentRL/HumanEval-v0`` runs offline (a tiny random model: the command's path, not a score)."""

from __future__ import annotations

import json

import pytest

from agentrl.algos import cli


@pytest.mark.needs_bwrap
def test_agentrl_eval_runs_on_humaneval_offline(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "eval" / "humaneval.jsonl"
    assert cli.main(["eval", "--env", "AgentRL/HumanEval-v0", "--model", str(tiny_dir), "--tasks", "2", "--n", "2",
                     "--max-new-tokens", "8", "--max-turns", "1", "--out", str(out), "--dtype", "fp32"]) == 0
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 4
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["num_tasks"] == 2 and set(summary["pass_at_k"]) == {"1", "2"}
    assert "Average@2" in capsys.readouterr().out
