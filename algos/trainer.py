"""The training loop shared by every algorithm: rollout -> reward -> advantage -> update -> repeat, on-policy.

One logical step::

    tasks   = the next tasks_per_step tasks from the data position     (checkpointed: no task twice, none lost)
    trajs   = collect(env, policy, tasks, group_size)                   (the sampler has the current weights)
    units   = algo.prepare(trajs)                                        (advantages / pairs over whole groups)
    for epoch in range(algo.epochs):                                     (1 = strictly on-policy)
        for micro-batch in pack_microbatches(units, micro_batch_tokens):
            logprobs = token_logprobs(model, ...)                        (chunked LM head)
            loss     = algo.loss(logprobs, ref_logprobs, micro-batch)    (weights: sums to the global mean)
            loss.backward()
        clip_grad_norm_; optimizer.step(); policy.update_weights(model)

SFT replaces the rollout with demonstrations (``env.demo(task)`` or a JSONL of conversations). Checkpoints hold
the adapter (PEFT format, plus exact tensors), optimizer, RNG states, step and data position; they are written
to a temporary folder and renamed into place, so a kill at any moment leaves the previous checkpoint intact.
Rollout sampling is seeded from ``(seed, collector.seed, step)``, so a resumed run repeats the killed run's
next step exactly.

Use from Python::

    from agentrl.algos.trainer import TrainConfig, Trainer
    Trainer(TrainConfig(env="AgentRL/ToolUse-v0", algo="grpo", steps=20, out="runs/grpo")).train()
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.algos.batching import collate, pack_microbatches
from agentrl.algos.collector import CollectorConfig
from agentrl.algos.dpo import DPO, DPOConfig
from agentrl.algos.grpo import GRPO, GRPOConfig
from agentrl.algos.logprobs import token_logprobs
from agentrl.algos.lora import (
    LoRAConfig,
    apply_lora,
    load_adapter,
    load_trainable_state_dict,
    save_adapter,
    trainable_state_dict,
)
from agentrl.algos.metrics import process_memory
from agentrl.algos.models import DEFAULT_MODEL
from agentrl.algos.ppo import PPO, PPOConfig
from agentrl.algos.sft import SFT, SFTConfig, load_conversations, render_conversation

logger = logging.getLogger(__name__)

ALGOS = ("grpo", "ppo", "dpo", "sft")
CHECKPOINTS = "checkpoints"
LATEST = "latest"


@dataclass
class AsyncConfig:
    """Decoupled rollout and training (``agentrl train --async``), run by :mod:`agentrl.algos.async_trainer`."""

    enabled: bool = False
    """Overlap rollouts with training: a producer thread samples the next batches while the trainer updates."""
    queue_size: int = 1
    """Rollout batches the producer may hold ahead of the trainer (queued or being collected); 1 = one-step
    off-policy (each batch is sampled by the weights one update behind those that train on it)."""
    max_staleness: int = 1
    """Trajectories sampled more than this many policy versions (weight updates) before the trainer's current
    weights are dropped ('drop') or importance-corrected ('tis')."""
    staleness: str = "drop"
    """'drop' or 'tis' (truncated importance sampling against the current weights, grpo/ppo only)."""
    tis_cap: float = 2.0
    """Upper bound of the per-token importance weight pi_current / pi_sampler in 'tis' mode."""


@dataclass
class TrainConfig:
    """Everything a training run needs; ``agentrl train`` builds it from flags and ``key=value`` overrides."""

    env: str = "AgentRL/ToolUse-v0"
    """Environment id (registered by importing agentrl.envs)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for gymnasium.make (e.g. {"families": ["multiply"]} for ToolUse-v0)."""
    algo: str = "grpo"
    """'grpo', 'ppo', 'dpo' or 'sft'."""
    model: str = DEFAULT_MODEL
    """Model alias, hub id or local path (the default is the embedded SmolLM2-135M-Instruct)."""
    dtype: str = "auto"
    """'auto' (bf16 where the hardware has bf16 units, else fp32), 'bf16' or 'fp32'."""
    device: str = "cpu"
    """'cpu', 'cuda', 'cuda:1', ..."""
    adapter: str | None = None
    """Start from this PEFT adapter (e.g. an SFT cold start) instead of a fresh LoRA."""
    out: str = "runs/agentrl"
    """Run directory: metrics.jsonl, tb/, checkpoints/, adapter/, config.json."""
    steps: int = 20
    """Optimizer steps (logical steps) in total, counting resumed ones."""
    tasks_per_step: int = 4
    """Tasks (groups) per step; each is sampled group_size times."""
    group_size: int = 8
    """Trajectories per task (the group of GRPO/PPO baselines and DPO pairs)."""
    lr: float = 2e-4
    """AdamW learning rate of the adapter."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many steps (constant afterwards)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (global L2 norm)."""
    micro_batch_tokens: int = 16384
    """Padded tokens (rows x longest) per forward/backward pass, packed first-fit-decreasing. The rows' shared
    prompt prefix is computed once, so the real work per micro-batch is usually far below this."""
    logprob_chunk: int = 1024
    """Action-token positions per LM-head call when computing logprobs (bounds the logits memory)."""
    save_every: int = 10
    """Checkpoint every N steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """Most recent checkpoints kept on disk."""
    seed: int = 0
    """Seeds task order, rollout sampling and initialisation."""
    tasks: str | None = None
    """JSONL of task rows to train on (default: the env's own task sampler)."""
    progress: bool = True
    """Show a progress bar."""
    tensorboard: bool = True
    """Also write TensorBoard scalars (run_dir/tb)."""
    executor: str = "local"
    """Where env resets and steps run: 'local' (threads in this process) or 'ray' (Ray actors, so tools and
    search scale across machines; pip install 'agentrl-gym[ray]')."""
    env_workers: int | None = None
    """With executor='ray': the number of env actors (default: the cluster's CPUs, at most 16)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)

    def __post_init__(self):
        # Nested sections may be given as dicts (TrainConfig(grpo={"beta": 0.04})); make them dataclasses.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            if isinstance(value, dict) and dataclasses.is_dataclass(default):
                setattr(self, f.name, config_from_dict(type(default), value))

    def validate(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        if self.executor not in ("local", "ray"):
            raise ValueError(f"executor must be 'local' or 'ray', got {self.executor!r}")
        if self.steps < 0 or self.tasks_per_step < 1 or self.group_size < 1:
            raise ValueError("steps must be >= 0, tasks_per_step and group_size >= 1")
        if self.algo in ("grpo", "ppo", "dpo") and self.group_size < 2:
            raise ValueError(f"{self.algo} compares samples within a group: group_size must be >= 2")
        a = self.asynchronous
        if a.enabled:
            if self.algo == "sft":
                raise ValueError("asynchronous training overlaps rollouts with updates; sft has no rollouts")
            if a.staleness not in ("drop", "tis"):
                raise ValueError(f"asynchronous.staleness must be 'drop' or 'tis', got {a.staleness!r}")
            if a.staleness == "tis" and self.algo not in ("grpo", "ppo"):
                raise ValueError("asynchronous.staleness='tis' corrects per-token policy-gradient losses "
                                 f"(grpo, ppo); use 'drop' with {self.algo}")
            if a.queue_size < 1 or a.max_staleness < 0 or a.tis_cap <= 0:
                raise ValueError("asynchronous: queue_size must be >= 1, max_staleness >= 0, tis_cap > 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return config_from_dict(cls, d)


def config_from_dict(cls, d: dict[str, Any], base=None):
    """Build dataclass ``cls`` from a (nested) dict; unknown keys are an error naming the valid ones.

    Keys not in ``d`` keep their values in ``base`` (default ``cls()``), nested configs included: a partial
    ``{"grpo": {"beta": 0.04}}`` changes beta and keeps the rest of the parent's own default ``grpo``."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(d) - set(names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; valid: {sorted(names)}")
    base = cls() if base is None else base
    kwargs = {}
    for k, v in d.items():
        current = getattr(base, k)
        nested = dataclasses.is_dataclass(current) and isinstance(v, dict)
        kwargs[k] = config_from_dict(type(current), v, base=current) if nested else v
    return dataclasses.replace(base, **kwargs)


def make_algorithm(config: TrainConfig):
    return {"grpo": lambda: GRPO(config.grpo), "ppo": lambda: PPO(config.ppo), "dpo": lambda: DPO(config.dpo),
            "sft": lambda: SFT(config.sft)}[config.algo]()


# ---------------------------------------------------------------------------------------------- data


class TaskSource:
    """Task ``k`` of a run as a pure function of ``(seed, k)``: the data position is just ``k``.

    With ``rows`` (a dataset), positions walk through a fresh seeded permutation each epoch. Otherwise the
    env's own sampler draws task ``k`` with ``np.random.default_rng([seed, k])`` (for ToolUse-v0 that is the
    seeded train-split generator, restricted to ``env_kwargs["families"]`` when given).
    """

    def __init__(self, env: str, env_kwargs: dict[str, Any] | None = None, *, seed: int = 0,
                 rows: list[dict[str, Any]] | None = None):
        self.seed = seed
        self.rows = rows
        self._env = None
        if rows is None:
            import gymnasium as gym

            import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids

            self._env = gym.make(env, **(env_kwargs or {})).unwrapped
            if not hasattr(self._env, "sample_task"):
                raise TypeError(f"{env} has no sample_task(rng); pass a task dataset (tasks=file.jsonl)")

    @property
    def env(self):
        return self._env

    def task(self, k: int) -> dict[str, Any]:
        if self.rows is not None:
            n = len(self.rows)
            perm = np.random.default_rng([self.seed, k // n]).permutation(n)
            return self.rows[int(perm[k % n])]
        return self._env.sample_task(np.random.default_rng([self.seed, k]))

    def take(self, start: int, n: int) -> list[dict[str, Any]]:
        return [self.task(k) for k in range(start, start + n)]


def _rollout_seed(config: TrainConfig, step: int) -> int:
    return int(np.random.SeedSequence([config.seed, config.collector.seed, step]).generate_state(1)[0] % (2**31))


# ---------------------------------------------------------------------------------------------- checkpoints


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or ``None``."""
    ckdir = Path(run_dir) / CHECKPOINTS
    pointer = ckdir / LATEST
    if pointer.is_file():
        path = ckdir / pointer.read_text().strip()
        if (path / "state.pt").is_file():
            return path
    done = sorted(p for p in ckdir.glob("step-*") if (p / "state.pt").is_file() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- trainer


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
        self.run_dir = Path(config.out)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        if model is None:
            from agentrl.algos.models import load_model

            model, loaded_tok = load_model(config.model, dtype=config.dtype, device=config.device)
            tokenizer = tokenizer or loaded_tok
        if tokenizer is None:
            from agentrl.algos.models import load_tokenizer

            tokenizer = load_tokenizer(config.model)
        self.tokenizer = tokenizer
        if not hasattr(model, "peft_config"):
            model = load_adapter(model, config.adapter, trainable=True) if config.adapter else apply_lora(model, config.lora)
        self.model = model
        self.model.eval()
        self.device = next(model.parameters()).device
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters (a PEFT model loaded without is_trainable?)")
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay)
        self.algo = make_algorithm(config)
        self.step = 0
        self.data_pos = 0
        rows = None
        if config.tasks:
            from agentrl.envs.datasets import load_rows

            rows = load_rows(config.tasks, ())
        self.tasks = TaskSource(config.env, config.env_kwargs, seed=config.seed, rows=rows)
        self._sft_cache: dict[int, tuple[list[int], list[int]]] = {}
        self._conversations = load_conversations(config.sft.data) if config.algo == "sft" and config.sft.data else None
        if resume:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is None:
                logger.warning("--resume: no checkpoint in %s; starting from step 0", self.run_dir)
            else:
                self.load_checkpoint(ckpt)
        _write_text_atomic(self.run_dir / "config.json", json.dumps(config.to_dict(), indent=2, default=str) + "\n")
        self.policy = policy
        if self.algo.needs_rollouts:
            if self.policy is None:
                from agentrl.algos.policy import HFPolicy

                self.policy = HFPolicy(self.model, self.tokenizer)
            self.policy.update_weights(self.model)
            from agentrl.algos.ray_workers import make_env_factory

            # What collect() gets as its env: the id itself (local threads) or a pool of Ray env actors.
            self.rollout_env = make_env_factory(config.executor, config.env, config.env_kwargs,
                                                tokenizer=self.tokenizer, num_workers=config.env_workers)
        self._logger = None
        self.history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ the loop
    def train(self) -> list[dict[str, Any]]:
        """Run until ``config.steps``; returns the metrics of the steps run here (also in metrics.jsonl)."""
        from tqdm.auto import tqdm

        from agentrl.algos.metrics import MetricsLogger

        cfg = self.config
        self._logger = MetricsLogger(self.run_dir, tensorboard=cfg.tensorboard)
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"{cfg.algo} {cfg.env}", disable=not cfg.progress,
                   unit="step", dynamic_ncols=True)
        try:
            while self.step < cfg.steps:
                metrics = self.train_step()
                self._logger.log(self.step, metrics)
                self.history.append(metrics)
                bar.update(1)
                bar.set_postfix(_postfix(metrics), refresh=False)
                if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                    self.save_checkpoint()
        finally:
            bar.close()
            self._logger.close()
            if getattr(self, "_collector", None) is not None:
                self._collector.close()
                self._collector = None
            if hasattr(getattr(self, "rollout_env", None), "close"):
                self.rollout_env.close()  # Ray env actors
        save_adapter(self.model, self.run_dir / "adapter")
        return self.history

    def train_step(self) -> dict[str, Any]:
        """One logical step: data -> (rollout) -> update -> sampler refresh. Returns the step's metrics."""
        cfg = self.config
        t_step = time.perf_counter()
        metrics: dict[str, Any] = {}
        if self.algo.needs_rollouts:
            from agentrl.algos.collector import Collector

            tasks = self.tasks.take(self.data_pos, cfg.tasks_per_step)
            collector_cfg = dataclasses.replace(cfg.collector, seed=_rollout_seed(cfg, self.step))
            if getattr(self, "_collector", None) is None:  # envs and env threads live for the whole run
                self._collector = Collector(self.policy, collector_cfg)
            self._collector.config = collector_cfg  # this step's rollout seed
            t0 = time.perf_counter()
            trajs = self._collector.collect(self.rollout_env, tasks, cfg.group_size, env_kwargs=cfg.env_kwargs)
            t_rollout = time.perf_counter() - t0
            self.data_pos += len(tasks)
            metrics.update(rollout_metrics(trajs, t_rollout))
            units, prep_stats = self.algo.prepare(trajs)
            temperature = self.rollout_temperature
        else:
            examples = [self._sft_example(k) for k in range(self.data_pos, self.data_pos + cfg.sft.batch_size)]
            self.data_pos += cfg.sft.batch_size
            units, prep_stats = self.algo.prepare(examples)
            temperature = 1.0
        return self.learn(units, prep_stats, temperature, metrics, t_step)

    @property
    def rollout_temperature(self) -> float:
        """The temperature rollout logprobs were recorded at (greedy rollouts record temperature-1 logprobs)."""
        return self.config.collector.temperature or 1.0

    def learn(self, units, prep_stats: dict[str, Any], temperature: float, metrics: dict[str, Any],
              t_step: float) -> dict[str, Any]:
        """The update half of a step (shared with the asynchronous trainer): :meth:`update` on prepared
        ``units``, then the step counter, data position and timings (``t_step``: when the step began) go into
        ``metrics``, which is returned."""
        metrics.update({f"train/{k}": v for k, v in prep_stats.items()})
        t0 = time.perf_counter()
        metrics.update(self.update(units, temperature))
        metrics["time/train"] = time.perf_counter() - t0
        metrics["perf/tokens_per_s"] = metrics["train/real_tokens"] / metrics["time/train"] if metrics["time/train"] else 0.0
        self.step += 1
        metrics["train/data_position"] = self.data_pos
        metrics["time/step"] = time.perf_counter() - t_step
        metrics.update(process_memory())
        return metrics

    def _lr(self) -> float:
        w = self.config.warmup_steps
        return self.config.lr * (min(1.0, (self.step + 1) / w) if w > 0 else 1.0)

    def update(self, units, temperature: float) -> dict[str, Any]:
        """``algo.epochs`` optimizer steps over ``units`` (lists of rows kept in one micro-batch)."""
        cfg = self.config
        out: dict[str, Any] = {"train/loss_tokens": 0, "train/padded_tokens": 0, "train/real_tokens": 0,
                               "train/optimizer_steps": 0, "train/lr": self._lr()}
        if not units:
            logger.info("step %d: nothing to train on (every group had zero advantage); no optimizer step",
                        self.step)
            return out
        for g in self.optimizer.param_groups:
            g["lr"] = out["train/lr"]
        lengths = [max(len(it) for it in u) for u in units]
        bins = pack_microbatches(lengths, cfg.micro_batch_tokens, [len(u) for u in units])
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        sums: dict[str, float] = defaultdict(float)
        maxes: dict[str, float] = {}
        counts: dict[str, float] = defaultdict(float)
        losses, grad_norms = [], []
        gap_sum = gap_n = 0.0
        gap_max = 0.0
        ent_sum = ent_n = 0.0
        self.model.train()
        try:
            for epoch in range(self.algo.epochs):
                self.optimizer.zero_grad(set_to_none=True)
                epoch_loss = 0.0
                for b in bins:
                    rows = [it for i in b for it in units[i]]
                    batch = collate(rows, pad_id, self.device)
                    lp, ent = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"],
                                             temperature=temperature, chunk_size=cfg.logprob_chunk,
                                             return_entropy=True, positions=batch["loss_mask"])
                    ref = None
                    if self.algo.needs_reference:
                        with torch.no_grad(), self.model.disable_adapter():
                            ref = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"],
                                                 temperature=temperature, chunk_size=cfg.logprob_chunk,
                                                 positions=batch["loss_mask"])
                    loss, stats = self.algo.loss(lp, ref, batch)
                    loss.backward()
                    epoch_loss += loss.item()
                    m = batch["loss_mask"] > 0
                    n_tok = int(m.sum())
                    ent_sum += float(ent[m].sum())
                    ent_n += n_tok
                    if epoch == 0 and self.algo.needs_rollouts:
                        gap = (lp.detach() - batch["old_logprobs"]).abs()[m]
                        if gap.numel():
                            gap_sum += float(gap.sum())
                            gap_n += gap.numel()
                            gap_max = max(gap_max, float(gap.max()))
                    if epoch == 0:
                        out["train/padded_tokens"] += batch["input_ids"].numel()
                        out["train/real_tokens"] += int(batch["attention_mask"].sum())
                    w = stats.get("loss_tokens", n_tok)
                    for k, v in stats.items():
                        if k in ("loss_tokens", "pairs"):
                            if epoch == 0:
                                sums[k] += v
                        elif k.endswith("_max"):
                            maxes[k] = max(maxes.get(k, float("-inf")), v)
                        else:
                            sums[k] += v * w
                            counts[k] += w
                grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                if self.policy is not None:
                    self.policy.update_weights(self.model)
                losses.append(epoch_loss)
                grad_norms.append(float(grad_norm))
                out["train/optimizer_steps"] += 1
        finally:
            self.model.eval()
        out["train/loss"] = float(np.mean(losses))
        out["train/grad_norm"] = float(np.mean(grad_norms))
        out["train/entropy"] = ent_sum / ent_n if ent_n else 0.0
        if gap_n:
            out["train/logprob_gap"] = gap_sum / gap_n
            out["train/logprob_gap_max"] = gap_max
        for k, v in sums.items():
            out[f"train/{k}"] = v / counts[k] if k in counts else v
        out.update({f"train/{k}": v for k, v in maxes.items()})
        return out

    # ------------------------------------------------------------------ SFT data
    def _sft_example(self, k: int) -> tuple[list[int], list[int]]:
        """Demonstration ``k mod num_demos`` rendered to ``(token_ids, loss_mask)`` (cached)."""
        from agentrl.algos.chat import ChatFormat

        n = len(self._conversations) if self._conversations is not None else self.config.sft.num_demos
        i = k % n
        if i not in self._sft_cache:
            fmt = getattr(self, "_chat_format", None) or ChatFormat(self.tokenizer)
            self._chat_format = fmt
            if self._conversations is not None:
                conv = self._conversations[i]
            else:
                conv = self._demo(i)
            self._sft_cache[i] = render_conversation(fmt, conv["messages"], conv.get("tools"))
        return self._sft_cache[i]

    def _demo(self, i: int) -> dict[str, Any]:
        env = self.tasks.env
        if env is None or not hasattr(env, "demo"):
            raise ValueError(f"{self.config.env} cannot produce demonstrations; pass sft.data=conversations.jsonl")
        # Scan forward from task i for one with a known solution (deterministic: the same i, the same demo).
        for k in range(i, i + 1000 * self.config.sft.num_demos, self.config.sft.num_demos):
            demo = env.demo(self.tasks.task(k))
            if demo is not None and demo.get("correct", True):
                return demo
        raise ValueError(f"{self.config.env} produced no correct demonstration; pass sft.data=conversations.jsonl")

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically and point ``checkpoints/latest`` at it."""
        ckdir = self.run_dir / CHECKPOINTS
        ckdir.mkdir(parents=True, exist_ok=True)
        name = f"step-{self.step:06d}"
        final, tmp = ckdir / name, ckdir / (name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        self.model.save_pretrained(str(tmp / "adapter"))
        torch.save({
            "step": self.step,
            "data_position": self.data_pos,
            "trainable": trainable_state_dict(self.model),
            "optimizer": self.optimizer.state_dict(),
            "rng": _rng_state(),
            "config": json.loads(json.dumps(self.config.to_dict(), default=str)),
        }, tmp / "state.pt")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_text_atomic(ckdir / LATEST, name)
        old = sorted(p for p in ckdir.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))
        for p in old[: max(0, len(old) - max(1, self.config.keep_checkpoints))]:
            shutil.rmtree(p, ignore_errors=True)
        logger.info("checkpoint %s (data position %d)", final, self.data_pos)
        return final

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore adapter, optimizer, RNG states, step and data position from a checkpoint folder."""
        state = torch.load(Path(path) / "state.pt", map_location=self.device, weights_only=False)
        load_trainable_state_dict(self.model, state["trainable"])
        self.optimizer.load_state_dict(state["optimizer"])
        _set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.data_pos = int(state["data_position"])
        logger.info("resumed from %s: step %d, data position %d", path, self.step, self.data_pos)


def rollout_metrics(trajectories, seconds: float) -> dict[str, Any]:
    """A rollout batch's metrics: :func:`~agentrl.algos.metrics.aggregate_rollout_metrics` plus ``time/rollout``
    (``seconds``), ``time/env`` (tool latency summed over turns) and ``perf/rollout_tokens_per_s``."""
    from agentrl.algos.metrics import aggregate_rollout_metrics

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
    return out


def train(config: TrainConfig, *, resume: bool = False, **kwargs) -> Trainer:
    """Build a :class:`Trainer` for ``config`` (an :class:`~agentrl.algos.async_trainer.AsyncTrainer` when
    ``config.asynchronous.enabled``), run it to ``config.steps`` and return it."""
    if config.asynchronous.enabled:
        from agentrl.algos.async_trainer import AsyncTrainer

        trainer = AsyncTrainer(config, resume=resume, **kwargs)
        trainer.train()
        return trainer
    trainer = Trainer(config, resume=resume, **kwargs)
    trainer.train()
    return trainer
