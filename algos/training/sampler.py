"""Where the learning signal is: a task sampler that learns each task key's pass rate and fills every update with
groups whose rewards differ (docs/sampler.md).

GRPO's group-relative advantage, PPO's group baseline, RLOO's leave-one-out baseline and online DPO's pairs all
learn nothing from a group whose rewards are equal (every sample solved the task, or none did). When the model
solves (or fails) most tasks, most groups are such groups and a step barely moves the weights. The pieces, and
the published technique each follows:

* **a pass-rate estimate per task key**, from the rollouts the trainer already does: a Beta(alpha, beta)
  posterior on *binary* success (the ``correct`` metric, or ``reward >= success_threshold``; a shaped score would
  call an all-fail group informative, verl-recipe PR #125), decayed toward the prior at every visit so it tracks
  a policy that learns (MoPPS' Beta posterior per prompt, arXiv 2507.04632);
* **a sampling weight by learnability** ``p(1 - p)`` of the estimate, never below ``floor`` (LILO,
  arXiv 2502.12272; the floor plays the part of prime-rl's out-of-band weight), with **unseen keys first**
  (prime-rl's ``DifficultyPoolSampler`` gives unseen tasks full weight);
* **a pre-rollout skip** of keys whose last ``skip_after`` groups all had equal rewards, each skipped key coming
  back with probability ``recheck`` per round (GRESO, arXiv 2506.02177: skip probability capped so a key is
  always re-checked);
* **refill** (DAPO's dynamic sampling, arXiv 2503.14476, as verl's ``filter_groups``): groups with equal rewards
  are dropped and more are rolled out until the update holds ``tasks_per_step`` groups with signal or the rollout
  budget (``budget`` plain batches) is spent; then it trains on what it has (slime's fallback; verl raises
  instead), and logs it. Refill rounds are sized by the signal share seen so far (GRESO's adaptive refill).

Task keys. A key is read from what a task row already carries: the values of ``key_fields`` it has (default
``key``, ``family``, ``tier``: ToolUse-v0 rows carry ``family``, PythonMath-v0 rows ``family`` and ``tier``),
joined with ``/``; a row with none of them is keyed by its ``data_source`` (Search-v0: ``data_source=nq``, the
field the ``family/*`` metrics fall back to as well), else by its ``id`` (``id=...``; Coding-v0's problems),
else by a hash of its contents (``row=...``). A mixture task's env name (``task["env"]``) prefixes the key
(``Search-v0:...``). Keys of a generator without families (every row its own id) are not pooled: each is seen
once, so such an env is better keyed by a field it has (``key_fields``).

Which tasks. The sampler only chooses among the tasks the run's task source gives (task ``k`` a pure function of
``(seed, k)``, :mod:`~agentrl.algos.training.tasks`): a round of ``n`` groups looks at the next
``ceil(oversample * n)`` positions and keeps ``n`` of them, so the key weights tilt the env's own task
distribution. Every choice draws from the sampler's own generator (seeded from the run's seed); its state and the
estimates go into each checkpoint, so ``--resume`` draws exactly what the killed run would have drawn.

With ``enabled = False`` (the default) nothing changes in what a run trains on: the trainer still feeds every
step's groups to :meth:`SignalSampler.observe`, so every run logs its ``signal/*`` metrics, writes its per-key
table (:data:`KEY_TABLE`) and ends with :func:`signal_summary`'s line.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.algos.rollout.trajectory import Trajectory, all_equal, group_indices

#: The sampler's generator is ``default_rng([seed, SAMPLER_STREAM])``: a stream of its own.
SAMPLER_STREAM = 4_217
#: The per-key table every rollout run writes into its run folder at the end.
KEY_TABLE = "signal_by_key.csv"
#: Below this share of updates (or of sampled groups) with signal, the end-of-run line says what to change.
LOW_SIGNAL = 0.30
_TASK_ENV_KEY = "env"  # agentrl.algos.rollout.collector.TASK_ENV_KEY, without importing the collector


@dataclass
class SamplerConfig:
    """The task sampler (docs/sampler.md): learnability weights, GRESO skip and DAPO refill. Defaults follow the
    references (DAPO, GRESO, prime-rl) and are not yet tuned on a train split."""

    enabled: bool = False
    """Choose tasks by their key's learnability and refill each update with groups with signal; false: train on
    the task source's tasks as they come (the signal/* metrics and the per-key table are written either way)."""
    key_fields: list[str] = field(default_factory=lambda: ["key", "family", "tier"])
    """Task-row fields whose values (those present, joined with '/') make a task's key; a row with none of them
    is keyed by its data_source, else its id, else a hash of the row. A mixture's env name prefixes the key."""
    oversample: float = 2.0
    """Candidate tasks looked at per group to roll out (>= 1): a round of n groups chooses n of the next
    ceil(oversample * n) tasks of the task source."""
    budget: float = 4.0
    """Rollout budget of one step, in plain batches of tasks_per_step groups (>= 1; DAPO's max_num_gen_batches):
    refill stops when it is spent and the step trains on the groups with signal it has; 1 = no refill."""
    floor: float = 0.05
    """The smallest sampling weight of a seen key (0 < floor <= 0.25): its learnability p(1-p) is raised to it,
    so a key that looks solved (or hopeless) is still drawn now and then."""
    prior_alpha: float = 1.0
    """Beta prior of a key's pass rate: pseudo-successes (> 0)."""
    prior_beta: float = 1.0
    """Beta prior of a key's pass rate: pseudo-failures (> 0)."""
    decay: float = 0.9
    """At each visit a key's evidence is multiplied by this (0 < decay <= 1) before the group's successes and
    failures are added: older groups count less as the policy changes (1 = never forget)."""
    skip_after: int = 3
    """Skip, before rollout, keys whose last this many groups all had equal rewards (GRESO); 0 = never skip."""
    recheck: float = 0.1
    """Probability (per round, 0..1) that a skipped key is drawn anyway, so skipped keys come back."""
    success_metric: str = "correct"
    """The episode metric (0/1) that counts as a success for the pass-rate estimate (the collector's 'correct')."""
    success_threshold: float | None = None
    """When set, a success is reward >= this instead of success_metric (a binary reading of the reward: not a
    shaped score, whose all-fail groups would look informative)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the ``sampler.`` key of a value that means nothing."""
        checks = [
            ("key_fields", isinstance(self.key_fields, list) and all(isinstance(f, str) and f
                                                                       for f in self.key_fields),
             "a list of task-row field names"),
            ("oversample", _finite(self.oversample) and self.oversample >= 1, "a number >= 1"),
            ("budget", _finite(self.budget) and self.budget >= 1, "a number >= 1 (plain batches per step)"),
            ("floor", _finite(self.floor) and 0 < self.floor <= 0.25, "a number in (0, 0.25]"),
            ("prior_alpha", _finite(self.prior_alpha) and self.prior_alpha > 0, "a number > 0"),
            ("prior_beta", _finite(self.prior_beta) and self.prior_beta > 0, "a number > 0"),
            ("decay", _finite(self.decay) and 0 < self.decay <= 1, "a number in (0, 1]"),
            ("skip_after", isinstance(self.skip_after, int) and not isinstance(self.skip_after, bool)
             and self.skip_after >= 0, "an int >= 0"),
            ("recheck", _finite(self.recheck) and 0 <= self.recheck <= 1, "a probability in [0, 1]"),
            ("success_metric", isinstance(self.success_metric, str) and bool(self.success_metric),
             "an episode metric name"),
            ("success_threshold", self.success_threshold is None or _finite(self.success_threshold),
             "a number or null"),
        ]
        for key, ok, want in checks:
            if not ok:
                raise ValueError(f"sampler.{key}: expected {want}, got {getattr(self, key)!r}")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def task_key(task: dict[str, Any], fields: Sequence[str] = ("key", "family", "tier")) -> str:
    """The sampler's key of a task row (see the module docstring): ``"add_multiply"``, ``"pow_mod/1"``,
    ``"data_source=nq"``, ``"id=count-inversions"``, ``"row=3f2a..."``, prefixed ``"<env>:"`` for a mixture task."""
    parts = [str(task[f]) for f in fields if task.get(f) not in (None, "")]
    if not parts:
        for name in ("data_source", "id"):
            if task.get(name) not in (None, ""):
                parts = [f"{name}={task[name]}"]
                break
        else:
            body = json.dumps({k: v for k, v in task.items() if k != _TASK_ENV_KEY}, sort_keys=True, default=str)
            parts = [f"row={hashlib.sha1(body.encode()).hexdigest()[:12]}"]
    env = task.get(_TASK_ENV_KEY)
    return f"{env}:{'/'.join(parts)}" if env else "/".join(parts)


@dataclass
class KeyStats:
    """What the sampler knows of one key: its Beta posterior and counts over the run."""

    alpha: float
    beta: float
    groups: int = 0
    """Groups rolled out (visits)."""
    rollouts: int = 0
    successes: int = 0
    signal_groups: int = 0
    """Groups whose rewards were not all equal."""
    streak: int = 0
    """Consecutive latest groups with equal rewards (the skip rule's count)."""
    skipped: int = 0
    """Rounds in which the key was skipped before rollout."""
    last_step: int = -1

    @property
    def estimate(self) -> float:
        """The posterior mean pass rate."""
        return self.alpha / (self.alpha + self.beta)


@dataclass
class SampledBatch:
    """One step's rollouts under the sampler (:func:`gather`)."""

    trajectories: list[Trajectory]
    """Everything rolled out this step (every round; group ids distinct across rounds), for the rollout metrics."""
    train: list[Trajectory]
    """What the update gets: up to ``groups`` groups with signal (group ids renumbered 0..), or, when none was
    found within the budget, the first round's groups (which the algorithm then skips)."""
    positions: int
    """Task-source positions consumed (the data position advances by this)."""
    seconds: float
    metrics: dict[str, float]


class SignalSampler:
    """Per-key pass-rate estimates, the choice of each round's tasks and their state for the checkpoint."""

    def __init__(self, config: SamplerConfig | None = None, seed: int = 0):
        self.config = config if config is not None else SamplerConfig()
        self.config.validate()
        self.rng = np.random.default_rng([seed, SAMPLER_STREAM])
        self.keys: dict[str, KeyStats] = {}

    # ------------------------------------------------------------------ estimates
    def key(self, task: dict[str, Any]) -> str:
        return task_key(task, self.config.key_fields)

    def weight(self, key: str) -> float:
        """The sampling weight of ``key``: ``max(floor, p(1 - p))`` of its estimate (0.25 for an unseen key)."""
        stats = self.keys.get(key)
        p = stats.estimate if stats is not None else 0.5
        return max(self.config.floor, p * (1.0 - p))

    def skips(self, key: str) -> bool:
        """Whether ``key``'s last ``skip_after`` groups all had equal rewards (before the re-check draw)."""
        stats = self.keys.get(key)
        return bool(self.config.skip_after) and stats is not None and stats.streak >= self.config.skip_after

    def success(self, t: Trajectory) -> bool:
        cfg = self.config
        if cfg.success_threshold is not None:
            return t.reward >= cfg.success_threshold
        if cfg.success_metric not in t.metrics:
            raise ValueError(f"sampler.success_metric: the episodes carry no metric {cfg.success_metric!r} "
                             f"(they have {sorted(t.metrics)}); name one of them, or set sampler.success_threshold "
                             "to count reward >= threshold as a success")
        return float(t.metrics[cfg.success_metric]) > 0.5

    def observe(self, trajectories: Sequence[Trajectory], step: int) -> dict[str, Any]:
        """Update the estimates from one rollout batch (groups by ``group_id``; episodes that ended with an env
        error are left out, as the algorithms leave them out). Returns ``{"signal": {group_id: bool}, "all_pass":
        n, "all_fail": n}``: which groups had unequal rewards, and how many equal groups were all successes or
        all failures."""
        cfg = self.config
        signal: dict[int, bool] = {}
        all_pass = all_fail = 0
        for members in group_indices(t.group_id for t in trajectories):
            gid = trajectories[members[0]].group_id
            group = [trajectories[i] for i in members if trajectories[i].termination != "error"]
            signal[gid] = len(group) > 1 and not all_equal([t.reward for t in group])
            if not group:
                continue
            wins = sum(self.success(t) for t in group)
            all_pass += not signal[gid] and wins == len(group)
            all_fail += not signal[gid] and wins == 0
            stats = self.keys.setdefault(self.key(group[0].task), KeyStats(cfg.prior_alpha, cfg.prior_beta))
            stats.alpha = cfg.prior_alpha + cfg.decay * (stats.alpha - cfg.prior_alpha) + wins
            stats.beta = cfg.prior_beta + cfg.decay * (stats.beta - cfg.prior_beta) + len(group) - wins
            stats.groups += 1
            stats.rollouts += len(group)
            stats.successes += wins
            stats.signal_groups += signal[gid]
            stats.streak = 0 if signal[gid] else stats.streak + 1
            stats.last_step = step
        return {"signal": signal, "all_pass": all_pass, "all_fail": all_fail}

    # ------------------------------------------------------------------ choice
    def select(self, candidates: Sequence[dict[str, Any]], n: int) -> tuple[list[int], dict[str, int]]:
        """Choose ``n`` of ``candidates`` (indices, ascending) and say how: skipped keys (GRESO) are left out
        unless their re-check draw comes up, the first candidate of each unseen key goes first, the rest is drawn
        without replacement by :meth:`weight`; when too few are left, skipped candidates fill the round."""
        cfg = self.config
        keys = [self.key(t) for t in candidates]
        saturated = sorted({k for k in keys if self.skips(k)})
        rechecked = {k for k in saturated if self.rng.random() < cfg.recheck}
        skipped = set(saturated) - rechecked
        for k in skipped:
            self.keys[k].skipped += 1
        eligible = [i for i, k in enumerate(keys) if k not in skipped]
        chosen: list[int] = []
        firsts: set[str] = set()
        for i in eligible:  # unseen keys first, one candidate each
            if keys[i] not in self.keys and keys[i] not in firsts and len(chosen) < n:
                chosen.append(i)
                firsts.add(keys[i])
        unseen = len(chosen)
        chosen += self._draw([i for i in eligible if i not in chosen], keys, n - len(chosen), weighted=True)
        forced = self._draw([i for i in range(len(keys)) if i not in chosen], keys, n - len(chosen), weighted=False)
        return sorted(chosen + forced), {"skipped_keys": len(skipped), "rechecked_keys": len(rechecked),
                                         "skipped_candidates": sum(k in skipped for k in keys),
                                         "unseen_keys_drawn": unseen, "skipped_drawn": len(forced)}

    def _draw(self, pool: list[int], keys: list[str], n: int, *, weighted: bool) -> list[int]:
        if n <= 0 or not pool:
            return []
        p = None
        if weighted:
            w = np.array([self.weight(keys[i]) for i in pool], dtype=np.float64)
            p = w / w.sum()
        picks = self.rng.choice(len(pool), size=min(n, len(pool)), replace=False, p=p)
        return [pool[int(j)] for j in picks]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The estimates and the generator's state (plain data: what a checkpoint stores)."""
        return {"rng": self.rng.bit_generator.state,
                "keys": {k: dataclasses.asdict(v) for k, v in self.keys.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.keys = {k: KeyStats(**v) for k, v in state["keys"].items()}

    def write_table(self, path: str | Path) -> Path:
        """The per-key table (CSV, keys sorted): groups, rollouts, observed pass rate, the estimate, the share of
        groups with signal, the current equal-reward streak and the rounds skipped."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["key", "groups", "rollouts", "pass_rate", "estimate", "signal_share", "equal_streak",
                        "skipped_rounds", "last_step"])
            for k in sorted(self.keys):
                s = self.keys[k]
                w.writerow([k, s.groups, s.rollouts, f"{s.successes / max(1, s.rollouts):.4f}", f"{s.estimate:.4f}",
                            f"{s.signal_groups / max(1, s.groups):.4f}", s.streak, s.skipped, s.last_step])
        return path


def key_bands(sampler: SignalSampler, low: float = 0.1, high: float = 0.9) -> dict[str, int]:
    """How the known keys' pass-rate estimates spread, logged every step (the keys over time in the run's plots):
    ``signal/keys``, and of them ``signal/keys_unsolved`` (estimate <= ``low``), ``signal/keys_edge`` (between:
    where the groups with signal come from) and ``signal/keys_solved`` (>= ``high``)."""
    rates = [s.estimate for s in sampler.keys.values()]
    return {"signal/keys": len(rates), "signal/keys_unsolved": sum(p <= low for p in rates),
            "signal/keys_edge": sum(low < p < high for p in rates), "signal/keys_solved": sum(p >= high for p in rates)}


def signal_metrics(sampler: SignalSampler, trajectories: Sequence[Trajectory], step: int) -> dict[str, float]:
    """Observe a plain rollout batch (the sampler off) and return its ``signal/*`` metrics."""
    seen = sampler.observe(trajectories, step)
    groups, with_signal = len(seen["signal"]), sum(seen["signal"].values())
    return {"signal/groups": groups, "signal/groups_with_signal": with_signal,
            "signal/share": with_signal / groups if groups else 0.0, "signal/trained_groups_with_signal": with_signal,
            "signal/all_pass_groups": seen["all_pass"], "signal/all_fail_groups": seen["all_fail"],
            "signal/rollouts": len(trajectories), **key_bands(sampler)}


Rollout = Callable[[list[dict[str, Any]], int], tuple[list[Trajectory], float]]
"""``rollout(tasks, stream)`` -> ``(trajectories, seconds)``: one group per task, ``group_id`` = the task's index;
``stream`` (the round's first data position) seeds the sampling."""


def gather(sampler: SignalSampler, source, position: int, rollout: Rollout, *, groups: int,
           step: int) -> SampledBatch:
    """One step under the sampler: rounds of choose -> roll out -> observe, from data ``position`` of ``source``
    (anything with ``take(start, n)``), until ``groups`` groups with signal are held or ``budget * groups``
    groups are spent (see the module docstring). Surplus groups with signal are dropped (logged)."""
    cfg = sampler.config
    budget = max(groups, math.ceil(cfg.budget * groups - 1e-9))
    kept: list[list[Trajectory]] = []
    first_round: list[list[Trajectory]] = []
    everything: list[Trajectory] = []
    totals = {"skipped_keys": 0, "rechecked_keys": 0, "skipped_candidates": 0, "unseen_keys_drawn": 0,
              "skipped_drawn": 0, "all_pass": 0, "all_fail": 0}
    spent = rounds = 0
    pos, seconds = position, 0.0
    while True:
        need = groups - len(kept)
        # the first round is a plain batch; a refill round is sized by the signal share so far (Laplace-smoothed)
        rate = (len(kept) + 1) / (spent + 2)
        size = groups if rounds == 0 else min(budget - spent, max(need, math.ceil(need / rate - 1e-9)))
        window = max(size, math.ceil(cfg.oversample * size - 1e-9))
        candidates = source.take(pos, window)
        chosen, how = sampler.select(candidates, size)
        trajs, secs = rollout([candidates[i] for i in chosen], pos)
        trajs = [dataclasses.replace(t, group_id=t.group_id + spent) for t in trajs]  # one id per group of the step
        pos, seconds, spent, rounds = pos + window, seconds + secs, spent + len(chosen), rounds + 1
        seen = sampler.observe(trajs, step)
        for k in totals:
            totals[k] += how.get(k, 0) + seen.get(k, 0)
        everything += trajs
        for members in group_indices(t.group_id for t in trajs):
            group = [trajs[i] for i in members]
            if rounds == 1:
                first_round.append(group)
            if seen["signal"][group[0].group_id]:
                kept.append(group)
        if len(kept) >= groups or spent >= budget:
            break
    trained = kept[:groups] or first_round
    train = [dataclasses.replace(t, group_id=g) for g, group in enumerate(trained) for t in group]
    n_signal = min(len(kept), groups)
    metrics = {"signal/groups": spent, "signal/groups_with_signal": len(kept),
               "signal/share": len(kept) / spent if spent else 0.0, "signal/trained_groups_with_signal": n_signal,
               "signal/rollouts": len(everything),
               "signal/refill_rounds": rounds - 1, "signal/budget_spent": float(len(kept) < groups),
               "signal/surplus_groups": max(0, len(kept) - groups), **key_bands(sampler),
               **{f"signal/{k}": v for k, v in totals.items() if k not in ("all_pass", "all_fail")},
               "signal/all_pass_groups": totals["all_pass"], "signal/all_fail_groups": totals["all_fail"]}
    if n_signal:
        metrics["signal/rollouts_per_signal_group"] = len(everything) / n_signal
    return SampledBatch(everything, train, pos - position, seconds, metrics)


def signal_summary(history: Sequence[dict[str, Any]], *, sampler_on: bool = False,
                   from_adapter: bool = False) -> str | None:
    """The end-of-run line: the share of updates that held a group with signal and the share of sampled groups
    with unequal rewards; under :data:`LOW_SIGNAL`, what to change (not what the run already did: with
    ``sampler_on`` a larger refill budget instead of turning the sampler on; with ``from_adapter`` a longer or
    broader cold start instead of starting from one). None when no step logged ``signal/*``."""
    steps = [m for m in history if "signal/groups" in m]
    if not steps:
        return None
    updates = sum(m["signal/trained_groups_with_signal"] > 0 for m in steps) / len(steps)
    groups = sum(m["signal/groups"] for m in steps)
    share = sum(m["signal/groups_with_signal"] for m in steps) / groups if groups else 0.0
    line = (f"signal: {updates:.0%} of {len(steps)} updates held a group with unequal rewards; {share:.0%} of "
            f"{groups} groups sampled had them")
    if min(updates, share) >= LOW_SIGNAL:
        return line
    passed = sum(m.get("signal/all_pass_groups", 0) for m in steps)
    failed = sum(m.get("signal/all_fail_groups", 0) for m in steps)
    sampler = ("raise the sampler's refill budget (sampler.budget)" if sampler_on
               else "turn on the sampler (sampler.enabled=true)")
    if passed >= failed:
        fix = ("the tasks are too easy for this model: train on harder families or tiers (env_kwargs / envs), "
               f"{sampler}, or raise group_size")
    else:
        cold = ("a longer cold start, or one on these tasks' demonstrations" if from_adapter
                else "start from a cold start (--adapter from agentrl train --algo sft)")
        fix = (f"the tasks are too hard for this model: {cold}, train on easier families or tiers, {sampler}, or "
               "raise group_size")
    return f"{line}. Under {LOW_SIGNAL:.0%}: {fix} (docs/sampler.md)"
