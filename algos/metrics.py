"""Training metrics: the JSONL/TensorBoard logger and the rollout-side aggregates of a batch.

Every metric name and what a healthy value looks like is in ``docs/metrics.md``.

* :class:`MetricsLogger` appends one JSON object per logged step to ``<run_dir>/metrics.jsonl`` (flushed at
  once, so a killed run loses nothing it logged) and mirrors the numeric values to TensorBoard when a writer
  is available. A resumed run opens the same file and appends.
* :func:`read_metrics` reads that file back, one record per step in step order: entries logged for the same
  step are merged, later values winning, so the steps a resumed run repeats appear once, with the resumed
  run's values.
* :func:`aggregate_rollout_metrics` turns a batch of :class:`~agentrl.algos.trajectory.Trajectory` into the
  ``reward/*``, ``rollout/*`` and ``env/*`` numbers of issue 6 §5.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.trajectory import Trajectory

logger = logging.getLogger(__name__)

#: File name of the metrics log inside a run directory.
METRICS_FILE = "metrics.jsonl"

#: Trajectory metrics that are reported under ``reward/*`` rather than repeated under ``env/*``.
_OUTCOME_KEYS = ("correct", "format_ok")


def _to_float(v: Any) -> float | None:
    """``v`` as a float if it is a number (bools count as 0/1), else ``None``."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    # numpy / torch scalars without importing either
    item = getattr(v, "item", None)
    if callable(item) and getattr(v, "ndim", 0) == 0:
        try:
            x = item()
        except Exception:  # noqa: BLE001 - not a scalar after all
            return None
        return float(x) if isinstance(x, (int, float, bool)) else None
    return None


# ---------------------------------------------------------------------------------------------- logger


class MetricsLogger:
    """Append metrics to ``<run_dir>/metrics.jsonl`` and (optionally) TensorBoard.

    Each :meth:`log` call writes one line ``{"step": step, "wall_time": <unix seconds>, **metrics}`` and
    flushes it. Values that are not JSON-serialisable numbers/strings are converted: numpy/torch scalars to
    floats, NaN/inf to ``null`` (JSON has no NaN), anything else to ``str``. Numeric values also go to
    TensorBoard as scalars under the same names (``train/loss`` shows as panel ``train``, chart ``loss``).

    TensorBoard is optional: with ``tensorboard=True`` the writer (``torch.utils.tensorboard.SummaryWriter``)
    is created lazily on the first :meth:`log`; if it cannot be imported, a warning is logged once and only
    the JSONL is written. Event files go to ``<run_dir>/tb``.

    Use as a context manager or call :meth:`close` at the end.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True):
        """
        Args:
            run_dir: the run's directory (created if missing). An existing ``metrics.jsonl`` is appended to.
            tensorboard: also write TensorBoard scalars to ``run_dir/tb`` when TensorBoard is installed.
        """
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tensorboard = tensorboard
        self._writer: Any = None
        self._writer_failed = False

    # -------------------------------------------------------------- writing
    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append ``metrics`` for ``step`` (one JSON line, flushed) and write TensorBoard scalars."""
        if self._file is None:
            raise RuntimeError("MetricsLogger.log called after close()")
        step = int(step)
        record: dict[str, Any] = {"step": step, "wall_time": round(time.time(), 3)}
        scalars: dict[str, float] = {}
        for key, value in metrics.items():
            if key in ("step", "wall_time"):
                continue
            x = _to_float(value)
            if x is not None:
                scalars[key] = x
                record[key] = x if math.isfinite(x) else None
            elif value is None or isinstance(value, str):
                record[key] = value
            else:
                record[key] = str(value)
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        writer = self._get_writer()
        if writer is not None:
            for key, x in scalars.items():
                writer.add_scalar(key, x, global_step=step)
            writer.flush()

    def _get_writer(self):
        if not self._tensorboard or self._writer_failed:
            return None
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except Exception as e:  # noqa: BLE001 - TensorBoard is optional; any import failure disables it
                self._writer_failed = True
                logger.warning("TensorBoard logging disabled (%s); metrics still go to %s", e, self.path)
                return None
            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tb"))
        return self._writer

    def close(self) -> None:
        """Flush and close the JSONL file and the TensorBoard writer (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``<run_dir>/metrics.jsonl`` (or of a ``.jsonl`` path given directly), one per step.

    Records are returned in increasing ``step`` order. Several lines with the same step (a step logged in
    parts, or repeated by a resumed run) are merged into one record, values from later lines winning. A line
    that is not valid JSON (a run killed mid-write) is skipped with a warning.

    Raises:
        FileNotFoundError: no metrics file at that place.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no metrics file at {path}; train with a run directory first "
                                f"(agentrl train ... --run-dir DIR)")
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                step = int(rec["step"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                logger.warning("%s:%d: skipping unreadable metrics line (%s)", path, lineno, e)
                continue
            by_step.setdefault(step, {}).update(rec)
    return [by_step[s] for s in sorted(by_step)]


# ---------------------------------------------------------------------------------------------- aggregates


def process_memory() -> dict[str, float]:
    """This process's memory: ``perf/rss_gib`` (resident now, Linux) and ``perf/peak_rss_gib`` (the high-water
    mark since the process started)."""
    import sys

    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm") as f:
            out["perf/rss_gib"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except OSError:  # not Linux
        pass
    try:
        import resource  # Unix only
    except ImportError:
        return out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out["perf/peak_rss_gib"] = peak / (2**30 if sys.platform == "darwin" else 2**20)
    return out


def _mean(xs: Sequence[float]) -> float:
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


def aggregate_rollout_metrics(trajectories: Iterable[Trajectory]) -> dict[str, float]:
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
      trajectories that report it.
    """
    trajs = list(trajectories)
    if not trajs:
        return {}
    n = len(trajs)
    rewards = [float(t.reward) for t in trajs]
    out: dict[str, float] = {
        "reward/mean": _mean(rewards),
        "reward/std": _std(rewards),
        "reward/correct": _mean([float(t.metrics.get("correct", 0)) for t in trajs]),
        "reward/format": _mean([float(t.metrics.get("format_ok", 0)) for t in trajs]),
    }

    groups: dict[int, list[float]] = defaultdict(list)
    for t, r in zip(trajs, rewards, strict=True):
        groups[t.group_id].append(r)
    degenerate = sum(1 for rs in groups.values() if max(rs) == min(rs))

    valid = attempts = 0
    for t in trajs:
        v, a = tool_call_counts(t)
        valid += v
        attempts += a
    lengths = [t.num_action_tokens for t in trajs]
    out.update({
        "rollout/turns": _mean([len(t.turns) if t.turns else float(t.metrics.get("turns", 0)) for t in trajs]),
        "rollout/tool_calls": _mean([float(t.metrics.get("tool_calls", _count_kind(t, "tool_call")))
                                     for t in trajs]),
        "rollout/valid_tool_call_rate": valid / attempts if attempts else 0.0,
        "rollout/degenerate_group_rate": degenerate / len(groups),
        "rollout/truncated_rate": sum(t.termination == "truncated" for t in trajs) / n,
        "rollout/budget_rate": sum(t.termination == "budget" for t in trajs) / n,
        "rollout/invalid_rate": sum(t.termination == "invalid" for t in trajs) / n,
        "rollout/response_length": _mean(lengths),
        "rollout/response_length_max": float(max(lengths)),
        "rollout/sequence_length": _mean([len(t.token_ids) for t in trajs]),
        "rollout/num_trajectories": float(n),
        "rollout/num_groups": float(len(groups)),
    })
    out.update({f"env/{k}": v for k, v in mean_env_metrics(trajs).items()})
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
            x = _to_float(v)
            if x is None or not math.isfinite(x):
                continue
            sums[k] += x
            counts[k] += 1
    return {k: sums[k] / counts[k] for k in sorted(sums)}


def _count_kind(t: Trajectory, kind: str) -> int:
    return sum((turn.parsed or {}).get("kind") == kind for turn in t.turns)
