"""The training loop shared by every algorithm: rollout -> reward -> advantage -> update -> repeat, on-policy.

One logical step::

    tasks   = the next tasks_per_step tasks from the data position     (checkpointed: no task twice, none lost)
    trajs   = collect(env, policy, tasks, group_size)                   (the policy has the current weights)
    rows    = algo.prepare(trajs)                                        (advantages / pairs over whole groups)
    for epoch in range(algo.epochs):                                     (1 = strictly on-policy)
        for micro-batch in pack_microbatches(rows, micro_batch_tokens):
            logprobs = token_logprobs(model, ...)                        (chunked LM head)
            loss     = algo.loss(logprobs, ref_logprobs, micro-batch)    (weights: sums to the global mean)
            loss.backward()
        clip_grad_norm_; optimizer.step(); policy.update_weights(model)

An algorithm without rollouts (SFT) replaces the rollout with its own examples
(:meth:`~agentrl.algos.objectives.base.Algorithm.offline_data`). The pieces live beside this file: the run's
settings in :mod:`~agentrl.algos.training.config`, task order and rollout seeds in
:mod:`~agentrl.algos.training.tasks`, the micro-batched update in :mod:`~agentrl.algos.training.update`,
memory settings in :mod:`~agentrl.algos.training.memory_plan`, checkpoints in
:mod:`~agentrl.algos.training.checkpoint`. Rollout sampling is seeded from
``(seed, collector.seed, data position)``, so a resumed run repeats the killed run's next step exactly.

Use from Python::

    from agentrl.algos import TrainConfig, Trainer
    Trainer(TrainConfig(env="AgentRL/ToolUse-v0", algo="grpo", steps=20, out="runs/grpo")).train()
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from agentrl.algos._io import atomic_write_text
from agentrl.algos.evaluation.process_memory import process_memory
from agentrl.algos.models.lora import apply_lora, is_peft, load_adapter, save_adapter
from agentrl.algos.objectives import algorithm_class
from agentrl.algos.rollout.env_factory import rollout_env
from agentrl.algos.training import checkpoint, distributed
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.memory_plan import (
    memory_plan,
    resolve_budget,
    set_gradient_checkpointing,
    set_malloc_mmap_threshold,
    trim_heap,
)
from agentrl.algos.training.reference import Reference
from agentrl.algos.training.sampler import KEY_TABLE, SignalSampler, gather, signal_metrics, signal_summary
from agentrl.algos.training.tasks import MixtureTaskSource, TaskSource, rollout_seed
from agentrl.algos.training.update import apply_update, resolve_correction

if TYPE_CHECKING:
    from agentrl.algos.evaluation.run_log import MetricsLogger
    from agentrl.algos.rollout.collector import Collector

logger = logging.getLogger(__name__)


class NoLearningSignal(ValueError):
    """RL steps that could not learn anything (0% format, every group skipped): the run stops, saying what to do."""


def make_algorithm(config: TrainConfig):
    """The algorithm object of ``config.algo``, with its config section."""
    return algorithm_class(config.algo)(config.algorithm)


class Trainer:
    """Runs :class:`TrainConfig`: loads the model, wraps it in LoRA, trains, logs, checkpoints.

    Args:
        config: the run's settings.
        model, tokenizer: use these instead of loading ``config.model`` (tests pass tiny models). A model that
            is not yet a PEFT model gets a fresh LoRA adapter (or ``config.adapter``).
        policy: the sampling backend (default: :class:`~agentrl.algos.policy.HFPolicy` over the model); the
            trainer calls ``policy.update_weights(model)`` after every optimizer step.
        resume: continue from the run directory's latest checkpoint (a fresh start when there is none).
    """

    def __init__(self, config: TrainConfig, *, model=None, tokenizer=None, policy=None, resume: bool = False):
        config.validate()
        self.config = config
        self.ranks = distributed.setup(config.device)  # one process unless launched by torchrun / accelerate
        if self.ranks.distributed and config.asynchronous.enabled:
            raise ValueError("asynchronous training runs in one process; launch it without torchrun")
        self.run_dir = Path(config.out)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.ranks.is_main:  # one trainer per run folder, until this one is gone
            checkpoint.lock_run(self.run_dir)
            weakref.finalize(self, checkpoint.unlock_run, self.run_dir)
        random.seed(config.seed)  # the same on every rank: identical LoRA initialisation
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.global_step = 0
        """Optimizer steps (logical steps) taken, resumed ones included."""
        self.data_pos = 0
        self.sampler = SignalSampler(config.sampler, config.seed)
        """Per-key pass rates of the rollouts (docs/sampler.md); it chooses the tasks when sampler.enabled."""
        self._setup_model(model, tokenizer, policy)
        self._setup_optimizer()
        self._setup_tasks()
        ckpt = latest_checkpoint(self.run_dir) if resume else None
        if resume and ckpt is None:
            logger.warning("--resume: no checkpoint in %s; starting from step 0", self.run_dir)
        elif ckpt is not None:
            self.load_checkpoint(ckpt)
        self._check_ranks_agree(ckpt, resume)
        if self.ranks.is_main:
            atomic_write_text(self.run_dir / "config.json", json.dumps(config.to_dict(), indent=2, default=str) + "\n")
        self._setup_policy(policy)
        self._logger: MetricsLogger | None = None
        self.history: list[dict[str, Any]] = []
        self._dead_steps = 0  # consecutive steps without a learning signal (_check_learning_signal)

    def _check_ranks_agree(self, ckpt: Path | None, resume: bool) -> None:
        """In a data-parallel run, refuse in one line unless every rank starts at the same step and data position,
        with the same config and adapter weights (:func:`~agentrl.algos.training.distributed.check_ranks_agree`):
        a rank whose ``--out`` holds no checkpoint while rank 0 resumes would otherwise train from step 0."""
        if not self.ranks.distributed:
            return
        origin = f"{ckpt.parent.parent}/{checkpoint.CHECKPOINTS}/{ckpt.name}" if ckpt is not None else (
            f"no checkpoint in {self.run_dir}" if resume else "fresh start")
        config = json.dumps(self.config.to_dict(), sort_keys=True, default=str)
        state = {"step": self.global_step, "step_from": origin, "data_position": self.data_pos,
                 "config": hashlib.sha256(config.encode()).hexdigest()[:12],
                 "adapter": distributed.weights_digest(self.params)}
        distributed.check_ranks_agree(state, self.ranks, hint=(
            f"; every rank must read the same --out ({self.run_dir}): on several nodes, a folder on a shared "
            "filesystem"))

    # ------------------------------------------------------------------ setup
    def _setup_model(self, model, tokenizer, policy=None) -> None:
        """The model (``config.model`` unless given) with its LoRA adapter, and the activation-memory plan."""
        config = self.config
        if model is None:
            from agentrl.algos.models import load_model

            model, loaded_tok = load_model(config.model, dtype=config.dtype,
                                           device=distributed.rank_device(config.device, self.ranks),
                                           attn_implementation=config.attn_implementation)
            tokenizer = tokenizer or loaded_tok
        if tokenizer is None:
            from agentrl.algos.models import load_tokenizer

            tokenizer = load_tokenizer(config.model)
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        if not is_peft(model):
            model = (load_adapter(model, config.adapter, trainable=True) if config.adapter
                     else apply_lora(model, config.lora))
        self.model = model
        self.model.eval()
        self.device = next(model.parameters()).device
        # Activation memory: checkpointing and the micro-batch size, resolved from memory_budget_gb ('auto': from
        # the memory free now, less what the optimizer and the sampler will still take)
        self.memory_budget_gb, budget_from = resolve_budget(config, model, policy, device=self.device)
        self.checkpointing, self.micro_batch_tokens = memory_plan(
            model, gradient_checkpointing=config.gradient_checkpointing, micro_batch_tokens=config.micro_batch_tokens,
            memory_budget_gb=self.memory_budget_gb)
        set_gradient_checkpointing(model, self.checkpointing)
        threshold = config.malloc_mmap_threshold_mb
        self.manages_heap = threshold is not None  # glibc: mmap threshold set, heap trimmed
        if threshold is not None:
            set_malloc_mmap_threshold(threshold)
        logger.info("micro_batch_tokens=%d, gradient_checkpointing=%s (memory_budget_gb=%s)", self.micro_batch_tokens,
                    self.checkpointing, budget_from)

    def _setup_optimizer(self) -> None:
        """AdamW over the adapter, the algorithm, and the reference policy when the algorithm needs one."""
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters (a PEFT model loaded without is_trainable?)")
        self.optimizer = torch.optim.AdamW(self.params, lr=self.config.lr, weight_decay=self.config.weight_decay)
        self.algo = make_algorithm(self.config)
        # The policy at the start of this stage (before any resumed checkpoint): the reference of KL and DPO.
        self.reference = Reference(self.model) if self.algo.needs_reference else None

    def _setup_tasks(self) -> None:
        """The task order (one env, a task file or a mixture) and, for an algorithm without rollouts, its data
        (:meth:`~agentrl.algos.objectives.base.Algorithm.offline_data`)."""
        config = self.config
        rows = None
        if config.tasks_file:
            from agentrl.envs.datasets import load_rows

            rows = load_rows(config.tasks_file, ())
        self.mixture = config.env_mixture()
        self.tasks: TaskSource | MixtureTaskSource
        if self.mixture:
            self.tasks = MixtureTaskSource(self.mixture, seed=config.seed, tasks_per_step=config.tasks_per_step)
        else:
            self.tasks = TaskSource(config.env, config.env_kwargs, seed=config.seed, rows=rows)
        self.examples: Any = None
        if not self.algo.needs_rollouts or self.algo.uses_demonstrations:
            self.examples = self.algo.offline_data(self.tokenizer, self.tasks, self.env_label)

    def _setup_policy(self, policy) -> None:
        """For a rollout algorithm: the sampling policy (an ``HFPolicy`` over the model unless given), given the
        current weights, and what ``collect`` gets as its env: the id itself (local threads) or a pool of Ray env
        actors; for a mixture, a mapping name -> either, each task naming its env."""
        config = self.config
        self.policy = policy
        self.rollout_env: Any = None
        self._collector: Collector | None = None
        self.correction = None
        """The rollout correction of the updates
        (:func:`~agentrl.algos.training.update.resolve_correction`)."""
        if not self.algo.needs_rollouts:
            return
        if self.policy is None:
            from agentrl.algos.policy.hf import HFPolicy

            self.policy = HFPolicy(self.model, self.tokenizer, share_weights=config.policy_shares_weights,
                                   max_batch_tokens=config.policy_max_batch_tokens,
                                   compile_decode=config.policy_compile)
        self.correction = resolve_correction(self.algo, self.policy, config.collector)
        if self.correction is not None:
            logger.info("rollout correction: %s", self.correction)
        distributed.share_servers(self.policy, self.ranks)  # ranks on one server: one load per adapter version
        self.policy.update_weights(self.model)

        def make(env_id, env_kwargs):
            return rollout_env(config.executor, env_id, env_kwargs, tokenizer=self.tokenizer,
                               num_workers=config.env_workers, call_format=config.collector.call_format,
                               actor_options=config.env_actor_options)

        if self.mixture:
            self.rollout_env = {c.name: make(c.id, c.env_kwargs) for c in self.mixture}
        else:
            self.rollout_env = make(config.env, config.env_kwargs)

    # ------------------------------------------------------------------ the loop
    def train(self) -> list[dict[str, Any]]:
        """Run until ``config.steps``; returns the metrics of the steps run here (also in metrics.jsonl)."""
        from tqdm.auto import tqdm

        from agentrl.algos.evaluation.plot import plot_run
        from agentrl.algos.evaluation.run_log import MetricsLogger

        cfg = self.config
        main = self.ranks.is_main  # rank 0 logs, checkpoints and saves; every rank trains
        self._logger = MetricsLogger(self.run_dir, report_to=cfg.report_to,
                                     config=cfg.to_dict(), plots=plot_run) if main else None
        bar = tqdm(total=cfg.steps, initial=self.global_step, desc=f"{cfg.algo} {self.env_label}",
                   disable=not (cfg.progress and main), unit="step", dynamic_ncols=True)
        try:
            while self.global_step < cfg.steps:
                metrics = self.step()
                if self._logger is not None:  # the main rank's
                    self._logger.log(self.global_step, metrics)
                self.history.append(metrics)
                self._check_learning_signal(metrics)
                bar.update(1)
                bar.set_postfix(_postfix(metrics), refresh=False)
                if (cfg.save_every and self.global_step % cfg.save_every == 0) or self.global_step == cfg.steps:
                    self.save_checkpoint()
        finally:
            bar.close()
            if self._logger is not None:
                self._logger.close()
            self.close_collector()
            pools = self.rollout_env.values() if isinstance(self.rollout_env, dict) else [self.rollout_env]
            for pool in pools:
                if hasattr(pool, "close"):
                    pool.close()  # Ray env actors
        if self.ranks.is_main:
            save_adapter(self.model, self.run_dir / "adapter")
            if self.sampler.keys:
                self.sampler.write_table(self.run_dir / KEY_TABLE)
        distributed.barrier(self.ranks)
        return self.history

    def signal_summary(self) -> str | None:
        """The end-of-run line on the learning signal of the steps run here
        (:func:`~agentrl.algos.training.sampler.signal_summary`); None for a run without rollouts."""
        return signal_summary(self.history, sampler_on=self.config.sampler.enabled,
                              from_adapter=bool(self.config.adapter))

    def _check_learning_signal(self, metrics: dict[str, Any]) -> None:
        """Raise :class:`NoLearningSignal` after ``stop_without_signal`` consecutive steps with 0% format and every
        group skipped: RL alone cannot leave that state, and the run would burn its budget learning nothing."""
        groups = metrics.get("train/groups", 0)
        dead = (self.algo.needs_rollouts and groups and metrics.get("train/skipped_groups") == groups
                and metrics.get("reward/format", 1.0) == 0)
        self._dead_steps = self._dead_steps + 1 if dead else 0
        if self.config.stop_without_signal and self._dead_steps >= self.config.stop_without_signal:
            raise NoLearningSignal(
                f"{self._dead_steps} steps in a row: no episode of {self.env_label} ended in a well-formed answer "
                "and every group had equal rewards, so RL has nothing to learn from. Train a cold start first "
                "(agentrl train --algo sft, on the env's demonstrations (dataset rows with 'calls') or "
                "sft.data=your_conversations.jsonl) and pass --adapter; or set stop_without_signal=0 "
                "(docs/own-tools.md)")

    def _rollout(self, collector, position: int, tasks: list | None = None) -> tuple[list, int, float]:
        """Collect the rollout batch that starts at data ``position``: ``(trajectories, tasks taken, seconds)``.

        Its tasks and sampling seed are functions of ``position`` alone, so a resumed run repeats it exactly.
        In a data-parallel run each rank collects its share of the tasks and every rank returns them all.
        ``tasks``: the sampler's choice for a round that starts at ``position`` (the round's sampling stream).
        """
        cfg, ranks = self.config, self.ranks
        if tasks is None:
            tasks, batch = self.tasks.take(position, cfg.tasks_per_step), position // cfg.tasks_per_step
        else:
            batch = position
        collector.config = dataclasses.replace(
            cfg.collector, seed=rollout_seed(cfg.seed, cfg.collector.seed, batch * ranks.world + ranks.rank))
        t0 = time.perf_counter()
        trajs = collector.collect(self.rollout_env, ranks.shard(tasks), cfg.group_size, env_kwargs=self.env_kwargs)
        seconds = time.perf_counter() - t0
        return distributed.gather_trajectories(trajs, ranks), len(tasks), seconds

    @property
    def env_label(self) -> str:
        """The env id, or the mixture's names joined by '+'."""
        return "+".join(c.name for c in self.mixture) if self.mixture else self.config.env

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """What ``collect`` gets as ``env_kwargs``: the run's, or a mixture's ``name -> kwargs``."""
        return {c.name: c.env_kwargs for c in self.mixture} if self.mixture else self.config.env_kwargs

    def close_collector(self) -> None:
        """Close the collector :meth:`step` keeps for the whole run (its envs and env threads); the next
        :meth:`step` makes a new one. :meth:`train` calls it when it ends; a loop that calls :meth:`step` itself
        calls it when done."""
        if self._collector is not None:
            self._collector.close()
            self._collector = None

    def step(self) -> dict[str, Any]:
        """One logical step: data -> (rollout) -> update -> policy refresh. Returns the step's metrics."""
        t_step = time.perf_counter()
        metrics: dict[str, Any] = {}
        if self.algo.needs_rollouts:
            if self._collector is None:  # envs and env threads live for the whole run
                from agentrl.algos.rollout.collector import Collector

                self._collector = Collector(self.policy, self.config.collector)
            if self.config.sampler.enabled:  # rounds of chosen tasks until the update holds groups with signal
                batch = gather(self.sampler, self.tasks, self.data_pos, self._sampler_rollout,
                               groups=self.config.tasks_per_step, step=self.global_step)
                trajs, n_tasks, seconds = batch.train, batch.positions, batch.seconds
                metrics.update(rollout_metrics(batch.trajectories, seconds))
                metrics.update(batch.metrics)
            else:
                trajs, n_tasks, seconds = self._rollout(self._collector, self.data_pos)
                metrics.update(rollout_metrics(trajs, seconds))
                metrics.update(signal_metrics(self.sampler, trajs, self.global_step))
            if self.config.policy_compile != "off":
                metrics.update(self._decode_times())
            self.data_pos += n_tasks
            rows, prep_stats = self.algo.prepare(trajs)
        else:  # offline: the algorithm's own examples, by data position
            n = self.algo.batch_size
            rows, prep_stats = self.algo.prepare([self.examples[k] for k in range(self.data_pos, self.data_pos + n)])
            self.data_pos += n
        return self._optimize(rows, prep_stats, metrics, t_step)

    def _decode_times(self) -> dict[str, float]:
        """With policy_compile: the in-process policy's seconds in decode steps (``time/decode``) and compiling
        them (``time/compile_decode``) since the last step."""
        stats = getattr(self.policy, "stats", {})
        now = (stats.get("decode_seconds", 0.0), stats.get("compile_seconds", 0.0))
        last = getattr(self, "_decode_seen", (0.0, 0.0))
        self._decode_seen = now
        return {"time/decode": now[0] - last[0], "time/compile_decode": now[1] - last[1]}

    def _sampler_rollout(self, tasks: list, position: int) -> tuple[list, float]:
        """One round of the sampler (:func:`~agentrl.algos.training.sampler.gather`): the chosen ``tasks``."""
        trajs, _, seconds = self._rollout(self._collector, position, tasks)
        return trajs, seconds

    @property
    def rollout_temperature(self) -> float:
        """The temperature rollout logprobs were recorded at (greedy rollouts record temperature-1 logprobs)."""
        return self.config.collector.temperature or 1.0

    @property
    def loss_temperature(self) -> float:
        """The temperature of the loss's logprobs: the rollout's when the algorithm takes a ratio against the
        rollout logprobs (:attr:`~agentrl.algos.objectives.base.Algorithm.uses_rollout_temperature`), else 1
        (and 1 for an algorithm without rollouts: there is no rollout)."""
        uses = self.algo.needs_rollouts and self.algo.uses_rollout_temperature
        return self.rollout_temperature if uses else 1.0

    def _optimize(self, rows, prep_stats: dict[str, Any], metrics: dict[str, Any], t_step: float) -> dict[str, Any]:
        """The update half of a step (shared with the asynchronous trainer): :meth:`apply_update_rows` on prepared
        ``rows`` at :attr:`loss_temperature`, then the step counter, data position and timings (``t_step``: when
        the step began) go into ``metrics``, which is returned."""
        metrics.update({f"train/{k}": v for k, v in prep_stats.items()})
        t0 = time.perf_counter()
        if self.manages_heap:
            trim_heap()  # glibc: the rollout's freed KV caches (small blocks) leave the RSS before the update grows it
        metrics.update(self.apply_update_rows(rows, self.loss_temperature))
        metrics["time/train"] = time.perf_counter() - t0
        busy = metrics["time/train"] - metrics.get("time/compile", 0.0)  # compiling is not the update's speed
        metrics["perf/tokens_per_s"] = metrics["train/real_tokens"] / busy if busy > 0 else 0.0
        self.global_step += 1
        metrics["train/data_position"] = self.data_pos
        if self.manages_heap:
            trim_heap()  # glibc: the step's small freed blocks leave the RSS too
        metrics["time/step"] = time.perf_counter() - t_step
        metrics.update(process_memory())
        return metrics

    def _lr(self) -> float:
        w = self.config.warmup_steps
        return self.config.lr * (min(1.0, (self.global_step + 1) / w) if w > 0 else 1.0)

    def apply_update_rows(self, rows, temperature: float) -> dict[str, Any]:
        """``algo.epochs`` optimizer steps over prepared row groups
        (:func:`~agentrl.algos.training.update.apply_update`)."""
        if not rows:
            logger.info("step %d: nothing to train on (no group with a signal); no optimizer step", self.global_step)
        cfg = self.config
        publish = (lambda: self.policy.update_weights(self.model)) if self.policy is not None else None
        sampled = self.algo.needs_rollouts and temperature == self.rollout_temperature
        return apply_update(self.model, self.optimizer, self.algo, rows, lr=self._lr(), temperature=temperature,
                            pad_id=self.pad_id, micro_batch_tokens=self.micro_batch_tokens,
                            logprob_chunk=cfg.logprob_chunk, max_grad_norm=cfg.max_grad_norm, reference=self.reference,
                            sampled=sampled, after_step=publish, ranks=self.ranks, trim=self.manages_heap,
                            correction=self.correction if sampled else None, compile_mode=cfg.compile)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically and point ``checkpoints/latest`` at it (rank 0; the
        other ranks of a data-parallel run wait until it is written)."""
        path = self.run_dir / checkpoint.CHECKPOINTS / f"step-{self.global_step:06d}"
        if self.ranks.is_main:
            path = checkpoint.save_checkpoint(self.run_dir, model=self.model, optimizer=self.optimizer,
                                              step=self.global_step, data_position=self.data_pos,
                                              config=self.config.to_dict(), keep=self.config.keep_checkpoints,
                                              sampler=self.sampler.state_dict())
        distributed.barrier(self.ranks)
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore adapter, optimizer, RNG states, step and data position from a checkpoint folder."""
        state = checkpoint.load_checkpoint(path, model=self.model, optimizer=self.optimizer)
        self.global_step, self.data_pos = state.step, state.data_position
        if state.sampler is not None:  # a checkpoint from before the sampler has none: estimates start afresh
            self.sampler.load_state_dict(state.sampler)


def rollout_metrics(trajectories, seconds: float) -> dict[str, Any]:
    """A rollout batch's metrics: :func:`~agentrl.algos.evaluation.metrics.aggregate_rollout_metrics` plus
    ``time/rollout`` (``seconds``), ``time/env`` (tool latency summed over turns) and
    ``perf/rollout_tokens_per_s``."""
    from agentrl.algos.evaluation.metrics import aggregate_rollout_metrics

    sampled = sum(t.num_action_tokens for t in trajectories)
    out = aggregate_rollout_metrics(trajectories)
    out["time/rollout"] = seconds
    out["time/env"] = sum(turn.tool_latency_s for t in trajectories for turn in t.turns)
    out["perf/rollout_tokens_per_s"] = sampled / seconds if seconds > 0 else 0.0
    return out


def _postfix(m: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, label in (("reward/mean", "reward"), ("reward/correct", "correct"), ("train/loss", "loss"),
                       ("perf/tokens_per_s", "tok/s")):
        if key in m:
            out[label] = f"{m[key]:.3g}"
    if "signal/share" in m:  # groups with unequal rewards among those sampled (docs/sampler.md)
        out["signal"] = f"{m['signal/share']:.0%}"
    return out
