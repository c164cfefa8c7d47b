"""Rollout-side metrics of a batch of trajectories.

Every metric name and what a healthy value looks like is in ``docs/metrics.md``.

* :func:`aggregate_rollout_metrics` turns a batch of :class:`~agentrl.algos.rollout.trajectory.Trajectory` into
  the ``reward/*``, ``rollout/*`` and ``env/*`` numbers logged at each training step.
* :func:`tool_call_counts`, :func:`valid_tool_call_rate`, :func:`mean_env_metrics` and :func:`mean` (0 for an
  empty list) are the pieces that evaluation reports share.
* The run log itself (:class:`~agentrl.algos.evaluation.run_log.MetricsLogger`,
  :func:`~agentrl.algos.evaluation.run_log.read_metrics`) is :mod:`agentrl.algos.evaluation.run_log`; the
  ``perf/*`` memory probes are :mod:`agentrl.algos.evaluation.process_memory`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrl.algos.evaluation.run_log import to_float
from agentrl.algos.rollout.collector import TASK_ENV_KEY
from agentrl.algos.rollout.trajectory import Trajectory, all_equal, group_indices

#: Trajectory metrics that are reported under ``reward/*`` rather than repeated under ``env/*``.
_OUTCOME_KEYS = ("correct", "format_ok")


def mean(xs: Sequence[float]) -> float:
    """The arithmetic mean (``statistics.fmean``: exactly rounded), 0.0 for an empty list."""
    return statistics.fmean(xs) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    """Population standard deviation (exactly 0 for equal values, unlike the naive float formula)."""
    return statistics.pstdev(xs) if len(xs) > 1 else 0.0


def tool_call_counts(t: Trajectory) -> tuple[int, int]:
    """``(valid, attempts)`` tool calls of one trajectory.

    An *attempt* is an assistant turn that is not a final answer: a turn parsed as a tool call, or an
    invalid reply (malformed call, or neither a call nor an answer). A *valid* call is a turn parsed as a
    tool call that named a known tool with acceptable arguments: the tool-call turns minus the env's
    ``invalid_calls`` that were not invalid replies (the base env counts unknown-tool / bad-argument calls
    and invalid replies together in ``invalid_calls``). A turn without a ``parsed`` kind (the token budget
    ran out mid-reply) counts as an attempt that was not valid.
    """
    kinds = [(turn.parsed or {}).get("kind") for turn in t.turns]
    n_call = sum(k == "tool_call" for k in kinds)
    n_invalid = sum(k == "invalid" for k in kinds)
    n_unparsed = sum(k is None for k in kinds)
    bad_calls = int(t.metrics.get("invalid_calls", 0)) - n_invalid
    valid = max(0, n_call - max(0, bad_calls))
    return valid, n_call + n_invalid + n_unparsed


def valid_tool_call_rate(trajectories: Iterable[Trajectory]) -> float:
    """Valid tool calls / tool-call attempts summed over ``trajectories`` (:func:`tool_call_counts`); 0.0 when
    nothing was attempted."""
    valid = attempts = 0
    for t in trajectories:
        v, a = tool_call_counts(t)
        valid += v
        attempts += a
    return valid / attempts if attempts else 0.0


def aggregate_rollout_metrics(trajectories: Iterable[Trajectory], *, per_env: bool = True) -> dict[str, float]:
    """The rollout-side metrics of one batch (see ``docs/metrics.md`` for each name).

    Returns ``{}`` for an empty batch. Keys:

    * ``reward/mean``, ``reward/std``, ``reward/correct``, ``reward/format`` — means over trajectories of the
      reward, ``metrics["correct"]`` and ``metrics["format_ok"]``;
    * ``rollout/turns`` (assistant turns), ``rollout/tool_calls`` (executed calls, env's ``tool_calls``),
      ``rollout/valid_tool_call_rate`` (valid calls / attempts summed over the batch, see
      :func:`tool_call_counts`; 0 when nothing was attempted), ``rollout/degenerate_group_rate`` (groups whose
      rewards are all equal, so their group-relative advantage is 0), ``rollout/truncated_rate``
      (termination ``truncated``: the token budget ran out), ``rollout/budget_rate`` (termination ``budget``:
      the turn or tool-call budget ran out), ``rollout/invalid_rate`` (termination ``invalid``),
      ``rollout/response_length`` and ``rollout/response_length_max`` (action tokens per trajectory),
      ``rollout/sequence_length`` (all tokens), ``rollout/num_trajectories``, ``rollout/num_groups``;
    * ``env/<name>`` — every other numeric entry of the trajectories' ``metrics``, averaged over the
      trajectories that report it;
    * in a batch from a mixture (tasks naming their env in ``task["env"]``), every key above once more per env
      over that env's trajectories, as ``<key>@<env name>`` (``reward/mean@Search-v0``): see
      :func:`metrics_by_env` (``per_env=False`` leaves them out). A single-env batch has none;
    * where tasks name a family (``task["family"]``, else ``task["data_source"]``): ``family/groups@<f>``,
      ``family/signal_groups@<f>`` and ``family/correct@<f>``, where the batch's learning signal was
      (:func:`metrics_by_family`; with ``per_env``).
    """
    trajs = list(trajectories)
    if not trajs:
        return {}
    n = len(trajs)
    rewards = [float(t.reward) for t in trajs]
    out: dict[str, float] = {
        "reward/mean": mean(rewards),
        "reward/std": _std(rewards),
        "reward/correct": mean([float(t.metrics.get("correct", 0)) for t in trajs]),
        "reward/format": mean([float(t.metrics.get("format_ok", 0)) for t in trajs]),
    }

    groups = group_indices(t.group_id for t in trajs)
    degenerate = sum(all_equal([rewards[i] for i in members]) for members in groups)

    lengths = [t.num_action_tokens for t in trajs]
    out.update({
        "rollout/turns": mean([len(t.turns) if t.turns else float(t.metrics.get("turns", 0)) for t in trajs]),
        "rollout/tool_calls": mean([float(t.metrics.get("tool_calls", _count_kind(t, "tool_call")))
                                     for t in trajs]),
        "rollout/valid_tool_call_rate": valid_tool_call_rate(trajs),
        "rollout/degenerate_group_rate": degenerate / len(groups),
        "rollout/truncated_rate": sum(t.termination == "truncated" for t in trajs) / n,
        "rollout/budget_rate": sum(t.termination == "budget" for t in trajs) / n,
        "rollout/invalid_rate": sum(t.termination == "invalid" for t in trajs) / n,
        "rollout/response_length": mean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/sequence_length": mean([len(t.token_ids) for t in trajs]),
        "rollout/num_trajectories": float(n),
        "rollout/num_groups": float(len(groups)),
    })
    out.update({f"env/{k}": v for k, v in mean_env_metrics(trajs).items()})
    if per_env:
        out.update(metrics_by_env(trajs))
        out.update(metrics_by_family(trajs))
    return out


def task_group(task: Mapping[str, Any]) -> str:
    """A task's family (``family``, else ``data_source``): how rollout metrics, the ledger and the held-out sets'
    sidecars group tasks."""
    return str(task.get("family", task.get("data_source")))


def metrics_by_family(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """Where a batch's learning signal was, per task family (``task["family"]``, else its ``data_source``):
    ``family/groups@<f>`` (task groups of that family), ``family/signal_groups@<f>`` (those whose rewards differ:
    the only groups a group-relative advantage learns from), ``family/zero_variance_share@<f>`` (the share of its
    groups whose rewards are all equal: GRPO's advantage is 0 on every sample of them) and ``family/correct@<f>``
    (mean ``correct`` of its trajectories). ``{}`` when no task names a family. Summed over steps, the two counts
    say which families RL never had a signal on (a chain it never solves in any sample)."""
    trajs = [t for t in trajectories if t.task and ("family" in t.task or "data_source" in t.task)]
    groups: dict[str, list[list[Trajectory]]] = defaultdict(list)
    for members in group_indices(t.group_id for t in trajs):
        groups[task_group(trajs[members[0]].task)].append([trajs[i] for i in members])
    out: dict[str, float] = {}
    for family, family_groups in sorted(groups.items()):
        signal = sum(not all_equal([float(t.reward) for t in g]) for g in family_groups)
        out[f"family/groups@{family}"] = float(len(family_groups))
        out[f"family/signal_groups@{family}"] = float(signal)
        out[f"family/zero_variance_share@{family}"] = 1.0 - signal / len(family_groups)
        out[f"family/correct@{family}"] = mean([float(t.metrics.get("correct", 0)) for g in family_groups for t in g])
    return out


def env_name(t: Trajectory) -> str | None:
    """The env a trajectory's task names in ``task["env"]`` (a mixture run), else ``None``."""
    name = (t.task or {}).get(TASK_ENV_KEY)
    return None if name is None else str(name)


def split_by_env(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """The trajectories of each env named by their tasks (sorted by name); ``{}`` when no task names one."""
    out: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        name = env_name(t)
        if name is not None:
            out[name].append(t)
    return dict(sorted(out.items()))


def metrics_by_env(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """:func:`aggregate_rollout_metrics` of each env's trajectories (:func:`split_by_env`), every key suffixed
    ``@<env name>``; ``{}`` when no task names an env."""
    out: dict[str, float] = {}
    for name, trajs in split_by_env(trajectories).items():
        out.update({f"{k}@{name}": v for k, v in aggregate_rollout_metrics(trajs, per_env=False).items()})
    return out


def mean_env_metrics(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """Every numeric entry of the trajectories' ``metrics`` except ``correct``/``format_ok``, averaged over
    the trajectories that report it (env-specific keys may be absent from some)."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for t in trajectories:
        for k, v in t.metrics.items():
            if k in _OUTCOME_KEYS:
                continue
            x = to_float(v)
            if x is None or not math.isfinite(x):
                continue
            sums[k] += x
            counts[k] += 1
    return {k: sums[k] / counts[k] for k in sorted(sums)}


def _count_kind(t: Trajectory, kind: str) -> int:
    return sum((turn.parsed or {}).get("kind") == kind for turn in t.turns)


__all__ = ["aggregate_rollout_metrics", "env_name", "mean", "mean_env_metrics", "metrics_by_env",
           "metrics_by_family", "split_by_env", "task_group", "tool_call_counts", "valid_tool_call_rate"]
