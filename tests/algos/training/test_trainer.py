"""The training loop with tiny random-init models: updates, skipped groups, resume, SFT rendering, learning."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import ScoreEnv, StockTask, kill_in_step, tiny_train_config, tiny_train_model

from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.trainer import NoLearningSignal, Trainer


def _trainable(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _frozen(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}


def test_grpo_step_updates_the_adapter_only_and_logs_the_metrics(tokenizer, tmp_path):
    trainer = Trainer(tiny_train_config(tmp_path, algorithm={"beta": 0.05}), model=tiny_train_model(tokenizer),
                      tokenizer=tokenizer)
    lora0, frozen0 = _trainable(trainer.model), _frozen(trainer.model)
    [m] = trainer.train()
    lora1, frozen1 = _trainable(trainer.model), _frozen(trainer.model)
    assert any(not torch.equal(lora0[n], lora1[n]) for n in lora0)
    assert all(torch.equal(frozen0[n], frozen1[n]) for n in frozen0)
    for key in ("reward/mean", "rollout/turns", "train/loss", "train/kl", "train/entropy", "train/clip_frac_low",
                "train/clip_frac_high", "train/ratio_mean", "train/ratio_max", "train/grad_norm", "train/loss_tokens",
                "train/padded_tokens", "train/logprob_gap", "time/rollout", "time/env", "time/train",
                "perf/tokens_per_s"):
        assert key in m, key
    # On-policy first epoch: the trainer's recomputed logprobs are the rollout's (fp32): the correctness alarm
    assert m["train/logprob_gap"] < 1e-4
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["train/kl"] == pytest.approx(0.0, abs=1e-6)  # adapter starts at zero: policy == reference
    assert 0 < m["train/loss_tokens"] <= 2 * 4 * 8  # tasks x group x max_new_tokens
    assert m["train/optimizer_steps"] == 1
    # the run directory: metrics, config, final PEFT adapter, a checkpoint at the last step
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["step"] == 1
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file()
    assert latest_checkpoint(tmp_path / "run").name == "step-000001"


def test_zero_advantage_groups_make_no_update(tokenizer, tmp_path):
    for algo in ("grpo", "ppo", "dpo"):
        env_id = "Test/ScoreConst-v0"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=ScoreEnv, kwargs={"constant": 0.5})
        # weight decay would move the weights on a zero-gradient optimizer step: skipped groups must mean no step
        # every reply ends at once (no token-budget truncation), so every reward is the env's constant
        trainer = Trainer(tiny_train_config(tmp_path / algo, env=env_id, algo=algo, weight_decay=0.5),
                          model=tiny_train_model(tokenizer, stop_scale=8.0), tokenizer=tokenizer)
        before = _trainable(trainer.model)
        [m] = trainer.train()
        after = _trainable(trainer.model)
        assert all(torch.equal(before[n], after[n]) for n in before), algo
        assert m["train/skipped_groups"] == 2 and m["train/optimizer_steps"] == 0 and m["train/loss_tokens"] == 0
        assert m["rollout/degenerate_group_rate"] == 1.0


def test_rl_at_zero_format_stops_saying_to_train_a_cold_start(tokenizer, tmp_path):
    """A random model on ToolUse never answers well-formed: every group has the invalid reward, nothing is learned.
    The run stops after stop_without_signal such steps with an error that says what to do; 0 lets it run on."""
    cfg = dict(env="AgentRL/ToolUse-v0", steps=3, collector=CollectorConfig(max_new_tokens=8, max_turns=1))
    trainer = Trainer(tiny_train_config(tmp_path / "stop", stop_without_signal=2, **cfg),
                      model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    with pytest.raises(NoLearningSignal, match="Train a cold start first"):
        trainer.train()
    assert len(trainer.history) == 2
    assert all(m["reward/format"] == 0 and m["train/skipped_groups"] == m["train/groups"] for m in trainer.history)
    on = Trainer(tiny_train_config(tmp_path / "on", stop_without_signal=0, **cfg),
                 model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    assert len(on.train()) == 3
    # a graded reward (a signal) never stops the run, whatever the setting
    assert len(Trainer(tiny_train_config(tmp_path / "score", steps=2, stop_without_signal=1),
                       model=tiny_train_model(tokenizer), tokenizer=tokenizer).train()) == 2


def test_dpo_first_step_loss_is_log2_and_ppo_steps(tokenizer, tmp_path):
    trainer = Trainer(tiny_train_config(tmp_path / "dpo", algo="dpo"), model=tiny_train_model(tokenizer),
                      tokenizer=tokenizer)
    [m] = trainer.train()
    assert m["train/pairs"] >= 1
    # LoRA B = 0 at the start: policy == reference, h = 0, loss = -log sigmoid(0) = log 2
    assert m["train/loss"] == pytest.approx(math.log(2), abs=1e-5)
    trainer = Trainer(tiny_train_config(tmp_path / "ppo", algo="ppo", algorithm={"epochs": 2}),
                      model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    [m] = trainer.train()
    assert m["train/optimizer_steps"] == 2
    assert m["train/ratio_max"] > 1.0  # the second epoch sees the updated policy against pi_old


def test_resume_after_a_kill_reproduces_the_uninterrupted_run(tokenizer, tmp_path):
    cfg = dict(steps=3, save_every=1, lr=1e-4, group_size=8, tasks_per_step=4)
    full = Trainer(tiny_train_config(tmp_path / "full", **cfg), model=tiny_train_model(tokenizer),
                   tokenizer=tokenizer)
    full_hist = full.train()
    assert [h["train/optimizer_steps"] for h in full_hist] == [1, 1, 1]  # every step really updates
    want = _trainable(full.model)

    killed = Trainer(tiny_train_config(tmp_path / "killed", **cfg), model=tiny_train_model(tokenizer),
                     tokenizer=tokenizer)
    kill_in_step(killed, 2)
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    assert latest_checkpoint(tmp_path / "killed" / "run").name == "step-000002"

    resumed = Trainer(tiny_train_config(tmp_path / "killed", **cfg), model=tiny_train_model(tokenizer),
                      tokenizer=tokenizer, resume=True)
    assert resumed.global_step == 2 and resumed.data_pos == full_hist[1]["train/data_position"]
    [m3] = resumed.train()
    for key in ("reward/mean", "train/loss", "train/grad_norm", "train/data_position"):
        assert m3[key] == pytest.approx(full_hist[2][key], rel=1e-6, abs=1e-7), key
    got = _trainable(resumed.model)
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=0, atol=1e-7)
    from agentrl.algos.evaluation.run_log import read_metrics

    assert [r["step"] for r in read_metrics(tmp_path / "killed" / "run")] == [1, 2, 3]


def test_sft_renders_demonstrations_as_the_chat_template_does(tokenizer):
    from agentrl.algos.rollout.chat import ChatFormat
    from agentrl.algos.rollout.demonstrations import render_conversation
    from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks

    env = ToolUseEnv()
    for task in make_tasks(3, split="train", families=["stock_value"]):
        demo = env.demo(task)
        ids, mask = render_conversation(ChatFormat(tokenizer), demo["messages"])
        want = tokenizer.apply_chat_template(demo["messages"], tokenize=True)["input_ids"]
        assert ids == want[: len(ids)] and len(want) - len(ids) <= 1  # ChatML ends the last turn with a newline
        replies = [m["content"] for m in demo["messages"] if m["role"] == "assistant"]
        spans, cur = [], []
        for t, m in zip(ids, mask, strict=True):
            if m:
                cur.append(t)
            elif cur:
                spans.append(cur)
                cur = []
        if cur:
            spans.append(cur)
        assert [tokenizer.decode(s) for s in spans] == [r + "<|im_end|>" for r in replies]


def test_sft_steps_lower_the_demonstration_nll(tokenizer, tmp_path):
    cfg = tiny_train_config(tmp_path, env="AgentRL/ToolUse-v0", algo="sft", steps=4, lr=5e-3,
                            env_kwargs={"families": ["multiply"], "tools": None},
                            algorithm={"batch_size": 2, "num_demos": 2})
    cfg.env_kwargs.pop("tools")
    trainer = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer)
    hist = trainer.train()
    assert hist[0]["train/loss_tokens"] > 0 and trainer.data_pos == 8
    # the same two demonstrations every other step: compare like with like
    assert hist[2]["train/loss"] < hist[0]["train/loss"] and hist[3]["train/loss"] < hist[1]["train/loss"]


def test_sft_demos_list_the_tools_as_rollouts_do_with_a_tool_aware_template(template_tokenizers, tmp_path):
    tok = template_tokenizers["qwen2_5"]  # its template renders the tool schemas itself
    cfg = tiny_train_config(tmp_path, env="AgentRL/ToolUse-v0", algo="sft", env_kwargs={"families": ["multiply"]},
                            algorithm={"batch_size": 1, "num_demos": 1})
    trainer = Trainer(cfg, model=tiny_train_model(tok), tokenizer=tok)
    ids, mask = trainer.examples[0]
    text = tok.decode(ids)
    # as in a rollout: the schemas once, in the template's own tools block (the env's prompt leaves them out)
    assert text.count('Multiply two integers.') == 1 and "<tools>" in text, text
    assert sum(mask) > 0


def test_task_source_is_a_pure_function_of_the_position():
    from agentrl.algos.training.tasks import TaskSource

    a = TaskSource("AgentRL/ToolUse-v0", {"families": ["add"]}, seed=3)
    b = TaskSource("AgentRL/ToolUse-v0", {"families": ["add"]}, seed=3)
    assert a.take(5, 3) == b.take(5, 3) == [b.task(k) for k in (5, 6, 7)]
    assert all(t["family"] == "add" for t in a.take(0, 5))
    rows = [{"id": str(i), "query": "q", "answer": str(i)} for i in range(5)]
    src = TaskSource("AgentRL/ToolUse-v0", seed=0, rows=rows)
    first_epoch = src.take(0, 5)
    assert sorted(t["id"] for t in first_epoch) == [str(i) for i in range(5)]
    assert src.take(5, 5) != first_epoch or np.random.default_rng([0, 1]).permutation(5).tolist() == \
        np.random.default_rng([0, 0]).permutation(5).tolist()


SFT_STEPS, RL_STEPS = 5, 8


def test_sft_then_grpo_raise_the_reward_on_a_trivially_learnable_tooluse_task(tokenizer, tmp_path):
    """An honest learning test: one fixed ToolUse task answered directly, a tiny random model.

    Base: invalid replies (reward -0.1). SFT on the one demonstration must raise the mean sampled reward;
    GRPO from there must raise it further. Rewards are measured on fresh samples (temperature 1, fixed seeds),
    not on the training rollouts.
    """
    task = StockTask(tmp_path, tokenizer)
    env_kwargs, col, model, mean_reward = task.env_kwargs, task.collector, task.model, task.mean_reward
    base = mean_reward(model, 1)
    sft = Trainer(tiny_train_config(tmp_path / "sft", env="AgentRL/ToolUse-v0", algo="sft", steps=SFT_STEPS,
                                    lr=1e-2, env_kwargs=env_kwargs, algorithm={"batch_size": 1, "num_demos": 1}),
                  model=model, tokenizer=tokenizer)
    sft.train()
    after_sft = mean_reward(sft.model, 1)
    rl = Trainer(tiny_train_config(tmp_path / "grpo", env="AgentRL/ToolUse-v0", algo="grpo", steps=RL_STEPS, lr=1e-3,
                                   tasks_per_step=1, group_size=16, env_kwargs=env_kwargs, collector=col),
                 model=sft.model, tokenizer=tokenizer)
    rl.train()
    after_rl = mean_reward(rl.model, 1)
    assert base < after_sft < after_rl, (base, after_sft, after_rl)


@pytest.mark.slow
def test_one_grpo_step_on_the_real_135m_model(tmp_path):
    """The embedded SmolLM2-135M (bf16 where supported): one SFT step, then one GRPO step, end to end."""
    from agentrl.algos.models import load_model

    model, tok = load_model()
    sft = Trainer(tiny_train_config(tmp_path / "sft", env="AgentRL/ToolUse-v0", algo="sft", steps=1, lr=5e-4,
                                    env_kwargs={"families": ["multiply"]},
                                    algorithm={"batch_size": 4, "num_demos": 4}),
                  model=model, tokenizer=tok)
    [s] = sft.train()
    assert 0 < s["train/loss"] < 5
    rl = Trainer(tiny_train_config(tmp_path / "grpo", env="AgentRL/ToolUse-v0", algo="grpo", steps=1, lr=1e-4,
                                   tasks_per_step=2, group_size=4,
                                   collector=CollectorConfig(max_new_tokens=64, max_turns=3)),
                 model=sft.model, tokenizer=tok)
    [m] = rl.train()
    assert m["rollout/num_trajectories"] == 8 and m["train/data_position"] == 2
    if m["train/loss_tokens"]:
        assert m["train/logprob_gap"] < 0.1  # bf16 merged copy vs bf16 trainer: small, never large
    assert (tmp_path / "grpo" / "run" / "adapter" / "adapter_config.json").is_file()
