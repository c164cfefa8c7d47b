"""ReLIFT's imitation term against GRPO's per-token term (guidance.relift_weight_ratio / check_relift_balance): the
ratio of one demonstration token's pull to one GRPO token's, checked against a step's actual loss weights, and the
one-line refusal beyond RELIFT_MAX_RATIO."""

from __future__ import annotations

import types

import pytest

from agentrl.algos.objectives.batching import token_weights
from agentrl.algos.objectives.grpo import GRPOConfig, group_advantages
from agentrl.algos.objectives.guidance import (
    RELIFT_MAX_RATIO,
    check_relift_balance,
    relift_demo_rows,
    relift_weight_ratio,
)


@pytest.mark.parametrize("scale_std", [False, True])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum_norm"])
def test_the_ratio_is_what_a_step_weighs_with_every_group_unsolved_and_the_largest_mean_advantage(aggregation,
                                                                                                   scale_std):
    tasks, group, length = 4, 8, 50
    grpo = GRPOConfig(scale_std=scale_std, aggregation=aggregation, norm_tokens=400, guidance="relift")
    # half the samples of each group right: the largest mean |advantage| of 0/1 rewards, 0.5 without std
    # scaling and sqrt(7/8) = 0.935 with it (issue 60, N4: the check assumed 0.5 and overstated the ratio 1.87x)
    rewards = [float(i % 2) for i in range(tasks * group)]
    adv = group_advantages(rewards, [i // group for i in range(tasks * group)], scale_std=scale_std)
    masks = [[1] * length for _ in rewards]
    w = token_weights(masks, aggregation, norm_tokens=grpo.norm_tokens)
    grpo_pull = sum(abs(a) * row[0] for a, row in zip(adv, w, strict=True)) / len(adv)
    demos = [types.SimpleNamespace(token_ids=[0] * length, loss_mask=[1] * length) for _ in range(tasks)]
    demo_pull = relift_demo_rows(demos, 0, grpo.guidance_coef)[0].weights[0]
    assert relift_weight_ratio(grpo, group, length) == pytest.approx(demo_pull / grpo_pull, rel=1e-5)
    plain = 8 / (7 / 8) ** 0.5 if scale_std else 16
    assert relift_weight_ratio(grpo, group, length) == pytest.approx(plain if aggregation == "token_mean"
                                                                     else plain * 400 / 50)


def test_std_scaled_advantages_are_checked_with_their_own_bound():
    # the audit's repro (relift.py): groups of 8, coefficient 0.7, GRPO's default std scaling: a step weighs a
    # demonstration token 6x a GRPO token, within the 10x limit, and the check refused it as 11x
    assert relift_weight_ratio(GRPOConfig(guidance="relift", guidance_coef=0.7), 8, 10) == pytest.approx(5.99, abs=0.01)
    check_relift_balance(GRPOConfig(guidance="relift", guidance_coef=0.7), 8, 10)
    with pytest.raises(ValueError, match=r"at least 10x .* grpo.guidance_coef <= 1.1 or use"):  # 10.26x
        check_relift_balance(GRPOConfig(guidance="relift", guidance_coef=1.2), 8, 10)


def test_relift_beyond_the_limit_is_refused_in_one_line_naming_the_coefficient_that_fits():
    grpo = GRPOConfig(scale_std=False, guidance="relift")
    with pytest.raises(ValueError, match=r"^grpo.guidance=relift: .* at least 16x .* grpo.guidance_coef <= 0.62 or use "
                                         r"grpo.guidance=luffy$"):
        check_relift_balance(grpo, 8, 384)
    scaled = GRPOConfig(scale_std=False, guidance="relift", guidance_coef=0.62)
    assert relift_weight_ratio(scaled, 8, 384) <= RELIFT_MAX_RATIO
    check_relift_balance(scaled, 8, 384)
    check_relift_balance(GRPOConfig(scale_std=False, guidance="luffy"), 8, 384)  # only relift is checked


def test_a_training_config_with_an_unbalanced_relift_term_is_refused_before_anything_loads():
    from agentrl.algos.training.config import TrainConfig

    with pytest.raises(ValueError, match=r"grpo.guidance=relift: .* at least 16x .*guidance_coef <= 0.62"):
        TrainConfig.from_dict({"algo": "grpo", "group_size": 8,
                               "grpo": {"guidance": "relift", "scale_std": False}}).validate()
    TrainConfig.from_dict({"algo": "grpo", "group_size": 8,
                           "grpo": {"guidance": "relift", "guidance_coef": 0.5}}).validate()
    TrainConfig.from_dict({"algo": "grpo", "group_size": 8, "grpo": {"guidance": "luffy"}}).validate()
