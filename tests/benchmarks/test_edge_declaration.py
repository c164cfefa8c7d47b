"""EDGE and its learning-rate choice (issue 59, part 5) as declared in benchmarks/harness/experiments.py: the
training mix is what the committed train-split measurement put in the band, the rates are chosen on the train
split only, and EDGE refuses to run while a setting is still pending."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import axes_cli
from harness.experiments import AXES, EDGE, EDGE_FAMILIES, LR_EDGE, RUNNABLE

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "results" / "data" / "edge_mix" / "results_n8.json"
FORGETTING = {"days", "convert"}  # the forgetting set's families: held out of every arm's training, as in AXES


def test_the_training_mix_is_the_measured_band_without_the_forgetting_families():
    rows = json.loads(MEASURED.read_text())["rows"]
    in_band = {r["candidate"] for r in rows if r["kind"] == "default" and r["in_band"]}
    assert set(EDGE_FAMILIES) == in_band - FORGETTING
    assert all(r["tasks"] >= 8 for r in rows if r["candidate"] in EDGE_FAMILIES)  # not the 2-task first look


def test_the_main_jobs_grpo_mix_is_every_default_family_in_the_measured_band():
    from agentrl.algos.recipes.main_job import RL_FAMILIES

    rows = json.loads(MEASURED.read_text())["rows"]
    assert set(RL_FAMILIES) == {r["candidate"] for r in rows if r["kind"] == "default" and r["in_band"]}


def test_the_rates_are_chosen_on_the_train_split_from_the_same_cold_start_and_mix():
    assert LR_EDGE.sets == () and LR_EDGE.transfer == () and LR_EDGE.steps == 16
    assert LR_EDGE.cold_start == EDGE.cold_start and LR_EDGE.train_families == EDGE.train_families
    algos = {arm: s["algo"] for arm, s in LR_EDGE.arms.items()}
    assert sorted(set(algos.values())) == ["grpo", "sft"] and len(LR_EDGE.seeds) == 3
    for arm, settings in LR_EDGE.arms.items():  # GRPO's rates are tried with the sampler EDGE's GRPO uses
        assert settings.get("stages.rl.sampler.enabled") is (True if algos[arm] == "grpo" else None)
    assert not LR_EDGE.pending and LR_EDGE.name in RUNNABLE


def test_edge_holds_the_axes_sets_both_cuts_and_waits_for_its_rates():
    assert EDGE.sets == AXES.sets and EDGE.transfer == AXES.transfer and EDGE.seeds == (0, 1, 2)
    assert EDGE.minutes > 0 and EDGE.steps is None and EDGE.cut_updates
    assert EDGE.arms["grpo"]["stages.rl.sampler.enabled"] and EDGE.arms["rft"]["stages.rl.sampler.enabled"]
    from agentrl.algos.training.sampler import SamplerConfig

    assert EDGE.arms["grpo"]["stages.rl.sampler.budget"] == SamplerConfig().budget  # the defaults, not the main job's
    from agentrl.algos.recipes.main_job import MainJobStages

    assert EDGE.arms["grpo"]["stages.rl.group_size"] == 8  # the "group 8", as the main job's
    assert MainJobStages().rl["group_size"] == 8
    # the rates are chosen for the batch and horizon EDGE uses: the same groups per update, 16 updates (the cut)
    batch = {k: v for k, v in EDGE.arms["grpo"].items() if k in ("stages.rl.tasks_per_step", "stages.rl.group_size")}
    assert batch and all(batch.items() <= s.items() for a, s in LR_EDGE.arms.items() if a.startswith("grpo"))
    assert batch.items() <= EDGE.arms["rft"].items() and EDGE.cut_updates == LR_EDGE.steps
    # the rates LR_EDGE chose, set in one commit with the pending line cleared (it waited for them before)
    assert not EDGE.pending and all(v is not None for s in EDGE.arms.values() for v in s.values())
    assert EDGE.arms["grpo"]["stages.rl.lr"] == EDGE.arms["rft"]["stages.rl.lr"] == LR_EDGE.arms["grpo_lr6e-5"][
        "stages.rl.lr"]
    assert EDGE.arms["sft"]["stages.sft.lr"] == LR_EDGE.arms["sft_lr1.5e-4"]["stages.sft.lr"]


def test_the_rates_are_what_lr_edges_committed_cells_decide():
    """The rule re-derived from LR_EDGE's committed per-task files, not copied: the page's decision names the rate
    set in EDGE's declaration, for GRPO and for SFT-continued."""
    text = (ROOT / "docs" / "results" / "learning.md").read_text(encoding="utf-8")
    for name, algo, key in (("GRPO", "grpo", "stages.rl.lr"), ("SFT-continued", "sft", "stages.sft.lr")):
        arm = [a for a, s in LR_EDGE.arms.items() if s["algo"] == algo and s[key] == EDGE.arms[algo][key]]
        assert len(arm) == 1 and f"**{name}: {arm[0]}** (lr " in text, (name, arm)


def test_a_pending_experiment_is_refused_before_any_piece_runs(tmp_path, monkeypatch):
    import dataclasses

    waiting = dataclasses.replace(EDGE, pending="the GRPO rates are LR_EDGE's choice")
    monkeypatch.setattr("harness.axes_run.RUNNABLE", {**RUNNABLE, "edge": waiting})
    monkeypatch.setattr("harness.axes_run.schedule", lambda *a, **k: pytest.fail("a piece was scheduled"))
    with pytest.raises(SystemExit, match="may not run yet: the GRPO rates"):
        axes_cli.main(["run", "--experiment", "edge", "--data", str(tmp_path / "d"), "--work", str(tmp_path / "w")])
    assert not (tmp_path / "d").exists() and not (tmp_path / "w").exists()


def test_the_rate_choice_also_scores_the_train_sample_at_temperature_1_and_the_axes_plan_is_unchanged():
    from harness.axes_run import plan

    keys = [p.key for p in plan(LR_EDGE)]
    assert "cold_start/train-sampled" in keys and "grpo_lr6e-5-s0/train-sampled" in keys
    assert LR_EDGE.sampled["eval_temperature"] == 1.0 and LR_EDGE.sampled["eval_n"] == 4
    assert not any(k.endswith("train-sampled") for k in (p.key for p in plan(AXES)))


def test_edge_samples_only_tooluse_v5_and_the_other_plans_sample_every_set():
    """The third amendment (before any EDGE piece): 8 tries at temperature 0.7 on tooluse_v5 only; greedy on every
    set, both cuts; AXES keeps its sampled evaluation of every held-out set."""
    from harness.axes_run import plan

    edge = {p.key for p in plan(EDGE)}
    assert {k for k in edge if k.endswith("-sampled")} == {f"{m}/tooluse_v5-sampled" for m in
                                                           ["cold_start", *(f"{a}-s{s}" for a in EDGE.arms
                                                                            for s in EDGE.seeds)]}
    assert all(f"grpo-s0/{s}-greedy" in edge and f"grpo-s0/{s}-cut-greedy" in edge for s in EDGE.sets)
    axes = {p.key for p in plan(AXES)}
    assert AXES.sampled_sets is None and all(f"grpo-s0/{s}-sampled" in axes for s in AXES.sets)
