"""Decoupled rollout and training: version bookkeeping, staleness drop and TIS, the queue bound, learning, resume."""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import pytest
import torch
from helpers import StockTask, kill_in_step, tiny_train_config, tiny_train_model  # (registers Test/Score-v0)

from agentrl.algos.objectives.batching import TrainRow
from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.algos.training.async_trainer import (
    AsyncTrainer,
    VersionedPolicy,
    split_stale,
    tis_correct,
    tis_weights,
)
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.launch import train
from agentrl.algos.training.trainer import Trainer


def _traj(group, version, n=3):
    return Trajectory(token_ids=[1] * n, loss_mask=[0, 1, 1][:n], logprobs=[0.0] * n, prompt_len=1, reward=0.0,
                      group_id=group, task={}, policy_version=version)


def _acfg(tmp_path, **async_kw):
    cfg = tiny_train_config(tmp_path, steps=3, tasks_per_step=2, group_size=8)
    cfg.asynchronous = dataclasses.replace(cfg.asynchronous, enabled=True, **async_kw)
    return cfg


def _record_versions(trainer):
    """Wrap algo.prepare to record (current version, the versions of the trajectories it trains on)."""
    real = trainer.algo.prepare
    seen = []

    def prepare(trajs):
        seen.append((trainer.policy.version, [t.policy_version for t in trajs]))
        return real(trajs)

    trainer.algo.prepare = prepare
    return seen


# ---------------------------------------------------------------------------------------------- pure pieces


def test_split_stale_moves_whole_groups():
    trajs = [_traj(0, 5), _traj(0, 5), _traj(1, 4), _traj(1, 3), _traj(2, 3)]
    fresh, stale = split_stale(trajs, current_version=5, max_staleness=1)
    assert [(t.group_id, t.policy_version) for t in fresh] == [(0, 5), (0, 5)]
    # group 1 has one member 2 versions old: the whole group goes (advantages need whole groups)
    assert [(t.group_id, t.policy_version) for t in stale] == [(1, 4), (1, 3), (2, 3)]
    fresh, stale = split_stale(trajs, current_version=5, max_staleness=2)
    assert len(fresh) == 5 and stale == []


def test_tis_weights_and_correction_by_hand():
    behaviour = [0.0, -1.0, -2.0, -0.5, 0.0]
    current = [0.0, -0.5, -2.5, 0.5, 0.0]
    mask = [0, 1, 1, 1, 0]
    # by hand: exp(0.5) = 1.6487, exp(-0.5) = 0.6065, exp(1.0) = 2.718 -> truncated at 2
    assert tis_weights(current, behaviour, mask, cap=2.0) == pytest.approx([1.0, 1.6487213, 0.6065307, 2.0, 1.0])
    item = TrainRow(token_ids=[1, 2, 3, 4, 5], loss_mask=mask, old_logprobs=list(behaviour),
                   weights=[0.0, 1 / 3, 1 / 3, 1 / 3, 0.0], advantage=0.7)
    tis_correct(item, current, cap=2.0)
    assert item.weights == pytest.approx([0.0, math.exp(0.5) / 3, math.exp(-0.5) / 3, 2.0 / 3, 0.0])
    assert item.old_logprobs == [0.0, -0.5, -2.5, 0.5, 0.0]  # the ratio is now taken around the current policy
    assert item.advantage == 0.7


def test_versioned_policy_counts_updates_and_waits_for_a_rollout_in_progress():
    class Stub:
        tokenizer = object()
        updates = 0

        def update_weights(self, model):
            self.updates += 1

    inner = Stub()
    vp = VersionedPolicy(inner)
    vp.update_weights(None)
    assert (vp.version, inner.updates) == (1, 1)
    vp.lock.acquire()  # a collect in progress
    t = threading.Thread(target=vp.update_weights, args=(None,))
    t.start()
    t.join(timeout=0.3)
    assert t.is_alive() and vp.version == 1 and inner.updates == 1  # not published mid-rollout
    vp.lock.release()
    t.join(timeout=10)
    assert not t.is_alive() and (vp.version, inner.updates) == (2, 2)
    assert vp.publish_wait_s > 0


def test_async_needs_a_rollout_algorithm_and_valid_settings(tmp_path):
    sft = _acfg(tmp_path)
    sft.algo = "sft"
    with pytest.raises(ValueError, match="sft has no rollouts"):
        sft.validate()
    bad = _acfg(tmp_path, staleness="later")
    with pytest.raises(ValueError, match="'drop' or 'tis'"):
        bad.validate()
    dpo = _acfg(tmp_path, staleness="tis")
    dpo.algo = "dpo"
    with pytest.raises(ValueError, match="grpo, ppo"):
        dpo.validate()
    shared = _acfg(tmp_path)
    shared.policy_shares_weights = True  # the producer would sample through the model being updated
    with pytest.raises(ValueError, match="set policy_shares_weights=false .* or train synchronously"):
        shared.validate()
    shared.asynchronous.enabled = False
    shared.validate()


def test_the_producer_samples_through_the_inner_policys_session(tokenizer, tmp_path):
    """The wrapper forwards ``session``: an HFPolicy's batch that requests join while it decodes (continuous
    turns), not the default rounds of generate calls."""
    trainer = AsyncTrainer(_acfg(tmp_path, queue_size=1), model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    inner = trainer.policy.inner
    opened, generated = [], []
    real_session, real_generate = inner.session, inner.generate

    def session(sampling):
        assert trainer.policy.lock.locked()  # inside the producer's collect, which holds the publishing lock
        opened.append(real_session(sampling))
        return opened[-1]

    inner.session = session
    inner.generate = lambda *a: (generated.append(1), real_generate(*a))[1]
    trainer.config.steps = 1
    trainer.train()
    assert opened and all(type(s).__module__ == "agentrl.algos.policy._decoding" for s in opened)
    assert not generated  # no request went through the round-by-round default


def test_cli_async_flag_sets_the_section():
    from agentrl.algos import cli, cli_train

    args = cli.build_parser().parse_args(["train", "--algo", "grpo", "--async", "asynchronous.staleness=tis",
                                          "--out", "x"])
    cfg = cli_train.build_train_config(args)
    assert cfg.asynchronous.enabled and cfg.asynchronous.staleness == "tis" and cfg.asynchronous.max_staleness == 1
    args = cli.build_parser().parse_args(["train", "--algo", "grpo", "--out", "x"])
    assert not cli_train.build_train_config(args).asynchronous.enabled


# ---------------------------------------------------------------------------------------------- runs


def _slow_updates(trainer, seconds: float) -> None:
    """Make every update of ``trainer`` take ``seconds`` longer, so the producer can run ahead."""
    real = trainer.apply_update_rows

    def slow(units, temperature):
        time.sleep(seconds)
        return real(units, temperature)

    trainer.apply_update_rows = slow


def test_one_step_off_policy_versions_and_the_queue_bound(tokenizer, tmp_path):
    trainer = AsyncTrainer(_acfg(tmp_path, queue_size=1, max_staleness=1), model=tiny_train_model(tokenizer),
                           tokenizer=tokenizer)
    seen = _record_versions(trainer)
    _slow_updates(trainer, 0.3)
    hist = trainer.train()
    assert trainer.global_step == 3
    # one publication per optimizer step (a step whose groups all had equal rewards makes none)
    assert trainer.policy.version == sum(h["train/optimizer_steps"] for h in hist) >= 1
    # Every batch is sampled by one version; the first by the initial weights, the others at most one update
    # behind the weights that train on them (queue_size=1: one batch in flight while the trainer updates).
    for current, versions in seen:
        assert len(set(versions)) == 1 and 0 <= current - versions[0] <= 1
    assert seen[0] == (0, [0] * 16)
    assert [h["async/staleness_max"] for h in hist] == [current - v[0] for current, v in seen]
    assert sum(h["async/staleness_max"] for h in hist) >= 1  # the producer did run ahead while the trainer slept
    assert trainer.producer.max_ahead == 1
    assert trainer.data_pos == 6 and [h["train/data_position"] for h in hist] == [2, 4, 6]
    assert all(h["async/dropped_trajectories"] == 0 for h in hist)


def test_the_producer_never_runs_more_than_queue_size_ahead(tokenizer, tmp_path):
    trainer = AsyncTrainer(_acfg(tmp_path, queue_size=2, max_staleness=2), model=tiny_train_model(tokenizer),
                           tokenizer=tokenizer)
    seen = _record_versions(trainer)
    _slow_updates(trainer, 0.5)
    hist = trainer.train()
    assert trainer.producer.max_ahead == 2  # reached the bound, never above it
    assert all(0 <= current - v[0] <= 2 for current, v in seen)
    assert all(h["async/queue_depth"] <= 2 for h in hist)


def test_drop_mode_trains_only_on_batches_within_max_staleness(tokenizer, tmp_path):
    trainer = AsyncTrainer(_acfg(tmp_path, queue_size=2, max_staleness=0, staleness="drop"),
                           model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    seen = _record_versions(trainer)
    _slow_updates(trainer, 0.4)
    hist = trainer.train()
    assert trainer.global_step == 3
    assert all(current == v for current, versions in seen for v in versions)  # nothing stale was trained on
    dropped = sum(h["async/dropped_trajectories"] for h in hist)
    assert dropped > 0 and dropped % 16 == 0  # whole batches (2 tasks x 8) sampled while the trainer moved on
    # dropped batches consumed their data positions and were replaced; no position was trained twice
    assert trainer.data_pos == 6 + 2 * (dropped // 16)


def test_tis_mode_corrects_stale_batches_around_the_current_policy(tokenizer, tmp_path):
    cfg = _acfg(tmp_path, queue_size=1, max_staleness=0, staleness="tis")
    cfg.algorithm = dataclasses.replace(cfg.algorithm, correction_cap=1.5)  # the one cap of the truncated weight
    trainer = AsyncTrainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    seen = _record_versions(trainer)
    _slow_updates(trainer, 0.3)
    hist = trainer.train()
    stale_steps = [h for h, (current, v) in zip(hist, seen, strict=True)
                   if current > v[0] and h["train/optimizer_steps"]]  # (a step of equal rewards trains nothing)
    assert stale_steps, "the producer never ran ahead"
    for h in stale_steps:
        assert h["async/tis_corrected"] > 0 and 0 < h["async/tis_weight_mean"] <= 1.5
        # pi_old of a corrected token is the current policy's logprob: the recomputation matches it exactly and
        # the first-epoch ratio is 1, although the batch was sampled by older weights.
        assert h["train/logprob_gap"] < 1e-4
        assert h["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert all(h["async/dropped_trajectories"] == 0 for h in hist)


class _OneDemo:
    """A demonstration source for every task: a short reply worth 1.0 (above any sampled reward of Score-v0
    but an all-'e' one), so each group gets one."""

    def __init__(self, tokenizer):
        self.ids = tokenizer("Say something.")["input_ids"] + tokenizer("eee")["input_ids"]
        self.mask = [0] * (len(self.ids) - 1) + [1]

    def get(self, task):
        return self.ids, self.mask, 1.0


@pytest.mark.parametrize("guidance", ["luffy", "relift"])
def test_tis_mode_with_demonstration_guidance_corrects_only_the_samples(tokenizer, tmp_path, guidance):
    """Demonstration rows come after the samples (their index is past the batch) and have no sampler: the stale
    correction skips them instead of indexing the batch with them."""
    cfg = _acfg(tmp_path, queue_size=1, max_staleness=0, staleness="tis")
    # (relift's term at a coefficient the balance check accepts: check_relift_balance)
    cfg.algorithm = dataclasses.replace(cfg.algorithm, guidance=guidance, guidance_coef=0.1)
    trainer = AsyncTrainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    trainer.algo.demos = _OneDemo(tokenizer)
    seen = _record_versions(trainer)
    real = trainer.algo.prepare
    samples = []  # per step: the rows of sampled trajectories (a zero-advantage group has none under 'relift')

    def prepare(trajs):
        rows, stats = real(trajs)
        samples.append(sum(1 for g in rows for row in g if not row.off_policy))
        return rows, stats

    trainer.algo.prepare = prepare
    _slow_updates(trainer, 0.3)
    hist = trainer.train()
    assert trainer.global_step == 3
    stale_steps = [(h, n) for h, (current, v), n in zip(hist, seen, samples, strict=True) if current > v[0]]
    assert stale_steps, "the producer never ran ahead"
    for h, n in stale_steps:
        assert h["train/guided_groups"] == 2  # both groups got their demonstration
        assert h["async/tis_corrected"] == n  # the samples' rows, not the 2 demonstrations
        assert h["train/demo_tokens"] > 0
    assert sum(n for _, n in stale_steps) > 0


def test_without_correction_a_stale_batch_shows_the_policy_change(tokenizer, tmp_path):
    """Control for the TIS test: the same stale batches trained as they are keep a nonzero logprob gap."""
    trainer = AsyncTrainer(_acfg(tmp_path, queue_size=1, max_staleness=1, staleness="drop"),
                           model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    seen = _record_versions(trainer)
    _slow_updates(trainer, 0.3)
    hist = trainer.train()
    stale = [h for h, (current, v) in zip(hist, seen, strict=True) if current > v[0] and h["train/optimizer_steps"]]
    assert stale and all(h["train/logprob_gap"] > 1e-4 for h in stale)


def test_resume_continues_an_async_run_without_lost_or_repeated_tasks(tokenizer, tmp_path):
    cfg = _acfg(tmp_path, queue_size=1, max_staleness=1)
    cfg.save_every = 1
    killed = AsyncTrainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    kill_in_step(killed, 2)
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    assert not killed.producer.thread.is_alive()  # the producer is stopped on the way out
    assert latest_checkpoint(tmp_path / "run").name == "step-000002"
    want = {n: p.detach().clone() for n, p in killed.model.named_parameters() if p.requires_grad}

    resumed = AsyncTrainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer, resume=True)
    assert resumed.global_step == 2 and resumed.data_pos == 4  # the batch queued at the kill is collected again
    got = {n: p.detach().clone() for n, p in resumed.model.named_parameters() if p.requires_grad}
    for n in want:  # the adapter after two steps (the kill came before step 3's optimizer step)
        torch.testing.assert_close(got[n], want[n], rtol=0, atol=0)
    [m3] = resumed.train()
    assert m3["train/data_position"] == 6 and m3["async/staleness_max"] == 0
    from agentrl.algos.evaluation.run_log import read_metrics

    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1, 2, 3]


# ---------------------------------------------------------------------------------------------- learning


def test_async_grpo_raises_the_reward_on_a_trivially_learnable_tooluse_task(tokenizer, tmp_path):
    """The learning check of the synchronous trainer's test, with the GRPO phase run asynchronously.

    One fixed ToolUse task answered directly, a tiny random model: a short SFT cold start (synchronous), then
    async GRPO (one-step off-policy). Rewards are measured on fresh samples (temperature 1, fixed seeds).
    """
    task = StockTask(tmp_path, tokenizer)
    env_kwargs, col, model, mean_reward = task.env_kwargs, task.collector, task.model, task.mean_reward
    sft = Trainer(tiny_train_config(tmp_path / "sft", env="AgentRL/ToolUse-v0", algo="sft", steps=5, lr=1e-2,
                                    env_kwargs=env_kwargs, algorithm={"batch_size": 1, "num_demos": 1}),
                  model=model, tokenizer=tokenizer)
    sft.train()
    after_sft = mean_reward(sft.model, 1)
    cfg = tiny_train_config(tmp_path / "grpo", env="AgentRL/ToolUse-v0", algo="grpo", steps=8, lr=1e-3,
                            tasks_per_step=1, group_size=16, env_kwargs=env_kwargs, collector=col)
    cfg.asynchronous.enabled = True
    rl = train(cfg, model=sft.model, tokenizer=tokenizer)
    assert isinstance(rl, AsyncTrainer)
    after_rl = mean_reward(rl.model, 1)
    assert max(h["async/staleness_max"] for h in rl.history) <= 1
    assert after_sft < after_rl, (after_sft, after_rl)
