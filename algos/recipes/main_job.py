"""The main job: base eval -> short SFT cold start -> GRPO -> eval, then a base -> SFT -> RL table and plots.

``agentrl main-job`` runs this with :class:`MainJobConfig`'s defaults,
sized for the embedded SmolLM2-135M on a 2-core CPU (20-25 minutes; see ``docs/algorithms/`` for the
measured budget). The stages share one model in memory: SFT trains a fresh LoRA adapter, GRPO keeps training
that same adapter, and every evaluation samples through one :class:`~agentrl.algos.policy.HFPolicy` refreshed
with the current weights.

Why a cold start: the 135M model's zero-shot valid tool-call rate is about 0, so every GRPO group would have
equal (invalid) rewards and nothing to learn from. Thirty-two demonstrations drawn from all nine task families
(16 SFT steps of 8, i.e. four passes) teach the call format, every tool and the multi-turn loop; GRPO on the full
mixture then sharpens what the cold start samples only sometimes. Chosen on the train split with
``benchmarks/coldstart_probe.py`` before any held-out evaluation (docs/results/archive/tooluse_coldstart.md at commit 6e899db):
after this cold start a temperature-1 sample reproduces a correct solution with log P >= -1.2 in eight of nine
families (only the three-call ``stock_total`` stays near -6), while 8 steps left the two-call chain
``add_multiply`` at -4 (GRPO then traded it away) and a cold start on one family left the other families'
solutions at ~1e-4.
Rewards of wrong answers (0) and format errors (-0.1) differ by little, so GRPO runs without dividing by the
group's reward std (Dr. GRPO): a group's format-only differences do not get the same weight as a correct answer.

Run directory::

    <out>/eval/{base,sft,rl}.jsonl (+ .summary.json)    the held-out episodes and their reports
    <out>/sft/  <out>/grpo/                             each stage's metrics.jsonl, checkpoints, adapter
    <out>/plots/                                        training_curves.png (reward, format rate and loss per
                                                        step of both stages) beside eval_comparison.png
    <out>/results.md                                    the table

With ``resume=True`` finished stages are not redone (their reports / adapters are read back) and a killed
GRPO stage continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.algos.models import DEFAULT_MODEL
from agentrl.algos.models.lora import LoRAConfig
from agentrl.algos.objectives.grpo import GRPOConfig
from agentrl.algos.objectives.sft import SFTConfig
from agentrl.algos.policy.base import DEFAULT_MAX_BATCH_TOKENS
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.tasks import test_tasks
from agentrl.algos.training.trainer import Trainer

__all__ = ["MainJobConfig", "eval_task_list", "peak_rss_gib", "rl_train_config", "run_main_job",
           "sft_train_config"]

logger = logging.getLogger(__name__)


@dataclass
class MainJobConfig:
    """The main job's settings (defaults: SmolLM2-135M on a 2-core CPU in 20-25 minutes)."""

    env: str = "AgentRL/ToolUse-v0"
    """Environment id; it must provide demonstrations (env.demo) and test tasks (env.test_tasks)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the environment in every stage."""
    model: str = DEFAULT_MODEL
    """Model alias, hub id or local path."""
    dtype: str = "auto"
    """'auto' (bf16 where the hardware has bf16 units, else fp32), 'bf16' or 'fp32'."""
    device: str = "auto"
    """Torch device: 'auto' (CUDA when available, else CPU), 'cpu', 'cuda', 'cuda:1', ..."""
    attn_implementation: str | None = None
    """transformers' attention kernel ('sdpa', 'eager', 'flash_attention_2'); None lets transformers choose."""
    policy_shares_weights: bool = False
    """Sample through the trained model itself (adapter unmerged) instead of a merged copy: one copy of
    the base weights in memory instead of two, at the cost of the LoRA matmuls in every decode step."""
    policy_max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS
    """The in-process policy (HFPolicy: rollouts and evaluations) decodes at most this many tokens of context
    per batch (each prompt beyond the shared prefix plus its reply budget); None: all at once."""
    out: str = "runs/main"
    """Run directory."""
    seed: int = 0
    """Seed of every stage."""
    eval_tasks: int = 32
    """Test-split tasks per evaluation (not used with eval_tasks_file)."""
    eval_tasks_file: str | None = None
    """JSONL of the held-out tasks (every row; e.g. benchmarks/heldout/tooluse.jsonl, fixed before tuning) instead
    of the env's first eval_tasks test tasks."""
    eval_n: int = 1
    """Samples per held-out task (the N of Average@N / Pass@N)."""
    eval_temperature: float = 0.0
    """Sampling temperature of the evaluations (0 = greedy: the table is deterministic)."""
    sft_families: list[str] = field(default_factory=list)
    """Task families of the cold-start demonstrations (ToolUse-v0 families; [] = all)."""
    sft_demos: int = 32
    """Distinct demonstrations of the cold start."""
    sft_steps: int = 16
    """SFT optimizer steps (of sft_batch_size demonstrations each)."""
    sft_batch_size: int = 8
    """Demonstrations per SFT step."""
    sft_lr: float = 5e-4
    """SFT learning rate."""
    rl_steps: int = 16
    """GRPO optimizer steps on all of the env's task families."""
    rl_tasks_per_step: int = 8
    """Tasks per GRPO step."""
    rl_group_size: int = 8
    """Samples per task (the GRPO group)."""
    rl_lr: float = 6e-5
    """GRPO learning rate: chosen on the train split over three seeds (docs/algorithms/grpo.md#the-learning-rate;
    2e-4 undid the cold start in 3 of 3)."""
    max_new_tokens: int = 96
    """Token budget of one assistant reply (rollouts and evaluations)."""
    max_turns: int = 4
    """Assistant turns per episode (rollouts and evaluations)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    memory_budget_gb: float = 1.5
    """Both stages' TrainConfig.memory_budget_gb: GiB an update may grow the RSS by; sizes the micro-batches (a
    larger budget: fewer, larger micro-batches, less time per step, more memory). 1.5 kept the main job under
    4 GiB peak RSS on its ~800-token rows in earlier measurements (docs/results/archive/README.md at commit 6e899db: not results)."""
    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(scale_std=False))
    """GRPO settings (the main job: Dr. GRPO, rewards centred per group but not divided by their std)."""
    progress: bool = True
    """Show progress bars."""
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers of the SFT and GRPO stages (one tracker run each, named 'sft' and 'grpo'):
    'tensorboard', 'wandb', 'mlflow', 'trackio' or 'none' (docs/trackers.md)."""


def eval_task_list(cfg: MainJobConfig) -> list[dict[str, Any]]:
    """The held-out tasks of every evaluation: all rows of ``eval_tasks_file``, else the env's first
    ``eval_tasks`` test tasks."""
    if cfg.eval_tasks_file:
        from agentrl.envs.datasets import load_rows

        if not Path(cfg.eval_tasks_file).is_file():
            raise ValueError(f"eval_tasks_file: {cfg.eval_tasks_file} does not exist")
        return load_rows(cfg.eval_tasks_file, (), name="eval_tasks_file")
    return test_tasks(cfg.env, cfg.eval_tasks, cfg.env_kwargs, seed=cfg.seed)


def peak_rss_gib() -> float | None:
    """This process's peak resident memory in GiB (the trainer's ``perf/peak_rss_gib``); None where there is none."""
    from agentrl.algos.evaluation.process_memory import process_memory

    return process_memory().get("perf/peak_rss_gib")


def _common(cfg: MainJobConfig) -> dict[str, Any]:
    return dict(env=cfg.env, model=cfg.model, dtype=cfg.dtype, device=cfg.device, seed=cfg.seed,
                progress=cfg.progress, lora=cfg.lora, report_to=list(cfg.report_to),
                attn_implementation=cfg.attn_implementation, policy_shares_weights=cfg.policy_shares_weights,
                policy_max_batch_tokens=cfg.policy_max_batch_tokens, memory_budget_gb=cfg.memory_budget_gb)


def sft_train_config(cfg: MainJobConfig, out: str | Path, **changes) -> TrainConfig:
    """The cold-start stage's TrainConfig (SFT on ``sft_demos`` demonstrations of ``sft_families``); ``changes``
    replace fields (e.g. ``steps``, ``seed``, ``adapter``)."""
    tc = TrainConfig(
        **_common(cfg), algo="sft", out=str(out), steps=cfg.sft_steps, lr=cfg.sft_lr, save_every=0,
        env_kwargs={**cfg.env_kwargs, **({"families": list(cfg.sft_families)} if cfg.sft_families else {})},
        sft=SFTConfig(batch_size=cfg.sft_batch_size, num_demos=cfg.sft_demos))
    return dataclasses.replace(tc, **changes)


def rl_train_config(cfg: MainJobConfig, out: str | Path, **changes) -> TrainConfig:
    """The RL stage's TrainConfig (GRPO on all of the env's task families with the main job's rollout settings);
    ``changes`` replace fields (e.g. ``algo="ppo"``, ``steps``, ``seed``)."""
    tc = TrainConfig(
        **_common(cfg), algo="grpo", out=str(out), steps=cfg.rl_steps, lr=cfg.rl_lr, env_kwargs=cfg.env_kwargs,
        tasks_per_step=cfg.rl_tasks_per_step, group_size=cfg.rl_group_size, save_every=4,
        collector=CollectorConfig(max_turns=cfg.max_turns, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed),
        grpo=cfg.grpo)
    return dataclasses.replace(tc, **changes)


def run_main_job(config: MainJobConfig | None = None, *, resume: bool = False, policy=None,
                 ledger: str | Path | None = None) -> dict[str, Any]:
    """Run the main job; returns ``{"rows": [(label, EvalReport), ...], "table": markdown, "out": Path,
    "plots", "timings", "peak_rss_gib"}`` (``peak_rss_gib``: the process's VmHWM at the end, GiB, or None).

    ``policy``: the sampling backend of every evaluation and rollout (e.g. an
    :class:`~agentrl.algos.policy.OpenAIPolicy` of a vLLM server); default an in-process
    :class:`~agentrl.algos.policy.HFPolicy` over the trained model. ``ledger``: a ledger file every evaluation
    on a fixed set appends a row to (:mod:`~agentrl.algos.evaluation.ledger`; the sets' files lie beside it),
    its row naming the stage and the adapter; None records nothing."""
    import time

    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.ledger import adapter_sha256, git_state
    from agentrl.algos.evaluation.plot import plot_eval, plot_run, plot_stages
    from agentrl.algos.evaluation.report import load_report, results_table
    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import apply_lora
    from agentrl.algos.policy.hf import HFPolicy

    cfg = config or MainJobConfig()
    if ledger is not None:
        git_state(Path(ledger).parent)  # the commit the ledger's rows name: the one this job starts from
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    model, tokenizer = load_model(cfg.model, dtype=cfg.dtype, device=cfg.device,
                                  attn_implementation=cfg.attn_implementation)
    model = apply_lora(model, cfg.lora)  # a zero-initialised adapter: the base model's function until SFT
    if policy is None:
        policy = HFPolicy(model, tokenizer, share_weights=cfg.policy_shares_weights,
                          max_batch_tokens=cfg.policy_max_batch_tokens)
    tasks = eval_task_list(cfg)
    rollout = CollectorConfig(max_turns=cfg.max_turns, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    eval_cfg = dataclasses.replace(rollout, temperature=cfg.eval_temperature)
    timings: dict[str, float] = {}

    def run_eval(label: str, adapter: Path | None = None):
        path = out / "eval" / f"{label}.jsonl"
        if resume and path.with_suffix(".summary.json").is_file():
            return load_report(path)
        t0 = time.perf_counter()
        # the ledger row names the stage and the adapter it evaluated ("base": none trained yet)
        fields = {"stage": label, "adapter": adapter_sha256(adapter) if adapter is not None and adapter.is_dir()
                  else "base" if adapter is None else None}
        report = evaluate(cfg.env, policy, tasks, cfg.eval_n, eval_cfg, env_kwargs=cfg.env_kwargs, out=path,
                          progress=cfg.progress, ledger=ledger, ledger_fields=fields)
        timings[f"eval_{label}"] = time.perf_counter() - t0
        logger.info("%s: %s", label, report.to_dict())
        return report

    rows = [("base", run_eval("base"))]

    sft_cfg = sft_train_config(cfg, out / "sft")
    t0 = time.perf_counter()
    sft = Trainer(sft_cfg, model=model, tokenizer=tokenizer, resume=resume)
    if sft.global_step < sft_cfg.steps:
        sft.train()
    timings["sft"] = time.perf_counter() - t0
    policy.update_weights(model)
    rows.append(("sft", run_eval("sft", out / "sft" / "adapter")))

    rl_cfg = rl_train_config(cfg, out / "grpo", collector=rollout)
    t0 = time.perf_counter()
    # The GRPO stage continues the SFT adapter in place; on resume, its own checkpoint (if any) wins.
    rl = Trainer(rl_cfg, model=model, tokenizer=tokenizer, policy=policy,
                 resume=resume and latest_checkpoint(out / "grpo") is not None)
    if rl.global_step < rl_cfg.steps:
        rl.train()
    timings["rl"] = time.perf_counter() - t0
    policy.update_weights(model)
    rows.append(("rl", run_eval("rl", out / "grpo" / "adapter")))

    table = results_table(rows)
    plots = plot_run(out / "sft") + plot_run(out / "grpo")
    plots.append(plot_eval(rows, out / "plots" / "eval_comparison.png", title=f"{cfg.env}: base -> SFT -> RL"))
    curves = plot_stages([("SFT", out / "sft"), ("GRPO", out / "grpo")], out / "plots" / "training_curves.png",
                         title=f"{cfg.env}: SFT cold start, then GRPO   (faint: raw, bold: smoothed)")
    if curves is not None:
        plots.append(curves)
    timings["total"] = time.perf_counter() - t_start
    times = ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items())
    peak = peak_rss_gib()
    if peak is not None:
        times += f"; peak RSS {peak:.2f} GiB"
    source = f" from {cfg.eval_tasks_file}" if cfg.eval_tasks_file else ""
    (out / "results.md").write_text(
        f"# {cfg.env} with {cfg.model}: base -> SFT -> RL\n\n"
        f"{len(tasks)} held-out tasks{source}, N = {cfg.eval_n}, temperature {cfg.eval_temperature}.\n\n"
        f"{table}\n\nTime: {times}.\n", encoding="utf-8")
    return {"rows": rows, "table": table, "out": out, "plots": plots, "timings": timings, "peak_rss_gib": peak}
