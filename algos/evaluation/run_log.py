"""The run log: ``<run_dir>/metrics.jsonl`` (plus TensorBoard) written step by step, and read back.

Every metric name and what a healthy value looks like is in ``docs/metrics.md``.

* :class:`MetricsLogger` appends one JSON object per logged step to ``<run_dir>/metrics.jsonl`` (flushed at
  once, so a killed run loses nothing it logged) and mirrors the numeric values to TensorBoard when a writer
  is available. A resumed run opens the same file and appends.
* :func:`read_metrics` reads that file back, one record per step in step order: entries logged for the same
  step are merged, later values winning, so the steps a resumed run repeats appear once, with the resumed
  run's values.
* :func:`process_memory` measures this process's memory, GPU memory too (:func:`gpu_memory`), for the
  ``perf/*`` entries of each step.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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



# ---------------------------------------------------------------------------------------------- process


def process_memory() -> dict[str, float]:
    """This process's memory: ``perf/rss_gib`` (resident now, Linux), ``perf/peak_rss_gib`` (the high-water
    mark since the process started) and, when this process has initialised CUDA, :func:`gpu_memory`'s entries."""
    import sys

    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm") as f:
            out["perf/rss_gib"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except OSError:  # not Linux
        pass
    out.update(gpu_memory())
    try:
        import resource  # Unix only
    except ImportError:
        return out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out["perf/peak_rss_gib"] = peak / (2**30 if sys.platform == "darwin" else 2**20)
    return out


def gpu_memory() -> dict[str, float]:
    """The CUDA caching allocator's figures for the current device, in GiB: ``perf/gpu_allocated_gib`` (tensors
    now), ``perf/gpu_peak_allocated_gib`` (``torch.cuda.max_memory_allocated``, the high-water mark since the
    process started), ``perf/gpu_reserved_gib`` and ``perf/gpu_peak_reserved_gib`` (what the allocator holds
    from the driver, now and at most). Empty when torch is not imported or CUDA was never initialised in this
    process (a CPU run): it never imports torch nor starts CUDA itself."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    gib = 2**30
    return {"perf/gpu_allocated_gib": torch.cuda.memory_allocated() / gib,
            "perf/gpu_peak_allocated_gib": torch.cuda.max_memory_allocated() / gib,
            "perf/gpu_reserved_gib": torch.cuda.memory_reserved() / gib,
            "perf/gpu_peak_reserved_gib": torch.cuda.max_memory_reserved() / gib}
