"""The task sampler (algos/training/sampler.py) with fake rewards, no model: refill and its budget, the GRESO skip
and its re-check, unseen keys first, learnability weights, resume, the config's errors and the end-of-run line."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.algos.training.sampler import (
    SamplerConfig,
    SignalSampler,
    gather,
    signal_metrics,
    signal_summary,
    task_key,
)


class Source:
    """Task k: a pure function of (seed, k), drawn among ``families`` (ids unique)."""

    def __init__(self, families, seed=0, weights=None):
        self.families, self.seed, self.weights = list(families), seed, weights

    def task(self, k):
        rng = np.random.default_rng([self.seed, k])
        return {"id": f"t{k}", "family": str(rng.choice(self.families, p=self.weights))}

    def take(self, start, n):
        return [self.task(k) for k in range(start, start + n)]


class FakeRollout:
    """Binary rewards: each sample of a task of family f succeeds with probability ``rates[f]`` (rng from the
    round's stream and the task id); records every round's tasks and refuses to run more than ``limit`` rounds."""

    def __init__(self, rates, group_size=4, limit=100):
        self.rates, self.group_size, self.limit = rates, group_size, limit
        self.rounds: list[list[dict]] = []

    def __call__(self, tasks, stream):
        self.rounds.append(list(tasks))
        assert len(self.rounds) <= self.limit, "refill never stopped"
        out = []
        for g, task in enumerate(tasks):
            rng = np.random.default_rng([stream, int(task["id"][1:])])
            for _ in range(self.group_size):
                r = float(rng.random() < self.rates[task["family"]])
                out.append(Trajectory([1], [1], [0.0], 0, r, g, task, metrics={"correct": r}))
        return out, 0.01


def _run(sampler, source, rollout, steps, groups=4, start=0, step0=0):
    pos, out = start, []
    for step in range(step0, step0 + steps):
        batch = gather(sampler, source, pos, rollout, groups=groups, step=step)
        pos += batch.positions
        out.append(batch)
    return out, pos


def test_refill_rolls_out_more_groups_until_the_update_holds_groups_with_signal():
    rollout = FakeRollout({"easy": 1.0, "mid": 0.5})
    sampler = SignalSampler(SamplerConfig(enabled=True, budget=8, skip_after=0), seed=1)
    [batch], _ = _run(sampler, Source(["easy", "easy", "easy", "mid"]), rollout, 1)
    assert batch.metrics["signal/trained_groups_with_signal"] == 4
    assert batch.metrics["signal/refill_rounds"] >= 1 and len(rollout.rounds) >= 2
    groups = {}
    for t in batch.train:
        groups.setdefault(t.group_id, []).append(t.reward)
    assert sorted(groups) == [0, 1, 2, 3]  # renumbered, four groups, each with unequal rewards
    assert all(min(r) != max(r) for r in groups.values())
    assert len(batch.trajectories) == batch.metrics["signal/rollouts"] > len(batch.train)
    assert len({t.group_id for t in batch.trajectories}) == batch.metrics["signal/groups"]  # rounds don't share ids
    assert batch.metrics["signal/rollouts_per_signal_group"] == batch.metrics["signal/rollouts"] / 4


def test_refill_stops_at_its_budget_and_trains_on_what_it_has():
    rollout = FakeRollout({"easy": 1.0}, limit=50)
    sampler = SignalSampler(SamplerConfig(enabled=True, budget=3, skip_after=0), seed=0)
    [batch], pos = _run(sampler, Source(["easy"]), rollout, 1)
    assert batch.metrics["signal/groups"] == 12 == sum(len(r) for r in rollout.rounds)  # 3 batches of 4 groups
    assert batch.metrics["signal/budget_spent"] == 1.0 and batch.metrics["signal/groups_with_signal"] == 0
    assert len({t.group_id for t in batch.train}) == 4  # the first round's groups: the algorithm skips them
    assert batch.metrics["signal/all_pass_groups"] == 12 and "signal/rollouts_per_signal_group" not in batch.metrics
    assert pos == batch.positions >= 12
    one = SignalSampler(SamplerConfig(enabled=True, budget=1), seed=0)  # budget 1: no refill
    rollout1 = FakeRollout({"easy": 1.0})
    _run(one, Source(["easy"]), rollout1, 1)
    assert len(rollout1.rounds) == 1


def test_keys_with_equal_rewards_are_skipped_and_come_back_by_recheck():
    source, rates = Source(["solved", "mid"]), {"solved": 1.0, "mid": 0.5}
    skipping = SignalSampler(SamplerConfig(enabled=True, budget=1, skip_after=2, recheck=0.2, oversample=3), seed=3)
    batches, _ = _run(skipping, source, FakeRollout(rates), 40)
    assert skipping.keys["solved"].skipped > 0
    assert sum(b.metrics["signal/skipped_keys"] for b in batches) > 0
    drawn_after_skip = [b for i, b in enumerate(batches) if i > 0 and b.metrics["signal/rechecked_keys"] > 0]
    assert drawn_after_skip, "a skipped key never came back"
    assert skipping.keys["solved"].groups > 2  # visited again after its streak reached skip_after
    never = SignalSampler(SamplerConfig(enabled=True, budget=1, skip_after=2, recheck=0.0, oversample=3), seed=3)
    _run(never, source, FakeRollout(rates), 40)
    assert never.keys["solved"].groups < skipping.keys["solved"].groups  # recheck is what brings it back
    # every candidate skipped: the round is filled with them (skipped keys are never starved of rollouts)
    alone = SignalSampler(SamplerConfig(enabled=True, budget=1, skip_after=1, recheck=0.0), seed=0)
    batches, _ = _run(alone, Source(["solved"]), FakeRollout(rates), 3)
    assert [b.metrics["signal/skipped_drawn"] for b in batches] == [0, 4, 4]


def test_unseen_keys_are_drawn_first():
    sampler = SignalSampler(SamplerConfig(enabled=True, oversample=4), seed=0)
    rollout = FakeRollout({"a": 0.5, "new": 1.0})
    sampler.observe(rollout([{"id": "t0", "family": "a"}], 0)[0], 0)  # "a" seen, near 0.5: the heaviest weight
    for seed in range(20):
        sampler.rng = np.random.default_rng(seed)
        candidates = [{"id": f"t{i}", "family": "a"} for i in range(7)] + [{"id": "t7", "family": "new"}]
        chosen, how = sampler.select(candidates, 1)
        assert chosen == [7] and how["unseen_keys_drawn"] == 1


def test_weights_follow_learnability_with_a_floor():
    sampler = SignalSampler(SamplerConfig(enabled=True, skip_after=0, decay=1.0), seed=0)
    rollout = FakeRollout({"mid": 0.5, "easy": 1.0}, group_size=8)
    for k in range(6):
        sampler.observe(rollout([{"id": f"t{k}", "family": "mid"}, {"id": f"t{k}", "family": "easy"}], k)[0], k)
    assert 0.2 < sampler.weight("mid") <= 0.25 and sampler.weight("easy") == sampler.config.floor
    counts = Counter()
    for _ in range(300):
        chosen, _ = sampler.select([{"id": "x", "family": "mid"}, {"id": "y", "family": "easy"}], 1)
        counts[chosen[0]] += 1
    assert counts[0] > 3 * counts[1] > 0  # learnable keys are drawn far more often; solved ones still now and then


def test_a_resumed_sampler_draws_what_the_uninterrupted_one_would_have():
    cfg = dict(enabled=True, budget=4, skip_after=2, recheck=0.3)
    source, rates = Source(["a", "b", "c", "d"], seed=5), {"a": 1.0, "b": 0.6, "c": 0.0, "d": 0.9}
    full_rollout = FakeRollout(rates)
    full, _ = _run(SignalSampler(SamplerConfig(**cfg), seed=7), source, full_rollout, 8)

    killed_rollout = FakeRollout(rates)
    killed = SignalSampler(SamplerConfig(**cfg), seed=7)
    first, pos = _run(killed, source, killed_rollout, 4)
    saved = json.loads(json.dumps(killed.state_dict()))  # plain data, as a checkpoint stores it
    resumed = SignalSampler(SamplerConfig(**cfg), seed=7)
    resumed.load_state_dict(saved)
    rest, _ = _run(resumed, source, killed_rollout, 4, start=pos, step0=4)
    assert [b.metrics for b in first + rest] == [b.metrics for b in full]
    assert killed_rollout.rounds == full_rollout.rounds  # the same tasks, round by round
    assert [[t.task for t in b.train] for b in first + rest] == [[t.task for t in b.train] for b in full]

    fresh = SignalSampler(SamplerConfig(**cfg), seed=7)  # without the saved state the draws differ
    fresh_rollout = FakeRollout(rates)
    _run(fresh, source, fresh_rollout, 4, start=pos, step0=4)
    assert fresh_rollout.rounds != full_rollout.rounds[len(killed_rollout.rounds) - len(fresh_rollout.rounds):]


def test_task_keys_follow_the_task_rows_fields():
    assert task_key({"id": "add-1", "family": "add", "query": "q"}) == "add"
    assert task_key({"id": "p-1", "family": "pow_mod", "tier": "1"}) == "pow_mod/1"
    assert task_key({"id": "count-inversions", "prompt": "..."}) == "id=count-inversions"
    assert task_key({"query": "q"}).startswith("row=") and task_key({"query": "q"}) == task_key({"query": "q"})
    assert task_key({"id": "s", "family": "add", "env": "ToolUse-v0"}) == "ToolUse-v0:add"
    assert task_key({"data_source": "nq", "id": "1"}) == "data_source=nq"
    assert task_key({"data_source": "nq", "id": "1", "level": 2}, ["level"]) == "2"


def test_the_config_names_the_bad_key():
    for key, value in (("budget", 0.5), ("oversample", 0), ("floor", 0.0), ("decay", 1.5), ("recheck", 2),
                       ("skip_after", -1), ("key_fields", "family"), ("prior_alpha", 0)):
        with pytest.raises(ValueError, match=f"sampler.{key}"):
            SamplerConfig(**{key: value}).validate()
    with pytest.raises(ValueError, match="sampler.success_metric"):
        SignalSampler().observe([Trajectory([1], [1], [0.0], 0, 1.0, 0, {"id": "x"}, metrics={})], 0)
    sampler = SignalSampler(SamplerConfig(success_threshold=0.5))
    sampler.observe([Trajectory([1], [1], [0.0], 0, r, 0, {"id": "x"}, metrics={}) for r in (0.7, 0.2)], 0)
    assert sampler.keys["id=x"].successes == 1


def test_env_errors_are_left_out_and_equal_groups_are_split_into_all_pass_and_all_fail():
    def traj(r, g, termination="answered"):
        return Trajectory([1], [1], [0.0], 0, r, g, {"id": f"g{g}"}, termination=termination, metrics={"correct": r})

    m = signal_metrics(SignalSampler(), [traj(1, 0), traj(1, 0), traj(0, 1), traj(0, 1), traj(1, 2),
                                         traj(0, 2, "error"), traj(1, 3), traj(0, 3)], 0)
    assert (m["signal/groups"], m["signal/groups_with_signal"], m["signal/all_pass_groups"],
            m["signal/all_fail_groups"]) == (4, 1, 2, 1)
    assert m["signal/share"] == 0.25
    assert (m["signal/keys"], m["signal/keys_unsolved"], m["signal/keys_edge"], m["signal/keys_solved"]) == (4, 0, 4, 0)
    sampler = SignalSampler(SamplerConfig(decay=1.0))
    for _ in range(5):
        m = signal_metrics(sampler, [traj(1, 0), traj(1, 0), traj(0, 1), traj(0, 1), traj(1, 2), traj(0, 2)], 0)
    assert (m["signal/keys_unsolved"], m["signal/keys_edge"], m["signal/keys_solved"]) == (1, 1, 1)


def test_the_end_of_run_line_says_what_to_change_under_30_percent():
    def step(groups, signal, trained, passed=0, failed=0):
        return {"signal/groups": groups, "signal/groups_with_signal": signal, "signal/trained_groups_with_signal":
                trained, "signal/all_pass_groups": passed, "signal/all_fail_groups": failed}

    assert signal_summary([{"reward/mean": 1.0}]) is None
    good = signal_summary([step(4, 3, 3), step(4, 2, 2)])
    assert "100% of 2 updates" in good and "62% of 8 groups" in good and "Under" not in good
    easy = signal_summary([step(4, 0, 0, passed=4), step(4, 1, 1, passed=3)])
    assert "50% of 2 updates" in easy and "12% of 8 groups" in easy and "too easy" in easy
    assert "sampler.enabled=true" in easy and "group_size" in easy
    hard = signal_summary([step(4, 0, 0, failed=4)])
    assert "too hard" in hard and "start from a cold start" in hard and "sampler.enabled=true" in hard
    # no advice to do what the run already did: its sampler was on, it started from an adapter
    done = signal_summary([step(4, 0, 0, failed=4)], sampler_on=True, from_adapter=True)
    assert "sampler.budget" in done and "sampler.enabled=true" not in done
    assert "longer cold start" in done and "--adapter" not in done


def test_train_config_checks_its_sampler_section():
    from agentrl.algos.training.config import TrainConfig

    assert TrainConfig().sampler.enabled is False  # off by default: runs train on the tasks they always did
    with pytest.raises(ValueError, match="sampler.budget"):
        TrainConfig(sampler={"budget": 0.5}).validate()
    with pytest.raises(ValueError, match="sampler.oversample"):
        TrainConfig.from_dict({"sampler": {"oversample": "many"}})
    with pytest.raises(ValueError, match="sampler.enabled chooses rollout tasks; sft has no rollouts"):
        TrainConfig(algo="sft", sampler={"enabled": True}).validate()
    with pytest.raises(ValueError, match="guidance"):
        TrainConfig.from_dict({"algo": "grpo", "grpo": {"guidance": "luffy"}, "sampler": {"enabled": True}}).validate()
    for algo in ("grpo", "ppo", "dpo"):
        TrainConfig(algo=algo, sampler={"enabled": True}).validate()


def test_the_built_in_envs_rows_give_keys_by_family():
    """The convention reads what the env rows already carry: ToolUse-v0 rows their family, PythonMath-v0 rows
    family and tier (so a generator's tasks pool by family instead of each being its own key)."""
    from agentrl.envs import make_text_env

    rng = np.random.default_rng(0)
    tool = make_text_env("AgentRL/ToolUse-v0").sample_task(rng)
    assert task_key(tool) == tool["family"]
    math_row = make_text_env("AgentRL/PythonMath-v0").sample_task(rng)
    assert task_key(math_row) == f"{math_row['family']}/{math_row['tier']}"
