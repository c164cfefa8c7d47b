"""Evaluation reports: what ``N`` sampled episodes per held-out task say, as numbers and as a table.

Definitions (``docs/evaluation.md`` has the worked example):

* **Average@N** — the mean of ``correct`` over all ``num_tasks × N`` episodes: how reliable one sample is.
* **Pass@N** — the fraction of tasks with at least one correct episode among their ``N``: the ceiling of
  many tries; :func:`pass_at_k` gives the unbiased pass@k estimates for every ``k`` up to ``N`` (Chen et al.
  2021: ``1 - C(N-c, k) / C(N, k)`` per task, averaged).
* **pass^k** — the chance that ``k`` tries of a task are *all* right (τ-bench's reliability measure):
  :func:`pass_hat_k`, ``C(c, k) / C(N, k)`` per task, averaged; pass^1 = pass@1 = Average@N.
* **Success by chain length** — Average@N over the tasks whose solution takes ``L`` tool calls
  (``task["chain_length"]``, else the length of ``task["calls"]``), for each ``L``.
* **EM per data source** — Average@N restricted to the tasks of one ``data_source`` (exact match after the
  env's answer normalisation); **Macro-EM** — the unweighted mean of the per-source EMs, so a large source
  does not dominate.

:func:`summarize` is a pure function of trajectories (use it on a JSONL written earlier);
:func:`save_report` / :func:`load_report` write and read the ``.summary.json`` next to the episodes;
:func:`results_table` prints rows of reports as one markdown table (base → SFT → RL). The runner that samples
the episodes is :func:`agentrl.algos.evaluation.evaluate.evaluate`.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.metrics import mean, mean_env_metrics, split_by_env, valid_tool_call_rate
from agentrl.algos.rollout.trajectory import Trajectory, group_indices

logger = logging.getLogger(__name__)


@dataclass
class EvalReport:
    """The summary of an evaluation: ``N`` sampled episodes for each of ``num_tasks`` tasks.

    Rates are fractions in [0, 1]; means are per episode.
    """

    n: int
    """Episodes sampled per task (the N of Average@N and Pass@N)."""
    num_tasks: int
    """Distinct tasks (trajectory groups)."""
    num_samples: int = 0
    """Episodes summarised (``num_tasks × n`` for a complete run)."""
    average_at_n: float = 0.0
    """Mean ``correct`` over all episodes."""
    pass_at_n: float = 0.0
    """Fraction of tasks with at least one correct episode."""
    pass_at_k: dict[int, float] = field(default_factory=dict)
    """Unbiased pass@k estimates (Chen et al. 2021) for k = 1 … the smallest group size (:func:`pass_at_k`)."""
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    """pass^k, all ``k`` tries of a task right, for k = 1 … the smallest group size (:func:`pass_hat_k`)."""
    by_chain_length: dict[int, float] = field(default_factory=dict)
    """Average@N per chain length (tool calls a solution takes); empty when no task says."""
    format_rate: float = 0.0
    """Fraction of episodes that ended in a well-formed final answer (``format_ok``)."""
    mean_tool_calls: float = 0.0
    """Tool calls executed per episode."""
    mean_turns: float = 0.0
    """Assistant turns per episode."""
    mean_reward: float = 0.0
    """Mean episode reward."""
    valid_tool_call_rate: float = 0.0
    """Valid tool calls / tool-call attempts over all episodes (see
    :func:`~agentrl.algos.evaluation.metrics.tool_call_counts`)."""
    tool_use_rate: float = 0.0
    """Fraction of episodes with at least one executed tool call."""
    truncated_rate: float = 0.0
    """Fraction of episodes cut by the token budget (termination ``truncated``)."""
    mean_tool_latency_s: float = 0.0
    """Seconds spent in tools per episode (the cost side of a tool-vs-text-only comparison)."""
    em_by_source: dict[str, float] = field(default_factory=dict)
    """Average@N per task ``data_source`` (empty when tasks carry none)."""
    macro_em: float | None = None
    """Unweighted mean of ``em_by_source``; ``None`` when there are no sources."""
    env_metrics: dict[str, float] = field(default_factory=dict)
    """Every other numeric episode metric of the env, averaged (e.g. ``search_calls``, ``timeouts``)."""
    by_env: dict[str, dict[str, Any]] = field(default_factory=dict)
    """When tasks name their env (``task["env"]``, a mixture): each env's own report (as :meth:`to_dict`), keyed by
    env name; the fields above are then over all envs. Empty for a single env."""
    settings: dict[str, Any] = field(default_factory=dict)
    """What produced the numbers (env, env kwargs, sampling config, …); compare reports only with equal ones."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``pass_at_k`` keys become strings)."""
        d = asdict(self)
        for key in ("pass_at_k", "pass_hat_k", "by_chain_length"):
            d[key] = {str(k): v for k, v in getattr(self, key).items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalReport:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        for key in ("pass_at_k", "pass_hat_k", "by_chain_length"):
            d[key] = {int(k): v for k, v in d.get(key, {}).items()}
        return cls(**d)

    def to_markdown_row(self, label: str, sources: Sequence[str] | None = None) -> str:
        """One row of :func:`results_table`: label, Average@N, Pass@N, format rate, mean tool calls, mean turns,
        then Macro-EM and the EM of each of ``sources`` (default: this report's own sources) when there are any.
        """
        sources = list(self.em_by_source) if sources is None else list(sources)
        cells = [label, _pct(self.average_at_n), _pct(self.pass_at_n), _pct(self.format_rate),
                 f"{self.mean_tool_calls:.2f}", f"{self.mean_turns:.2f}"]
        if sources:
            cells.append(_pct(self.macro_em))
            cells += [_pct(self.em_by_source.get(s)) for s in sources]
        return "| " + " | ".join(cells) + " |"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 < k <= n:
        raise ValueError(f"need 0 < k <= n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n correct samples, got c={c}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k (at least one of ``k`` tries right) from ``n`` samples of which ``c`` are
    correct: ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021, the HumanEval paper's estimator)."""
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass^k (all of ``k`` tries right; τ-bench) from ``n`` samples of which ``c`` are
    correct: ``C(c, k) / C(n, k)``."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def chain_length(task: dict[str, Any] | None) -> int | None:
    """The tool calls a task's solution takes: ``task["chain_length"]``, else the length of ``task["calls"]``;
    None when the task says neither."""
    task = task or {}
    if task.get("chain_length") is not None:
        return int(task["chain_length"])
    calls = task.get("calls")
    return len(calls) if isinstance(calls, list) else None


def sampling_table(label: str, report: EvalReport) -> str:
    """pass@k and pass^k for k = 1 … N, and success by chain length, as markdown (what ``agentrl eval``
    prints after its results table when it sampled N > 1 episodes per task)."""
    ks = sorted(report.pass_at_k)
    lines = [f"| {label} | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---:|" * len(ks),
             "| pass@k | " + " | ".join(_pct(report.pass_at_k[k]) for k in ks) + " |",
             "| pass^k | " + " | ".join(_pct(report.pass_hat_k.get(k)) for k in ks) + " |"]
    if report.by_chain_length:
        lines += ["", "| Chain length | " + " | ".join(str(n) for n in report.by_chain_length) + " |",
                  "|---|" + "---:|" * len(report.by_chain_length),
                  f"| Average@{report.n} | " + " | ".join(_pct(v) for v in report.by_chain_length.values()) + " |"]
    return "\n".join(lines)


def summarize(trajectories: Iterable[Trajectory], n: int, *, source_key: str = "data_source",
              per_env: bool = True) -> EvalReport:
    """Summarise evaluation episodes (a pure function; no model, no env).

    Episodes are grouped into tasks by ``group_id``. A task's source is ``task[source_key]``; tasks without
    one are left out of ``em_by_source`` (and Macro-EM), never out of Average@N / Pass@N. A group whose size
    differs from ``n`` (an interrupted run) is summarised as it is, with a warning; Pass@N then means "at
    least one correct among the episodes there are".

    Args:
        trajectories: the episodes, e.g. :func:`evaluate`'s output or ``load_trajectories(path)``.
        n: the number of episodes sampled per task.
        source_key: the task field that names its data source (``"family"`` reports ToolUse-v0 per family).

    Episodes whose tasks name an env (``task["env"]``: a mixture) are also summarised per env in ``by_env``
    (``per_env=False`` leaves it empty).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    trajs = list(trajectories)
    if not trajs:
        return EvalReport(n=n, num_tasks=0)
    groups = [[trajs[i] for i in members] for members in group_indices(t.group_id for t in trajs)]
    short = sorted((ts[0].group_id, len(ts)) for ts in groups if len(ts) != n)
    if short:
        logger.warning("%d of %d tasks have a number of episodes other than n=%d (e.g. group %d has %d)",
                       len(short), len(groups), n, *short[0])

    correct = [float(bool(t.metrics.get("correct", 0))) for t in trajs]
    task_correct = [[bool(t.metrics.get("correct", 0)) for t in ts] for ts in groups]
    ks = range(1, min(len(cs) for cs in task_correct) + 1)
    by_length: dict[int, list[float]] = defaultdict(list)
    for ts, cs in zip(groups, task_correct, strict=True):
        length = chain_length(ts[0].task)
        if length is not None:
            by_length[length] += [float(c) for c in cs]

    by_source: dict[str, list[float]] = defaultdict(list)
    for t, c in zip(trajs, correct, strict=True):
        src = (t.task or {}).get(source_key)
        if src is not None:
            by_source[str(src)].append(c)
    em_by_source = {s: mean(cs) for s, cs in sorted(by_source.items())}

    env = mean_env_metrics(trajs)
    return EvalReport(
        n=n,
        num_tasks=len(groups),
        num_samples=len(trajs),
        average_at_n=mean(correct),
        pass_at_n=mean([float(any(cs)) for cs in task_correct]),
        pass_at_k={k: mean([pass_at_k(len(cs), sum(cs), k) for cs in task_correct]) for k in ks},
        pass_hat_k={k: mean([pass_hat_k(len(cs), sum(cs), k) for cs in task_correct]) for k in ks},
        by_chain_length={length: mean(cs) for length, cs in sorted(by_length.items())},
        format_rate=mean([float(bool(t.metrics.get("format_ok", 0))) for t in trajs]),
        mean_tool_calls=mean([float(t.metrics.get("tool_calls", 0)) for t in trajs]),
        mean_turns=mean([float(len(t.turns) if t.turns else t.metrics.get("turns", 0)) for t in trajs]),
        mean_reward=mean([float(t.reward) for t in trajs]),
        valid_tool_call_rate=valid_tool_call_rate(trajs),
        tool_use_rate=mean([float(t.metrics.get("tool_calls", 0) > 0) for t in trajs]),
        truncated_rate=mean([float(t.termination == "truncated") for t in trajs]),
        mean_tool_latency_s=env.get("tool_latency_s", 0.0),
        em_by_source=em_by_source,
        macro_em=mean(list(em_by_source.values())) if em_by_source else None,
        env_metrics=env,
        by_env={name: summarize(ts, n, source_key=source_key, per_env=False).to_dict()
                for name, ts in split_by_env(trajs).items()} if per_env else {},
    )


# ---------------------------------------------------------------------------------------------- files


def summary_path(episodes: str | Path) -> Path:
    """Where the report of the episodes written to ``episodes`` goes: the same path with the suffix
    ``.summary.json`` (``runs/eval/base.jsonl`` -> ``runs/eval/base.summary.json``)."""
    return Path(episodes).with_suffix(".summary.json")


def save_report(report: EvalReport, path: str | Path) -> None:
    """Write ``report`` as indented JSON to ``path`` (:func:`summary_path` names it next to the episodes)."""
    Path(path).write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_report(path: str | Path) -> EvalReport:
    """Read a report written by :func:`save_report` (the ``.summary.json`` file, or the episodes' JSONL path)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path = summary_path(path)
    return EvalReport.from_dict(json.loads(path.read_text(encoding="utf-8")))


# ---------------------------------------------------------------------------------------------- table


def results_table(rows: Sequence[tuple[str, EvalReport]]) -> str:
    """A markdown table with one row per ``(label, report)``, in the given order (e.g. base → SFT → RL).

    Columns: Average@N, Pass@N, format rate, mean tool calls, mean turns; plus Macro-EM and one EM column per
    data source when any report has sources (the union of sources, sorted; a report lacking one shows "–").
    """
    if not rows:
        raise ValueError("results_table needs at least one (label, report) row")
    ns = sorted({r.n for _, r in rows})
    n_label = str(ns[0]) if len(ns) == 1 else "N"
    sources = sorted({s for _, r in rows for s in r.em_by_source})
    header = ["Model", f"Average@{n_label}", f"Pass@{n_label}", "Format", "Tool calls", "Turns"]
    if sources:
        header += ["Macro-EM"] + [f"EM {s}" for s in sources]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += [r.to_markdown_row(label, sources) for label, r in rows]
    if len(ns) > 1:
        lines.append("")
        lines.append("N differs between rows: " + ", ".join(f"{label}: N={r.n}" for label, r in rows))
    return "\n".join(lines)
