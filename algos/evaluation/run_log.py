"""The run log: ``<run_dir>/metrics.jsonl`` written step by step (and sent to experiment trackers), read back.

Every metric name and what a healthy value looks like is in ``docs/metrics.md``.

* :class:`MetricsLogger` appends one JSON object per logged step to ``<run_dir>/metrics.jsonl`` (flushed at
  once, so a killed run loses nothing it logged) and sends the config, the numeric values and the plots to
  each tracker of ``report_to``: TensorBoard, Weights & Biases, MLflow, trackio (docs/trackers.md). A resumed
  run opens the same file and appends (and, via ``trackers.json``, continues the same tracker runs).
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
import re
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


# ---------------------------------------------------------------------------------------------- trackers

EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}
"""Tracker name -> the agentrl-gym extra that installs its library (``pip install 'agentrl-gym[wandb]'``)."""


def tracker_names() -> list[str]:
    """The values ``report_to`` accepts."""
    return ["tensorboard", *EXTRAS, "none"]


def resolve_report_to(report_to: str | list[str] | None, tensorboard: bool = True) -> list[str]:
    """The trackers a run writes to: ``report_to`` (default ``["tensorboard"]``), without 'tensorboard' when
    ``tensorboard`` is false; ``"none"`` alone means the JSONL log only.

    Raises:
        ValueError: an unknown name, or 'none' together with a tracker.
    """
    names = ["tensorboard"] if report_to is None else [report_to] if isinstance(report_to, str) else list(report_to)
    bad = [n for n in names if n not in tracker_names()]
    if bad:
        raise ValueError(f"report_to: unknown tracker(s) {bad}; choose from {tracker_names()}")
    if "none" in names and len(names) > 1:
        raise ValueError(f"report_to: 'none' cannot be combined with other trackers, got {names}")
    return list(dict.fromkeys(n for n in names if n != "none" and (n != "tensorboard" or tensorboard)))


def _import_tracker(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"report_to={name!r} needs the {name} package: pip install 'agentrl-gym[{EXTRAS[name]}]' "
                          f"({e})") from e


class _TensorBoard:
    """Scalars, the config as text and plots as images in ``run_dir/tb`` (the writer is created on first use;
    without TensorBoard a warning is logged once and the sink is silent)."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.run_dir, self.config, self.writer, self.failed = run_dir, config, None, False

    def _get(self):
        if self.writer is None and not self.failed:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except Exception as e:  # noqa: BLE001 - TensorBoard is optional; any import failure disables it
                self.failed = True
                logger.warning("TensorBoard logging disabled (%s); metrics still go to %s", e, self.run_dir)
                return None
            self.writer = SummaryWriter(log_dir=str(self.run_dir / "tb"))
            if self.config:
                self.writer.add_text("config", "```\n" + json.dumps(self.config, indent=2, default=str) + "\n```")
        return self.writer

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if (writer := self._get()) is not None:
            for key, x in scalars.items():
                writer.add_scalar(key, x, global_step=step)
            writer.flush()

    def log_images(self, step: int, paths: list[Path]) -> None:
        if (writer := self._get()) is not None:
            import matplotlib.image

            for path in paths:
                writer.add_image(f"plots/{path.stem}", matplotlib.image.imread(path)[..., :3], step,
                                 dataformats="HWC")
            writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _WandB:
    """A Weights & Biases run in ``run_dir`` (project ``$WANDB_PROJECT`` or 'agentrl'; ``WANDB_MODE=offline``
    writes ``run_dir/wandb/offline-run-*`` for ``wandb sync``); a resumed run continues the same W&B run."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.wandb = _import_tracker("wandb")
        ids = _tracker_ids(run_dir)
        self.run = self.wandb.init(project=os.environ.get("WANDB_PROJECT", "agentrl"), name=name, dir=str(run_dir),
                                   config=config, id=ids.get("wandb"), resume="allow", reinit="create_new")
        _tracker_ids(run_dir, wandb=self.run.id)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def log_images(self, step: int, paths: list[Path]) -> None:
        self.run.log({f"plots/{p.stem}": self.wandb.Image(str(p)) for p in paths}, step=step)

    def close(self) -> None:
        self.run.finish()


class _MLflow:
    """An MLflow run at ``$MLFLOW_TRACKING_URI`` (experiment ``$MLFLOW_EXPERIMENT_NAME`` or 'agentrl'): the config
    as flattened params and ``config.json``, metrics by step, plots as artifacts under ``plots/``."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        mlflow = _import_tracker("mlflow")
        self.client = mlflow.MlflowClient()
        self.entities = mlflow.entities
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "agentrl")
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        run_id = _tracker_ids(run_dir).get("mlflow")
        if run_id is None:
            run_id = self.client.create_run(exp_id, run_name=name).info.run_id
            params = [self.entities.Param(k, str(v)[:6000]) for k, v in _flatten(config).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(run_id, params=params[i:i + 100])
            self.client.log_dict(run_id, config, "config.json")
            _tracker_ids(run_dir, mlflow=run_id)
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def log(self, step: int, scalars: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self.entities.Metric(_mlflow_key(k), x, now, step) for k, x in scalars.items() if math.isfinite(x)]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_images(self, step: int, paths: list[Path]) -> None:
        for p in paths:
            self.client.log_artifact(self.run_id, str(p), "plots")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class _Trackio:
    """A trackio run (project ``$TRACKIO_PROJECT`` or 'agentrl'), stored locally in ``$TRACKIO_DIR`` (default
    ``~/.cache/huggingface/trackio``) unless trackio is pointed at a Space."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.trackio = _import_tracker("trackio")
        self.run = self.trackio.init(project=os.environ.get("TRACKIO_PROJECT", "agentrl"), name=name, config=config,
                                     resume="allow", embed=False, auto_log_cpu=False, auto_log_gpu=False)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({k: x for k, x in scalars.items() if math.isfinite(x)}, step=step)

    def log_images(self, step: int, paths: list[Path]) -> None:
        self.run.log({f"plots/{p.stem}": self.trackio.Image(str(p)) for p in paths}, step=step)

    def close(self) -> None:
        self.run.finish()


SINKS = {"tensorboard": _TensorBoard, "wandb": _WandB, "mlflow": _MLflow, "trackio": _Trackio}


def _tracker_ids(run_dir: Path, **update: str) -> dict[str, str]:
    """The tracker run ids of this run directory (``trackers.json``), so a resumed run logs to the same runs."""
    path = run_dir / "trackers.json"
    ids = json.loads(path.read_text()) if path.exists() else {}
    if update:
        ids.update(update)
        path.write_text(json.dumps(ids))
    return ids


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, Mapping) and v else {f"{prefix}{k}": v})
    return out


def _mlflow_key(key: str) -> str:
    """An MLflow metric name (letters, digits, ``_ - . / space``): other characters become ``_``."""
    return re.sub(r"[^\w\-./ ]", "_", key)


# ---------------------------------------------------------------------------------------------- logger


class MetricsLogger:
    """Append metrics to ``<run_dir>/metrics.jsonl`` and send them to the selected experiment trackers.

    Each :meth:`log` call writes one line ``{"step": step, "wall_time": <unix seconds>, **metrics}`` and
    flushes it. Values that are not JSON-serialisable numbers/strings are converted: numpy/torch scalars to
    floats, NaN/inf to ``null`` (JSON has no NaN), anything else to ``str``. Numeric values also go to every
    tracker of ``report_to`` under the same names (in TensorBoard ``train/loss`` shows as panel ``train``,
    chart ``loss``).

    Trackers (docs/trackers.md): 'tensorboard' (``run_dir/tb``; when TensorBoard cannot be imported a warning
    is logged once and only the JSONL is written), 'wandb', 'mlflow', 'trackio' (each an optional extra,
    imported only when selected; a missing one is an ``ImportError`` naming the extra, raised here, before the
    run starts). Each gets ``config`` at the start. On :meth:`close`, when wandb, mlflow or trackio is selected,
    the run's curves are drawn (:func:`agentrl.algos.evaluation.plot.plot_run`, the PNGs ``agentrl plot``
    writes) and sent as images / artifacts; :meth:`log_images` sends other PNGs.

    Use as a context manager or call :meth:`close` at the end.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, report_to: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, run_name: str | None = None):
        """
        Args:
            run_dir: the run's directory (created if missing). An existing ``metrics.jsonl`` is appended to.
            tensorboard: false drops 'tensorboard' from ``report_to``.
            report_to: tracker names (:func:`tracker_names`); default ``["tensorboard"]``.
            config: the run's config (a JSON-able dict), sent to each tracker.
            run_name: the trackers' run name (default: the run directory's name).

        Raises:
            ImportError: a selected tracker's library is not installed (the message names the extra).
            ValueError: an unknown tracker name.
        """
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.trackers = resolve_report_to(report_to, tensorboard)
        config = json.loads(json.dumps(dict(config or {}), default=str))
        name = run_name or self.run_dir.resolve().name
        self._sinks: list[Any] = []
        try:
            for t in self.trackers:
                self._sinks.append(SINKS[t](self.run_dir, name, config))
        except BaseException:
            self._close_sinks()
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
        for sink in self._sinks:
            sink.log(step, scalars)

    def log_images(self, paths: list[str | Path], step: int | None = None) -> None:
        """Send PNG files to every tracker (W&B / trackio images, MLflow artifacts, TensorBoard images) at
        ``step`` (default: the last step logged)."""
        paths = [Path(p) for p in paths]
        for sink in self._sinks:
            sink.log_images(self._last_step if step is None else step, paths)

    def close(self) -> None:
        """Close the JSONL file; draw the run's plots for wandb/mlflow/trackio and send them; close the trackers
        (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            if any(t in EXTRAS for t in self.trackers):
                try:
                    from agentrl.algos.evaluation.plot import plot_run

                    self.log_images(plot_run(self.run_dir))
                except Exception as e:  # noqa: BLE001 - the plots are a courtesy; the metrics are already sent
                    logger.warning("could not send the run's plots to %s: %s", self.trackers, e)
        self._close_sinks()

    def _close_sinks(self) -> None:
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception as e:  # noqa: BLE001 - one tracker failing to close must not hide the others
                logger.warning("closing %s failed: %s", type(sink).__name__, e)

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
