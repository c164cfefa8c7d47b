"""The learning runner's controls: the SFT control (the cold start trained further for the GRPO stage's wall
time), the rejection-sampling control (:class:`RejectionSampling`: SFT on the policy's own correct samples) and
the text-only baseline, each evaluated in process or on a client of the run's server; and reusing another run's
cold start."""

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


def eval_config(cfg):
    from agentrl.algos.recipes.main_job import eval_collector

    return eval_collector(cfg)  # exactly the pipeline's evaluation settings (pipeline.run_main_job: eval_cfg)


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


def run_sft_control(cfg, out: Path, seconds: float, tasks: list[dict], policy=None, ledger: Path | None = None):
    """The cold-start adapter trained further with SFT for ``seconds``; then evaluated, in process or
    (``policy``: the run's server policy, ``--engine``) on a new client of that server. Its TrainConfig is the
    cold start's (``main_job.stage_config(cfg, "sft", ...)``: the same demos, lr, batch, dtype and memory budget
    as every stage of the run), so that "the same time" buys the control what it would buy the cold start's SFT."""
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.ledger import adapter_sha256
    from agentrl.algos.evaluation.plot import plot_run
    from agentrl.algos.evaluation.report import load_report
    from agentrl.algos.evaluation.run_log import MetricsLogger
    from agentrl.algos.models import load_model
    from agentrl.algos.models.lora import save_adapter
    from agentrl.algos.policy.hf import HFPolicy
    from agentrl.algos.recipes.main_job import stage_config
    from agentrl.algos.training.trainer import Trainer

    eval_path = out / "eval" / "sft_control.jsonl"
    if eval_path.with_suffix(".summary.json").is_file():
        return load_report(eval_path), None
    run_dir = out / "sft_control"
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
    sampler = server_client(policy)
    if sampler is None:
        sampler = HFPolicy(trainer.model, tokenizer, max_batch_tokens=cfg.policy_max_batch_tokens)
        sampler.update_weights(trainer.model)
    else:
        sampler.use_adapter(run_dir / "adapter")
    try:
        report = evaluate(cfg.env, sampler, tasks, cfg.eval_n, eval_config(cfg), env_kwargs=cfg.env_kwargs,
                          out=eval_path, progress=cfg.progress, ledger=ledger,
                          ledger_fields={"stage": "sft_control", "adapter": adapter_sha256(run_dir / "adapter")})
    finally:
        sampler.close()
    plot_run(run_dir)
    (run_dir / "control.json").write_text(json.dumps({"seconds": spent, "steps": trainer.global_step}) + "\n")
    return report, {"seconds": spent, "steps": trainer.global_step}


def run_text_only(cfg, out: Path, tasks: list[dict], policy=None, ledger: Path | None = None):
    """The base model with the env's tools switched off (``tools_enabled=False``), in process or (``policy``)
    on a new client of the run's server."""
    from agentrl.algos.evaluation.evaluate import evaluate
    from agentrl.algos.evaluation.report import load_report
    from agentrl.algos.models import load_model
    from agentrl.algos.policy.hf import HFPolicy

    path = out / "eval" / "text_only.jsonl"
    if path.with_suffix(".summary.json").is_file():
        return load_report(path)
    sampler = server_client(policy)
    if sampler is None:
        model, tokenizer = load_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
        sampler = HFPolicy(model, tokenizer, max_batch_tokens=cfg.policy_max_batch_tokens)
    try:
        return evaluate(cfg.env, sampler, tasks, cfg.eval_n, eval_config(cfg), env_kwargs=cfg.env_kwargs, out=path,
                        progress=cfg.progress, text_only=True, ledger=ledger,
                        ledger_fields={"stage": "text_only", "adapter": "base"})
    finally:
        sampler.close()


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
