"""GRPO's demonstration guidance (LUFFY's 'luffy', ReLIFT's 'relift'): which groups get a demonstration, the
shaped loss and its gradient, the NLL term, the rows and statistics they produce, and real steps on ToolUse-v0
whose demonstrations are rendered as rollouts are."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_train_config, tiny_train_model

from agentrl.algos.objectives.batching import collate
from agentrl.algos.objectives.grpo import GRPO, GRPOConfig, grpo_loss
from agentrl.algos.objectives.guidance import add_demonstrations, relift_demo_rows, shaped_demo_loss
from agentrl.algos.rollout.trajectory import Trajectory


def _traj(group: int, reward: float, task: dict, termination: str = "answered") -> Trajectory:
    return Trajectory(token_ids=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1], logprobs=[0.0, 0.0, -0.5, -0.7], prompt_len=2,
                      reward=reward, group_id=group, task=task, termination=termination)


class FakeDemos:
    """Demonstrations of tasks ``{"q": k}``: reward 1.0, none for q=99."""

    def __init__(self):
        self.asked = []

    def get(self, task):
        self.asked.append(task)
        return None if task["q"] == 99 else ([1, 2, 7, 8, 9], [0, 0, 1, 1, 1], 1.0)


def test_only_groups_no_sample_solved_get_a_demonstration():
    trajs = ([_traj(0, 0.0, {"q": 0}) for _ in range(3)]            # all fail: guided
             + [_traj(1, 0.0, {"q": 1}), _traj(1, 1.0, {"q": 1})]  # one solved: not guided
             + [_traj(2, 0.0, {"q": 99}) for _ in range(2)]         # no known solution
             + [_traj(3, 0.0, {"q": 3}, "error") for _ in range(2)]  # env errors only: not samples
             + [_traj(4, 0.5, {"q": 4}), _traj(4, 0.2, {"q": 4})])  # partial credit below the demo's: guided
    out, guided = add_demonstrations(trajs, FakeDemos())
    assert guided == 2
    assert out[: len(trajs)] == trajs
    demos = out[len(trajs):]
    assert [d.group_id for d in demos] == [0, 4]
    assert all(d.termination == "demonstration" and d.reward == 1.0 and d.prompt_len == 2 for d in demos)
    assert demos[0].token_ids == [1, 2, 7, 8, 9] and demos[0].logprobs == [0.0] * 5


def test_shaped_loss_value_and_gradient_are_luffys():
    gamma = 0.1
    lp = torch.tensor([[-0.1, -2.0, -5.0]], requires_grad=True)
    adv = torch.tensor([1.5])
    loss = shaped_demo_loss(lp, adv, gamma).sum()
    p = torch.exp(lp.detach())
    assert float(loss.detach()) == pytest.approx(float((-1.5 * p / (p + gamma)).sum()), rel=1e-6)
    loss.backward()
    # d/d log p of -A p/(p+g) = -A * g * p / (p+g)^2: an unlikely token weighs more than plain p * grad log p
    expected = -1.5 * gamma * p / (p + gamma) ** 2
    torch.testing.assert_close(lp.grad, expected)
    assert abs(float(expected[0, 1] / p[0, 1])) > abs(float(expected[0, 0] / p[0, 0]))


def test_grpo_loss_gives_demonstration_rows_the_shaped_term_and_no_kl():
    cfg = GRPOConfig(beta=0.5, guidance="luffy")
    lp = torch.tensor([[-0.3, -0.4], [-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-0.3, -0.4], [0.0, 0.0]])  # the demonstration row has no pi_old
    ref = torch.tensor([[-0.2, -0.6], [-9.0, -9.0]])  # a large "KL" on the demo row must not count
    adv = torch.tensor([-0.5, 2.0])
    w = torch.full((2, 2), 0.25)
    off = torch.tensor([0.0, 1.0])
    loss, stats = grpo_loss(lp, old, adv, w, cfg, ref, off_policy=off)
    on_only, on_stats = grpo_loss(lp[:1], old[:1], adv[:1], w[:1], cfg, ref[:1])
    demo_term = (shaped_demo_loss(lp[1:], adv[1:], cfg.guidance_gamma) * w[1:]).sum()
    assert float(loss) == pytest.approx(float(on_only + demo_term), rel=1e-6)
    assert stats["kl"] == pytest.approx(on_stats["kl"])
    assert stats["ratio_max"] == pytest.approx(1.0)  # the demo row's exp(lp - 0) is not a ratio
    assert stats["demo_tokens"] == 2 and stats["loss_tokens"] == 4
    assert stats["demo_prob_mean"] == pytest.approx(float(torch.exp(lp[1]).mean()))


def test_prepare_adds_demonstrations_marks_them_off_policy_and_gives_them_the_positive_advantage():
    algo = GRPO(GRPOConfig(guidance="luffy", scale_std=False))
    algo.demos = FakeDemos()
    trajs = [_traj(0, 0.0, {"q": 0}) for _ in range(4)] + [_traj(1, 0.0, {"q": 1}), _traj(1, 1.0, {"q": 1})]
    groups, stats = algo.prepare(trajs)
    rows = [g[0] for g in groups]
    assert stats["guided_groups"] == 1 and stats["skipped_groups"] == 0 and stats["groups"] == 2
    demo = [r for r in rows if r.off_policy]
    assert len(demo) == 1 and demo[0].token_ids == [1, 2, 7, 8, 9]
    assert demo[0].advantage == pytest.approx(1.0 - 1.0 / 5)  # Dr. GRPO: R - mean over 4 samples + the demo
    assert all(r.advantage == pytest.approx(-0.2) for r in rows if not r.off_policy and r.meta["index"] < 4)
    batch = collate(rows, pad_id=0)
    assert batch["off_policy"].tolist() == [float(r.off_policy) for r in rows]


def test_plain_grpo_consults_no_demonstrations():
    algo = GRPO(GRPOConfig())
    assert not algo.uses_demonstrations
    groups, stats = algo.prepare([_traj(0, 0.0, {"q": 0}) for _ in range(4)])
    assert groups == [] and "guided_groups" not in stats


def test_sft_guidance_keeps_groups_plain_and_adds_demonstrations_as_nll_rows():
    algo = GRPO(GRPOConfig(guidance="relift", guidance_coef=0.5, scale_std=False))
    algo.demos = FakeDemos()
    plain = GRPO(GRPOConfig(scale_std=False))
    trajs = ([_traj(0, 0.0, {"q": 0}) for _ in range(4)]                       # all fail: guided, group skipped
             + [_traj(1, 0.0, {"q": 1}), _traj(1, 1.0, {"q": 1})]             # solved: plain GRPO
             + [_traj(2, 0.0, {"q": 2}), _traj(2, 0.0, {"q": 2})])            # all fail: guided
    groups, stats = algo.prepare(trajs)
    rows = [g[0] for g in groups]
    plain_rows = [g[0] for g in plain.prepare(trajs)[0]]
    assert stats["guided_groups"] == 2 and stats["skipped_groups"] == 2 and stats["groups"] == 3
    on, demo = [r for r in rows if not r.off_policy], [r for r in rows if r.off_policy]
    # the samples' rows are plain GRPO's: same advantages, same weights (the demonstrations are not counted)
    assert [(r.advantage, r.weights) for r in on] == [(r.advantage, r.weights) for r in plain_rows]
    assert len(demo) == 2 and all(r.advantage == 0.0 and r.token_ids == [1, 2, 7, 8, 9] for r in demo)
    assert sum(sum(r.weights) for r in demo) == pytest.approx(0.5)  # c over all demonstration tokens
    batch = collate(rows, pad_id=0)
    lp = torch.full(batch["old_logprobs"].shape, -0.5, requires_grad=True)
    loss, st = grpo_loss(lp, batch["old_logprobs"], batch["advantages"], batch["weights"], algo.config,
                         off_policy=batch["off_policy"])
    on_loss, _ = grpo_loss(lp[:len(on)], batch["old_logprobs"][:len(on)], batch["advantages"][:len(on)],
                           batch["weights"][:len(on)], algo.config)
    # c * mean NLL of the demonstration tokens (-log p = 0.5 on each) on top of the samples' GRPO loss
    assert float(loss) == pytest.approx(float(on_loss) + 0.5 * 0.5, rel=1e-6)
    assert st["demo_tokens"] == 6


def test_sft_demo_rows_skip_demonstrations_without_action_tokens():
    full = Trajectory(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0] * 3, prompt_len=1, reward=1.0,
                      group_id=0, task={})
    empty = Trajectory(token_ids=[1, 2], loss_mask=[0, 0], logprobs=[0.0] * 2, prompt_len=2, reward=1.0,
                       group_id=0, task={})
    rows = relift_demo_rows([empty, full], 10, 1.0)
    assert [r.meta["index"] for r in rows] == [11] and rows[0].weights == [0.0, 0.5, 0.5]


@pytest.mark.parametrize("key,value,message", [("guidance", "gigpo", "guidance must be one of"),
                                               ("guidance_gamma", 0.0, "guidance_gamma must be > 0"),
                                               ("guidance_coef", 0.0, "guidance_coef must be > 0")])
def test_bad_guidance_settings_name_the_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        GRPO(GRPOConfig(**{key: value}))


@pytest.mark.parametrize("mode", ["luffy", "relift"])
def test_a_guided_step_on_tooluse_trains_on_demonstrations_rendered_as_rollouts(mode, tokenizer, tmp_path):
    from agentrl.algos.training.trainer import Trainer

    cfg = tiny_train_config(tmp_path, env="AgentRL/ToolUse-v0", algorithm={"guidance": mode})
    trainer = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    seen = []
    prepare = trainer.algo.prepare

    def spy(trajs):
        seen.extend(trajs)
        return prepare(trajs)

    trainer.algo.prepare = spy
    [m] = trainer.train()
    #  a random-init model solves nothing: every group is guided, and trains ('luffy': no group skipped;
    # 'relift': the groups are skipped, the demonstrations alone make the step)
    skipped = 0 if mode == "luffy" else 2
    assert m["train/guided_groups"] == 2 and m["train/skipped_groups"] == skipped
    assert m["train/optimizer_steps"] == 1
    assert m["train/demo_tokens"] > 0 and 0 < m["train/demo_prob_mean"] < 1
    if mode == "luffy":  # the samples' tokens and the demonstrations'
        assert m["train/loss_tokens"] > m["train/demo_tokens"]
    else:  # every group skipped: only the demonstrations train
        assert m["train/loss_tokens"] == m["train/demo_tokens"]
    for t in seen:  # each demonstration opens with exactly the prompt its group's rollouts saw
        ids, mask, reward = trainer.algo.demos.get(t.task)
        assert ids[: t.prompt_len] == t.token_ids[: t.prompt_len] and mask.index(1) == t.prompt_len
        assert reward > t.reward
    # demonstration rows (no rollout logprobs) are left out of the gap (relift: no sampled row trained at all)
    assert m["train/logprob_gap"] < 1e-4 if mode == "luffy" else "train/logprob_gap" not in m


@pytest.mark.parametrize("old, new", [("demos", "luffy"), ("sft", "relift")])
def test_an_old_guidance_value_names_the_new_one(old, new):
    line = rf"^grpo.guidance='{old}' was renamed to grpo.guidance='{new}' \(docs/architecture.md#glossary\)$"
    with pytest.raises(ValueError, match=line):
        GRPO(GRPOConfig(guidance=old))
