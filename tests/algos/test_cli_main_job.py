"""The main job writes its training curves (reward, format rate, loss per step of SFT then GRPO) into plots/,
beside the evaluation chart (algos.evaluation.plot.plot_stages)."""

from __future__ import annotations

import json
import struct

from agentrl.algos.evaluation.plot import plot_stages


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def _metrics(run_dir, rows):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_stages_draws_a_panel_per_logged_metric_and_nothing_without_metrics(tmp_path):
    _metrics(tmp_path / "sft", [{"step": s, "train/loss": 2.0 / s} for s in range(1, 5)])
    assert plot_stages([("SFT", tmp_path / "sft")], tmp_path / "a.png", dpi=100) == tmp_path / "a.png"
    assert _png_size(tmp_path / "a.png")[0] == 500  # one panel (loss) of 5 inches: SFT logs no reward
    _metrics(tmp_path / "grpo", [{"step": s, "reward/mean": 0.1 * s, "reward/format": 0.2 * s, "train/loss": 0.5,
                                  "rollout/tool_calls": 1.0} for s in range(1, 4)])
    path = plot_stages([("SFT", tmp_path / "sft"), ("GRPO", tmp_path / "grpo")], tmp_path / "b.png", dpi=100)
    assert _png_size(path)[0] == 1500  # reward, format rate, loss; not every metric the run logged
    assert plot_stages([("SFT", tmp_path / "nowhere")], tmp_path / "c.png") is None
    assert not (tmp_path / "c.png").exists()


def test_the_main_job_writes_its_training_curves_beside_the_eval_chart(tmp_path, tiny_dir, monkeypatch):
    from agentrl.algos.recipes.main_job import MainJobConfig, run_main_job

    # each stage's own figures (plot_run: every metric group, in sft/plots and grpo/plots) take most of a
    # tiny run's time and are not what this checks
    monkeypatch.setattr("agentrl.algos.evaluation.plot.plot_run", lambda run_dir, **kw: [])
    cfg = MainJobConfig(model=str(tiny_dir), out=str(tmp_path / "main"), eval_tasks=1, progress=False,
                        report_to=["none"], dtype="fp32", device="cpu",
                        stages={"sft": {"steps": 1, "sft": {"num_demos": 2, "batch_size": 2}},
                                "rl": {"steps": 1, "tasks_per_step": 1, "group_size": 2,
                                       "collector": {"max_new_tokens": 4, "max_turns": 2}}})
    result = run_main_job(cfg)
    plots = tmp_path / "main" / "plots"
    assert {p.name for p in plots.iterdir()} == {"eval_comparison.png", "training_curves.png"}
    assert plots / "training_curves.png" in result["plots"]
    assert _png_size(plots / "training_curves.png")[0] == 3 * 5 * 110  # reward, format rate and loss panels


def test_the_signal_column_and_share_are_the_grpo_stages_groups_with_unequal_rewards():
    from agentrl.algos.recipes.main_job import signal_share, with_signal_column

    history = [{"step": 1, "train/loss": 1.0},  # a step without signal/* metrics counts for nothing
               {"step": 2, "signal/groups": 8, "signal/groups_with_signal": 1},
               {"step": 3, "signal/groups": 16, "signal/groups_with_signal": 8}]
    assert signal_share(history) == 9 / 24
    assert signal_share([{"step": 1, "train/loss": 1.0}]) is None  # an SFT stage: no share, not 0 %
    table = "| Model | Average@1 |\n|---|---:|\n| base | 0.0 |\n| sft | 0.5 |\n| rl | 0.6 |\n\nN differs ..."
    lines = with_signal_column(table, {"rl": 9 / 24, "sft": None}, 3).split("\n")
    assert lines[:5] == ["| Model | Average@1 | Signal |", "|---|---:|---:|", "| base | 0.0 | – |",
                         "| sft | 0.5 | – |", "| rl | 0.6 | 38% |"]
    assert lines[5:] == ["", "N differs ..."]  # the note under the table is left as it was


def test_the_main_job_ends_with_the_grpo_stages_signal_line_and_column(tmp_path, tiny_dir, monkeypatch, capsys):
    """``agentrl main-job`` (a tiny one): its table's Signal column holds the GRPO stage's share of groups with
    unequal rewards, read from grpo/metrics.jsonl, and it ends with the line ``agentrl train`` ends with."""
    from agentrl.algos import cli
    from agentrl.algos.evaluation.run_log import read_metrics
    from agentrl.algos.training.sampler import signal_summary

    monkeypatch.setattr("agentrl.algos.evaluation.plot.plot_run", lambda run_dir, **kw: [])
    out = tmp_path / "main"
    assert cli.main(["main-job", "--model", str(tiny_dir), "--out", str(out), "--device", "cpu", "--dtype", "fp32",
                     "--report-to", "none", "eval_tasks=1", "progress=false", "stages.sft.steps=1",
                     "stages.sft.sft.num_demos=2", "stages.sft.sft.batch_size=2", "stages.rl.steps=2",
                     "stages.rl.tasks_per_step=2", "stages.rl.group_size=2", "stages.rl.collector.max_new_tokens=4",
                     "stages.rl.collector.max_turns=2"]) == 0
    printed = capsys.readouterr().out.strip().split("\n")
    steps = read_metrics(out / "grpo")
    assert len(steps) == 2 and all("signal/groups" in m for m in steps)
    groups = sum(m["signal/groups"] for m in steps)
    assert groups == 4  # 2 steps x 2 tasks
    share = sum(m["signal/groups_with_signal"] for m in steps) / groups
    header, _, base, sft, rl = [line for line in printed if line.startswith("|")]
    assert header.endswith("| Signal |")
    assert base.endswith("| – |") and sft.endswith("| – |") and rl.endswith(f"| {share:.0%} |")
    line = signal_summary(steps, sampler_on=True, from_adapter=True)  # the stage: sampler on, from the cold start
    assert line.startswith("signal: ") and f"of {groups} groups sampled" in line
    assert printed[-1] == line  # the job's last line, as agentrl train's
    assert f"\n{line}\n" in (out / "results.md").read_text()
