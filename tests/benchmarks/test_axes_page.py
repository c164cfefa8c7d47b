"""The learning page's sections of the axes experiment and the train-split lr choices (LR_CHOICE, LR_EDGE), from
partial data in a tmp folder: what ran is shown with its verdicts, seed spread, pass@k / pass^k and KL; the rest
says "not run"."""

from __future__ import annotations

import json
from pathlib import Path

from harness.axes_page import axes_section, decision, edge_decision, lr_choice_section, lr_edge_section, readme_rows
from harness.experiments import AXES, LR_CHOICE, LR_EDGE


def piece(folder: Path, key: str, scores: list[float] | None = None, **meta) -> None:
    """A finished piece in the one layout: an evaluation (``scores``) as ``<model>/<set>-<mode>.jsonl`` beside its
    ``.meta.json``; a training piece as its folder with ``meta.json``."""
    if scores is None:
        (folder / key).mkdir(parents=True, exist_ok=True)
        (folder / key / "meta.json").write_text(json.dumps({"key": key, "wall_seconds": 1.0, **meta}))
        return
    records = folder / f"{key}.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    records.write_text("".join(json.dumps({"id": f"t{i}", "family": "f", "score": s, "n": 1}) + "\n"
                               for i, s in enumerate(scores)))
    (folder / f"{key}.meta.json").write_text(json.dumps({"key": key, "wall_seconds": 1.0, **meta}))


def test_nothing_committed_says_not_run(tmp_path):
    text = "\n".join(axes_section(tmp_path / "axes"))
    assert "**Not run yet**" in text and "15 minutes of training" in text
    assert "**Not run yet**" in "\n".join(lr_choice_section(tmp_path / "lr_choice"))


def partial(data: Path, n: int = 40) -> None:
    """The cold start, GRPO seeds 0 and 1 at 50% on tooluse_v5 and SFT-continued seed 0 at 0%; nothing else."""
    piece(data, "cold_start", steps=48, train_seconds=600.0)
    piece(data, "cold_start/tooluse_v5-greedy", [0.0] * n)
    piece(data, "cold_start/train-greedy", [1.0] * n, kl_to_base={"token_mean": 0.0125})
    for cell, score in (("grpo-s0", 1.0), ("grpo-s1", 1.0), ("sft-s0", 0.0)):
        piece(data, cell, steps=3, train_seconds=900.0,
              diagnostics={"reward_first_quarter": 0.25, "reward_last_quarter": 0.5 + score / 4})
        if cell.startswith("grpo"):  # two steps: add 2 groups (1 with a signal), then power 4 groups (none)
            (data / f"{cell}/metrics.jsonl").write_text(
                json.dumps({"step": 1, "family/groups@add": 2, "family/signal_groups@add": 1}) + "\n"
                + json.dumps({"step": 2, "family/groups@power": 4, "family/signal_groups@power": 0}) + "\n")
        piece(data, f"{cell}/tooluse_v5-greedy", [score] * (n // 2) + [0.0] * (n // 2))
        piece(data, f"{cell}/train-greedy", [1.0] * n, kl_to_base={"token_mean": 0.5})
    piece(data, "grpo-s0/tooluse_v5-sampled", [0.5] * n,
          report={"pass_at_k": {"1": 0.5, "2": 0.75, "4": 0.9, "8": 1.0},
                  "pass_hat_k": {"2": 0.25, "4": 0.1, "8": 0.0}})


def test_partial_data_shows_what_ran_with_verdicts_and_the_rest_as_not_run(tmp_path):
    data = tmp_path / "axes"
    partial(data)
    text = "\n".join(axes_section(data))
    assert "**Not run yet**" not in text
    assert "| GRPO (Dr. GRPO) | 3 steps, 15.0 min | 3 steps, 15.0 min | not run |" in text
    assert "| rejection sampling (SFT on own correct samples) | not run | not run | not run |" in text
    # tooluse_v5: GRPO's two seeds at 50%, SFT-continued's one seed at 0%, the cold start at 0%
    assert "| GRPO (Dr. GRPO) | 50.0 / 50.0 / not run | 50.0 (2 seeds) | 50 / 75 / 90 / 100 | 25 / 10 / 0 |" in text
    assert "| SFT-continued | 0.0 / not run / not run | 0.0 (1 seed) | not run | not run |" in text
    row = next(line for line in text.splitlines() if line.startswith("| GRPO (Dr. GRPO) vs SFT-continued |"))
    assert "+50.0" in row and "0.0 / 1 seed" in row and "**met** (decided)" in row  # 20 tasks vs 0: not a tie
    # a set nobody evaluated: every row not run, no comparison
    depth = text.split("#### `tooluse_axis_depth`")[1].split("####")[0]
    assert depth.count("not run") >= 4 and "A vs B" not in depth
    assert "| GRPO (Dr. GRPO) | 0.25 -> 0.75 | add 50%, power 100% |" in text
    assert "| SFT-continued | 0.25 -> 0.50 | – |" in text
    assert "| cold start | not run | 100.0 | 0.0125 |" in text
    assert "| GRPO (Dr. GRPO) | not run | 100.0 (2 seeds) | 0.5000 (0.5000 / 0.5000) |" in text


def test_the_readme_rows_are_at_most_8_sets_with_every_arm_and_grpo_against_each_control(tmp_path):
    assert readme_rows(tmp_path / "axes") == []  # nothing committed: the README says so instead
    data = tmp_path / "axes"
    partial(data)
    piece(data, "grpo-s0/bfcl_multiple-greedy", [1.0] * 10 + [0.0] * 30)
    lines = readme_rows(data)
    table = [line for line in lines if line.startswith("| ")]
    assert table[0].startswith("| Set: greedy pass@1 (%) | cold start | GRPO | SFT-continued | rejection sampling | "
                               "GRPO - SFT-continued: 95% interval; seed SD (points); verdict | GRPO - rejection")
    names = [line.split("|")[1].strip() for line in table[1:]]
    assert names == [*(f"`{s}`" for s in AXES.sets), "BFCL simple_python", "BFCL multiple"]  # 8: the README's most
    v5 = next(line for line in table if line.startswith("| `tooluse_v5` |"))
    cells = [c.strip() for c in v5.split("|")[2:-1]]
    assert cells[:4] == ["0.0", "50.0 (2 seeds)", "0.0 (1 seed)", "not run"]
    assert cells[4].startswith("+50.0 [") and "; 0.0 / 1 seed; **met** (decided)" in cells[4]
    assert cells[5] == "not run"  # no rejection-sampling seed yet
    assert "| BFCL multiple | not run | 25.0 (1 seed) | not run | not run | not run | not run |" in table
    depth = next(line for line in table if line.startswith("| `tooluse_axis_depth` |"))
    assert depth.count("not run") == 6
    assert lines[-1] == ("Cells trained (15 minutes each, from one shared cold start): GRPO 2 of 3 (3 / 3 steps), "
                         "SFT-continued 1 of 3 (3 steps), rejection sampling 0 of 3. On the learning page also: "
                         "train-split sample, BFCL irrelevance.")
    page = "\n".join(axes_section(data))  # the page: greedy only on a public benchmark set, no pass@k
    bfcl = page.split("#### BFCL multiple (`bfcl_multiple`: greedy only")[1].split("####")[0]
    assert "| GRPO (Dr. GRPO) | 25.0 / not run / not run | 25.0 (1 seed) | – | – |" in bfcl


def test_a_one_task_difference_is_a_tie(tmp_path):
    data = tmp_path / "axes"
    piece(data, "cold_start/tooluse_v5-greedy", [0.0] * 10)
    piece(data, "grpo-s0/tooluse_v5-greedy", [1.0] + [0.0] * 9)
    text = "\n".join(axes_section(data))
    row = next(line for line in text.splitlines() if line.startswith("| GRPO (Dr. GRPO) vs cold start |"))
    assert "**tie** (1 vs 0 tasks" in row


def test_a_verdict_one_seed_carries_says_so_and_one_every_seed_holds_does_not(tmp_path):
    """GRPO's seed 0 solves 12 of 40 tasks, seeds 1 and 2 none: the mean beats the cold start (met), but without
    seed 0 it is a tie, so the cell names seed 0. SFT-continued solves the same 12 with every seed: no note."""
    data = tmp_path / "axes"
    n = 40
    piece(data, "cold_start/tooluse_v5-greedy", [0.0] * n)
    for seed in range(3):
        piece(data, f"grpo-s{seed}/tooluse_v5-greedy", ([1.0] * 12 if seed == 0 else [0.0] * 12) + [0.0] * 28)
        piece(data, f"sft-s{seed}/tooluse_v5-greedy", [1.0] * 12 + [0.0] * 28)
    lines = axes_section(data)
    grpo = next(line for line in lines if line.startswith("| GRPO (Dr. GRPO) vs cold start |"))
    sft = next(line for line in lines if line.startswith("| SFT-continued vs cold start |"))
    assert "**met** (decided), carried by GRPO (Dr. GRPO) seed 0 alone |" in grpo, grpo
    assert sft.endswith("**met** (decided) |"), sft


def test_the_lr_choice_applies_its_declared_rule_once_every_cell_is_in(tmp_path):
    data = tmp_path / "lr_choice"
    piece(data, "cold_start/train-greedy", [1.0] * 8 + [0.0] * 2)  # 80%
    for arm, after, reward in (("grpo_lr2e-4", [1.0] * 6 + [0.0] * 4, 0.9), ("grpo_lr6e-5", [1.0] * 8 + [0.0] * 2, 0.5),
                               ("grpo_lr2e-5", [1.0] * 8 + [0.0] * 2, 0.49)):
        for seed in LR_CHOICE.seeds[:2]:
            piece(data, f"{arm}-s{seed}", steps=16, diagnostics={"reward_last_quarter": reward})
            piece(data, f"{arm}-s{seed}/train-greedy", after)
    text = "\n".join(lr_choice_section(data))
    assert "| grpo_lr2e-4 | 0 | 16 | 60.0 | -20.0 | **yes** | 0.900 |" in text
    assert "| grpo_lr2e-4 | 2 | not run |" in text and "**Not decided yet**: 6 of 9 cells" in text
    outcome = {"grpo_lr2e-4": [(True, 0.9)] * 3, "grpo_lr6e-5": [(False, 0.5)] * 3, "grpo_lr2e-5": [(False, 0.49)] * 3}
    # 2e-4 collapsed; 6e-5 and 2e-5 within 0.02 of the best reward: the lower rate
    assert decision(LR_CHOICE, outcome).startswith("**Decision**: grpo_lr2e-5 (rl_lr 2e-05)")
    outcome["grpo_lr2e-5"] = [(False, 0.3)] * 3
    assert decision(LR_CHOICE, outcome).startswith("**Decision**: grpo_lr6e-5")
    every = {a: [(True, 0.5)] * 3 for a in LR_CHOICE.arms}
    assert "none passed" in decision(LR_CHOICE, every) and "grpo_lr2e-5" in decision(LR_CHOICE, every)
    assert AXES.judge == ""  # the axes experiment is judged by its comparisons, not a rule of its own


def test_the_axes_rows_of_the_ledger_are_not_selections():
    from harness.data import selections

    def row(i, stage, value, adapter):
        return {"id": i, "set": "tooluse_v5", "set_sha256": "x", "n": 1, "temperature": 0.0, "tasks": 128,
                "set_tasks": 128, "stage": stage, "adapter": adapter, "scores": {"average_at_n": value}}

    others = [row(1, "rl", 0.5, "a"), row(2, "sft_control", 0.6, "b")]
    axes = [row(3, "axes:grpo-s0", 0.9, "c"), row(4, "axes:cold_start", 0.1, "d")]
    assert selections(others + axes) == {2: 2}  # without the axes rows: best of the two others



def sampled(data, key, scores):
    """A temperature-1 evaluation: per-task pass@1 of 4 tries."""
    piece(data, f"{key}/train-sampled", scores)


def test_lr_edge_rows_show_both_scores_updates_and_signal(tmp_path):
    data = tmp_path / "lr_edge"
    piece(data, "cold_start/train-greedy", [1.0] * 9 + [0.0])  # 90%
    sampled(data, "cold_start", [0.5] * 10)  # 50%
    piece(data, "grpo_lr6e-5-s0", steps=16, algo="grpo")
    (data / "grpo_lr6e-5-s0" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "train/optimizer_steps": float(i % 2), "signal/groups": 8.0,
                    "signal/groups_with_signal": 6.0, "signal/rollouts": 64.0}) + "\n" for i in range(4)))
    piece(data, "grpo_lr6e-5-s0/train-greedy", [1.0] * 7 + [0.0] * 3)  # 70%: 20 points down, collapsed
    sampled(data, "grpo_lr6e-5-s0", [0.75] * 10)
    piece(data, "sft_lr5e-4-s1", steps=16, algo="sft")
    piece(data, "sft_lr5e-4-s1/train-greedy", [1.0] * 9 + [0.0])
    text = "\n".join(lr_edge_section(data))
    assert "Cold start on the train-split sample: greedy 90.0%, pass@1 at temperature 1 50.0%." in text
    # 2 updates in 4 steps; 24 of 32 groups with signal; 256 rollouts / 2 updates
    assert "| grpo_lr6e-5 | 0 | 2 | 70.0 | -20.0 | **yes** | 75.0 | +25.0 | 75% | 128 |" in text
    assert "| sft_lr5e-4 | 1 | not run |" in text  # its temperature-1 evaluation is missing
    assert "**GRPO: not decided yet**: 1 of 9 cells" in text and "**SFT-continued: not decided yet**: 0 of 9" in text


def test_lr_edge_applies_its_rule_per_algorithm():
    grpo = {"grpo_lr2e-5": [(False, 0.70)] * 3, "grpo_lr6e-5": [(False, 0.71)] * 3, "grpo_lr2e-4": [(True, 0.9)] * 3}
    # 2e-4 collapsed; 2e-5 within 2 points of 6e-5's best: the lower rate
    assert edge_decision(LR_EDGE, "grpo", grpo).startswith("**GRPO: grpo_lr2e-5** (lr 2e-05)")
    grpo["grpo_lr2e-5"] = [(False, 0.68)] * 3
    assert edge_decision(LR_EDGE, "grpo", grpo).startswith("**GRPO: grpo_lr6e-5** (lr 6e-05)")
    grpo["grpo_lr2e-5"] = [(False, 0.9), (True, 0.9), (False, 0.9)]  # one seed collapsed: the rate is out
    assert edge_decision(LR_EDGE, "grpo", grpo).startswith("**GRPO: grpo_lr6e-5**")
    sft = {a: [(True, 0.9)] * 3 for a in LR_EDGE.arms if a.startswith("sft")}
    assert edge_decision(LR_EDGE, "sft", sft).startswith("**SFT-continued: sft_lr1.5e-4** (lr 0.00015)")
    assert "none passed" in edge_decision(LR_EDGE, "sft", sft)
    assert "not decided yet" in edge_decision(LR_EDGE, "sft", {"sft_lr1.5e-4": [(False, 0.9)] * 3})
    # a rate with a collapsed seed is out: its other seeds are not needed, the others' are
    early = {"sft_lr1.5e-4": [(False, 0.9)] * 3, "sft_lr5e-4": [(True, 0.7)], "sft_lr1.5e-3": [(False, 0.8)] * 2}
    assert edge_decision(LR_EDGE, "sft", early) == ("**SFT-continued: not decided yet**: 6 of 9 cells trained and "
                                                    "evaluated. Out by the collapse rule already: sft_lr5e-4.")
    early["sft_lr1.5e-3"].append((True, 0.8))
    assert edge_decision(LR_EDGE, "sft", early).startswith("**SFT-continued: sft_lr1.5e-4** (lr 0.00015)")
    assert "(2 cells of collapsed rates not run: the rule does not need them)." in edge_decision(LR_EDGE, "sft", early)
