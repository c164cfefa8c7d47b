"""``benchmarks/signal_targets.py``: issue 59's three learning-signal targets per arm, from a cell's committed
metrics, with the task sampler's counts (refill included) where it ran and the single batch's where it did not."""

from __future__ import annotations

import json

import signal_targets


def cell(folder, name, algo, rows, **config):
    (folder / name).mkdir(parents=True)
    (folder / name / "meta.json").write_text(json.dumps({"arm": name.rsplit("-s", 1)[0], "algo": algo,
                                                         "config": config}))
    (folder / name / "metrics.jsonl").write_text("".join(json.dumps({"step": i, **r}) + "\n"
                                                         for i, r in enumerate(rows, 1)))


def test_sampler_and_plain_cells_pool_their_steps_per_arm(tmp_path, capsys):
    exp, base = tmp_path / "edge", tmp_path / "axes"
    # sampler on, 4 x 8: step 1 refilled (12 groups rolled out, 8 with signal, 96 rollouts, an update), step 2
    # found no signal within its budget (no update)
    cell(exp, "grpo-s0", "grpo", [
        {"signal/groups": 12, "signal/groups_with_signal": 8, "signal/rollouts": 96, "train/optimizer_steps": 1.0},
        {"signal/groups": 16, "signal/groups_with_signal": 0, "signal/rollouts": 128, "train/optimizer_steps": 0.0}],
        tasks_per_step=4, group_size=8)
    cell(exp, "grpo-s1", "grpo", [{"signal/groups": 4, "signal/groups_with_signal": 4, "signal/rollouts": 32,
                                   "train/optimizer_steps": 1.0}], tasks_per_step=4, group_size=8)
    cell(exp, "sft-s0", "sft", [{"train/optimizer_steps": 1.0}])  # not an RL arm: left out
    # the old main-job keys; no sampler: the batch's groups, 3 of 4 with equal rewards
    cell(base, "grpo-s0", "grpo", [{"rollout/num_groups": 4, "rollout/degenerate_group_rate": 0.75,
                                    "rollout/num_trajectories": 32, "train/optimizer_steps": 1.0}],
         rl_tasks_per_step=4, rl_group_size=8)
    arms = signal_targets.arm_figures(exp)
    assert set(arms) == {"grpo"}
    g = arms["grpo"]
    assert (g["cells"], g["steps"], g["updates"]) == (2, 3, 2)
    assert g["signal_share"] == 12 / 32 and g["update_share"] == 2 / 3
    assert g["per_update"] == (96 + 128 + 32) / 2 / 32  # 4x a plain step's 32 rollouts
    assert signal_targets.arm_figures(base)["grpo"]["signal_share"] == 0.25
    assert signal_targets.main(["--experiment", "edge", "--baseline", "axes", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| grpo | 2 | 3 | 38 % missed | 67 % missed | 4.00x missed | 25 % / 100 % / 1.00x |" in out


def test_a_met_row_and_an_unjudged_algorithm(tmp_path, capsys):
    rows = [{"signal/groups": 4, "signal/groups_with_signal": 3, "signal/rollouts": 40, "train/optimizer_steps": 1.0}]
    cell(tmp_path / "e", "grpo_lr6e-5-s0", "grpo", rows, tasks_per_step=4, group_size=8)
    cell(tmp_path / "e", "rft-s0", "rft", rows, tasks_per_step=4, group_size=8)
    signal_targets.main(["--experiment", "e", "--baseline", "none", "--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| grpo_lr6e-5 | 1 | 1 | 75 % **met** | 100 % **met** | 1.25x **met** | – |" in out
    assert "| rft | 1 | 1 | 75 % (not judged) |" in out
