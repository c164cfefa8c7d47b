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
``benchmarks/coldstart_probe.py`` before any held-out evaluation (docs/results/archive/tooluse_coldstart.md at
commit 6e899db): after this cold start a temperature-1 sample reproduces a correct solution with log P >= -1.2 in
eight of nine families (only the three-call ``stock_total`` stays near -6), while 8 steps left the two-call chain
``add_multiply`` at -4 (GRPO then traded it away) and a cold start on one family left the other families'
solutions at ~1e-4.
Rewards of wrong answers (0) and format errors (-0.1) differ by little, so GRPO runs without dividing by the
group's reward std (Dr. GRPO's advantage; full Dr. GRPO also divides by a constant length, aggregation
seq_mean_token_sum_norm, where the main job keeps token_mean): a group's format-only differences do not get the
same weight as a correct answer.

Run directory::

    <out>/eval/{base,sft,rl}.jsonl (+ .summary.json)    the held-out episodes and their reports
    <out>/sft/  <out>/grpo/                             each stage's metrics.jsonl, checkpoints, adapter
    <out>/plots/                                        training_curves.png (reward, format rate and loss per
                                                        step of both stages) beside eval_comparison.png
    <out>/results.md                                    the table (its Signal column: the share of the GRPO
                                                        stage's groups whose rewards differ) and the signal line

With ``resume=True`` finished stages are not redone (their reports / adapters are read back) and a killed
GRPO stage continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentrl.algos.config import config_from_dict, config_to_dict, deep_merge
from agentrl.algos.objectives import algorithm_class, algorithm_names
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.algos.training.checkpoint import latest_checkpoint
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.sampler import signal_summary
from agentrl.algos.training.tasks import test_tasks
from agentrl.algos.training.trainer import Trainer

__all__ = ["STAGE_DIRS", "MainJobConfig", "MainJobStages", "eval_collector", "eval_task_list", "peak_rss_gib",
           "run_main_job", "signal_share", "stage_config", "with_signal_column"]

logger = logging.getLogger(__name__)

#: Each stage's folder in the run directory.
STAGE_DIRS = {"sft": "sft", "rl": "grpo"}


def _sft_stage() -> dict[str, Any]:
    return {"algo": "sft", "steps": 16, "lr": 5e-4, "save_every": 0, "sft": {"batch_size": 8, "num_demos": 32}}


#: The GRPO stage's task families on AgentRL/ToolUse-v0 (when neither ``env_kwargs`` nor ``stages.rl.env_kwargs``
#: names families): those whose pass rate at this job's cold start sits in the 10-90 % band on a committed
#: train-split sample, every default family but ``stock_total`` (3 %; docs/sampler.md, issue 59).
RL_FAMILIES = ("multiply", "add", "power", "stock", "convert", "days", "stock_value", "add_multiply")
_TOOLUSE = "AgentRL/ToolUse-v0"


def _rl_stage() -> dict[str, Any]:
    return {"algo": "grpo", "steps": 16, "lr": 6e-5, "tasks_per_step": 8, "group_size": 8, "save_every": 4,
            "collector": {"max_turns": 4, "max_new_tokens": 96}, "grpo": {"scale_std": False},
            "sampler": {"enabled": True, "budget": 1.0}}


@dataclass
class MainJobStages:
    """Each stage's TrainConfig keys over the main job's own (the base); a stage given in a file or as
    ``stages.rl.lr=2e-5`` is merged key by key over that stage's defaults, ``env_kwargs`` included."""

    sft: dict[str, Any] = field(default_factory=_sft_stage)
    """The SFT cold start: 16 steps of 8 of 32 demonstrations (sft.num_demos) at lr 5e-4, only the last
    checkpoint kept; env_kwargs.families: the task families of its demonstrations (default: all)."""
    rl: dict[str, Any] = field(default_factory=_rl_stage)
    """GRPO with the task sampler on (docs/sampler.md: learnability weights and GRESO skip; budget 1, no refill, so
    a step rolls out as many groups as without it); on ToolUse-v0 on the eight families whose pass rate at the cold
    start sits in 10-90 % (all but stock_total; RL_FAMILIES) unless env_kwargs.families names others; 16 steps of 8
    tasks x 8 samples: Dr. GRPO's advantage (rewards centred per group, not divided by their std; the token-mean
    loss, not Dr. GRPO's constant length); lr 6e-5 chosen on the train split over three seeds
    (docs/algorithms/grpo.md#the-learning-rate; 2e-4 undid the cold start in 3 of 3). Its collector (a reply of at
    most 96 tokens, 4 turns) samples every evaluation too, at eval_temperature."""

    def __post_init__(self):
        for name, default in (("sft", _sft_stage()), ("rl", _rl_stage())):
            stage = deep_merge(default, getattr(self, name), whole=())
            config_from_dict(TrainConfig, stage, _prefix=f"stages.{name}.")  # each key and value checked now
            setattr(self, name, stage)


@dataclass
class MainJobConfig(TrainConfig):
    """The main job's settings (defaults: SmolLM2-135M on a 2-core CPU in 20-25 minutes): a TrainConfig, the
    base of both stages (``model=``, ``env_kwargs=``, ``lora.r=``, ``seed=``: every stage's), the evaluations'
    keys and each stage's own keys over the base (``stages.rl.lr=2e-5``)."""

    out: str = "runs/main"
    """Run directory: each stage trains in a folder of it (sft/, grpo/); eval/, plots/, results.md."""
    memory_budget_gb: float | Literal["auto"] = 1.5
    """Both stages' GiB an update may grow the RSS by; sizes the micro-batches (a larger budget: fewer, larger
    micro-batches, less time per step, more memory; 'auto': from the memory free when each stage starts, as in
    TrainConfig). 1.5 kept the main job under 4 GiB peak RSS on its ~800-token rows in earlier measurements
    (docs/results/archive/README.md at commit 6e899db: not results)."""
    eval_tasks: int = 32
    """Test-split tasks per evaluation (not used with eval_tasks_file)."""
    eval_tasks_file: str | None = None
    """JSONL of the held-out tasks (every row; e.g. benchmarks/heldout/tooluse.jsonl, fixed before tuning) instead
    of the env's first eval_tasks test tasks."""
    eval_n: int = 1
    """Samples per held-out task (the N of Average@N / Pass@N)."""
    eval_temperature: float = 0.0
    """Sampling temperature of the evaluations (0 = greedy: the table is deterministic)."""
    stages: MainJobStages = field(default_factory=MainJobStages)

    def __post_init__(self):
        super().__post_init__()
        default = TrainConfig()
        for key in sorted(set(self.stages.sft) & set(self.stages.rl)):  # a base key no stage would read
            if key in default.__dataclass_fields__ and getattr(self, key) != getattr(default, key):
                raise ValueError(f"{key}: both stages set their own (stages.sft.{key}, stages.rl.{key}); "
                                 f"set it there")


def stage_config(cfg: MainJobConfig, stage: str, out: str | Path, **changes) -> TrainConfig:
    """Stage ``stage``'s ('sft' or 'rl') TrainConfig, training in ``out``: the main job's TrainConfig keys, the
    stage's keys merged over them key by key (``env_kwargs`` too), then ``changes`` (TrainConfig keys, e.g.
    ``algo="ppo"``, ``adapter=...``; a dict is merged likewise). A stage whose algorithm samples rollouts does so
    with ``collector.seed = seed`` unless the stage or ``changes`` set ``collector.seed``. On ToolUse-v0 the RL stage
    draws from :data:`RL_FAMILIES` unless the base, the stage or ``changes`` name ``env_kwargs.families``."""
    if stage not in STAGE_DIRS:
        raise ValueError(f"stage must be one of {tuple(STAGE_DIRS)}, got {stage!r}")
    own = {f.name for f in dataclasses.fields(MainJobConfig)} - {f.name for f in dataclasses.fields(TrainConfig)}
    base = {k: v for k, v in config_to_dict(cfg).items() if k not in own}
    overrides = deep_merge(getattr(cfg.stages, stage), changes, whole=())
    d = deep_merge(base, overrides, whole=())
    d["out"] = str(out)
    if stage == "rl" and d["env"] == _TOOLUSE and "families" not in (d.get("env_kwargs") or {}):
        d["env_kwargs"] = {**(d.get("env_kwargs") or {}), "families": list(RL_FAMILIES)}  # the edge (issue 59)
    collector = overrides.get("collector", {})
    if (d["algo"] in algorithm_names() and algorithm_class(d["algo"]).needs_rollouts
            and isinstance(d["collector"], dict) and not (isinstance(collector, dict) and "seed" in collector)):
        d["collector"] = {**d["collector"], "seed": d["seed"]}
    return TrainConfig.from_dict(d)


def eval_collector(cfg: MainJobConfig) -> CollectorConfig:
    """The rollout settings of every evaluation: the RL stage's collector at ``eval_temperature``."""
    rollout = stage_config(cfg, "rl", Path(cfg.out) / STAGE_DIRS["rl"]).collector
    return dataclasses.replace(rollout, temperature=cfg.eval_temperature)


def eval_task_list(cfg: MainJobConfig) -> list[dict[str, Any]]:
    """The held-out tasks of every evaluation: all rows of ``eval_tasks_file``, else the env's first
    ``eval_tasks`` test tasks."""
    if cfg.eval_tasks_file:
        from agentrl.envs.datasets import load_rows

        if not Path(cfg.eval_tasks_file).is_file():
            raise ValueError(f"eval_tasks_file: {cfg.eval_tasks_file} does not exist")
        return load_rows(cfg.eval_tasks_file, (), name="eval_tasks_file")
    return test_tasks(cfg.env, cfg.eval_tasks, cfg.env_kwargs, seed=cfg.seed)


def signal_share(history: list[dict[str, Any]]) -> float | None:
    """The share of a stage's sampled groups whose rewards differ, over all its steps (``signal/groups_with_signal``
    over ``signal/groups``, docs/sampler.md); None when no step logged them (an SFT stage)."""
    steps = [m for m in history if "signal/groups" in m]
    groups = sum(m["signal/groups"] for m in steps)
    return sum(m["signal/groups_with_signal"] for m in steps) / groups if groups else None


def with_signal_column(table: str, signal: dict[str, float | None], rows: int) -> str:
    """``table`` (a :func:`~agentrl.algos.evaluation.report.results_table` of ``rows`` rows) with a last column
    "Signal": ``signal[label]`` as a percentage for the rows whose label it names, "–" for the others."""
    lines = table.split("\n")
    lines[0] += " Signal |"
    lines[1] += "---:|"
    for i in range(2, 2 + rows):
        label = lines[i].split("|")[1].strip()
        share = signal.get(label)
        lines[i] += f" {share:.0%} |" if share is not None else " – |"
    return "\n".join(lines)


def peak_rss_gib() -> float | None:
    """This process's peak resident memory in GiB (the trainer's ``perf/peak_rss_gib``); None where there is none."""
    from agentrl.algos.evaluation.process_memory import process_memory

    return process_memory().get("perf/peak_rss_gib")



def write_results(out: Path, cfg: MainJobConfig, tasks: int, table: str, summary: str | None,
                  timings: dict[str, float]) -> tuple[str, float | None]:
    """Write the main job's ``<out>/results.md`` (the table, the signal line, the stages' times and the peak RSS);
    returns the times as printed and the peak RSS in GiB (None where it cannot be read)."""
    times = ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items())
    peak = peak_rss_gib()
    if peak is not None:
        times += f"; peak RSS {peak:.2f} GiB"
    source = f" from {cfg.eval_tasks_file}" if cfg.eval_tasks_file else ""
    (out / "results.md").write_text(
        f"# {cfg.env} with {cfg.model}: base -> SFT -> RL\n\n"
        f"{tasks} held-out tasks{source}, N = {cfg.eval_n}, temperature {cfg.eval_temperature}.\n\n"
        f"{table}\n\nSignal: the share of the GRPO stage's sampled groups whose rewards differ (docs/sampler.md).\n"
        + (f"\n{summary}\n" if summary else "") + f"\nTime: {times}.\n", encoding="utf-8")
    return times, peak


def run_main_job(config: MainJobConfig | None = None, *, resume: bool = False, policy=None,
                 ledger: str | Path | None = None) -> dict[str, Any]:
    """Run the main job; returns ``{"rows": [(label, EvalReport), ...], "table": markdown, "out": Path,
    "plots", "timings", "peak_rss_gib", "signal_summary"}`` (``peak_rss_gib``: the process's VmHWM at the end, GiB,
    or None; ``signal_summary``: the GRPO stage's signal line, :func:`~agentrl.algos.training.sampler.signal_summary`,
    None without ``signal/*`` metrics). The table's last column is the GRPO stage's signal share.

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
    from agentrl.algos.evaluation.run_log import read_metrics
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
                          max_batch_tokens=cfg.policy_max_batch_tokens, compile_decode=cfg.policy_compile)
    tasks = eval_task_list(cfg)
    eval_cfg = eval_collector(cfg)
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

    sft_cfg = stage_config(cfg, "sft", out / "sft")
    t0 = time.perf_counter()
    sft = Trainer(sft_cfg, model=model, tokenizer=tokenizer, resume=resume)
    if sft.global_step < sft_cfg.steps:
        sft.train()
    timings["sft"] = time.perf_counter() - t0
    policy.update_weights(model)
    rows.append(("sft", run_eval("sft", out / "sft" / "adapter")))

    rl_cfg = stage_config(cfg, "rl", out / "grpo")
    t0 = time.perf_counter()
    # The GRPO stage continues the SFT adapter in place; on resume, its own checkpoint (if any) wins.
    rl = Trainer(rl_cfg, model=model, tokenizer=tokenizer, policy=policy,
                 resume=resume and latest_checkpoint(out / "grpo") is not None)
    if rl.global_step < rl_cfg.steps:
        rl.train()
    timings["rl"] = time.perf_counter() - t0
    policy.update_weights(model)
    rows.append(("rl", run_eval("rl", out / "grpo" / "adapter")))

    # the GRPO stage's learning signal over all its steps (a resumed stage's too: read from its metrics.jsonl)
    rl_history = read_metrics(out / "grpo") if (out / "grpo" / "metrics.jsonl").is_file() else []
    table = with_signal_column(results_table(rows), {"rl": signal_share(rl_history)}, len(rows))
    summary = signal_summary(rl_history, sampler_on=rl_cfg.sampler.enabled, from_adapter=True)  # the stage starts
    # from the cold start's adapter; the line agentrl train ends with (docs/sampler.md)
    plots = plot_run(out / "sft") + plot_run(out / "grpo")
    plots.append(plot_eval(rows, out / "plots" / "eval_comparison.png", title=f"{cfg.env}: base -> SFT -> RL"))
    curves = plot_stages([("SFT", out / "sft"), ("GRPO", out / "grpo")], out / "plots" / "training_curves.png",
                         title=f"{cfg.env}: SFT cold start, then GRPO   (faint: raw, bold: smoothed)")
    if curves is not None:
        plots.append(curves)
    timings["total"] = time.perf_counter() - t_start
    _, peak = write_results(out, cfg, len(tasks), table, summary, timings)
    return {"rows": rows, "table": table, "out": out, "plots": plots, "timings": timings, "peak_rss_gib": peak,
            "signal_summary": summary}
