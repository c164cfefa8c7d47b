"""Evaluation runs: sample ``n`` episodes per held-out task with a policy and summarise them.

:func:`evaluate` runs the collector on the tasks, summarises the episodes into an
:class:`~agentrl.algos.evaluation.report.EvalReport` (Average@N, Pass@N, EM per source, Macro-EM, tool use;
definitions in :mod:`agentrl.algos.evaluation.report` and ``docs/evaluation.md``) and can write both to disk.

**Text-only baseline** — the same tasks and sampling settings with the env's tools switched off
(:func:`text_only_env_kwargs`), to measure what the tools add.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.algos.evaluation.ledger import record
from agentrl.algos.evaluation.report import (
    EvalReport,
    save_report,
    summarize,
    summary_path,
)
from agentrl.algos.rollout.env_factory import env_class
from agentrl.algos.rollout.trajectory import save_trajectories

if TYPE_CHECKING:
    from agentrl.algos.rollout.collector import CollectorConfig

logger = logging.getLogger(__name__)

#: The env constructor keyword that switches tools off, for envs that offer a text-only mode.
TOOLS_ENABLED_KWARG = "tools_enabled"


# ---------------------------------------------------------------------------------------------- text-only mode


def text_only_env_kwargs(env: str | Callable[[], Any], env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``env_kwargs`` plus ``tools_enabled=False`` for the text-only (no tools) baseline.

    An environment declares the mode with the class attribute
    :attr:`~agentrl.envs.core.TextEnv.supports_text_only` (``True`` on ``AgentRL/Search-v0``); its constructor
    then takes ``tools_enabled: bool = True``, and with ``False`` it offers no tools (none in the prompt, a call
    is answered as unavailable), so the agent must answer from its own knowledge. Only registered env ids can be
    checked; for a factory, make the factory build the text-only env yourself.

    Raises:
        ValueError: the env does not declare a text-only mode, or ``env`` is a factory.
    """
    cls = env_class(env)
    if cls is None:
        raise ValueError(f"cannot tell whether {env!r} has a text-only mode: pass a registered env id, or "
                         f"build the no-tools env in your factory")
    if not getattr(cls, "supports_text_only", False):
        raise ValueError(f"{env} ({cls.__name__}) has no text-only mode: it does not declare "
                         f"supports_text_only = True. Environments offering a no-tools baseline declare it and "
                         f"accept {TOOLS_ENABLED_KWARG}=False (see docs/evaluation.md)")
    return {**(env_kwargs or {}), TOOLS_ENABLED_KWARG: False}


# ---------------------------------------------------------------------------------------------- running


def _env_label(env) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", repr(env))


def _plain(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v) for k, v in (kwargs or {}).items()}


def _settings(env, n, config, env_kwargs, text_only) -> dict[str, Any]:
    cfg = asdict(config) if is_dataclass(config) and not isinstance(config, type) else None
    mixture = isinstance(env, Mapping)
    return {
        "env": {name: _env_label(e) for name, e in env.items()} if mixture else _env_label(env),
        "env_kwargs": ({name: _plain(kw) for name, kw in (env_kwargs or {}).items()} if mixture
                       else _plain(env_kwargs)),
        "n": n,
        "text_only": text_only,
        "collector": cfg,
    }


def evaluate(
    env: str | Callable[[], Any] | Mapping[str, str | Callable[[], Any]],
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
    ledger: str | Path | None = None,
    ledger_fields: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Sample ``n`` episodes for each task with ``policy`` and summarise them.

    Args:
        env: an env id (made with ``gymnasium.make(env, **env_kwargs)``) or a zero-argument factory; or, for
            several envs, a mapping ``name -> id or factory`` with each task naming its env in ``task["env"]``
            (:func:`~agentrl.algos.training.tasks.mixture_test_tasks` makes such tasks); the report then has
            one sub-report per env in ``by_env``.
        policy: a policy backend (e.g. :class:`~agentrl.algos.policy.HFPolicy`).
        tasks: the held-out tasks (dicts the env accepts as ``reset(options={"task": ...})``).
        n: episodes per task (the N of Average@N / Pass@N).
        config: sampling settings (temperature, top-p, budgets, seed); the collector's defaults when ``None``.
            Compare checkpoints only under equal settings.
        env_kwargs: constructor keywords for the env (with a mapping of envs: ``name -> kwargs``).
        out: if given, the episodes are written there as JSONL (one trajectory per line) and the report next
            to it as ``<out without suffix>.summary.json``.
        progress: show a progress bar.
        text_only: the no-tools baseline: adds ``tools_enabled=False`` to ``env_kwargs``
            (:func:`text_only_env_kwargs`; raises ``ValueError`` for an env without that mode).
        source_key: the task field naming its data source, for EM per source and Macro-EM.
        ledger: a ledger file (:mod:`~agentrl.algos.evaluation.ledger`): when the tasks are (rows of) a fixed
            set whose ``<name>.jsonl`` and sidecar ``<name>.json`` lie in the ledger's folder, a row is appended
            to it and its id lands in ``report.settings["ledger"]``. ``None`` (the default) records nothing.
        ledger_fields: fields added to that row (e.g. ``{"adapter": "base"}``).
    """
    from agentrl.algos.rollout.collector import collect

    if not tasks:
        raise ValueError("evaluate() needs at least one task")
    if text_only:
        if isinstance(env, Mapping):
            env_kwargs = {name: text_only_env_kwargs(e, (env_kwargs or {}).get(name)) for name, e in env.items()}
        else:
            env_kwargs = text_only_env_kwargs(env, env_kwargs)
    trajectories = collect(env, policy, tasks, n, config, env_kwargs=env_kwargs, progress=progress)
    report = summarize(trajectories, n, source_key=source_key)
    report.settings = _settings(env, n, config, env_kwargs, text_only)
    if ledger is not None:
        record(tasks, trajectories, report, ledger, policy=policy, extra=ledger_fields, out=out)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_trajectories(trajectories, out)
        summary = summary_path(out)
        save_report(report, summary)
        logger.info("wrote %d episodes to %s and the summary to %s", len(trajectories), out, summary)
    return report


__all__ = ["TOOLS_ENABLED_KWARG", "evaluate", "text_only_env_kwargs"]
