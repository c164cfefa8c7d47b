"""Train a LoRA on an agentrl env with TRL's GRPOTrainer through TRL's ``environment_factory`` API.

    pip install -e ".[train,trl]"      # in the agentrl-gym checkout
    python docs/examples/trl_environment_factory.py --model Qwen/Qwen2.5-0.5B-Instruct --steps 20
    python docs/examples/trl_environment_factory.py --tiny --steps 1     # random-init tiny model, offline smoke run
    python docs/examples/trl_environment_factory.py --adapter runs/main/sft/adapter --steps 20  # a cold start

TRL owns generation (its own tool-calling loop, parsing calls with the chat template), the GRPO loss, LoRA (a
fresh one via ``peft_config``, or the ``--adapter`` it trains on) and logging; agentrl owns the task, the
tools (exposed to TRL as typed methods with the env's own schemas), the never-raising tool execution and the
outcome reward. The chat template must support tool calling (TRL checks); a model whose template does not
(e.g. SmolLM2) gets TRL's ChatML-compatible Qwen2.5 template. Compare docs/examples/trl_grpo.py, which rolls
out with agentrl's collector through ``rollout_func`` instead.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental in TRL 1.16

logger = logging.getLogger("trl_environment_factory")


def tool_calling_tokenizer(tokenizer):
    """``tokenizer``, or a copy switched to TRL's Qwen2.5 template (with its ``<tool_call>`` tokens) when its own chat
    template cannot render a tool-calling conversation."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    logger.warning("the chat template does not support tool calling; using TRL's Qwen2.5 template")
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>"})
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number above 0 is needed, got {text!r}")
    return int(text)


def check_args(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` / ``FileNotFoundError`` (one line, saying what to do) for an unknown env id, an env that
    does not come up, a model not available here, or an adapter that is missing or of another base model."""
    from agentrl.algos.models import check_model_available
    from agentrl.algos.models.lora import check_adapter_base, check_adapter_folder
    from agentrl.algos.rollout.env_factory import preflight_env

    preflight_env(args.env)
    if not args.tiny:
        check_model_available(args.model)
    if args.adapter:
        check_adapter_folder(args.adapter)
        if not args.tiny:  # the random-init tiny model is no checkpoint an adapter could name
            check_adapter_base(args.adapter, args.model)


def main(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="AgentRL/ToolUse-v0")
    ap.add_argument("--model", default="smollm2-135m", help="alias, hub id or local path")
    ap.add_argument("--tiny", action="store_true", help="random-init tiny model (smoke run)")
    ap.add_argument("--steps", type=positive_int, default=20)
    ap.add_argument("--tasks", type=positive_int, default=64, help="training tasks (the env's test split is not used)")
    ap.add_argument("--prompts-per-step", type=positive_int, default=2)
    ap.add_argument("--num-generations", type=positive_int, default=4)
    ap.add_argument("--max-completion-length", type=positive_int, default=256,
                    help="tokens of the whole multi-turn completion")
    ap.add_argument("--adapter", help="train this PEFT LoRA adapter on instead of a fresh LoRA "
                                      "(e.g. a cold start: runs/main/sft/adapter)")
    ap.add_argument("--out", default="runs/trl_environment_factory")
    ap.error = lambda message: ap.exit(2, f"{ap.prog}: error: {message}\n")  # one line, no usage block
    args = ap.parse_args(argv)
    try:  # bad input is refused in one line before anything loads, as `agentrl train` does
        check_args(args)
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))

    import gymnasium as gym
    import numpy as np
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    import agentrl.envs  # noqa: F401  (registers the env ids)
    from agentrl.algos import load_model, load_tokenizer
    from agentrl.algos.integrations.trl_env import (
        env_correct_func,
        env_reward_func,
        environment_factory,
        tasks_dataset,
    )
    from agentrl.algos.models import tiny_model
    from agentrl.algos.models.lora import load_adapter

    if args.tiny:
        tokenizer = tool_calling_tokenizer(load_tokenizer(args.model))
        model = tiny_model(tokenizer)
    else:
        model, tokenizer = load_model(args.model)
        tokenizer = tool_calling_tokenizer(tokenizer)
        if len(tokenizer) > model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
    bf16 = str(next(model.parameters()).dtype) == "torch.bfloat16"
    peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    if args.adapter:  # TRL trains its LoRA weights; it refuses a PeftModel given with a peft_config
        model = load_adapter(model, args.adapter, trainable=True)   # onto the resized base
        peft_config = None
        print(f"started from adapter {args.adapter}")

    # Tasks: any dicts the env's reset(options={"task": ...}) accepts; here drawn from the env itself.
    env = gym.make(args.env).unwrapped
    tasks = [env.sample_task(np.random.default_rng([0, k])) for k in range(args.tasks)]
    env.close()

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[env_reward_func, env_correct_func],   # the env's outcome reward; correctness, logged
        train_dataset=tasks_dataset(tasks),                  # task column = each task as JSON
        environment_factory=environment_factory(args.env),        # one agentrl env per rollout, tools as methods
        peft_config=peft_config,                                   # a fresh LoRA, or None: --adapter's
        args=GRPOConfig(
            output_dir=args.out,
            use_cpu=True,                                          # drop on a GPU machine
            bf16=bf16,
            max_steps=args.steps,
            per_device_train_batch_size=args.prompts_per_step * args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            reward_weights=[1.0, 0.0],                             # env_correct_func is for the logs only
            temperature=1.0,
            learning_rate=2e-4,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
        ),
    )
    trainer.train()
    for row in trainer.state.log_history:
        if "rewards/env_reward_func/mean" in row:
            print(f"step {row['step']:>3}  env reward {row['rewards/env_reward_func/mean']:+.3f}  "
                  f"correct {row['rewards/env_correct_func/mean']:.3f}  loss {row['loss']:+.4f}")
    trainer.save_model(args.out)
    print(f"adapter saved in {args.out}")
    return trainer


if __name__ == "__main__":
    main()
