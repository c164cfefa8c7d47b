"""The run log: ``<run_dir>/metrics.jsonl`` written step by step (and sent to experiment trackers), read back.

Every metric name and what a healthy value looks like is in ``docs/metrics.md``.

* :class:`MetricsLogger` appends one JSON object per logged step to ``<run_dir>/metrics.jsonl`` (flushed at
  once, so a killed run loses nothing it logged) and sends the config and the numeric values to each tracker of
  ``report_to`` (:mod:`agentrl.algos.evaluation.trackers`: TensorBoard, Weights & Biases, MLflow, trackio, or
  one a third party registered; docs/trackers.md). A resumed run opens the same file and appends (and, via
  ``trackers.json``, continues the same tracker runs). It draws nothing itself: whoever makes it passes
  ``plots=`` (:func:`agentrl.algos.evaluation.plot.plot_run`) to have the run's curves sent when it closes.
* :func:`read_metrics` reads that file back, one record per step in step order: entries logged for the same
  step are merged, later values winning, so the steps a resumed run repeats appear once, with the resumed
  run's values.

Within ``agentrl.algos.evaluation`` this module sits low: it imports only :mod:`~agentrl.algos.evaluation.trackers`;
``metrics``, ``report`` and ``plot`` build on it, never the other way round.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.algos.evaluation.trackers import Tracker, open_tracker, resolve_report_to

logger = logging.getLogger(__name__)

#: File name of the metrics log inside a run directory.
METRICS_FILE = "metrics.jsonl"


def to_float(v: Any) -> float | None:
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
    """Append metrics to ``<run_dir>/metrics.jsonl`` and send them to the selected experiment trackers.

    Each :meth:`log` call writes one line ``{"step": step, "wall_time": <unix seconds>, **metrics}`` and
    flushes it. Values that are not JSON-serialisable numbers/strings are converted: numpy/torch scalars to
    floats, NaN/inf to ``null`` (JSON has no NaN), anything else to ``str``. Numeric values also go to every
    tracker of ``report_to`` under the same names (in TensorBoard ``train/loss`` shows as panel ``train``,
    chart ``loss``).

    Trackers (docs/trackers.md) are the names of the registry
    :data:`~agentrl.algos.evaluation.trackers.TRACKERS`: 'tensorboard' (``run_dir/tb``; when TensorBoard cannot
    be imported a warning is logged once and only the JSONL is written), 'wandb', 'mlflow', 'trackio' (each an
    optional extra, imported only when selected; a missing one is an ``ImportError`` naming the extra, raised
    here, before the run starts) and any a third party registered. Each gets ``config`` at the start.

    The logger draws no plots. Given ``plots`` (a function of the run directory that writes PNGs and returns
    their paths: :func:`agentrl.algos.evaluation.plot.plot_run`), :meth:`close` calls it once the JSONL file is
    closed, when a selected tracker takes the run's plots (:attr:`Tracker.run_plots
    <agentrl.algos.evaluation.trackers.Tracker.run_plots>`: wandb, mlflow, trackio), and sends the PNGs to those
    trackers; :meth:`log_images` sends other PNGs to every tracker.

    Use as a context manager or call :meth:`close` at the end.
    """

    def __init__(self, run_dir: str | Path, *, report_to: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, run_name: str | None = None,
                 plots: Callable[[Path], Sequence[str | Path]] | None = None):
        """
        Args:
            run_dir: the run's directory (created if missing). An existing ``metrics.jsonl`` is appended to.
            report_to: tracker names (:func:`~agentrl.algos.evaluation.trackers.tracker_names`); default
                ``["tensorboard"]``; ``"none"``: the JSONL log only.
            config: the run's config (a JSON-able dict), sent to each tracker.
            run_name: the trackers' run name (default: the run directory's name).
            plots: draws the run's curves at :meth:`close` for the trackers that take them (``plot_run``);
                ``None``: no plots are sent.

        Raises:
            ImportError: a selected tracker's library is not installed (the message names the extra).
            ValueError: an unknown tracker name.
        """
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.trackers = resolve_report_to(report_to)
        self._plots = plots
        config = json.loads(json.dumps(dict(config or {}), default=str))
        name = run_name or self.run_dir.resolve().name
        self._trackers: list[Tracker] = []
        try:
            for t in self.trackers:
                self._trackers.append(open_tracker(t, self.run_dir, name, config))
        except BaseException:
            self._close_trackers()
            raise
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._last_step = 0

    # -------------------------------------------------------------- writing
    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append ``metrics`` for ``step`` (one JSON line, flushed) and send the numbers to the trackers."""
        if self._file is None:
            raise RuntimeError("MetricsLogger.log called after close()")
        step = int(step)
        record: dict[str, Any] = {"step": step, "wall_time": round(time.time(), 3)}
        scalars: dict[str, float] = {}
        for key, value in metrics.items():
            if key in ("step", "wall_time"):
                continue
            x = to_float(value)
            if x is not None:
                scalars[key] = x
                record[key] = x if math.isfinite(x) else None
            elif value is None or isinstance(value, str):
                record[key] = value
            else:
                record[key] = str(value)
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        self._last_step = max(self._last_step, step)
        for tracker in self._trackers:
            tracker.log(step, scalars)

    def log_images(self, paths: Sequence[str | Path], step: int | None = None) -> None:
        """Send PNG files to every tracker (W&B / trackio images, MLflow artifacts, TensorBoard images) at
        ``step`` (default: the last step logged)."""
        self._send_images(self._trackers, paths, step)

    def _send_images(self, trackers: list[Tracker], paths: Sequence[str | Path], step: int | None = None) -> None:
        paths = [Path(p) for p in paths]
        for tracker in trackers:
            tracker.log_images(self._last_step if step is None else step, paths)

    def close(self) -> None:
        """Close the JSONL file; draw the run's plots (``plots``) and send them to the trackers that take them;
        close the trackers (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            takers = [t for t in self._trackers if t.run_plots]
            if takers and self._plots is not None:
                try:
                    self._send_images(takers, self._plots(self.run_dir))
                except Exception as e:  # noqa: BLE001 - the plots are a courtesy; the metrics are already sent
                    logger.warning("could not send the run's plots to %s: %s", self.trackers, e)
        self._close_trackers()

    def _close_trackers(self) -> None:
        trackers, self._trackers = self._trackers, []
        for tracker in trackers:
            try:
                tracker.close()
            except Exception as e:  # noqa: BLE001 - one tracker failing to close must not hide the others
                logger.warning("closing %s failed: %s", type(tracker).__name__, e)

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
