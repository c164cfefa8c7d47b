"""``benchmarks/experiment.py`` (issue 58, step 1): every experiment is declared as one ``Record`` with its notes as
fields, and the one command runs, reports and renders any of them through the runner and page of its kind (the
committed pages come out byte for byte). Nothing here trains: runners are replaced by recorders."""

from __future__ import annotations

import harness.experiment_cli as cli
import pytest
from harness import experiments as ex
from harness import transfer as tr
from harness.axes_run import status_lines as axes_status
from harness.experiments import RECORDS, diagnostic, note, record, undeclared
from harness.layout import DATA, LEDGER
from harness.record import NOTES, make_arm
from helpers import ROOT


def test_every_declaration_is_a_record_named_by_its_data_folder():
    learning = {e.name for e in ex.EXPERIMENTS} | {v.name for v in ex.VARIANTS}
    assert {n for n, r in RECORDS.items() if r.kind == "learning"} == learning
    assert {n for n, r in RECORDS.items() if r.kind == "axes"} == set(ex.RUNNABLE)
    assert RECORDS["axes"] is ex.AXES and RECORDS["transfer"] is tr.TRANSFER  # the declarations themselves
    assert record("transfer").sets == tuple(s.name for s in tr.SETS) and record("transfer").arms is tr.ARMS
    assert record("tooluse_lr2e-5").sets == ("tooluse_v4",) and record("tooluse").sets == ("tooluse_v3",)
    assert record("tooluse_guided").sets == ("tooluse_v3",)  # a variant without a set of its own: the plain one's
    assert record("tooluse_lr2e-5").overrides == ("stages.rl.lr=2e-5", "stages.rl.steps=4")
    assert ex.learning_record(ex.TOOLUSE, "lr2e-5") is record("tooluse_lr2e-5")
    assert ex.learning_record(ex.TOOLUSE) is record("tooluse") and not record("tooluse").variant
    assert record("pythonmath").full["eval_n"] == 4 and record("pythonmath").text_only_pipeline
    assert record("search").text_only_baseline and not record("tooluse").text_only_baseline
    assert "rl_text_only" in record("pythonmath").arms and "rl_text_only" not in record("search").arms
    assert record("axes").evaluated == (*ex.AXES.sets, "train", *ex.AXES.transfer)
    with pytest.raises(ValueError, match="no experiment 'nope'; declared: tooluse, "):
        record("nope")


def test_an_arm_s_notes_are_apart_from_its_settings():
    for r in RECORDS.values():
        for a in r.arms:
            assert not set(NOTES) & set(r.settings(a)), (r.name, a)
    axes = record("axes")
    assert axes.arm("rft")["about"].startswith("rejection sampling") and axes.algo("rft") == "rft"
    assert axes.settings("rft")["stages.rl.lr"] == 6e-5 and axes.algo("grpo") == "grpo"  # no note: its name
    assert record("lr_choice").algo("grpo_lr2e-4") == "grpo"
    assert ex.COMPARE.settings("grpo_lr2e-5") == {"lr": 2e-5} and ex.COMPARE.algo("grpo_lr2e-5") == "grpo"
    assert ex.COMPARE.algos == ("grpo", "ppo", "dpo", "sft") and "rft" in ex.COMPARE.options
    with pytest.raises(ValueError, match="no arm 'ppo' \\(declared: grpo, sft, rft\\)"):
        record("axes").arm("ppo")
    with pytest.raises(ValueError, match=r"arm notes \['lr'\] are not notes"):
        make_arm(lr=1e-4)


def test_undeclared_runs_diagnostics_and_notes_are_fields_of_their_records():
    assert record("tooluse").undeclared and not record("tooluse_multicall").undeclared
    assert diagnostic("tooluse_chains").startswith("GRPO collapsed") and note("tooluse_chains")
    assert note("compare_algorithms").startswith("GRPO's lr 6e-5") and not diagnostic("compare_algorithms")
    assert not undeclared("tooluse_quick") and diagnostic("tooluse_quick") == ""  # a quick run carries none
    assert not record("compare_algorithms_lr2e-4").runnable


def test_status_reports_what_is_committed_for_each_kind():
    assert cli.status_lines(record("axes"))[1:] == axes_status(ex.AXES, DATA / "axes")[1:]
    tooluse = cli.status_lines(record("tooluse"))
    assert tooluse[0] == "tooluse (learning): docs/results/data/tooluse"
    assert [line.split()[1] for line in tooluse[2:]] == ["base", "sft", "rl", "sft_control"]
    assert all(line.startswith("  done") for line in tooluse[2:])
    vllm = cli.status_lines(record("tooluse_vllm"))  # --no-control: its control never ran
    assert vllm[-1].startswith("  not run  sft_control")
    transfer = cli.status_lines(record("transfer"))
    assert any(line.startswith("  main_sft: 5 of 8 sets; not run: bfcl_multi_turn_base") for line in transfer)
    assert cli.summary_line(record("compare_algorithms")).endswith("arms run")


def test_status_of_an_experiment_with_no_data_says_not_run(tmp_path):
    assert cli.status_lines(record("tooluse"), tmp_path)[1:] == ["  not run"]
    assert cli.status_lines(record("compare_algorithms"), tmp_path)[1:] == ["  not run"]
    assert cli.status_lines(record("transfer"), tmp_path)[-1] == f"0 of {7 * 8} evaluations done"


def test_page_writes_the_page_that_shows_the_experiment(tmp_path, monkeypatch):
    import harness.pages

    written = cli.page("transfer", results=tmp_path)
    assert written == [tmp_path / "transfer.md"]
    assert written[0].read_bytes() == (ROOT / "docs" / "results" / "transfer.md").read_bytes()
    calls = []  # learning.md regenerates byte for byte in test_learning_page.py: here, who is asked to write it
    monkeypatch.setattr(harness.pages, "write_page", lambda *a, **k: calls.append((a, k)) or tmp_path / "learning.md")
    assert cli.page("axes", results=tmp_path) == [tmp_path / "learning.md"]
    assert calls == [((DATA, tmp_path), {"ledger": LEDGER, "readme": None})]  # README only with docs/results
    assert [p.name for p in cli.page("all", results=tmp_path)] == ["learning.md", "transfer.md"]
    assert [p.name for p in cli.page("tooluse_guided", results=tmp_path)] == ["learning.md"]


def test_run_hands_the_rest_of_the_line_to_the_runner_of_its_kind(monkeypatch):
    import harness.axes_cli
    import harness.transfer_cli

    calls = []
    monkeypatch.setattr(cli, "run_learning", lambda r, argv: calls.append(("learning", r.name, argv)) or 0)
    monkeypatch.setattr(cli, "run_comparison", lambda r, argv: calls.append(("compare", r.name, argv)) or 0)
    monkeypatch.setattr(harness.axes_cli, "main", lambda argv: calls.append(("axes", argv)) or 0)
    monkeypatch.setattr(harness.transfer_cli, "main", lambda argv: calls.append(("transfer", argv)) or 0)
    assert cli.main(["run", "tooluse_guided", "--no-control", "stages.rl.steps=2"]) == 0
    assert cli.main(["run", "search"]) == 0
    assert cli.main(["run", "compare_algorithms", "--seeds", "0,1", "--results", "r", "--ledger", "l"]) == 0
    assert cli.main(["run", "lr_choice", "--budget-minutes", "5"]) == 0
    assert cli.main(["run", "transfer", "--arm", "base"]) == 0
    assert calls == [
        ("learning", "tooluse_guided", ["--no-control", "stages.rl.steps=2"]),
        ("learning", "search", []),
        ("compare", "compare_algorithms", ["--seeds", "0,1", "--results", "r", "--ledger", "l"]),  # all of the rest
        ("axes", ["run", "--experiment", "lr_choice", "--budget-minutes", "5"]),
        ("transfer", ["--arm", "base"]),
    ]


def test_bad_requests_fail_in_one_line(capsys, monkeypatch):
    with pytest.raises(SystemExit, match="experiment.py: no experiment 'tooluse_x'; declared: "):
        cli.main(["status", "tooluse_x"])
    with pytest.raises(SystemExit, match="compare_algorithms_lr2e-4 is kept for its data only"):
        cli.main(["run", "compare_algorithms_lr2e-4"])
    import dataclasses

    # a record declared while a setting waits on another's decision (as EDGE's rates waited on LR_EDGE's)
    waiting = dataclasses.replace(RECORDS["edge"], pending="a rate still to be decided")
    monkeypatch.setattr(ex, "RECORDS", {**RECORDS, "edge": waiting})
    for r in [waiting, *(r for r in RECORDS.values() if r.pending)]:
        assert "may not run yet" in cli.status_lines(r)[0]
        with pytest.raises(SystemExit, match=f"{r.name} is declared but may not run yet: "):
            cli.main(["run", r.name])
    with pytest.raises(SystemExit):
        cli.main(["status", "axes", "--budget-minutes", "3"])  # only run passes options on
    assert "unrecognized arguments: --budget-minutes 3" in capsys.readouterr().err
