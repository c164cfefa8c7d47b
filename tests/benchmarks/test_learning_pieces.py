"""A learning run in pieces of the one piece runner (issue 58 step 1; ``harness.learning_exec``): its plan, a budget
that stops it between pieces, a resumed run that does only what is missing, a killed piece redone alone, the SFT
control's budget taken from the GRPO stage's recorded time, and the data it leaves in the shape the pages read.
End to end on a tiny random model (``--quick``); no learning figure is asserted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import harness.experiment_cli as cli
from harness.controls import stage_seconds
from harness.experiments import PYTHONMATH, SEARCH, TOOLUSE, learning_record
from harness.learning_exec import finished_by, plan
from helpers import ROOT

MAIN = ["eval/base", "sft", "eval/sft", "grpo", "eval/rl"]
CONTROL = ["sft_control", "eval/sft_control"]


def test_plan_runs_the_main_job_then_the_control_after_grpo_then_the_text_only_rows():
    keys = [p.key for p in plan(learning_record(TOOLUSE))]
    assert keys == MAIN + CONTROL
    needs = {p.key: p.needs for p in plan(learning_record(TOOLUSE))}
    assert needs["sft_control"] == ("sft", "grpo")  # it trains for the GRPO stage's recorded time: after it
    assert needs["grpo"] == ("sft",) and needs["eval/rl"] == ("grpo",) and needs["eval/base"] == ()
    assert [p.key for p in plan(learning_record(SEARCH))] == MAIN + CONTROL + ["eval/text_only"]
    pythonmath = learning_record(PYTHONMATH)
    assert [p.key for p in plan(pythonmath)] == MAIN + CONTROL + [f"text_only/{k}" for k in MAIN]
    assert [p.key for p in plan(pythonmath, text_only=False)] == MAIN + CONTROL  # --no-text-only
    assert [p.key for p in plan(pythonmath, control=False)] == MAIN  # --no-control: neither
    assert [p.key for p in plan(learning_record(SEARCH), control=False)] == MAIN + ["eval/text_only"]
    out = Path("r")
    assert {p.key: finished_by(out, p).as_posix() for p in plan(pythonmath)
            if p.key in ("sft", "eval/sft", "sft_control", "text_only/grpo", "text_only/eval/rl")} == {
        "sft": "r/sft/adapter/adapter_config.json", "eval/sft": "r/eval/sft.summary.json",
        "sft_control": "r/sft_control/control.json", "text_only/grpo": "r/text_only/grpo/adapter/adapter_config.json",
        "text_only/eval/rl": "r/text_only/eval/rl.summary.json"}


def _ledger(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tooluse_v3.jsonl", "tooluse_v3.json"):
        shutil.copyfile(ROOT / "benchmarks" / "heldout" / name, folder / name)
    return folder / "ledger.jsonl"


def _metas(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "pieces").glob("*.json")}


def test_a_learning_run_stops_at_its_budget_resumes_and_redoes_only_a_killed_piece(stopping_model_dir, tmp_path,
                                                                                   capsys):
    out, results, ledger = tmp_path / "run", tmp_path / "results", _ledger(tmp_path / "sets")
    argv = ["--quick", "--model", stopping_model_dir, "--out", str(out), "--results", str(results), "--ledger",
            str(ledger), "progress=false", "report_to=none"]
    # 2 minutes: the base model's evaluation (80 s expected), not the cold start (15 min expected)
    assert cli.main(["run", "tooluse", *argv, "--budget-minutes", "2"]) == 0
    assert "stopped before sft" in capsys.readouterr().out
    assert set(_metas(out)) == {"eval__base.json"} and not (out / "learning.json").exists()
    assert not (results / "data").exists()  # nothing committed before every piece is finished
    base_eval = (out / "eval" / "base.summary.json").stat().st_mtime_ns
    rows = ledger.read_text().count("\n")
    assert rows == 1

    assert cli.main(["run", "tooluse", *argv]) == 0  # the rest: the finished piece is not evaluated again
    assert (out / "eval" / "base.summary.json").stat().st_mtime_ns == base_eval
    assert ledger.read_text().count("\n") == rows + 3  # cold start, RL and the control: one row each
    metas = _metas(out)
    assert set(metas) == {f"{k.replace('/', '__')}.json" for k in MAIN + CONTROL}
    summary = json.loads((out / "learning.json").read_text())
    # the SFT control trained for the GRPO stage's recorded time, read once GRPO had finished
    grpo_s = stage_seconds(out / "grpo")
    control = json.loads((out / "pieces" / "sft_control.json").read_text())
    assert grpo_s > 0 and control["budget_seconds"] == grpo_s == summary["stage_seconds"]["grpo"]
    assert summary["stage_seconds"]["sft_control"] == control["seconds"] >= grpo_s
    # this invocation's stage times, named as the page names them (the base evaluation ran in the first one)
    assert list(summary["page"]["timings"]) == ["sft", "eval_sft", "rl", "eval_rl", "total"]
    assert summary["page"]["control"] == {"seconds": control["seconds"], "steps": control["steps"]}
    data = results / "data" / "tooluse_quick"
    committed = json.loads((data / "learning.json").read_text())
    assert committed["evals"] == {"base": "base-s0/heldout-quick.jsonl",
                                  "SFT (cold start)": "sft-s0/heldout-quick.jsonl",
                                  "RL (GRPO)": "rl-s0/heldout-quick.jsonl",
                                  "SFT control (same time)": "sft_control-s0/heldout-quick.jsonl"}
    assert set(committed) == set(summary) | {"evals"} and {"rows", "page", "stage_seconds", "config", "command",
                                                           "commit", "machine", "heldout_sha256"} <= set(summary)
    assert [label for label, _ in summary["rows"]] == list(committed["evals"])

    assert cli.main(["run", "tooluse", *argv]) == 0  # nothing left: no piece runs, no row is added
    assert _metas(out) == metas and ledger.read_text().count("\n") == rows + 3

    (out / "eval" / "rl.summary.json").unlink()  # an evaluation killed before it finished
    assert cli.main(["run", "tooluse", *argv]) == 0
    again = _metas(out)
    assert {k for k in again if again[k] != metas[k]} == {"eval__rl.json"}
    assert ledger.read_text().count("\n") == rows + 4


def test_a_budget_too_small_for_any_piece_runs_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "tooluse", "--quick", "--out", str(out), "--results", str(tmp_path / "results"),
                     "--budget-minutes", "0.5"]) == 0
    assert "stopped before eval/base" in capsys.readouterr().out
    assert not (out / "pieces").exists() and not (out / "eval").exists()
