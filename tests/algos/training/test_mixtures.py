"""Several envs in one run: the mixture spec, weighted per-position task draws, single-env groups, per-env
metrics, plots and evaluation reports, resume, and the CLI flag. Real envs: ToolUse-v0 and Search-v0 (bundled
offline BM25), tiny random models."""

from __future__ import annotations

import pytest
from helpers import tiny_train_config, tiny_train_model

from agentrl.algos.evaluation.metrics import aggregate_rollout_metrics, mean
from agentrl.algos.rollout.collector import TASK_ENV_KEY, CollectorConfig
from agentrl.algos.training.tasks import EnvComponent, MixtureTaskSource, mixture_test_tasks, parse_mixture

TOOL, SEARCH = "AgentRL/ToolUse-v0", "AgentRL/Search-v0"
MIX = [{"id": TOOL, "weight": 3}, {"id": SEARCH, "weight": 1}]


def test_every_spelling_of_a_mixture_gives_the_same_components():
    want = [EnvComponent(TOOL, 3.0, {}, "ToolUse-v0"), EnvComponent(SEARCH, 1.0, {}, "Search-v0")]
    assert parse_mixture(MIX) == want
    assert parse_mixture({TOOL: 3, SEARCH: 1}) == want
    assert parse_mixture("ToolUse-v0:3, Search-v0") == want  # short ids, default weight 1
    assert parse_mixture(None) == [] and parse_mixture([]) == []
    named = parse_mixture([{"id": TOOL, "name": "mul", "env_kwargs": {"families": ["multiply"]}}, {"id": TOOL}])
    assert [c.name for c in named] == ["mul", "ToolUse-v0"] and named[0].env_kwargs == {"families": ["multiply"]}


@pytest.mark.parametrize(("spec", "message"), [
    ([{"id": TOOL, "wieght": 2}], "envs[0]: unknown key 'wieght'"),
    ([{"weight": 2}], "envs[0]: 'id'"),
    ([{"id": TOOL, "weight": 0}], "envs[0].weight: must be a positive"),
    ([{"id": TOOL, "weight": "heavy"}], "envs[0].weight: expected a number"),
    ([{"id": TOOL}, {"id": TOOL}], "two components are named 'ToolUse-v0'"),
    ([{"id": TOOL, "env_kwargs": [1]}], "envs[0].env_kwargs: expected a dict"),
    ([{"id": TOOL, "after_steps": -1}], "envs[0].after_steps: expected an int >= 0"),
    ([{"id": TOOL, "after_steps": "4"}], "envs[0].after_steps: expected an int >= 0"),
    ([{"id": TOOL, "after_steps": 2}], "every component has after_steps > 0"),
])
def test_a_bad_mixture_names_the_entry_and_key(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_mixture(spec)


def test_mixture_tasks_follow_the_weights_and_are_a_pure_function_of_seed_and_position():
    comps = parse_mixture(MIX)
    source = MixtureTaskSource(comps, seed=3)
    names = [source.task(k)[TASK_ENV_KEY] for k in range(4000)]
    share = names.count("ToolUse-v0") / len(names)
    assert abs(share - 0.75) < 0.03, share  # 3:1 (deterministic for this seed; std of the share is 0.007)
    assert set(names) == {"ToolUse-v0", "Search-v0"}
    # A fresh source (a resumed run) gives the very same tasks at any position, read in any order.
    again = MixtureTaskSource(parse_mixture(MIX), seed=3)
    assert again.take(1000, 8) == source.take(1000, 8)
    assert [again.task(k) for k in (7, 2, 5)] == [source.task(k) for k in (7, 2, 5)]
    # The task itself is the env's own task k, tagged with the env's name.
    k = names.index("Search-v0")
    task = source.task(k)
    assert {k2: v for k2, v in task.items() if k2 != TASK_ENV_KEY} == source.sources[1].task(k)
    assert "golden_answers" in task
    assert MixtureTaskSource(comps, seed=4).take(0, 16) != source.take(0, 16)


def test_the_documented_curriculum_adds_each_chain_length_at_its_step():
    """docs/mixtures.md's curriculum, as printed: one-call families only for 4 steps, then the two-call chains,
    from step 9 the three-call chain too; still a pure function of (seed, position)."""
    import re

    import yaml
    from helpers import ROOT

    from agentrl.algos import TrainConfig

    page = (ROOT / "docs" / "mixtures.md").read_text(encoding="utf-8")
    [block] = re.findall(r"^## A curriculum\n.*?^```yaml\n(.*?)^```", page, re.S | re.M)
    cfg = TrainConfig.from_dict({**yaml.safe_load(block), "tasks_per_step": 4})
    source = MixtureTaskSource(cfg.env_mixture(), seed=0, tasks_per_step=cfg.tasks_per_step)
    step = {s: {source.task(k)[TASK_ENV_KEY] for k in range(4 * (s - 1), 4 * s)} for s in range(1, 41)}
    assert set().union(*(step[s] for s in range(1, 5))) == {"one-call"}
    assert set().union(*(step[s] for s in range(5, 9))) == {"one-call", "two-calls"}
    assert set().union(*(step[s] for s in range(9, 41))) == {"one-call", "two-calls", "three-calls"}
    families = {source.task(k)["family"] for k in range(32) if source.task(k)[TASK_ENV_KEY] == "two-calls"}
    assert families <= {"stock_value", "add_multiply"} and families
    assert MixtureTaskSource(cfg.env_mixture(), seed=0, tasks_per_step=4).take(40, 8) == source.take(40, 8)


def _mixture_config(tmp_path, **kw):
    base = dict(env="AgentRL/ToolUse-v0", envs=MIX, tasks_per_step=4, group_size=2, save_every=1,
                collector=CollectorConfig(max_new_tokens=8, max_turns=2))
    base.update(kw)
    return tiny_train_config(tmp_path, **base)


def test_one_training_step_on_a_mixture_keeps_groups_single_env_and_logs_per_env_metrics(tokenizer, tmp_path):
    from agentrl.algos.rollout.collector import Collector
    from agentrl.algos.training.trainer import Trainer, rollout_metrics

    trainer = Trainer(_mixture_config(tmp_path), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    # Pick a start position whose batch holds both envs.
    start = next(p for p in range(0, 400, 4)
                 if len({t[TASK_ENV_KEY] for t in trainer.tasks.take(p, 4)}) == 2)
    with Collector(trainer.policy, trainer.config.collector) as collector:
        trajs, n_tasks, seconds = trainer._rollout(collector, start)
    assert n_tasks == 4 and len(trajs) == 8
    tasks = trainer.tasks.take(start, 4)
    for g, task in enumerate(tasks):
        group = [t for t in trajs if t.group_id == g]
        assert len(group) == 2 and all(t.task[TASK_ENV_KEY] == task[TASK_ENV_KEY] for t in group)
        # The episodes really ran in the task's env: Search-v0 asks "Question: ...", ToolUse-v0 does not.
        prompts = {tokenizer.decode(t.token_ids[:t.prompt_len]) for t in group}
        assert len(prompts) == 1
        assert ("Question: " in prompts.pop()) == (task[TASK_ENV_KEY] == "Search-v0")

    m = rollout_metrics(trajs, seconds)
    for name in ("ToolUse-v0", "Search-v0"):
        own = [t for t in trajs if t.task[TASK_ENV_KEY] == name]
        assert m[f"reward/mean@{name}"] == pytest.approx(mean([t.reward for t in own]))
        assert m[f"rollout/num_groups@{name}"] == len({t.group_id for t in own})
    assert m["reward/mean"] == pytest.approx(mean([t.reward for t in trajs]))

    [step] = trainer.train()
    present = {t[TASK_ENV_KEY] for t in trainer.tasks.take(0, 4)}
    assert {k.partition("@")[2] for k in step if "@" in k and not k.startswith("family/")} == present
    assert all(f"reward/mean@{name}" in step for name in present)

    # Resume: the checkpoint's data position leads to the same next tasks the uninterrupted run would take.
    resumed = Trainer(_mixture_config(tmp_path, steps=2), model=tiny_train_model(tokenizer), tokenizer=tokenizer,
                      resume=True)
    assert resumed.global_step == 1 and resumed.data_pos == 4
    assert resumed.tasks.take(resumed.data_pos, 4) == trainer.tasks.take(4, 4)


def test_a_single_env_batch_has_no_per_env_metrics(tokenizer):
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.rollout.collector import collect

    policy = HFPolicy(tiny_train_model(tokenizer), tokenizer)
    trajs = collect("Test/Score-v0", policy, [{"id": "0", "query": "hi"}], 2, CollectorConfig(max_new_tokens=4))
    assert not any("@" in k for k in aggregate_rollout_metrics(trajs))


def test_evaluate_reports_each_env_and_all_together(tokenizer, tmp_path):
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.report import load_report
    from agentrl.algos.policy.hf import HFPolicy

    comps = parse_mixture(MIX)
    tasks = mixture_test_tasks(comps, 2)
    assert [t[TASK_ENV_KEY] for t in tasks] == ["ToolUse-v0"] * 2 + ["Search-v0"] * 2
    policy = HFPolicy(tiny_train_model(tokenizer), tokenizer)
    report = evaluate({c.name: c.id for c in comps}, policy, tasks, n=2,
                      config=CollectorConfig(max_new_tokens=8, max_turns=2), progress=False,
                      out=tmp_path / "eval.jsonl")
    assert report.num_tasks == 4 and set(report.by_env) == {"ToolUse-v0", "Search-v0"}
    assert all(sub["num_tasks"] == 2 and sub["num_samples"] == 4 for sub in report.by_env.values())
    assert mean([sub["mean_reward"] for sub in report.by_env.values()]) == pytest.approx(report.mean_reward)
    assert report.settings["env"] == {"ToolUse-v0": TOOL, "Search-v0": SEARCH}
    assert load_report(tmp_path / "eval.jsonl").by_env == report.by_env


def test_plots_draw_per_env_curves_in_the_overall_panel():
    from agentrl.algos.evaluation.plot import _group_panels

    groups = _group_panels(["reward/mean", "reward/mean@ToolUse-v0", "reward/mean@Search-v0", "train/loss"])
    assert groups["reward"] == {"reward/mean": ["reward/mean", "reward/mean@ToolUse-v0", "reward/mean@Search-v0"]}


def test_cli_envs_flag_builds_the_mixture(tmp_path):
    from agentrl.algos.cli import build_parser
    from agentrl.algos.cli_train import build_train_config

    args = build_parser().parse_args(["train", "--algo", "grpo", "--out", str(tmp_path),
                                      "--envs", "ToolUse-v0:2", "--envs", "Search-v0:1"])
    cfg = build_train_config(args)
    assert cfg.env_mixture() == [EnvComponent(TOOL, 2.0, {}, "ToolUse-v0"), EnvComponent(SEARCH, 1.0, {}, "Search-v0")]
    with pytest.raises(ValueError, match="tasks_file="):
        tiny_train_config(tmp_path, envs=MIX, tasks_file="rows.jsonl").validate()
