"""The rejection-sampling control (harness.controls.RejectionSampling, algo "rft"): SFT on the policy's own correct
samples only, on a tiny random model."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from harness.controls import REJECTION_SAMPLING, RejectionSampling, register_rejection_sampling
from helpers import ScoreEnv, tiny_train_config, tiny_train_model

from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.algos.training.trainer import Trainer


def _traj(group: int, correct: bool, n_action: int) -> Trajectory:
    ids = list(range(2, 4 + n_action))
    mask = [0, 0] + [1] * n_action
    return Trajectory(token_ids=ids, loss_mask=mask, logprobs=[0.0, 0.0] + [-1.0] * n_action, prompt_len=2,
                      reward=float(correct), group_id=group, task={"id": str(group)},
                      metrics={"correct": int(correct)})


def test_prepare_keeps_the_correct_samples_only_with_a_token_mean_over_them():
    trajs = [_traj(0, True, 3), _traj(0, False, 5), _traj(1, False, 2), _traj(1, True, 1)]
    rows, stats = RejectionSampling().prepare(trajs)
    assert stats == {"kept_samples": 2.0, "samples": 4.0}
    kept = [r for [r] in rows]
    assert [len(r.token_ids) for r in kept] == [5, 3]  # the correct ones, as they were sampled
    assert sum(sum(r.weights) for r in kept) == pytest.approx(1.0)  # 1/4 on each of their 4 action tokens
    assert all(w in (0.0, 0.25) for r in kept for w in r.weights)
    assert RejectionSampling().prepare([_traj(0, False, 3)])[0] == []  # nothing right: no update


class EvenLength(ScoreEnv):
    """Correct when the reply has an even number of characters: a random model gets some right, some wrong."""

    def score(self, answer, task):
        return (1.0, True) if len(answer) % 2 == 0 else (0.0, False)


@pytest.fixture
def rft_registered(monkeypatch):
    """The control registered on a copy of the registry (TrainConfig's sections are built first), undone after:
    importing the harness registers nothing, and no later test sees an ``rft`` algorithm."""
    import copy

    from agentrl.algos import objectives
    from agentrl.algos.training import config  # noqa: F401 - TrainConfig's sections: the built-ins only

    monkeypatch.setattr(objectives, "ALGORITHMS", copy.deepcopy(objectives.ALGORITHMS))
    register_rejection_sampling()
    assert REJECTION_SAMPLING in objectives.ALGORITHMS


def test_importing_the_harness_registers_no_algorithm():
    from agentrl.algos import objectives

    assert REJECTION_SAMPLING not in objectives.ALGORITHMS


def test_a_training_step_learns_from_the_correct_samples_of_its_rollout(tokenizer, tmp_path, rft_registered):
    if "Test/EvenLength-v0" not in gym.registry:
        gym.register("Test/EvenLength-v0", entry_point=EvenLength)
    trainer = Trainer(tiny_train_config(tmp_path, env="Test/EvenLength-v0", algo=REJECTION_SAMPLING, group_size=4,
                                        tasks_per_step=4), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    [m] = trainer.train()
    samples = m["rollout/num_trajectories"]
    assert m["train/samples"] == samples == 16
    assert m["train/kept_samples"] == pytest.approx(m["reward/correct"] * samples)  # exactly the correct ones
    assert 0 < m["train/kept_samples"] < samples  # the seed gives both kinds
    moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if p.requires_grad)
    assert moved and m["train/optimizer_steps"] == 1
