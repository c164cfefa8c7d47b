"""The algorithms side by side on ToolUse-v0: GRPO, PPO (clip-higher), online DPO and SFT-continued, from ONE cold start.

``--algos`` also takes options of an algorithm as rows of their own (``OPTIONS``): ``grpo_turns`` is GRPO with the
turn-level (GiGPO-style) step advantage, ``grpo.step_weight=1``; ``grpo_lr6e-5`` and ``grpo_lr2e-5`` are GRPO at
lower learning rates; ``grpo_guided`` and ``grpo_relift`` are GRPO with demonstration guidance (``grpo.guidance=demos``,
LUFFY; ``grpo.guidance=sft``, ReLIFT); the page compares each with plain GRPO too.

Every run starts from the same cold-start adapter (the main job's SFT stage: made once in ``<out>/cold_start``, or
an existing one given with ``--cold-start``), trains for the SAME wall time (``Trainer.step()`` in a loop
until ``--minutes`` of training are spent; evaluation time is not counted) and is evaluated greedily on the same
fixed held-out set (``benchmarks/heldout/tooluse_v3.jsonl``, fixed before any tuning; trained with its
``env_kwargs``, ``items=999``) at a few points of its budget
(``--eval-points``, fractions of it; the cold start itself is the point at 0). Each algorithm runs once per seed
(``--seeds 0,1``); the page gives the mean and the spread (min..max) over seeds, says for each algorithm whether
it beat the cold start, and shows the metrics that explain a miss: groups with equal rewards (no signal), skipped
groups, optimizer steps, clip fractions (PPO), KL, DPO pairs and preference accuracy.

Settings shared by all runs are the main job's (``MainJobConfig``; ``key=value`` overrides, e.g.
``rl_group_size=4``; ``ppo.eps_high=0.3`` / ``dpo.beta=0.2`` set those algorithms' sections). GRPO is the main
job's Dr. GRPO; PPO uses its default clip-higher range [0.8, 1.28] and two epochs per rollout batch
(``SECTION_DEFAULTS``; with one it would optimise Dr. GRPO's objective); online DPO pairs the best and worst halves of
each group against the cold-start reference; SFT-continued trains on the demonstrations of the cold start (seed
``s`` draws the demonstrations of seed ``s``; seed 0's are the cold start's own, continued from where it stopped).

Resumable: a finished run (``<out>/<algo>-s<seed>/result.json``), the cold start and its evaluation are read back;
a run killed part-way is redone from its start (its time budget would not be comparable otherwise). ``<out>``
remembers its settings (``setup.json``) and refuses an invocation with other ones; more algorithms or seeds may
be added to it.

Writes ``<out>/compare.json`` (every figure, the command, the commit, times, machine, peak RSS), the page
``docs/results/learning_compare_algorithms[_quick].md`` and its two plots in
``docs/results/compare_algorithms[_quick]/`` (held-out success against training wall time; rollout reward against
step), and copies the results page's raw data to ``docs/results/data/compare_algorithms[_quick]/`` (``compare.json``,
per-task scores and each run's metrics; commit it, then ``python benchmarks/learning.py --page``, which redraws the
plots, this page and the section from that data). A run takes about algorithms x seeds x (--minutes + set-up and
evaluations) plus the cold start: the committed ``--minutes 15 --seeds 0 --eval-points 1`` took 77.3 min for its
four algorithms on a 2-core CPU without bf16 units (fp32; its page has the machine): the cold start's 16 SFT steps
14.4 min, an evaluation of the 128 tasks about a minute, a GRPO step 6-8.5 min, PPO's two-epoch step 13.4 min, a
DPO step 3-5 min, an SFT step under a minute; there a budget of minutes holds few RL steps. A CPU with AMX runs
several times faster.

    python benchmarks/compare_algorithms.py                          # 4 algorithms x 2 seeds, 10 min each
    python benchmarks/compare_algorithms.py --minutes 20 --seeds 0,1,2
    python benchmarks/compare_algorithms.py --cold-start runs/main  # reuse a main-job run's SFT adapter
    python benchmarks/compare_algorithms.py --quick                  # CI-sized (a smoke test, not a result)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import gc
import hashlib
import json
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = ROOT / "docs" / "results"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # heldout, run_all: sibling scripts

ENV = "AgentRL/ToolUse-v0"
ALGOS = ("grpo", "ppo", "dpo", "sft")
#: Options of an algorithm compared as rows of their own (``--algos grpo_turns``): name -> (the algorithm, changes
#: to its run's TrainConfig on top of the main job's (``grpo.<key>``: a field of its GRPO section), the label).
#: ``grpo_turns``: GiGPO's step-level advantage with its paper's weight, 1 (docs/algorithms/grpo.md, "Turn-level
#: credit"). ``grpo_lr6e-5`` / ``grpo_lr2e-5``: the main job's GRPO at a lower learning rate than its ``rl_lr`` of
#: 2e-4 (a diagnostic of the collapse after one update at 2e-4 on a CPU without bf16: Adam's first step moves every
#: LoRA weight by about ``lr``). ``grpo_guided`` / ``grpo_relift``: the env's demonstration of each group no sample
#: solved, inside the group (LUFFY) or as an NLL term beside it (ReLIFT), at the main job's settings
#: (docs/algorithms/grpo.md, "Demonstration guidance").
OPTIONS = {"grpo_turns": ("grpo", {"grpo.step_weight": 1.0}, "GRPO + turn-level credit (step_weight=1)"),
           "grpo_lr6e-5": ("grpo", {"lr": 6e-5}, "GRPO, lr 6e-5"),
           "grpo_lr2e-5": ("grpo", {"lr": 2e-5}, "GRPO, lr 2e-5"),
           "grpo_guided": ("grpo", {"grpo.guidance": "demos"}, "GRPO + demonstrations in unsolved groups (LUFFY)"),
           "grpo_relift": ("grpo", {"grpo.guidance": "sft"}, "GRPO + SFT on unsolved groups (ReLIFT)")}
LABELS = {"grpo": "GRPO (Dr. GRPO)", "ppo": "PPO (clip-higher)", "dpo": "online DPO", "sft": "SFT-continued",
          **{name: label for name, (_, _, label) in OPTIONS.items()}}
#: --quick: CI-sized settings (MainJobConfig keys) and budgets.
QUICK = {"sft_demos": 8, "sft_steps": 2, "sft_batch_size": 4, "rl_tasks_per_step": 2, "rl_group_size": 4,
         "max_new_tokens": 32, "max_turns": 2}
QUICK_TASKS = 4
#: Section settings every run starts from (the command line's ``ppo.*`` / ``dpo.*`` come after and win). PPO runs
#: two epochs over each rollout batch: with one, its group-mean surrogate is the main job's Dr. GRPO objective and
#: the comparison would show one algorithm twice (docs/results/archive/learning_compare_ppo_epochs2.md).
SECTION_DEFAULTS = {"ppo": ["epochs=2"], "dpo": []}
#: Per-step metrics whose run means the page shows (when an algorithm logs them), with their labels.
DIAGNOSTICS = {
    "rollout/degenerate_group_rate": "equal-reward groups", "train/step_anchor_turns": "turns sharing a state", "train/skipped_groups": "skipped groups/step",
    "train/optimizer_steps": "optimizer steps/step", "train/clip_frac_high": "clip frac high",
    "train/clip_frac_low": "clip frac low", "train/kl": "KL", "train/pairs": "DPO pairs/step",
    "train/dpo_accuracy": "DPO accuracy", "train/guided_groups": "groups given a demonstration/step",
    "train/demo_prob_mean": "demonstration token probability", "rollout/tool_calls": "tool calls/episode",
    "train/loss": "loss",
}

logger = logging.getLogger("compare_algorithms")


def parse_fractions(text: str) -> list[float]:
    """``"0.5,1"`` -> ``[0.5, 1.0]``: sorted fractions in (0, 1], always ending with 1 (the end of the budget)."""
    try:
        points = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--eval-points: expected fractions like 0.5,1, got {text!r}") from None
    if not points or points[0] <= 0 or points[-1] > 1:
        raise ValueError(f"--eval-points: fractions must lie in (0, 1], got {text!r}")
    return points if points[-1] == 1 else [*points, 1.0]


def split_overrides(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """MainJobConfig overrides, and those of the ``ppo`` / ``dpo`` sections (``ppo.eps_high=0.3``)."""
    pipeline, sections = [], {k: list(v) for k, v in SECTION_DEFAULTS.items()}
    for item in overrides:
        head = item.split(".", 1)[0]
        if head in sections and "=" in item:
            sections[head].append(item.split(".", 1)[1])
        else:
            pipeline.append(item)
    return pipeline, sections


def resolve_cold_start(path: str) -> Path:
    """The adapter folder of ``--cold-start``: the folder itself, its ``adapter/`` or a main-job run's ``sft/adapter``."""
    p = Path(path)
    for candidate in (p, p / "adapter", p / "sft" / "adapter"):
        if (candidate / "adapter_config.json").is_file():
            return candidate
    raise ValueError(f"--cold-start: no adapter (adapter_config.json) in {p}, {p / 'adapter'} or {p / 'sft/adapter'}")


def by_family(episodes: Path, n: int) -> dict[str, float]:
    """Average@N per task family of saved eval episodes."""
    from agentrl.algos.evaluation.report import summarize
    from agentrl.algos.rollout.trajectory import load_trajectories

    return summarize(load_trajectories(episodes), n, source_key="family").em_by_source


def summarize_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Run means of :data:`DIAGNOSTICS` and the first/last rollout reward (only the keys the run logged)."""
    out = {}
    for key in DIAGNOSTICS:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = statistics.fmean(values)
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    if rewards:
        k = max(1, len(rewards) // 4)
        out["reward_first_quarter"] = statistics.fmean(rewards[:k])
        out["reward_last_quarter"] = statistics.fmean(rewards[-k:])
    return out


def check_setup(out: Path, setup: dict[str, Any]) -> None:
    """Record the settings every run of ``out`` shares in ``<out>/setup.json``; refuse to mix runs made with
    other settings (finished runs are read back, so they must be comparable). Algorithms and seeds may be added."""
    path = out / "setup.json"
    setup = json.loads(json.dumps(setup, default=str))
    if path.is_file():
        old = json.loads(path.read_text())
        changed = sorted(k for k in set(old) | set(setup) if old.get(k) != setup.get(k))
        if changed:
            raise SystemExit(f"{out} holds runs made with other settings ({', '.join(changed)} differ); "
                             "use another --out, or the same settings")
    else:
        path.write_text(json.dumps(setup, indent=1) + "\n")


class Runner:
    """Holds the base model once; makes the cold start, evaluates, and runs one (algorithm, seed)."""

    def __init__(self, cfg, out: Path, tasks: list[dict[str, Any]], sections: dict[str, list[str]]):
        from agentrl.algos.models import load_model

        self.cfg, self.out, self.tasks = cfg, out, tasks
        self.sections = sections
        self.base, self.tokenizer = load_model(cfg.model, dtype=cfg.dtype, device=cfg.device,
                                               attn_implementation=cfg.attn_implementation)

    def eval_config(self):
        from agentrl.algos.rollout.collector import CollectorConfig

        c = self.cfg
        return CollectorConfig(max_turns=c.max_turns, max_new_tokens=c.max_new_tokens, seed=c.seed,
                               temperature=c.eval_temperature)

    def evaluate(self, policy, path: Path):
        from agentrl.algos.evaluation.evaluate import evaluate
        from agentrl.algos.evaluation.report import load_report

        if path.with_suffix(".summary.json").is_file():
            return load_report(path)
        return evaluate(self.cfg.env, policy, self.tasks, self.cfg.eval_n, self.eval_config(),
                        env_kwargs=self.cfg.env_kwargs, out=path, progress=self.cfg.progress)

    def cold_start(self, given: str | None) -> tuple[Path, dict[str, Any]]:
        """The shared cold-start adapter (made once in ``<out>/cold_start`` unless ``given``) and its provenance."""
        from agentrl.algos.recipes.main_job import sft_train_config
        from agentrl.algos.training.trainer import Trainer

        if given:
            return resolve_cold_start(given), {"source": str(given), "seconds": None}
        run_dir = self.out / "cold_start"
        info_path = run_dir / "cold_start.json"
        if (run_dir / "adapter" / "adapter_config.json").is_file() and info_path.is_file():
            return run_dir / "adapter", json.loads(info_path.read_text())
        t0 = time.perf_counter()
        tc = sft_train_config(self.cfg, run_dir, progress=False, report_to=["none"], tensorboard=False)
        Trainer(tc, model=copy.deepcopy(self.base), tokenizer=self.tokenizer).train()
        info = {"source": f"made here: the main job's SFT stage ({self.cfg.sft_steps} steps of "
                          f"{self.cfg.sft_batch_size} on {self.cfg.sft_demos} demos of "
                          f"{', '.join(self.cfg.sft_families) or 'all families'})",
                "seconds": time.perf_counter() - t0}
        info_path.write_text(json.dumps(info) + "\n")
        return run_dir / "adapter", info

    def eval_cold_start(self, adapter: Path):
        from agentrl.algos.models.lora import load_adapter
        from agentrl.algos.policy.hf import HFPolicy

        path = self.out / "eval" / "cold_start.jsonl"
        if path.with_suffix(".summary.json").is_file():
            return self.evaluate(None, path)
        model = load_adapter(copy.deepcopy(self.base), adapter)
        report = self.evaluate(HFPolicy(model, self.tokenizer), path)
        del model
        gc.collect()
        return report

    def train_config(self, algo: str, seed: int, adapter: Path, run_dir: Path):
        from agentrl.algos.config import apply_overrides, config_from_dict
        from agentrl.algos.objectives.dpo import DPOConfig
        from agentrl.algos.objectives.ppo import PPOConfig
        from agentrl.algos.recipes.main_job import rl_train_config, sft_train_config

        common = dict(seed=seed, adapter=str(adapter), steps=10**9, save_every=0, progress=False,
                      report_to=["none"], tensorboard=False)
        if algo == "sft":
            return sft_train_config(self.cfg, run_dir, **common)
        ppo = config_from_dict(PPOConfig, apply_overrides({}, self.sections["ppo"]), _prefix="ppo.")
        dpo = config_from_dict(DPOConfig, apply_overrides({}, self.sections["dpo"]), _prefix="dpo.")
        grpo, changes = self.cfg.grpo, {}
        if algo in OPTIONS:
            algo, settings, _ = OPTIONS[algo]
            grpo = dataclasses.replace(grpo, **{k[5:]: v for k, v in settings.items() if k.startswith("grpo.")})
            changes = {k: v for k, v in settings.items() if not k.startswith("grpo.")}
        return rl_train_config(self.cfg, run_dir, algo=algo, ppo=ppo, dpo=dpo, grpo=grpo, **{**common, **changes})

    def run(self, algo: str, seed: int, adapter: Path, seconds: float, fractions: list[float],
            max_steps: int | None) -> dict[str, Any]:
        """One (algorithm, seed): train for ``seconds`` of wall time, evaluating at each fraction of it."""
        from agentrl.algos.evaluation.ledger import git_state
        from agentrl.algos.evaluation.run_log import MetricsLogger, read_metrics
        from agentrl.algos.models.lora import save_adapter
        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.training.trainer import Trainer

        run_dir = self.out / f"{algo}-s{seed}"
        done = run_dir / "result.json"
        if done.is_file():
            result = json.loads(done.read_text())
            return result if "commit" in result else {**result, **ledger_commit(run_dir, result)}
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a killed run: redo it whole (its clock restarted)
        trainer = Trainer(self.train_config(algo, seed, adapter, run_dir), model=copy.deepcopy(self.base),
                          tokenizer=self.tokenizer)
        if algo == "sft" and seed == self.cfg.seed:
            trainer.data_pos = self.cfg.sft_steps * self.cfg.sft_batch_size  # continue the cold start's demos
        policy = trainer.policy or HFPolicy(trainer.model, self.tokenizer)
        log = MetricsLogger(run_dir, tensorboard=False, report_to=["none"])
        points, clock, pending = [], 0.0, list(fractions)
        try:
            while pending:
                if takes_step(clock, trainer.global_step, pending[0] * seconds, max_steps):
                    t0 = time.perf_counter()
                    metrics = trainer.step()
                    clock += time.perf_counter() - t0
                    log.log(trainer.global_step, metrics)
                    logger.info("%s seed %d step %d: %.0f of %.0f s", algo, seed, trainer.global_step, clock, seconds)
                    continue
                frac = pending.pop(0)
                policy.update_weights(trainer.model)
                episodes = run_dir / "eval" / f"at-{frac:g}.jsonl"
                report = self.evaluate(policy, episodes)
                points.append({"fraction": frac, "train_seconds": clock, "step": trainer.global_step,
                               "average_at_n": report.average_at_n, "pass_at_n": report.pass_at_n})
        finally:
            log.close()
            collector = getattr(trainer, "_collector", None)
            if collector is not None:
                collector.close()
        save_adapter(trainer.model, run_dir / "adapter")
        result = {"algo": algo, "seed": seed, **git_state(), "steps": trainer.global_step, "train_seconds": clock,
                  "points": points,
                  "final": report.to_dict(),
                  "final_by_family": by_family(episodes, self.cfg.eval_n), "diagnostics": summarize_metrics(read_metrics(run_dir))}
        done.write_text(json.dumps(result, indent=1) + "\n")
        del trainer, policy
        gc.collect()
        return result


def ledger_commit(run_dir: Path, result: dict[str, Any]) -> dict[str, Any]:
    """``{"commit", "dirty", "commit_from"}`` of a finished run whose ``result.json`` predates runs recording their
    commit: those of the ledger row of its final evaluation (the same episodes file and score; the last such row),
    or ``{}`` when the ledger has none."""
    from agentrl.algos.evaluation.ledger import read

    episodes = (run_dir / "eval" / f"at-{result['points'][-1]['fraction']:g}.jsonl").resolve()
    rows = [row for row in read() if row.get("out") and Path(row["out"]).resolve() == episodes
            and row["scores"].get("average_at_n") == result["final"]["average_at_n"]]
    if not rows:
        return {}
    return {"commit": rows[-1]["commit"], "dirty": rows[-1].get("dirty", False),
            "commit_from": f"ledger row {rows[-1]['id']} (its final evaluation)"}


def takes_step(clock: float, steps: int, budget: float, max_steps: int | None) -> bool:
    """Whether a run with ``steps`` steps in ``clock`` seconds takes one more within ``budget`` seconds: the first
    step always; another while the budget's end is nearer the next step's expected end than its start (``clock``
    plus half the mean step time is below the budget). Runs so end at the step count whose time is nearest the
    budget, over or under by at most about half a step, where "start while time is left" let the last step
    overrun by up to a whole one (half the budget, with two steps in it)."""
    if max_steps is not None and steps >= max_steps:
        return False
    return steps == 0 or clock + 0.5 * clock / steps < budget


def aggregate(cold: float, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean / min / max final held-out success over seeds, per-seed deltas and mean diagnostics. ``beat``: every
    seed ended above the cold start (a mean above it with one seed below is within the seed-to-seed spread)."""
    finals = [r["final"]["average_at_n"] for r in results]
    diag: dict[str, float] = {}
    for key in {k for r in results for k in r["diagnostics"]}:
        values = [r["diagnostics"][key] for r in results if key in r["diagnostics"]]
        diag[key] = statistics.fmean(values)
    mean = statistics.fmean(finals)
    fams = sorted({f for r in results for f in r.get("final_by_family", {})})
    family = {f: statistics.fmean(r["final_by_family"].get(f, 0.0) for r in results) for f in fams}
    return {"mean": mean, "min": min(finals), "max": max(finals), "by_family": family,
            "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "seeds_above": sum(f > cold for f in finals), "seeds": len(finals), "beat": min(finals) > cold,
            "steps": [r["steps"] for r in results], "diagnostics": diag}


def why_not(agg: dict[str, Any]) -> str:
    """The diagnostics of an algorithm that did not beat its cold start, as one sentence of measured rates."""
    d = agg["diagnostics"]
    parts = [f"{label} {d[key]:.3g}" for key, label in DIAGNOSTICS.items() if key in d]
    if "reward_first_quarter" in d:
        parts.append(f"rollout reward {d['reward_first_quarter']:+.3f} (first quarter) -> "
                     f"{d['reward_last_quarter']:+.3f} (last quarter)")
    return "; ".join(parts) or "no metrics logged"


def plots(summary: dict[str, Any], metrics: Path, dest: Path) -> list[Path]:
    """Held-out success against training wall time (mean over seeds, min..max bars), and rollout reward
    against step (one line per seed, from ``metrics/<algo>-s<seed>.jsonl``); written to ``dest``."""
    from agentrl.algos.evaluation.plot import _pyplot
    from agentrl.algos.evaluation.run_log import read_metrics

    plt = _pyplot()
    dest.mkdir(parents=True, exist_ok=True)
    cold = summary["cold_start"]["average_at_n"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for algo, runs in summary["runs"].items():
        n_points = min(len(r["points"]) for r in runs)
        xs, ys, lo, hi = [0.0], [cold], [0.0], [0.0]
        for i in range(n_points):
            vals = [r["points"][i]["average_at_n"] for r in runs]
            m = statistics.fmean(vals)
            xs.append(statistics.fmean(r["points"][i]["train_seconds"] for r in runs) / 60)
            ys.append(m)
            lo.append(m - min(vals))
            hi.append(max(vals) - m)
        ax.errorbar(xs, [100 * y for y in ys], yerr=[[100 * v for v in lo], [100 * v for v in hi]], marker="o",
                    capsize=3, label=LABELS.get(algo, algo))
    ax.axhline(100 * cold, color="grey", linestyle=":", label="cold start")
    ax.set_xlabel("training wall time (min)")
    ax.set_ylabel(f"held-out Average@{summary['eval_n']} (%)")
    ax.set_title(f"{ENV}: {summary['tasks']} held-out tasks, mean of {len(summary['seeds'])} seeds (bars: min..max)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    heldout_png = dest / "heldout_vs_time.png"
    fig.savefig(heldout_png, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (algo, runs) in enumerate(summary["runs"].items()):
        for j, r in enumerate(runs):
            path = metrics / f"{algo}-s{r['seed']}.jsonl"
            recs = [m for m in read_metrics(path) if "reward/mean" in m] if path.is_file() else []
            if recs:
                ax.plot([m["step"] for m in recs], [m["reward/mean"] for m in recs], color=f"C{i}", alpha=0.8,
                        linestyle=("-", "--", ":", "-.")[j % 4], label=f"{LABELS.get(algo, algo)} seed {r['seed']}")
    ax.set_xlabel("step")
    ax.set_ylabel("rollout reward (mean)")
    ax.set_title("rollout reward of the RL algorithms (SFT has no rollouts)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    reward_png = dest / "reward_vs_step.png"
    fig.savefig(reward_png, dpi=110)
    plt.close(fig)
    return [heldout_png, reward_png]


def judged(summary: dict[str, Any], data_dir: Path) -> list[tuple[str, str, Any]]:
    """``(A, B, intervals.Comparison)`` for each algorithm against the cold start, each RL algorithm against
    SFT-continued and each option against its plain algorithm, on the final held-out evaluations' per-task scores in ``data_dir/eval`` (what
    ``learning_page.export_compare`` writes; a task's score is its mean over seeds), goal: above B. Empty when
    the files are not there."""
    from learning_page import read_scores

    from agentrl.algos.evaluation.intervals import compare

    def final(algo: str) -> dict[str, float] | None:
        paths = [data_dir / "eval" / f"{algo}-s{r['seed']}-at-1.jsonl" for r in summary["runs"][algo]]
        if not paths or not all(p.is_file() for p in paths):
            return None
        per_seed = [read_scores(p)[0] for p in paths]
        return {task: statistics.fmean(s[task] for s in per_seed) for task in per_seed[0]}

    if not (data_dir / "eval" / "cold_start.jsonl").is_file():
        return []
    scores = {"cold start": read_scores(data_dir / "eval" / "cold_start.jsonl")[0]}
    scores.update({LABELS.get(a, a): s for a in summary["runs"] if (s := final(a)) is not None})
    pairs = [(LABELS.get(a, a), "cold start") for a in summary["runs"]]
    if "sft" in summary["runs"]:
        pairs += [(LABELS.get(a, a), LABELS["sft"]) for a in summary["runs"] if a != "sft"]
    pairs += [(LABELS[a], LABELS[OPTIONS[a][0]]) for a in summary["runs"] if a in OPTIONS and OPTIONS[a][0] in summary["runs"]]
    return [(a, b, compare(scores[a], scores[b], goal_points=0.0, strict=True))
            for a, b in pairs if a in scores and b in scores]


def signal_tables(summary: dict[str, Any], metrics: Path) -> list[str]:
    """Per RL algorithm, where its learning signal was per task family (``learning_page.signal_table``), from the
    committed metrics of its runs (all seeds' steps together); nothing for runs logged without ``family/*``."""
    from learning_page import signal_table

    from agentrl.algos.evaluation.run_log import read_metrics

    lines = []
    for algo, runs in summary["runs"].items():
        paths = [metrics / f"{algo}-s{r['seed']}.jsonl" for r in runs]
        # seeds' steps interleaved by step number: a quarter of the table is that quarter of every seed's run
        steps = sorted((m for p in paths if p.is_file() for m in read_metrics(p)), key=lambda m: m["step"])
        table = signal_table(steps, who=LABELS.get(algo, algo)) if algo != "sft" else []
        lines += ["", *table[:-1]] if table else []
    return lines


def page(summary: dict[str, Any], plot_dir: str, data_dir: Path | None = None) -> str:
    """The markdown of the comparison (also embedded in docs/results/learning.md); with ``data_dir`` (the
    committed per-task scores) also each comparison's paired bootstrap interval and verdict."""
    n, cold = summary["eval_n"], summary["cold_start"]["average_at_n"]
    lines = [f"{summary['tasks']} held-out tasks from `{summary['heldout_file']}`, greedy (N = {n}); each "
             f"algorithm trained for about {summary['minutes']:g} min of wall time (a run ends at the step count "
             "whose time is nearest that budget; each run's own time is in the table) from the same cold start "
             f"({summary['cold_start_source']}); seeds {', '.join(map(str, summary['seeds']))}.", "",
             f"| Algorithm | Held-out Average@{n}: mean (min..max) | vs cold start ({100 * cold:.1f}%) | "
             "seeds above | steps (training min) per seed | beat its cold start? |", "|---|---:|---:|---:|---:|---|"]
    notes = []
    for algo, agg in summary["aggregate"].items():
        agg = {**agg, "beat": agg["min"] > cold}  # the rule of aggregate(), also for a compare.json written before it
        verdict = "yes (every seed)" if agg["beat"] else "no (see below)"
        spent = ", ".join(f"{r['steps']} ({r['train_seconds'] / 60:.1f})" for r in summary["runs"][algo])
        lines.append(f"| {LABELS.get(algo, algo)} | {100 * agg['mean']:.1f}% ({100 * agg['min']:.1f}..{100 * agg['max']:.1f}) "
                     f"| {100 * (agg['mean'] - cold):+.1f} | {agg['seeds_above']} of {agg['seeds']} | "
                     f"{spent} | {verdict} |")
        if not agg["beat"]:
            notes.append(f"- **{LABELS.get(algo, algo)}** did not beat its cold start on every seed "
                         f"({agg['seeds_above']} of {agg['seeds']} above). Run means: {why_not(agg)}.")
    judgements = judged(summary, data_dir) if data_dir is not None else []
    if judgements:
        lines += ["", f"Comparisons of the final evaluations (Average@{n}, a task's score averaged over seeds; paired "
                  "bootstrap over tasks, 10,000 resamples, seed 0; verdict: met when A is above B; *decided* when the "
                  "whole interval lies on the verdict's side):", "",
                  "| Comparison | A | B | A - B (points) | 95% interval | Goal | Verdict |", "|---|---:|---:|---:|---|---|---|"]
        for a, b, c in judgements:
            lines.append(f"| {a} vs {b} | {c.a:.1f}% | {c.b:.1f}% | {c.difference:+.1f} | [{c.low:+.1f}, {c.high:+.1f}] "
                         f"| > +0 | **{c.verdict}** ({'decided' if c.decided else 'not decided'}) |")
    if data_dir is not None:
        lines += signal_tables(summary, data_dir / "metrics")
    fams = summary.get("cold_start_by_family", {})
    if fams:
        lines += ["", "Per task family (Average@N; algorithms: mean over seeds):", "",
                  "| Model | " + " | ".join(fams) + " |", "|---|" + "---:|" * len(fams),
                  "| cold start | " + " | ".join(f"{100 * v:.0f}%" for v in fams.values()) + " |"]
        for algo, agg in summary["aggregate"].items():
            lines.append(f"| {LABELS.get(algo, algo)} | "
                         + " | ".join(f"{100 * agg['by_family'].get(f, 0.0):.0f}%" for f in fams) + " |")
    earlier = [f"{LABELS.get(a, a)} seed {r['seed']} ("
               + (f"commit `{r['commit'][:10]}`" if r.get("commit") else "commit not recorded")
               + (f", from the {r['commit_from']}" if r.get("commit_from") else "") + ")"
               for a, runs in summary["runs"].items() for r in runs if r.get("commit") != summary.get("commit")]
    if earlier:
        notes.append("- Read back from an earlier invocation with the same settings (`<out>/setup.json`), not made at "
                     f"this page's commit: {', '.join(earlier)}.")
    notes.append(f"- One held-out task is {100 / (summary['tasks'] * n):.1f} points; greedy evaluation is not bit-exact "
                 "across batch compositions, so a difference of a task or two is within noise.")
    if "ppo" in summary["aggregate"]:
        from agentrl.algos.config import apply_overrides

        # a compare.json written before "sections" was recorded ran PPO with its command's ppo.* only
        ppo_settings = summary["sections"]["ppo"] if "sections" in summary else [
            t.split(".", 1)[1] for t in summary["command"].split() if t.startswith("ppo.") and "=" in t]
        if apply_overrides({}, ppo_settings).get("epochs", 1) == 1:
            notes.append("- PPO ran one epoch per rollout batch with the group-mean baseline: that is the main job's "
                         "Dr. GRPO objective (rewards centred, not scaled, `beta=0`; both clip at [0.8, 1.28] with "
                         "the dual clip and a token mean), so the PPO and GRPO rows differ only by the steps each "
                         "fitted in its time and by numerics (a seed's first rollouts are identical). The script now "
                         "runs PPO with `epochs=2` (`SECTION_DEFAULTS`).")
        else:
            notes.append(f"- PPO settings: {', '.join(f'`{s}`' for s in ppo_settings)} (more than one epoch per "
                         "rollout batch makes it a different algorithm from Dr. GRPO, whose objective one epoch of "
                         "the group-mean PPO equals).")
    lines += ["", *notes, "",
              f"![held-out success against wall time]({plot_dir}/heldout_vs_time.png)",
              f"![rollout reward against step]({plot_dir}/reward_vs_step.png)", "",
              f"Command: `{summary['command']}`; {summary['invocation_seconds'] / 60:.1f} min this invocation, peak "
              f"RSS {summary['peak_rss_gib'] or float('nan'):.2f} GiB; machine: {'; '.join(m.lstrip('- ') for m in summary['machine'][:3])}."]
    return "\n".join(lines)


def earlier_name(data_dir: Path) -> str | None:
    """``<name>`` of an earlier comparison kept beside the current one (``compare_algorithms_<name>/``, see
    docs/evaluation.md); None for the current one (``compare_algorithms[_quick]/``)."""
    name = data_dir.name.removesuffix("_quick")
    return None if name == "compare_algorithms" else name.removeprefix("compare_algorithms_")


def write_page_file(summary: dict[str, Any], results: Path, data_dir: Path, quick: bool) -> Path:
    """``<results>/learning_<data_dir name>.md`` (``learning_compare_algorithms[_quick].md`` for the current
    comparison): the comparison's own page (``page`` under a title, its plots in ``<results>/<data_dir name>/``),
    from ``summary`` and the data in ``data_dir``; written at the end of a run and again by ``learning.py --page``."""
    name = data_dir.name
    path = results / f"learning_{name}.md"
    earlier = earlier_name(data_dir)
    title = f"An earlier algorithms comparison ({earlier})" if earlier else "The algorithms side by side"
    path.write_text(f"# {title}: {ENV}{' (quick smoke run)' if quick else ''}\n\n"
                    f"{page(summary, name, data_dir)}\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algos", default=",".join(ALGOS),
                    help=f"comma-separated, of {', '.join(ALGOS)} and the options {', '.join(OPTIONS)}")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds (>= 2 for a spread)")
    ap.add_argument("--minutes", type=float, help="training wall time per run (default 10; --quick 0.03)")
    ap.add_argument("--eval-points", default="0.5,1", help="fractions of the budget to evaluate at (1 = the end)")
    ap.add_argument("--max-steps", type=int, help="also stop a run after this many steps (default: time only)")
    ap.add_argument("--cold-start", help="an adapter folder or a main-job run dir (its sft/adapter) to start from")
    ap.add_argument("--heldout", help="held-out task file (default benchmarks/heldout/tooluse_v3.jsonl)")
    ap.add_argument("--model", help="model alias or path (default: the main job's)")
    ap.add_argument("--quick", action="store_true", help="CI-sized settings (a smoke test, not a result)")
    ap.add_argument("--out", help="run directory (default runs/compare-algorithms[-quick])")
    ap.add_argument("--results", default=str(RESULTS), help="where the page and plots go (docs/results)")
    ap.add_argument("overrides", nargs="*", help="MainJobConfig key=value (and ppo.* / dpo.*) overrides")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    import heldout
    import learning_page
    import run_all

    from agentrl.algos.config import apply_overrides, config_from_dict
    from agentrl.algos.evaluation.ledger import git_state
    from agentrl.algos.recipes.main_job import MainJobConfig, peak_rss_gib

    git_state()  # the commit this run starts from: what every later record of this process names
    run_all.machine()  # the machine and the load it starts under (cached: compare.json records these)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(algos) - set(ALGOS) - set(OPTIONS))
    if unknown or not algos:
        raise SystemExit(f"--algos: unknown {unknown} (choose from {', '.join([*ALGOS, *OPTIONS])})")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    fractions = parse_fractions(args.eval_points)
    minutes = args.minutes if args.minutes is not None else (0.03 if args.quick else 10.0)
    suffix = "_quick" if args.quick else ""
    out = Path(args.out or f"runs/compare-algorithms{suffix.replace('_', '-')}")
    out.mkdir(parents=True, exist_ok=True)
    heldout_file = Path(args.heldout) if args.heldout else heldout.path_for_env(ENV)
    tasks = heldout.read(heldout_file)[: QUICK_TASKS if args.quick else None]
    pipeline_overrides, sections = split_overrides(args.overrides)
    preset = {**(QUICK if args.quick else {}), "env": ENV, "out": str(out), "progress": False,
              "env_kwargs": heldout.set_env_kwargs(heldout_file),  # the world the set was drawn from
              **({"model": args.model} if args.model else {})}
    cfg = config_from_dict(MainJobConfig, apply_overrides(preset, pipeline_overrides))
    check_setup(out, {"pipeline": dataclasses.asdict(cfg), "sections": sections, "minutes": minutes,
                      "eval_points": fractions, "max_steps": args.max_steps, "cold_start": args.cold_start,
                      "heldout_sha256": hashlib.sha256(heldout.dumps(tasks).encode()).hexdigest()})
    started = datetime.datetime.now().astimezone()
    t0 = time.perf_counter()
    runner = Runner(cfg, out, tasks, sections)
    adapter, cold_info = runner.cold_start(args.cold_start)
    cold = runner.eval_cold_start(adapter)
    runs = {algo: [runner.run(algo, s, adapter, minutes * 60, fractions, args.max_steps) for s in seeds]
            for algo in algos}
    shown = sys.argv[1:] if argv is None else argv
    summary = {
        "env": ENV, "quick": args.quick, "algos": algos, "seeds": seeds, "minutes": minutes,
        "eval_points": fractions, "eval_n": cfg.eval_n, "tasks": len(tasks),
        "heldout_file": str(heldout_file.relative_to(ROOT) if heldout_file.is_relative_to(ROOT) else heldout_file),
        "heldout_sha256": hashlib.sha256(heldout_file.read_bytes()).hexdigest(),
        "cold_start": cold.to_dict(),
        "cold_start_by_family": by_family(out / "eval" / "cold_start.jsonl", cfg.eval_n),
        "cold_start_source": cold_info["source"], "model": cfg.model, "sections": sections,
        "options": {a: {"algo": OPTIONS[a][0], "settings": OPTIONS[a][1]} for a in algos if a in OPTIONS},
        "command": " ".join(["python benchmarks/compare_algorithms.py", *shown]),
        "started": started.isoformat(timespec="minutes"), "invocation_seconds": time.perf_counter() - t0,
        "peak_rss_gib": peak_rss_gib(), "machine": run_all.machine(), "runs": runs,
        "aggregate": {algo: aggregate(cold.average_at_n, rs) for algo, rs in runs.items()},
        **git_state(),  # the commit (and uncommitted changes) the figures came from, as learning.py records it
    }
    (out / "compare.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    results = Path(args.results)
    name = f"compare_algorithms{suffix}"
    # the results page's raw data (compare.json and per-task scores), as learning.py copies its runs' data
    data = learning_page.export_compare(out, results / "data" / name)
    plots(summary, data.parent / "metrics", results / name)
    path = write_page_file(summary, results, data.parent, args.quick)
    print(path.read_text(encoding="utf-8"))
    print(f"written: {path}")
    print(f"data: {data} (commit it with the page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
