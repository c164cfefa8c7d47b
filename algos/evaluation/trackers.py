"""Experiment trackers: where :class:`~agentrl.algos.evaluation.run_log.MetricsLogger` sends a run's config,
metrics and plots besides ``metrics.jsonl`` (``report_to=``, ``--report-to``; docs/trackers.md).

* :class:`Tracker` is the contract: what the logger calls on a tracker (:meth:`~Tracker.log`,
  :meth:`~Tracker.log_images`, :meth:`~Tracker.close`, and :attr:`~Tracker.run_plots`). A tracker is made by
  calling its entry with ``(run_dir, run_name, config)`` — a class whose ``__init__`` takes those is the usual
  entry.
* :data:`TRACKERS` is the registry of ``report_to`` names: :class:`TensorBoardTracker`, :class:`WandbTracker`,
  :class:`MLflowTracker` and :class:`TrackioTracker` are built in; a third party adds one with
  :func:`register_tracker` or an entry point in the group ``agentrl.trackers``. ``"none"`` is reserved: the
  JSONL log only.
* :func:`resolve_report_to` checks a ``report_to`` value against the registry; :func:`open_tracker` makes one.

Each library is imported only when its tracker is made; a missing one is an ``ImportError`` naming the
agentrl-gym extra that installs it.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentrl.envs.plugins import Registry, class_or_factory

logger = logging.getLogger(__name__)


@runtime_checkable
class Tracker(Protocol):
    """An experiment tracker of one run, as :class:`~agentrl.algos.evaluation.run_log.MetricsLogger` uses it.

    The registry entry that makes it is called as ``entry(run_dir, run_name, config)``: ``run_dir`` (a
    :class:`~pathlib.Path`, created) is the run's directory, ``run_name`` the tracker run's name, ``config`` the
    run's config as a JSON-able dict. Raise ``ImportError`` there when the tracker's library is missing: the run
    stops before it starts.
    """

    run_plots: bool
    """True: when the log closes, the run's curves (the PNGs ``agentrl plot`` writes) are drawn and sent to
    :meth:`log_images`; False for a tracker that draws its own curves from the scalars (TensorBoard)."""

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """The numeric values of one step (NaN and inf included: drop them if the backend refuses them)."""

    def log_images(self, step: int, paths: list[Path]) -> None:
        """PNG files, at ``step``."""

    def close(self) -> None:
        """End the tracker run (called once)."""


#: What a registry entry is: called with ``(run_dir, run_name, config)``, it returns a :class:`Tracker`.
TrackerFactory = Callable[[Path, str, dict[str, Any]], Tracker]


def _require(name: str):
    """Import the library ``name``; missing, an ImportError naming the agentrl-gym extra that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"report_to={name!r} needs the {name} package: pip install {name} (in an "
                          f"agentrl-gym checkout: pip install -e '.[{name}]') "
                          f"({e})") from e


class TensorBoardTracker:
    """Scalars and the config as text in ``run_dir/tb`` (the writer is created on first use; without TensorBoard a
    warning is logged once and the tracker is silent). Images only through ``log_images``: TensorBoard draws its
    own curves."""

    run_plots = False

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


class WandbTracker:
    """A Weights & Biases run in ``run_dir`` (project ``$WANDB_PROJECT`` or 'agentrl'; ``WANDB_MODE=offline``
    writes ``run_dir/wandb/offline-run-*`` for ``wandb sync``); a resumed run continues the same W&B run."""

    run_plots = True

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.wandb = _require("wandb")
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


class MLflowTracker:
    """An MLflow run at ``$MLFLOW_TRACKING_URI`` (experiment ``$MLFLOW_EXPERIMENT_NAME`` or 'agentrl'): the config
    as flattened params and ``config.json``, metrics by step, plots as artifacts under ``plots/``."""

    run_plots = True

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        mlflow = _require("mlflow")
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


class TrackioTracker:
    """A trackio run (project ``$TRACKIO_PROJECT`` or 'agentrl'), stored locally in ``$TRACKIO_DIR`` (default
    ``~/.cache/huggingface/trackio``) unless trackio is pointed at a Space."""

    run_plots = True

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.trackio = _require("trackio")
        self.run = self.trackio.init(project=os.environ.get("TRACKIO_PROJECT", "agentrl"), name=name, config=config,
                                     resume="allow", embed=False, auto_log_cpu=False, auto_log_gpu=False)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({k: x for k, x in scalars.items() if math.isfinite(x)}, step=step)

    def log_images(self, step: int, paths: list[Path]) -> None:
        self.run.log({f"plots/{p.stem}": self.trackio.Image(str(p)) for p in paths}, step=step)

    def close(self) -> None:
        self.run.finish()


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


# ---------------------------------------------------------------------------------------------- the registry

#: ``report_to`` name -> the tracker's entry (a class, or its ``"module:Class"`` path); entry-point group
#: ``agentrl.trackers``; the contract: a class with the :class:`Tracker` methods, or a factory function.
TRACKERS: Registry[TrackerFactory] = Registry("tracker", "agentrl.trackers", {
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "mlflow": MLflowTracker,
    "trackio": TrackioTracker,
}, contract=class_or_factory(Tracker))

#: The ``report_to`` value that selects no tracker (the JSONL log only); no tracker may take this name.
NONE = "none"


def register_tracker(name: str, entry: TrackerFactory | str) -> None:
    """Make ``report_to=name`` (and ``--report-to name``) use ``entry``: a :class:`Tracker` class (or any callable
    ``(run_dir, run_name, config) -> Tracker``), or its ``"module:Class"`` import path, loaded when first used.
    A name already taken is replaced.

    Raises:
        ValueError: ``name`` is not a Python identifier, or is ``"none"``.
    """
    if name == NONE:
        raise ValueError(f"{NONE!r} is reserved: report_to={NONE!r} selects no tracker")
    TRACKERS.register(name, entry)


def tracker_names() -> list[str]:
    """The values ``report_to`` accepts: the registered trackers and ``"none"``."""
    return [*TRACKERS.names(), NONE]


def resolve_report_to(report_to: str | list[str] | None) -> list[str]:
    """The trackers a run writes to: ``report_to`` (default ``["tensorboard"]``), duplicates dropped;
    ``"none"`` alone means the JSONL log only.

    Raises:
        ValueError: an unknown name, or 'none' together with a tracker.
    """
    names = ["tensorboard"] if report_to is None else [report_to] if isinstance(report_to, str) else list(report_to)
    bad = [n for n in names if n not in tracker_names()]
    if bad:
        raise ValueError(f"report_to: unknown tracker(s) {bad}; choose from {tracker_names()} (or register "
                         f"yours: register_tracker, or an entry point in the group {TRACKERS.group!r})")
    if NONE in names and len(names) > 1:
        raise ValueError(f"report_to: {NONE!r} cannot be combined with other trackers, got {names}")
    return list(dict.fromkeys(n for n in names if n != NONE))


def open_tracker(name: str, run_dir: Path, run_name: str, config: dict[str, Any]) -> Tracker:
    """The tracker ``name`` of the registry, made for this run.

    Raises:
        ValueError: ``name`` is not registered (or its import path does not load).
        ImportError: the tracker's library is not installed (the message names the extra).
        TypeError: what the entry made lacks a member of :class:`Tracker`.
    """
    tracker = TRACKERS.get(name)(run_dir, run_name, config)
    if not isinstance(tracker, Tracker):
        if callable(close := getattr(tracker, "close", None)):
            close()
        missing = [m for m in ("run_plots", "log", "log_images", "close") if not hasattr(tracker, m)]
        raise TypeError(f"tracker {name!r} ({type(tracker).__qualname__}) lacks {missing} of the Tracker protocol "
                        f"(agentrl.algos.evaluation.trackers.Tracker)")
    return tracker
