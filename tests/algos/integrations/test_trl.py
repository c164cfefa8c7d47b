"""TRL adapter: one real ``GRPOTrainer`` step on ToolUse-v0 with a tiny model, through our collector."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402

import agentrl.envs  # noqa: E402,F401
from agentrl.algos.integrations.trl import (  # noqa: E402
    env_reward_func,
    make_rollout_func,
    prompt_to_task,
    task_to_prompt,
    tasks_dataset,
    trajectories_to_trl,
)
from agentrl.algos.models import tiny_model  # noqa: E402
from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.rollout.chat import ChatFormat  # noqa: E402
from agentrl.algos.rollout.collector import CollectorConfig  # noqa: E402
from agentrl.algos.rollout.trajectory import Trajectory  # noqa: E402
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


# ------------------------------------------------------------------------------------------ pure parts


def test_tasks_dataset_round_trips_tasks():
    tasks = make_tasks(3, "train")
    ds = tasks_dataset(tasks)
    assert ds.column_names == ["prompt", "task_id"]
    assert [prompt_to_task(p) for p in ds["prompt"]] == tasks
    assert ds["task_id"] == [t["id"] for t in tasks]
    # a conversational prompt whose last message carries the JSON works too
    assert prompt_to_task([{"role": "user", "content": task_to_prompt(tasks[1])}]) == tasks[1]
    with pytest.raises(ValueError, match="tasks_dataset"):
        prompt_to_task("What is 2 + 2?")


def test_trajectories_to_trl_splits_at_the_prompt():
    t = Trajectory(token_ids=[1, 2, 3, 4, 5, 6, 7], loss_mask=[0, 0, 0, 1, 0, 0, 1],
                   logprobs=[0, 0, 0, -0.5, 0, 0, -0.25], prompt_len=3, reward=0.5, group_id=0, task={},
                   termination="answered", metrics={"correct": 1.0, "format_ok": 1.0})
    out = trajectories_to_trl([t])
    assert out["prompt_ids"] == [[1, 2, 3]]
    assert out["completion_ids"] == [[4, 5, 6, 7]]
    assert out["logprobs"] == [[-0.5, 0.0, 0.0, -0.25]]
    assert out["env_mask"] == [[1, 0, 0, 1]]
    assert out["env_reward"] == [0.5] and out["env_correct"] == [1.0] and out["env_termination"] == ["answered"]
    assert env_reward_func(prompts=["p"], completions=["c"], env_reward=out["env_reward"]) == [0.5]
    with pytest.raises(ValueError, match="rollout_func"):
        env_reward_func(prompts=["p"], completions=["c"])


# ------------------------------------------------------------------------------------------ a real GRPO step


class AlternatingDemoPolicy(Policy):
    """Plays each task's demonstration tool calls, then answers right on every other trajectory and wrong on the
    rest (by order of first appearance of the trajectory's key), so a group's rewards differ and every completion
    holds env tokens (the tool turns) between the policy's replies."""

    def __init__(self, tokenizer, tasks):
        self.tokenizer = tokenizer
        self.stop = ChatFormat(tokenizer).stop_token_ids[0]
        env = ToolUseEnv()
        self.actions = {t["query"]: env.demo_actions(t) for t in tasks}
        self.right: dict = {}
        self.turn: dict = {}

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            assert r.key is not None
            self.right.setdefault(r.key, len(self.right) % 2 == 0)
            turn = self.turn[r.key] = self.turn.get(r.key, -1) + 1
            text = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=False)
            actions = self.actions[next(q for q in self.actions if q in text)]
            reply = actions[turn]
            if turn == len(actions) - 1 and not self.right[r.key]:
                reply = "Answer: -1"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.stop]
            out.append(GenerationResult(ids, [-1.0] * len(ids), "stop"))
        return out


def _trainer(model, tokenizer, tasks, rollout_func, reward_funcs, out_dir):
    from trl import GRPOConfig, GRPOTrainer

    class Probe(GRPOTrainer):
        """Records what reaches the loss."""

        seen: list = []

        def compute_loss(self, model, inputs, *args, **kwargs):
            self.seen.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
            return super().compute_loss(model, inputs, *args, **kwargs)

    args = GRPOConfig(output_dir=str(out_dir), use_cpu=True, report_to=[], bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=12, max_steps=1, logging_steps=1, save_strategy="no",
                      learning_rate=1e-2, seed=0, dataloader_num_workers=0)
    probe = Probe(model=model, processing_class=tokenizer, reward_funcs=reward_funcs,
                  train_dataset=tasks_dataset(tasks), rollout_func=rollout_func, args=args)
    probe.seen = []
    return probe


def _recording(rollout_func, calls):
    def wrapped(prompts, trainer):
        out = rollout_func(prompts, trainer)
        calls.append((list(prompts), out))
        return out
    return wrapped


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(model, before) -> float:
    return sum((p.detach() - before[n]).abs().sum().item() for n, p in model.named_parameters())


def test_grpo_step_with_the_default_policy(tokenizer, tmp_path):
    """TRL samples through our collector with an HFPolicy over its own model; one step updates the weights."""
    model = tiny_model(tokenizer)
    tasks = make_tasks(2, "train")
    calls = []

    def length_reward(completions, **kwargs):  # a random model's replies are all invalid: give the group variance
        return [len(c) / 100 for c in completions]

    trainer = _trainer(model, tokenizer, tasks, _recording(make_rollout_func("AgentRL/ToolUse-v0"), calls),
                       [env_reward_func, length_reward], tmp_path)
    before = _snapshot(model)
    trainer.train()

    assert len(calls) == 1
    prompts, out = calls[0]
    # TRL's sampler repeats each prompt num_generations times in a row; one completion per prompt comes back
    assert len(prompts) == 4 and prompts[0] == prompts[1] and prompts[2] == prompts[3] and prompts[0] != prompts[2]
    assert {json.dumps(prompt_to_task(p), sort_keys=True) for p in prompts} == {task_to_prompt(t) for t in tasks}
    assert [len(x) for x in out["completion_ids"]] == [len(x) for x in out["logprobs"]] == \
        [len(x) for x in out["env_mask"]]
    assert all(1 <= len(x) <= 12 for x in out["completion_ids"])  # one reply, within max_completion_length
    assert all(lp < 0 for row in out["logprobs"] for lp in row)  # sampled tokens carry real logprobs
    # the group shares its prompt tokens (the env renders the same prompt for both samples)
    assert out["prompt_ids"][0] == out["prompt_ids"][1] and out["prompt_ids"][0] != out["prompt_ids"][2]

    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and "rewards/env_reward_func/mean" in logs[0]
    assert logs[0]["rewards/env_reward_func/mean"] == pytest.approx(sum(out["env_reward"]) / 4)
    assert trainer.seen, "compute_loss never ran"
    assert _changed(model, before) > 0
    assert model.training  # the rollout restored the trainer's mode


def test_grpo_step_masks_env_tokens_in_the_loss(tokenizer, tmp_path):
    """Multi-turn completions: the tool turns reach TRL as env_mask zeros, and TRL's loss mask holds them."""
    model = tiny_model(tokenizer, seed=1)
    tasks = make_tasks(2, "train", families=["multiply"])
    calls = []
    rollout = make_rollout_func("AgentRL/ToolUse-v0", collector_config=CollectorConfig(max_new_tokens=64),
                                policy_factory=lambda trainer: AlternatingDemoPolicy(tokenizer, tasks))
    trainer = _trainer(model, tokenizer, tasks, _recording(rollout, calls), env_reward_func, tmp_path)
    before = _snapshot(model)
    trainer.train()

    _, out = calls[0]
    assert out["env_reward"] == [1.0, 0.0, 1.0, 0.0]  # right, wrong in each group: the advantages are not zero
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        assert mask[0] == 1 and mask[-1] == 1  # starts with the first reply, ends with the answer
        assert 0 in mask  # the tool call's result sits between the replies
        masked_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
        assert "tool" in masked_text or "<|im_start|>" in masked_text

    seen = trainer.seen[0]
    assert "tool_mask" in seen, "the env mask did not reach the loss inputs"
    tool_mask, completion_mask = seen["tool_mask"], seen["completion_mask"]
    # TRL shuffles the rows of a generation batch: find each completion's row by its tokens
    rows = [seen["completion_ids"][r, :int(completion_mask[r].sum())].tolist() for r in range(len(out["env_mask"]))]
    trained = []
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        row, n = rows.index(ids), len(mask)
        assert tool_mask[row, :n].tolist() == mask
        assert completion_mask[row, :n].sum().item() == n and completion_mask[row, n:].sum().item() == 0
        # what TRL trains on: the policy's tokens only
        trained.append(int((completion_mask[row] * tool_mask[row]).sum()))
    assert trained == [sum(m) for m in out["env_mask"]]
    logs = [h for h in trainer.state.log_history if "loss" in h]
    # TRL counts only model tokens (tool_mask = 1) in its completion length when a mask is given
    assert logs[0]["completions/mean_length"] == pytest.approx(sum(trained) / 4)
    assert logs[0]["rewards/env_reward_func/mean"] == pytest.approx(0.5)
    assert _changed(model, before) > 0
