"""One writer per run folder (issue 60, N1): every command that writes a run folder holds its lock for its whole
life, so a second ``agentrl main-job`` / ``train`` / ``eval --out`` on it is refused in one line naming the
holder's pid and command, and the folder records which commands and which commit wrote it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import hold_run

from agentrl.algos import cli
from agentrl.algos.evaluation.ledger import git_state
from agentrl.algos.run_folder import WRITERS_FILE, claim_run, writers
from agentrl.algos.training.checkpoint import RunInUse


def _never_runs(*args, **kwargs):
    raise AssertionError("the second job ran: it would have written over the first one's run folder")


def _refusal(run, pid) -> str:
    return (f"{run} is in use: `agentrl main-job --out {run}` (pid {pid}) still runs there; wait for it to end or "
            f"stop it (kill {pid}), or pass another --out")


def test_a_second_main_job_on_a_live_run_folder_is_refused_in_one_line(held, tiny_dir, capsys, monkeypatch):
    # the audit's race (race2.sh): job B started while job A is in its base eval or SFT stage, where A's stage
    # lock is not yet (or no longer) held and nothing is trained yet: B must be refused, not run
    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr("agentrl.algos.recipes.main_job.run_main_job", _never_runs)
    assert cli.main(["main-job", "--env", "Test/Score-v0", "--model", str(tiny_dir), "--out", str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"agentrl main-job: error: {_refusal(run, proc.pid)}\n"
    assert "agentrl main-job:" not in captured.out  # refused before its banner, model or engine
    assert writers(run) == [writers(run)[0]] and writers(run)[0]["pid"] == proc.pid  # the refused one is no writer


def test_a_train_on_a_folder_a_main_job_holds_is_refused(held, tiny_dir, capsys, monkeypatch):
    run, proc = held
    monkeypatch.delenv("RANK", raising=False)
    assert cli.main(["train", "--algo", "grpo", "--env", "Test/Score-v0", "--model", str(tiny_dir), "--out",
                     str(run), "steps=1", "progress=false", "report_to=none"]) == 2
    assert capsys.readouterr().err == f"agentrl train: error: {_refusal(run, proc.pid)}\n"


def test_a_second_eval_writing_the_same_file_is_refused_and_another_file_is_not(tmp_path, tiny_dir, capsys,
                                                                                  monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    run = tmp_path / "evals"
    proc = hold_run(run, "a.jsonl")
    try:
        monkeypatch.setattr("agentrl.algos.evaluation.evaluate.evaluate", _never_runs)
        args = ["eval", "--env", "Test/Score-v0", "--model", str(tiny_dir), "--tasks", "1", "--out"]
        assert cli.main([*args, str(run / "a.jsonl")]) == 2
        assert capsys.readouterr().err == f"agentrl eval: error: {_refusal(run, proc.pid)}\n"
        with claim_run(run, writes="b.jsonl"):  # another file of the same folder: no wait
            pass
    finally:
        proc.kill()
        proc.wait()


def test_the_lock_is_held_for_the_whole_command_and_given_back_after_it(tmp_path, tiny_dir, monkeypatch):
    # the check-then-act refusal alone let a second job in while the first ran (its stage locks come and go):
    # while main-job's stages run, another process must find the folder taken
    monkeypatch.delenv("RANK", raising=False)
    run = tmp_path / "run"
    seen = {}

    def stages(cfg, resume, policy):
        try:
            hold_run(run).kill()
            seen["second"] = "ran"
        except AssertionError:
            seen["second"] = "refused"
        return {"table": "", "timings": {}, "out": Path(cfg.out)}

    monkeypatch.setattr("agentrl.algos.recipes.main_job.run_main_job", stages)
    monkeypatch.setattr("agentrl.algos.rollout.demonstrations.check_demonstrations", lambda *a: None)
    assert cli.main(["main-job", "--env", "Test/Score-v0", "--model", str(tiny_dir), "--out", str(run)]) == 0
    assert seen == {"second": "refused"}
    hold_run(run).kill()  # given back when the command ended


def test_a_run_folder_records_the_command_and_commit_that_wrote_it(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(sys, "argv", ["agentrl", "train", "--out", str(tmp_path)])
    with claim_run(tmp_path):
        pass
    with claim_run(tmp_path):  # a --resume: a second line
        pass
    rows = writers(tmp_path)
    state = git_state(Path(__file__).parent)
    assert len(rows) == 2 and (tmp_path / WRITERS_FILE).is_file()
    assert rows[0]["command"] == f"agentrl train --out {tmp_path}" and rows[0]["pid"] == os.getpid()
    assert rows[0]["commit"] == state["commit"] and rows[0]["commit"]  # this checkout's commit
    assert set(rows[0]) >= {"command", "commit", "dirty", "pid", "host", "started"}


def test_claim_run_refuses_another_process_and_runs_its_check_under_the_lock(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    proc = hold_run(tmp_path / "run")
    try:
        with pytest.raises(RunInUse, match=rf"\(pid {proc.pid}\)"), claim_run(tmp_path / "run"):
            pass
    finally:
        proc.kill()
        proc.wait()
    checked = []
    with pytest.raises(ValueError, match="already"), claim_run(tmp_path / "run", check=lambda: (
            checked.append(1), (_ for _ in ()).throw(ValueError("already holds a run")))):
        pass
    assert checked == [1] and writers(tmp_path / "run")[-1]["pid"] == proc.pid  # the refused one: no record
