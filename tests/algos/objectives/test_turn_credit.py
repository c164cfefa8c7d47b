"""Turn credit (GiGPO-style turn advantages): returns, anchor states, per-token advantages, the GRPO rows and
the per-turn rewards the collector records."""

from __future__ import annotations

import pytest
import torch

from agentrl.algos.objectives.batching import collate
from agentrl.algos.objectives.grpo import GRPO, GRPOConfig
from agentrl.algos.objectives.turn_credit import token_advantages, turn_advantages, turn_returns
from agentrl.algos.rollout.trajectory import Trajectory, Turn


def _traj(group: int, turns: list[tuple[str, float]], termination: str = "answered") -> Trajectory:
    """A trajectory of 2-token prompt + per turn: 2 reply tokens and 1 observation token; ``turns``: (observation,
    reward) per turn."""
    ids, mask, out = [0, 0], [0, 0], []
    for obs, reward in turns:
        out.append(Turn(prompt_len=len(ids), completion_len=2, completion="", parsed={}, observation=obs,
                        reward=reward))
        ids += [1, 1, 2]
        mask += [1, 1, 0]
    return Trajectory(token_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids), prompt_len=2,
                      reward=sum(r for _, r in turns), group_id=group, task={"id": group}, turns=out,
                      termination=termination)


def test_turn_returns_discount_the_later_rewards():
    t = _traj(0, [("a", 0.5), ("b", 0.0), ("", 1.0)])
    assert turn_returns(t, 0.9) == pytest.approx([0.5 + 0.81, 0.9, 1.0])


def test_turn_advantages_compare_turns_that_start_from_the_same_observations():
    # Four samples: two got tool result "r1" then answered right/wrong; one got "r2" then answered right; one
    # answered at once, wrong. Outcome reward only (last turn).
    trajs = [_traj(0, [("r1", 0.0), ("", 1.0)]), _traj(0, [("r1", 0.0), ("", 0.0)]),
             _traj(0, [("r2", 0.0), ("", 1.0)]), _traj(0, [("", 0.0)]),
             _traj(1, [("x", 0.0), ("", 1.0)], termination="error")]  # env error: no part, no credit
    adv, stats = turn_advantages(trajs, gamma=1.0)
    # turn 0: the task is every sample's anchor; returns 1, 0, 1, 0 -> mean 0.5
    assert [a[0] for a in adv[:4]] == pytest.approx([0.5, -0.5, 0.5, -0.5])
    # turn 1 after "r1": returns 1 and 0 -> +-0.5; after "r2": alone -> 0
    assert adv[0][1] == pytest.approx(0.5) and adv[1][1] == pytest.approx(-0.5) and adv[2][1] == 0.0
    assert adv[4] == [0.0, 0.0]
    assert stats["turn_anchor_turns"] == 4 + 2  # the four first turns and the two after "r1"
    scaled, _ = turn_advantages(trajs, gamma=1.0, scale_std=True)
    assert scaled[0][1] == pytest.approx(0.5 / (0.5 ** 0.5 + 1e-6) * 1.0, rel=1e-5)  # (1 - 0.5) / std(1, 0)


def test_token_advantages_add_each_replys_turn_credit_to_its_own_tokens_only():
    t = _traj(0, [("r1", 0.0), ("", 1.0)])
    out = token_advantages(t, episode_advantage=0.25, per_turn=[0.5, -1.0], weight=0.5)
    #          prompt    reply 0          obs  reply 1           obs
    assert out == pytest.approx([0, 0, 0.5, 0.5, 0, -0.25, -0.25, 0])


def test_grpo_rows_carry_token_advantages_and_collate_makes_them_a_matrix():
    trajs = [_traj(0, [("r1", 0.0), ("", 1.0)]), _traj(0, [("r1", 0.0), ("", 0.0)]),
             _traj(0, [("r2", 0.0), ("", 1.0)]), _traj(0, [("", 0.0)])]
    groups, stats = GRPO(GRPOConfig(turn_weight=1.0, turn_gamma=1.0, scale_std=False)).prepare(trajs)
    rows = [g[0] for g in groups]
    assert stats["turn_anchor_turns"] == 6 and stats["turn_adv_abs_mean"] > 0
    first = rows[0]  # episode advantage 1 - 0.5 = 0.5; turn 0 step +0.5, turn 1 step +0.5
    assert first.token_advantages == pytest.approx([0, 0, 1.0, 1.0, 0, 1.0, 1.0, 0])
    batch = collate(rows, pad_id=0)
    assert batch["advantages"].shape == batch["input_ids"].shape
    torch.testing.assert_close(batch["advantages"][3, :5], torch.tensor([0, 0, -1.0, -1.0, 0]))
    plain, _ = GRPO(GRPOConfig(scale_std=False)).prepare(trajs)
    assert (all(g[0].token_advantages is None for g in plain)
            and collate([g[0] for g in plain], 0)["advantages"].dim() == 1)


@pytest.mark.parametrize("key,value,message", [("turn_weight", -1.0, "turn_weight must be >= 0"),
                                               ("turn_gamma", 0.0, "turn_gamma must be in")])
def test_bad_step_settings_name_the_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        GRPO(GRPOConfig(**{key: value}))


def test_the_collector_records_each_turns_reward_and_they_sum_to_the_episodes(tokenizer):
    from helpers import ScriptedPolicy

    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.envs.tool_use.env import make_tasks

    task = next(t for t in make_tasks(64, split="train") if len(t.get("calls", [])) >= 2)  # a chain of calls
    [t] = collect("AgentRL/ToolUse-v0", ScriptedPolicy(tokenizer, [task]), [task], 1,
                  CollectorConfig(max_turns=6, max_new_tokens=96))
    assert t.metrics["correct"] == 1.0 and len(t.turns) == len(task["calls"]) + 1
    assert [turn.reward for turn in t.turns] == [0.0] * len(task["calls"]) + [1.0] and t.reward == 1.0
    # ended by the collector's turn budget: the no-answer reward goes to the last turn
    [t] = collect("AgentRL/ToolUse-v0", ScriptedPolicy(tokenizer, [task]), [task], 1,
                  CollectorConfig(max_turns=1, max_new_tokens=96))
    assert t.termination == "budget" and t.turns[-1].reward == t.reward == pytest.approx(-0.1)
