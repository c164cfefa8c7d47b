"""The task sampler inside the trainer, with tiny random-init models: GRPO, PPO (group and leave-one-out baselines)
and online DPO train only on groups with signal when it is on; its state goes into the checkpoint and a resumed run
draws what the killed one would have; every run writes its signal metrics, per-key table and end-of-run line."""

from __future__ import annotations

import csv

import gymnasium as gym
import pytest
from helpers import ScoreEnv, kill_in_step, tiny_train_config, tiny_train_model

from agentrl.algos.rollout.trajectory import all_equal, group_indices
from agentrl.algos.training.sampler import KEY_TABLE
from agentrl.algos.training.trainer import Trainer, _postfix
from agentrl.envs.core import Rewards


class FlatEnv(ScoreEnv):
    """Every episode scores 0.5, a reply cut at the token budget included: every group has equal rewards."""

    def __init__(self):
        super().__init__(constant=0.5)
        self.rewards = Rewards(invalid=0.5)


CONST = "Test/FlatSampler-v0"
if CONST not in gym.registry:
    gym.register(CONST, entry_point=FlatEnv)

#: Half the tasks carry a signal (graded rewards), half never do (a constant reward).
MIX = [{"id": "Test/Score-v0", "name": "graded"}, {"id": CONST, "name": "flat"}]


def _record_prepare(trainer) -> list[list]:
    """Wrap the algorithm's prepare: each call's trajectories are kept."""
    seen, real = [], trainer.algo.prepare

    def prepare(trajectories):
        seen.append(list(trajectories))
        return real(trajectories)

    trainer.algo.prepare = prepare
    return seen


@pytest.mark.parametrize("algo, extra", [("grpo", {}), ("ppo", {}),
                                         ("ppo", {"algorithm": {"baseline": "leave_one_out"}}), ("dpo", {})])
def test_with_the_sampler_every_algorithm_trains_only_on_groups_with_signal(tokenizer, tmp_path, algo, extra):
    cfg = dict(envs=MIX, algo=algo, steps=2, tasks_per_step=2, group_size=4, lr=1e-4, **extra)
    on = Trainer(tiny_train_config(tmp_path / "on", sampler={"enabled": True, "budget": 6}, **cfg),
                 model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    batches = _record_prepare(on)
    history = on.train()
    for batch in batches:
        groups = group_indices(t.group_id for t in batch)
        assert len(groups) == 2 and all(batch[g[0]].task["env"] == "graded" for g in groups)
        assert not any(all_equal([batch[i].reward for i in g]) for g in groups)
    assert sum(m["signal/groups"] for m in history) > 4  # flat groups were rolled out, dropped and refilled
    assert all(m["signal/trained_groups_with_signal"] == 2 and m["train/skipped_groups"] == 0 for m in history)
    assert all(m["train/optimizer_steps"] == 1 for m in history)

    off = Trainer(tiny_train_config(tmp_path / "off", **cfg), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    plain = _record_prepare(off)
    off.train()
    assert any(t.task["env"] == "flat" for batch in plain for t in batch)  # without it the flat groups come along


def test_a_resumed_run_with_the_sampler_draws_what_the_killed_one_would_have(tokenizer, tmp_path):
    cfg = dict(envs=MIX, steps=3, save_every=1, tasks_per_step=2, group_size=4, lr=1e-4,
               sampler={"enabled": True, "budget": 3, "skip_after": 1, "recheck": 0.5, "key_fields": ["env"]})
    full = Trainer(tiny_train_config(tmp_path / "full", **cfg), model=tiny_train_model(tokenizer),
                   tokenizer=tokenizer)
    full_hist = full.train()

    killed = Trainer(tiny_train_config(tmp_path / "killed", **cfg), model=tiny_train_model(tokenizer),
                     tokenizer=tokenizer)
    kill_in_step(killed, 2)
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    resumed = Trainer(tiny_train_config(tmp_path / "killed", **cfg), model=tiny_train_model(tokenizer),
                      tokenizer=tokenizer, resume=True)
    assert set(resumed.sampler.keys) == {"graded:graded", "flat:flat"}  # the estimates came back (key: the env)
    [m3] = resumed.train()
    for key in ("train/data_position", "reward/mean", "train/loss", "signal/groups", "signal/refill_rounds",
                "signal/skipped_keys", "signal/rechecked_keys"):
        assert m3[key] == pytest.approx(full_hist[2][key], rel=1e-6, abs=1e-7), key
    assert resumed.sampler.state_dict() == full.sampler.state_dict()


def test_an_asynchronous_run_shows_its_signal_too_and_refuses_the_sampler(tokenizer, tmp_path):
    from agentrl.algos.training.async_trainer import AsyncTrainer

    cfg = tiny_train_config(tmp_path, envs=MIX, steps=2, tasks_per_step=2, asynchronous={"enabled": True})
    trainer = AsyncTrainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    history = trainer.train()
    assert all(m["signal/groups"] == 2 for m in history) and trainer.signal_summary()
    assert (tmp_path / "run" / KEY_TABLE).is_file()
    cfg.sampler.enabled = True
    with pytest.raises(ValueError, match="sampler.enabled runs in the synchronous trainer only"):
        cfg.validate()


def test_every_rollout_run_shows_its_signal(tokenizer, tmp_path):
    trainer = Trainer(tiny_train_config(tmp_path, envs=MIX, steps=2, tasks_per_step=4),
                      model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    history = trainer.train()
    for m in history:
        assert m["signal/groups"] == 4 and 0 <= m["signal/share"] <= 1
        assert m["signal/groups_with_signal"] == round(4 * (1 - m["rollout/degenerate_group_rate"]))
        assert _postfix(m)["signal"].endswith("%")
    rows = list(csv.DictReader((tmp_path / "run" / KEY_TABLE).open()))
    assert {r["key"].split(":")[0] for r in rows} <= {"graded", "flat"} and rows
    flat = [r for r in rows if r["key"].startswith("flat:")]
    assert all(float(r["signal_share"]) == 0.0 for r in flat)
    assert sum(int(r["groups"]) for r in rows) == 8
    line = trainer.signal_summary()
    assert line.startswith("signal: ") and "updates" in line
    from agentrl.algos.evaluation.plot import plot_run

    assert tmp_path / "run" / "plots" / "signal.png" in plot_run(tmp_path / "run")  # the share over the steps
