"""TRL's ``environment_factory`` path: agentrl envs as TRL environments, real ``GRPOTrainer`` steps with a tiny
model."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
from helpers import make_template_tokenizer  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402

import agentrl.envs  # noqa: E402
from agentrl.algos.integrations.trl_env import (  # noqa: E402
    RESERVED,
    AgentRLEnvironment,
    env_correct_func,
    env_reward_func,
    environment_factory,
    tasks_dataset,
)
from agentrl.algos.models import tiny_model  # noqa: E402
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


# ------------------------------------------------------------------------------------------ the environment objects


def _expressible(schema):
    """A schema without what a Python signature cannot carry to TRL: pydantic's ``title`` keys and ``default``
    values (TauBench-v0's tools come from tau2-bench's pydantic models), and line breaks in descriptions (a
    docstring is read as one paragraph)."""
    if isinstance(schema, dict):
        return {k: _expressible(v) for k, v in schema.items() if k not in ("title", "default")}
    if isinstance(schema, list):
        return [_expressible(v) for v in schema]
    return " ".join(schema.split()) if isinstance(schema, str) else schema


# AgentRL/OpenEnv-v0 plays a running server (url=...); TRL on it is tested in tests/envs/bridges/test_openenv.py
@pytest.mark.parametrize("env_id", sorted(i for i in agentrl.envs.ENVS if i != "AgentRL/OpenEnv-v0"))
def test_every_registered_env_shows_trl_its_own_tool_schemas(env_id):
    """The methods TRL lists as tools render (through transformers' get_json_schema) to the env's schemas."""
    import inspect

    names = set(agentrl.envs.make_text_env(env_id).tools.names)
    if names & RESERVED:  # TauBench-v0's solo `done` tool: refused in one line, not shadowed by env.done
        with pytest.raises(ValueError, match=r"would hide the attributes TRL's environment object keeps"):
            environment_factory(env_id)()
        return
    env = environment_factory(env_id)()
    members = [n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
               if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(members) == sorted(env.env.tools.names)
    for schema in env.env.tools.schemas():
        rendered = get_json_schema(getattr(env, schema["function"]["name"]))["function"]
        assert _expressible(rendered) == _expressible(schema["function"])
    task = env.env.sample_task(env.env.np_random)
    if task.get("tools") is not None:  # the task's own tools (BFCL-v0): TRL reads an env class's tools once
        with pytest.raises(ValueError, match=r"brings its own tools \('tools' key\).*rollout_func"):
            env.reset(task=json.dumps(task))
        return
    text = env.reset(task=json.dumps(task))
    assert env.env.user_prompt(task) in text and env.env.parser.answer_instructions() in text


def test_tool_calls_step_the_env_and_bad_calls_are_observations():
    env = environment_factory("AgentRL/ToolUse-v0")()
    task = make_tasks(1, "train", families=["multiply"])[0]
    env.reset(task=task)
    (name, args), = task["calls"]
    assert getattr(env, name)(**args) == str(task["answer"] if not isinstance(task["answer"], list)
                                              else task["answer"][0])
    assert getattr(env, name)(**{**args, "bogus": 1}).startswith("Error:")  # unknown argument: the env's error
    assert env.add(a="x", b=1).startswith("Error:")  # wrong type
    assert env.env.metrics.invalid_calls == 2 and env.env.metrics.tool_calls == 3 and not env.done
    answer = task["answer"][0] if isinstance(task["answer"], list) else task["answer"]
    assert env_reward_func([[{"role": "assistant", "content": f"Answer: {answer}"}]], [env]) == [1.0]
    assert env.done and env.info["termination"] == "answered" and env_correct_func([[]], [env]) == [1.0]
    assert env.add(a=1, b=2) == "The episode has ended; call reset() to start a new one."
    env.reset(task=task)  # a reused instance starts clean; no answer (a tool message last) is invalid
    assert env_reward_func([[{"role": "tool", "content": "5"}]], [env]) == [env.env.rewards.invalid]
    with pytest.raises(ValueError, match="environment_factory"):
        env_reward_func([[]])


def test_rows_without_a_task_share_one_drawn_task_per_group():
    make = environment_factory("AgentRL/ToolUse-v0", group_size=2, seed=5)
    envs = [make() for _ in range(4)]
    texts = [e.reset(prompt=[{"role": "user", "content": ""}]) for e in envs]
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
    assert envs[0].env.task == ToolUseEnv().sample_task(__import__("numpy").random.default_rng([5, 0]))


# ------------------------------------------------------------------------------------------ real GRPO steps


def _trainer(model, tokenizer, tasks, reward_funcs, out_dir, trainer_cls=None, **kw):
    from trl import GRPOConfig, GRPOTrainer

    class Probe(trainer_cls or GRPOTrainer):
        seen: list = []

        def compute_loss(self, model, inputs, *args, **kwargs):
            self.seen.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
            return super().compute_loss(model, inputs, *args, **kwargs)

    args = GRPOConfig(output_dir=str(out_dir), use_cpu=True, report_to=[], bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=kw.pop("max_completion_length", 12), max_steps=1,
                      logging_steps=1, save_strategy="no", learning_rate=1e-2, seed=0, dataloader_num_workers=0)
    probe = Probe(model=model, processing_class=tokenizer, reward_funcs=reward_funcs,
                  train_dataset=tasks_dataset(tasks),
                  environment_factory=environment_factory("AgentRL/ToolUse-v0"), args=args, **kw)
    probe.seen = []
    return probe


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(model, before) -> float:
    return sum((p.detach() - before[n]).abs().sum().item() for n, p in model.named_parameters())


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    return make_template_tokenizer(tokenizer, "qwen2_5")  # TRL's own qwen2_5 template: tool calling


def test_grpo_step_with_environment_factory(qwen_tokenizer, tmp_path):
    """A random tiny model samples through TRL; the env's reset text is the prompt and its reward is logged."""
    model = tiny_model(qwen_tokenizer)
    tasks = make_tasks(2, "train")
    rewards = []

    def recorded_env_reward(completions, environments, **kwargs):
        out = env_reward_func(completions, environments, **kwargs)
        rewards.append((out, [e.env.task for e in environments],
                        [e.env.messages[1]["content"] for e in environments]))
        return out

    def length_reward(completions, **kwargs):  # random replies are all invalid: give the group variance
        return [len(c[-1]["content"]) / 100 for c in completions]

    trainer = _trainer(model, qwen_tokenizer, tasks, [recorded_env_reward, length_reward], tmp_path)
    before = _snapshot(model)
    trainer.train()

    (out, seen_tasks, users), = rewards
    assert sorted(json.dumps(t, sort_keys=True) for t in seen_tasks) == \
        sorted(json.dumps(t, sort_keys=True) for t in tasks for _ in range(2))  # each task once per group member
    assert {u for u in users} == {t["query"] for t in tasks}
    assert all(r == ToolUseEnv().rewards.invalid for r in out)  # a random model never answers in format
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs[0]["rewards/recorded_env_reward/mean"] == pytest.approx(sum(out) / 4)
    assert trainer.seen and _changed(model, before) > 0


class _ScriptedTurns:
    """Replaces sampling with each task's demonstration in the template's native (hermes) call format: tool calls
    first, then the right answer for the even rollouts of the batch and a wrong one for the odd ones."""

    def __init__(self, tokenizer, tasks):
        self.tokenizer = tokenizer
        env = ToolUseEnv()
        self.actions = {t["query"]: env.demo_actions(t) for t in tasks}
        self.first_turns = 0

    def __call__(self, prompt_ids):
        out = []
        for ids in prompt_ids:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            actions = self.actions[next(q for q in self.actions if q in text)]
            turn = text.count("<|im_start|>assistant") - 1
            if turn == 0:
                opener = "First: " if self.first_turns % 2 == 0 else "Then: "
                self.first_turns += 1
                reply = opener + actions[0]
            else:
                reply = actions[turn] if turn < len(actions) - 1 or "First: " in text else "Answer: -1"
            out.append(self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id])
        return out


def test_grpo_step_plays_tool_calls_through_the_env(qwen_tokenizer, tmp_path):
    """TRL's own tool loop calls the env's tools; the env's outcome reward separates right from wrong answers and
    the tool output is masked out of the loss."""
    from trl import GRPOTrainer

    model = tiny_model(qwen_tokenizer, seed=1)
    tasks = make_tasks(2, "train", families=["multiply"])
    script = _ScriptedTurns(qwen_tokenizer, tasks)
    finished = []

    class Scripted(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            return script(prompt_ids), None

    def recorded(completions, environments, **kwargs):
        out = env_reward_func(completions, environments, **kwargs)
        finished.append((out, [dict(e.env.metrics.as_dict()) for e in environments],
                         [e.info["termination"] for e in environments]))
        return out

    trainer = _trainer(model, qwen_tokenizer, tasks, [recorded, env_correct_func], tmp_path,
                       trainer_cls=Scripted, max_completion_length=128)
    before = _snapshot(model)
    trainer.train()

    (out, metrics, terminations), = finished
    assert sorted(out) == [0.0, 0.0, 1.0, 1.0]  # one right and one wrong answer per group
    assert terminations == ["answered"] * 4
    assert all(m["tool_calls"] == 1 and m["tool_errors"] == 0 for m in metrics)  # the env ran each call
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs[0]["rewards/recorded/mean"] == pytest.approx(0.5)
    assert logs[0]["rewards/env_correct_func/mean"] == pytest.approx(0.5)
    seen = trainer.seen[0]
    assert "tool_mask" in seen and (seen["tool_mask"] * seen["completion_mask"] == 0).any()  # tool output masked
    assert _changed(model, before) > 0


def test_agentrl_environment_has_no_public_method_but_reset():
    """TRL exposes every public function of the class as a tool: the base class must add none of its own."""
    import inspect

    assert [n for n, _ in inspect.getmembers(AgentRLEnvironment, predicate=inspect.isfunction)
            if not n.startswith("_")] == ["reset"]
