"""Evaluation: sample ``n`` episodes per held-out task and summarise them.

Definitions (``docs/evaluation.md`` has the worked example):

* **Average@N** — the mean of ``correct`` over all ``num_tasks × N`` episodes: how reliable one sample is.
* **Pass@N** — the fraction of tasks with at least one correct episode among their ``N``: the ceiling of
  many tries.
* **EM per data source** — Average@N restricted to the tasks of one ``data_source`` (exact match after the
  env's answer normalisation); **Macro-EM** — the unweighted mean of the per-source EMs, so a large source
  does not dominate.
* **Text-only baseline** — the same tasks and sampling settings with the env's tools switched off
  (:func:`text_only_env_kwargs`), to measure what the tools add.

:func:`summarize` is a pure function of trajectories (use it on a JSONL written earlier);
:func:`evaluate` runs the collector and then summarises; :func:`results_table` prints rows of reports as one
markdown table (base → SFT → RL).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.algos.metrics import mean_env_metrics, tool_call_counts
from agentrl.algos.trajectory import Trajectory, save_jsonl

if TYPE_CHECKING:
    from agentrl.algos.collector import CollectorConfig

logger = logging.getLogger(__name__)

#: The env constructor keyword that switches tools off, for envs that offer a text-only mode.
TOOLS_ENABLED_KWARG = "tools_enabled"


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
    """Unbiased pass@k estimates (Chen et al. 2021) for k = 1, 2, 4, … up to the smallest group size."""
    format_rate: float = 0.0
    """Fraction of episodes that ended in a well-formed final answer (``format_ok``)."""
    mean_tool_calls: float = 0.0
    """Tool calls executed per episode."""
    mean_turns: float = 0.0
    """Assistant turns per episode."""
    mean_reward: float = 0.0
    """Mean episode reward."""
    valid_tool_call_rate: float = 0.0
    """Valid tool calls / tool-call attempts over all episodes (see ``metrics.tool_call_counts``)."""
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
    settings: dict[str, Any] = field(default_factory=dict)
    """What produced the numbers (env, env kwargs, sampling config, …); compare reports only with equal ones."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``pass_at_k`` keys become strings)."""
        d = asdict(self)
        d["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalReport:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["pass_at_k"] = {int(k): v for k, v in d.get("pass_at_k", {}).items()}
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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 < k <= n:
        raise ValueError(f"need 0 < k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize(trajectories: Iterable[Trajectory], n: int, *, source_key: str = "data_source") -> EvalReport:
    """Summarise evaluation episodes (a pure function; no model, no env).

    Episodes are grouped into tasks by ``group_id``. A task's source is ``task[source_key]``; tasks without
    one are left out of ``em_by_source`` (and Macro-EM), never out of Average@N / Pass@N. A group whose size
    differs from ``n`` (an interrupted run) is summarised as it is, with a warning; Pass@N then means "at
    least one correct among the episodes there are".

    Args:
        trajectories: the episodes, e.g. :func:`evaluate`'s output or ``trajectory.load_jsonl(path)``.
        n: the number of episodes sampled per task.
        source_key: the task field that names its data source (``"family"`` reports ToolUse-v0 per family).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    trajs = list(trajectories)
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t)
    if not trajs:
        return EvalReport(n=n, num_tasks=0)
    short = sorted(g for g, ts in groups.items() if len(ts) != n)
    if short:
        logger.warning("%d of %d tasks have a number of episodes other than n=%d (e.g. group %d has %d)",
                       len(short), len(groups), n, short[0], len(groups[short[0]]))

    correct = [float(bool(t.metrics.get("correct", 0))) for t in trajs]
    task_correct = {g: [bool(t.metrics.get("correct", 0)) for t in ts] for g, ts in groups.items()}
    k_max = min(len(cs) for cs in task_correct.values())
    ks = [2**i for i in range(k_max.bit_length()) if 2**i <= k_max]
    if k_max not in ks:
        ks.append(k_max)

    by_source: dict[str, list[float]] = defaultdict(list)
    for t, c in zip(trajs, correct, strict=True):
        src = (t.task or {}).get(source_key)
        if src is not None:
            by_source[str(src)].append(c)
    em_by_source = {s: _mean(cs) for s, cs in sorted(by_source.items())}

    valid = attempts = 0
    for t in trajs:
        v, a = tool_call_counts(t)
        valid += v
        attempts += a
    env = mean_env_metrics(trajs)
    return EvalReport(
        n=n,
        num_tasks=len(groups),
        num_samples=len(trajs),
        average_at_n=_mean(correct),
        pass_at_n=_mean([float(any(cs)) for cs in task_correct.values()]),
        pass_at_k={k: _mean([pass_at_k(len(cs), sum(cs), k) for cs in task_correct.values()]) for k in ks},
        format_rate=_mean([float(bool(t.metrics.get("format_ok", 0))) for t in trajs]),
        mean_tool_calls=_mean([float(t.metrics.get("tool_calls", 0)) for t in trajs]),
        mean_turns=_mean([float(len(t.turns) if t.turns else t.metrics.get("turns", 0)) for t in trajs]),
        mean_reward=_mean([float(t.reward) for t in trajs]),
        valid_tool_call_rate=valid / attempts if attempts else 0.0,
        tool_use_rate=_mean([float(t.metrics.get("tool_calls", 0) > 0) for t in trajs]),
        truncated_rate=_mean([float(t.termination == "truncated") for t in trajs]),
        mean_tool_latency_s=env.get("tool_latency_s", 0.0),
        em_by_source=em_by_source,
        macro_em=_mean(list(em_by_source.values())) if em_by_source else None,
        env_metrics=env,
    )


# ---------------------------------------------------------------------------------------------- text-only mode


def _env_class(env: str | Callable[[], Any]) -> type | None:
    """The class behind a registered env id (without making an env), or ``None`` if it cannot be found."""
    if not isinstance(env, str):
        return None
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the AgentRL/* ids

    try:
        spec = gym.spec(env.split(":", 1)[1] if ":" in env else env)
    except Exception:  # noqa: BLE001 - unknown id; gymnasium.make will give the user its own error
        return None
    entry = spec.entry_point
    if isinstance(entry, str):
        from gymnasium.envs.registration import load_env_creator

        entry = load_env_creator(entry)
    return entry if isinstance(entry, type) else None


def text_only_env_kwargs(env: str | Callable[[], Any], env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``env_kwargs`` plus ``tools_enabled=False`` for the text-only (no tools) baseline.

    The convention: an environment that can run without tools accepts a constructor keyword
    ``tools_enabled: bool = True``; with ``False`` it offers no tools (none in the prompt, a call is answered
    as unavailable) and the agent must answer from its own knowledge. Only registered env ids can be checked;
    for a factory, make the factory build the text-only env yourself.

    Raises:
        ValueError: the env's constructor has no ``tools_enabled`` keyword, or ``env`` is a factory.
    """
    cls = _env_class(env)
    if cls is None:
        raise ValueError(f"cannot tell whether {env!r} has a text-only mode: pass a registered env id, or "
                         f"build the no-tools env in your factory")
    params = inspect.signature(cls.__init__).parameters
    if TOOLS_ENABLED_KWARG not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        raise ValueError(f"{env} ({cls.__name__}) has no text-only mode: its constructor takes no "
                         f"{TOOLS_ENABLED_KWARG!r} keyword. Environments offering a no-tools baseline accept "
                         f"{TOOLS_ENABLED_KWARG}=False (see docs/evaluation.md)")
    return {**(env_kwargs or {}), TOOLS_ENABLED_KWARG: False}


# ---------------------------------------------------------------------------------------------- running


def _settings(env, n, config, env_kwargs, text_only) -> dict[str, Any]:
    cfg = asdict(config) if config is not None and is_dataclass(config) else None
    return {
        "env": env if isinstance(env, str) else getattr(env, "__name__", repr(env)),
        "env_kwargs": {k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
                       for k, v in (env_kwargs or {}).items()},
        "n": n,
        "text_only": text_only,
        "collector": cfg,
    }


def evaluate(
    env: str | Callable[[], Any],
    policy: Any,
    tasks: list[dict[str, Any]],
    n: int = 1,
    config: CollectorConfig | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    text_only: bool = False,
    source_key: str = "data_source",
) -> EvalReport:
    """Sample ``n`` episodes for each task with ``policy`` and summarise them.

    Args:
        env: an env id (made with ``gymnasium.make(env, **env_kwargs)``) or a zero-argument factory.
        policy: a policy backend (e.g. :class:`~agentrl.algos.policy.HFPolicy`).
        tasks: the held-out tasks (dicts the env accepts as ``reset(options={"task": ...})``).
        n: episodes per task (the N of Average@N / Pass@N).
        config: sampling settings (temperature, top-p, budgets, seed); the collector's defaults when ``None``.
            Compare checkpoints only under equal settings.
        env_kwargs: constructor keywords for the env.
        out: if given, the episodes are written there as JSONL (one trajectory per line) and the report next
            to it as ``<out without suffix>.summary.json``.
        progress: show a progress bar.
        text_only: the no-tools baseline: adds ``tools_enabled=False`` to ``env_kwargs``
            (:func:`text_only_env_kwargs`; raises ``ValueError`` for an env without that mode).
        source_key: the task field naming its data source, for EM per source and Macro-EM.
    """
    from agentrl.algos.collector import collect

    if not tasks:
        raise ValueError("evaluate() needs at least one task")
    if text_only:
        env_kwargs = text_only_env_kwargs(env, env_kwargs)
    trajectories = collect(env, policy, tasks, n, config, env_kwargs=env_kwargs, progress=progress)
    report = summarize(trajectories, n, source_key=source_key)
    report.settings = _settings(env, n, config, env_kwargs, text_only)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_jsonl(trajectories, out)
        summary_path = out.with_suffix(".summary.json")
        summary_path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n",
                                encoding="utf-8")
        logger.info("wrote %d episodes to %s and the summary to %s", len(trajectories), out, summary_path)
    return report


def load_report(path: str | Path) -> EvalReport:
    """Read a report written by :func:`evaluate` (the ``.summary.json`` file, or the episodes' JSONL path)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path = path.with_suffix(".summary.json")
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
