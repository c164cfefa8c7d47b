"""The settings of a training run: :class:`TrainConfig` (``agentrl train``'s keys) and :class:`AsyncConfig`.

The algorithm's own keys are one section, ``TrainConfig.algorithm``, of the config class registered for ``algo``
(:data:`agentrl.algos.objectives.ALGORITHMS`), written under the algorithm's name (``--algo grpo grpo.beta=0.04``),
so an algorithm's keys are declared once, next to its loss, and one registered late is looked up the same way.
Importing this module imports no algorithm (and no torch): the section's class is looked up when a config is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.algos.config import config_from_dict, config_to_dict, nested_dicts_to_configs, tagged_section
from agentrl.algos.models import DEFAULT_MODEL
from agentrl.algos.models.lora import LoRAConfig
from agentrl.algos.objectives import algorithm_class, algorithm_names
from agentrl.algos.policy.base import DEFAULT_MAX_BATCH_TOKENS
from agentrl.algos.policy.engine_node import EngineConfig
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.rollout.env_factory import EXECUTORS
from agentrl.algos.training.sampler import SamplerConfig
from agentrl.algos.training.tasks import EnvComponent, parse_mixture


def algorithm_config_class(name: str) -> type:
    """The config class of the algorithm registered as ``name`` (its module is imported here, on first use)."""
    return algorithm_class(name).config_class


@dataclass
class AsyncConfig:
    """Decoupled rollout and training (``agentrl train --async``), run by
    :mod:`agentrl.algos.training.async_trainer`."""

    enabled: bool = False
    """Overlap rollouts with training: a producer thread samples the next batches while the trainer updates."""
    queue_size: int = 1
    """Rollout batches the producer may hold ahead of the trainer (queued or being collected); 1 = one-step
    off-policy (each batch is sampled by the weights one update behind those that train on it)."""
    max_staleness: int = 1
    """Trajectories sampled more than this many policy versions (weight updates) before the trainer's current
    weights are dropped ('drop') or importance-corrected ('tis')."""
    staleness: str = "drop"
    """'drop' or 'tis' (truncated importance sampling against the current weights, grpo/ppo only; the weight
    pi_current / pi_rollout is truncated at the algorithm's correction_cap, e.g. grpo.correction_cap)."""


@dataclass
class TrainConfig:
    """Everything a training run needs; ``agentrl train`` builds it from flags and ``key=value`` overrides."""

    env: str = "AgentRL/ToolUse-v0"
    """Environment id (registered by importing agentrl.envs)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for gymnasium.make (e.g. {"families": ["multiply"]} for ToolUse-v0)."""
    envs: list[dict[str, Any]] | dict[str, float] | str = field(default_factory=list)
    """A mixture of envs instead of env/env_kwargs: [{"id": "AgentRL/Search-v0", "weight": 2, "env_kwargs": {...},
    "name": ..., "after_steps": 0}, ...] (only id is required; after_steps > 0: the env joins the mix after that
    many steps, a curriculum); on the command line: --envs ToolUse-v0:2,Search-v0:1. Each task's env is drawn by
    weight; groups never mix envs; metrics are logged per env (docs/mixtures.md)."""
    algo: str = "grpo"
    """A registered algorithm: 'grpo', 'ppo', 'dpo', 'sft' (agentrl.algos.objectives.ALGORITHMS)."""
    algorithm: Any = tagged_section("algo", algorithm_names, algorithm_config_class)
    """The section of algo, of its registered config class (GRPOConfig for grpo), written under the algorithm's
    name: grpo.beta=0.04 on the command line, grpo: {beta: 0.04} in a file (a section of another algorithm is
    checked and not kept); in Python TrainConfig(algo="ppo", algorithm={"epochs": 2})."""
    model: str = DEFAULT_MODEL
    """Model alias, hub id or local path (the default is the embedded SmolLM2-135M-Instruct)."""
    dtype: str = "auto"
    """'auto' (bf16 where the hardware has bf16 units, else fp32), 'bf16' or 'fp32'."""
    device: str = "auto"
    """'auto' (CUDA when available, else CPU), 'cpu', 'cuda', 'cuda:1', ..."""
    attn_implementation: str | None = None
    """transformers' attention kernel ('sdpa', 'eager', 'flash_attention_2'); None lets transformers choose."""
    policy_shares_weights: bool = False
    """Sample through the trained model itself (adapter unmerged) instead of a merged copy: one copy of the
    base weights instead of two, slower decoding. Synchronous training only (refused with asynchronous.enabled:
    the producer would sample through the model while it is updated)."""
    policy_max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS
    """The in-process policy (HFPolicy) decodes at most this many tokens of context per batch (each prompt
    beyond the shared prefix plus its reply budget; ``HFPolicy(max_batch_tokens=...)``); None: all live
    trajectories at once."""
    policy_compile: Literal["off", "on", "auto"] = field(default="off", metadata={"omit_if": "off"})
    """torch.compile the in-process policy's decode steps (HFPolicy(compile_decode=...),
    agentrl.algos.policy._compiled_decode: the one-token forward over fixed-size, bucketed KV buffers, so shapes
    repeat, the cascade's shared prefix too; prefill stays eager): 'on', 'off', or 'auto' (on for a model on
    CUDA, eager on a CPU until measured faster there). Graphs compile on first use of a bucket; where compiling
    fails one line is logged and decoding runs eager. Tokens and logprobs are eager's up to rounding. Left out of
    written configs when 'off' (as they were before this key)."""
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
    micro_batch_tokens: int | Literal["auto"] = "auto"
    """Tokens held per forward/backward pass, packed first-fit-decreasing: the rows' common prompt prefix
    (the system prompt and tools) counted once (it is computed once per update), plus rows x (longest - prefix);
    'auto': as many as memory_budget_gb holds by the model's estimated activation bytes per token
    (agentrl.algos.training.memory_plan.activation_bytes_per_token), at most 2048 on a CPU (larger ones only pad)."""
    gradient_checkpointing: bool | Literal["auto"] = "auto"
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (transformers'
    activation checkpointing, non-reentrant; off while sampling). 'auto': on when a micro-batch would not fit
    memory_budget_gb without it (a fixed micro_batch_tokens) or would hold fewer than 2048 tokens on a CPU, 4096
    on a GPU ('auto'; memory_plan.CPU_MICRO_BATCH_CAP)."""
    memory_budget_gb: float | Literal["auto"] = 2.0
    """GiB by which one update may grow the process's peak RSS over what the weights, adapter and batch take
    (1 GiB of it is the part that does not scale with the micro-batch): sizes micro_batch_tokens='auto' and
    decides gradient_checkpointing='auto' (agentrl.algos.training.memory_plan.memory_plan). A target, not a
    bound: the process also keeps freed memory the allocator holds (see malloc_mmap_threshold_mb). 'auto': half
    of the memory free when the trainer starts (the host's available memory; a CUDA device's free memory) less
    what the optimizer and the in-process sampler (KV cache, merged weight copy) will still take, within
    [1, 16] GiB; the 2.0 default where it cannot be read (memory_plan.resolve_budget; the log line says what
    it chose and from what)."""
    malloc_mmap_threshold_mb: int | None = 8
    """glibc only (Linux): allocations of at least this many MiB are mmap-ed and given back to the OS when freed
    (mallopt M_MMAP_THRESHOLD, set once by the Trainer for the whole process), and the heap is trimmed
    (malloc_trim) before each update, after each micro-batch and after each step, so the rollout's and the
    update's freed transients do not stay in the process's RSS (smaller: less memory, slower steps). null leaves
    the allocator as it is; no effect where the C library is not glibc."""
    logprob_chunk: int = 256
    """Action-token positions per LM-head call when computing logprobs (bounds the logits memory)."""
    compile: Literal["off", "on", "auto"] = field(default="off", metadata={"omit_if": "off"})
    """torch.compile the update's passes (agentrl.algos.training.compiled: each decoder layer's MLP with its LoRA
    and its norms, inductor on CPU or CUDA; the attention stays eager): 'on', 'off', or 'auto' (on for a model on
    CUDA, eager on a CPU until measured faster there). Graphs compile on first use (time/compile in the step's
    metrics, apart from time/train's other seconds) and are reused by later steps; where compiling fails (no C++
    compiler, an unsupported op) one line is logged and the update runs eager. Results are eager's up to
    rounding. Left out of written configs when 'off' (as they were before this key)."""
    stop_without_signal: int = 3
    """Stop with an error (saying to train a cold start first) after this many consecutive RL steps in which no
    episode ended in a well-formed answer and every group was skipped (equal rewards: nothing to learn from);
    0 never stops. A model at 0% format on new tools or data learns nothing from RL alone."""
    save_every: int = 10
    """Checkpoint every N steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """Most recent checkpoints kept on disk."""
    seed: int = 0
    """Seeds task order, rollout sampling and initialisation."""
    tasks_file: str | None = None
    """JSONL of task rows to train on (default: the env's own sample_task); `agentrl eval --tasks-file` and
    the main job's eval_tasks_file name the same kind of file."""
    progress: bool = True
    """Show a progress bar."""
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers that get the run's config, metrics and plots: 'tensorboard', 'wandb', 'mlflow',
    'trackio' or 'none' (docs/trackers.md): the one switch of TensorBoard too (report_to=none: none)."""
    executor: str = "local"
    """Where env resets and steps run: 'local' (threads in this process) or 'ray' (Ray actors, so tools and
    search scale across machines; pip install ray)."""
    env_workers: int | None = None
    """With executor='ray': the number of env actors (default: the cluster's CPUs, at most 16)."""
    env_actor_options: dict[str, Any] | None = None
    """With executor='ray': Ray ``.options()`` of every env actor, i.e. where Ray places them (``num_cpus``,
    ``resources`` such as a custom ``{"envs": 1}`` only some nodes have, ``scheduling_strategy: SPREAD``)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self):
        nested_dicts_to_configs(self)

    def env_mixture(self) -> list[EnvComponent]:
        """The components of ``envs`` (:func:`~agentrl.algos.training.tasks.parse_mixture`); empty for a
        single-env run."""
        return parse_mixture(self.envs)

    def validate(self) -> None:
        names = algorithm_names()
        if self.algo not in names:
            raise ValueError(f"algo must be one of {tuple(names)}, got {self.algo!r}")
        algo = algorithm_class(self.algo)
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {tuple(EXECUTORS)}, got {self.executor!r}")
        if self.env_actor_options is not None:
            if not isinstance(self.env_actor_options, dict):
                raise ValueError("env_actor_options must be a mapping of Ray actor options (e.g. {\"num_cpus\": 1}), "
                                 f"got {self.env_actor_options!r}")
            if self.executor == "local":
                raise ValueError("env_actor_options places Ray env actors: set executor=ray too (the local executor "
                                 "runs the envs in this process)")
        self.engine.validate()
        if self.micro_batch_tokens != "auto" and self.micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1 or 'auto', got {self.micro_batch_tokens!r}")
        if self.malloc_mmap_threshold_mb is not None and (
                isinstance(self.malloc_mmap_threshold_mb, bool) or not isinstance(self.malloc_mmap_threshold_mb, int)
                or self.malloc_mmap_threshold_mb < 1):
            raise ValueError("malloc_mmap_threshold_mb must be a positive int (MiB) or null, "
                             f"got {self.malloc_mmap_threshold_mb!r}")
        budget = self.memory_budget_gb
        if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
            raise ValueError(f"memory_budget_gb must be > 0 (GiB) or 'auto', got {budget!r}")
        if self.policy_max_batch_tokens is not None and self.policy_max_batch_tokens < 1:
            raise ValueError(f"policy_max_batch_tokens must be >= 1 or null, "
                             f"got {self.policy_max_batch_tokens!r}")
        if self.compile not in ("off", "on", "auto"):
            raise ValueError(f"compile must be 'off', 'on' or 'auto', got {self.compile!r}")
        if self.policy_compile not in ("off", "on", "auto"):
            raise ValueError(f"policy_compile must be 'off', 'on' or 'auto', got {self.policy_compile!r}")
        if self.logprob_chunk < 1:
            raise ValueError(f"logprob_chunk must be >= 1, got {self.logprob_chunk!r}")
        if self.steps < 0 or self.tasks_per_step < 1 or self.group_size < 1:
            raise ValueError("steps must be >= 0, tasks_per_step and group_size >= 1")
        if self.group_size < algo.min_group_size:
            raise ValueError(f"{self.algo} compares samples within a group: group_size must be >= "
                             f"{algo.min_group_size}")
        algo_config = self.algorithm
        if getattr(algo_config, "guidance", None) == "relift":  # GRPO's ReLIFT term against its own
            from agentrl.algos.objectives.guidance import check_relift_balance

            check_relift_balance(algo_config, self.group_size, self.collector.max_new_tokens * self.collector.max_turns)
        if self.env_mixture() and self.tasks_file:
            raise ValueError("tasks_file= is for one env; a mixture (envs=) draws each env's own tasks")
        self.sampler.validate()
        if self.sampler.enabled:  # docs/sampler.md
            if not algo.needs_rollouts:
                raise ValueError(f"sampler.enabled chooses rollout tasks; {self.algo} has no rollouts")
            if self.asynchronous.enabled:
                raise ValueError("sampler.enabled runs in the synchronous trainer only; drop --async "
                                 "(asynchronous.enabled) or set sampler.enabled=false")
            if getattr(algo_config, "guidance", "none") != "none":
                raise ValueError(f"sampler.enabled trains only on groups with unequal rewards, but "
                                 f"{self.algo}.guidance acts on groups that no sample solved; set one of them off")
        a = self.asynchronous
        if a.enabled:
            if not algo.needs_rollouts:
                raise ValueError(f"asynchronous training overlaps rollouts with updates; {self.algo} has no rollouts")
            if a.staleness not in ("drop", "tis"):
                raise ValueError(f"asynchronous.staleness must be 'drop' or 'tis', got {a.staleness!r}")
            if a.staleness == "tis" and not algo.token_level:
                per_token = ", ".join(n for n in names if algorithm_class(n).token_level)
                raise ValueError(f"asynchronous.staleness='tis' corrects per-token policy-gradient losses "
                                 f"({per_token}); use 'drop' with {self.algo}")
            if a.staleness == "tis" and not hasattr(self.algorithm, "correction_cap"):
                raise ValueError(f"asynchronous.staleness='tis' truncates its weight at the algorithm's "
                                 f"correction_cap, which {self.algo}'s config lacks; use 'drop'")
            if a.queue_size < 1 or a.max_staleness < 0:
                raise ValueError("asynchronous: queue_size must be >= 1, max_staleness >= 0")
            if self.policy_shares_weights:
                raise ValueError("asynchronous training samples in a producer thread while the trainer "
                                 "updates the model, so policy_shares_weights=true would sample through "
                                 "weights being changed (and race the backward pass): set "
                                 "policy_shares_weights=false (the policy keeps its own merged copy, "
                                 "published after each step) or train synchronously (drop --async / "
                                 "asynchronous.enabled)")

    def to_dict(self) -> dict[str, Any]:
        """Every key as ``config.json`` holds it (the algorithm's section under its name: ``"grpo": {...}``)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Checked like any config (:func:`~agentrl.algos.config.config_from_dict`)."""
        return config_from_dict(cls, d)
