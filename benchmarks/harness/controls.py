"""The learning runs' controls: the SFT control's training (the cold start trained further for the GRPO stage's
wall time; evaluated as any piece of :mod:`harness.learning_exec`), the rejection-sampling control
(:class:`RejectionSampling`: SFT on the policy's own correct samples), a client of the run's server, and reusing
another run's cold start."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentrl.algos.objectives import register_algorithm
from agentrl.algos.objectives.base import Algorithm
from agentrl.algos.objectives.batching import TrainRow, token_weights

logger = logging.getLogger("learning")


@dataclass
class RejectionSamplingConfig:
    """The rejection-sampling control's settings (the rollout and optimizer settings are the run's, as GRPO's)."""

    keep: str = "correct"
    """Which samples it trains on: ``correct`` (the episode's answer was right), the only choice."""


class RejectionSampling(Algorithm):
    """The rejection-sampling control (rejection fine-tuning; Search-R1's and the f(g(x)) study's baseline):
    each step samples the same rollouts GRPO would (``tasks_per_step`` x ``group_size`` from the current
    policy), keeps the correct ones and takes one SFT step on their sampled tokens (token mean over the kept
    action tokens). Beside GRPO it separates "learning from on-policy data" from "learning from failures": it
    sees the same samples and never the wrong ones. A step where no sample is correct makes no update."""

    config_class = RejectionSamplingConfig

    def __init__(self, config: RejectionSamplingConfig | None = None):
        super().__init__(config)
        if self.config.keep != "correct":
            raise ValueError(f"rft.keep must be 'correct', got {self.config.keep!r}")

    def prepare(self, trajectories) -> tuple[list[list[TrainRow]], dict[str, float]]:
        kept = [t for t in trajectories if t.metrics.get("correct") and sum(t.loss_mask)]
        weights = token_weights([t.loss_mask for t in kept], "token_mean") if kept else []
        rows = [[TrainRow(list(t.token_ids), list(t.loss_mask), list(t.logprobs), w, meta={"index": i})]
                for i, (t, w) in enumerate(zip(kept, weights, strict=True))]
        return rows, {"kept_samples": float(len(kept)), "samples": float(len(trajectories))}

    def loss(self, logprobs, ref_logprobs, batch):
        from agentrl.algos.objectives.sft import sft_loss

        m = batch["weights"] > 0
        n = int(m.sum())
        return sft_loss(logprobs, batch["weights"]), {
            "loss_tokens": n, "nll": float(-logprobs.detach()[m].mean()) if n else 0.0}


#: The rejection-sampling control's algorithm name (``algo="rft"``, the ``rft.`` config section).
REJECTION_SAMPLING = "rft"


def register_rejection_sampling() -> None:
    """Register the control as algorithm :data:`REJECTION_SAMPLING` (once; importing the harness changes no
    registry)."""
    from agentrl.algos import objectives

    if REJECTION_SAMPLING not in objectives.ALGORITHMS:
        register_algorithm(REJECTION_SAMPLING, RejectionSampling)


@contextlib.contextmanager
def rejection_sampling_registered() -> Iterator[None]:
    """The control registered on a copy of the algorithm registry for the ``with`` block, the registry as it was
    after it: a comparison run in-process (a test) leaves no ``rft`` algorithm behind."""
    from agentrl.algos import objectives

    saved = objectives.ALGORITHMS
    objectives.ALGORITHMS = copy.deepcopy(saved)
    try:
        register_rejection_sampling()
        yield
    finally:
        objectives.ALGORITHMS = saved


def stage_seconds(run_dir: Path) -> float:
    """Wall time of a training stage: the sum of its steps' ``time/step`` (survives resumes)."""
    from agentrl.algos.evaluation.run_log import read_metrics

    return float(sum(r.get("time/step", 0.0) for r in read_metrics(run_dir)))


def server_client(policy):
    """A new client of ``policy``'s server (an :class:`~agentrl.algos.policy.OpenAIPolicy` with no adapter
    loaded: it samples the base model until told otherwise; closing it leaves the server running), or None for
    an in-process run (``policy`` None)."""
    if policy is None:
        return None
    from agentrl.algos.policy.openai import OpenAIPolicy

    return OpenAIPolicy.connect(policy.base_url, policy.tokenizer, model=policy.base_model_name,
                                lora_api=policy.lora_api)


def train_sft_control(cfg, out: Path, seconds: float) -> dict[str, float]:
    """The SFT control's training (a piece of :mod:`harness.learning_exec`; its evaluation is another): the
    cold-start adapter (``<out>/sft/adapter``) trained further with SFT for ``seconds`` (the GRPO stage's recorded
    time), into ``<out>/sft_control`` (``adapter``, ``metrics.jsonl``, plots, and ``control.json`` written last:
    ``{"seconds", "steps"}``). Its TrainConfig is the cold start's (``main_job.stage_config(cfg, "sft", ...)``: the
    same demos, lr, batch, dtype and memory budget as every stage of the run), so that "the same time" buys the
    control what it would buy the cold start's SFT; it continues the cold start's data position."""
    from agentrl.algos.evaluation.plot import plot_run
    from agentrl.algos.evaluation.run_log import MetricsLogger
    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import save_adapter
    from agentrl.algos.recipes.main_job import stage_config
    from agentrl.algos.training.trainer import Trainer

    run_dir = out / "sft_control"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a killed control: redo it whole (its clock restarted)
    model, tokenizer = load_model(cfg.model, dtype=cfg.dtype, device=cfg.device,
                                  attn_implementation=cfg.attn_implementation)
    cold = stage_config(cfg, "sft", out / "sft")
    tc = stage_config(cfg, "sft", run_dir, adapter=str(out / "sft" / "adapter"), steps=10**9, progress=False,
                      report_to=["none"])
    trainer = Trainer(tc, model=model, tokenizer=tokenizer)
    # The cold start already made its steps over the same demonstrations: continue the data position.
    trainer.data_pos = cold.steps * cold.algorithm.batch_size
    log = MetricsLogger(run_dir, report_to=["none"])
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            metrics = trainer.step()
            log.log(cold.steps + trainer.global_step, metrics)
            logger.info("sft control step %d (%.0f of %.0f s): loss %.4f", trainer.global_step,
                        time.perf_counter() - t0, seconds, metrics.get("train/loss", float("nan")))
    finally:
        log.close()
    spent = time.perf_counter() - t0
    save_adapter(trainer.model, run_dir / "adapter")
    plot_run(run_dir)
    info = {"seconds": spent, "steps": trainer.global_step}
    (run_dir / "control.json").write_text(json.dumps(info) + "\n")
    return info


#: What ``--reuse-cold-start`` copies: the base model's and the cold start's evaluations and the cold-start
#: stage (Search-v0's text-only baseline too: it does not depend on the recipe).
COLD_START_FILES = ("eval/base.jsonl", "eval/base.summary.json", "eval/sft.jsonl", "eval/sft.summary.json",
                    "eval/text_only.jsonl", "eval/text_only.summary.json", "sft")


def reuse_cold_start(source: Path, out: Path) -> list[str]:
    """Copy the stages before RL from the run directory ``source`` into ``out`` (what is already there is
    kept); returns what was copied. The run then reads them back instead of re-running them."""
    if not (source / "sft" / "adapter").is_dir() or not (source / "eval" / "sft.summary.json").is_file():
        raise SystemExit(f"--reuse-cold-start {source}: no finished cold start there (sft/adapter and "
                         "eval/sft.summary.json); run the plain recipe first")
    copied = []
    for rel in COLD_START_FILES:
        src, dst = source / rel, out / rel
        if not src.exists() or dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
        copied.append(rel)
    return copied
