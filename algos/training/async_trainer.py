"""Decoupled rollout and training (``agentrl train --async``): a producer thread samples while the trainer updates.

The synchronous loop (:class:`~agentrl.algos.training.trainer.Trainer`) alternates: rollout, then update, then rollout
with the new weights. Here the two run at once, in one process::

    producer thread                                   trainer (main thread)
    ---------------                                   ---------------------
    wait for a free slot (at most queue_size ahead)
    with weights_lock: trajs = collect(...)           batch = queue.get()          (frees a slot)
        each trajectory records policy_version       drop / correct stale trajectories
    queue.put(batch)                                  units = algo.prepare(batch)  (advantages, micro-batches,
                                                      update(units)                 losses: the trainer's own)
                                                      with weights_lock: policy.update_weights(model); version += 1

The policy backend samples from its own copy of the weights (:class:`~agentrl.algos.policy.HFPolicy` merges
the LoRA adapter into a separate model; an :class:`~agentrl.algos.policy.OpenAIPolicy` server holds its own),
so the trainer's model is never read by the producer. Publishing new weights takes the lock that a whole
``collect`` holds, so every trajectory of a batch is sampled by exactly one version, never by half-updated
weights.

**Staleness.** A policy *version* is one weight publication (one optimizer step). A trajectory sampled by version
``v`` and trained on at version ``u`` is ``u - v`` versions stale. With ``queue_size=1`` the producer collects
batch ``k+1`` while the trainer trains on batch ``k``: every batch after the first is one version stale
(one-step off-policy), which the PPO/GRPO ratio against the rollout logprobs already corrects within its clip
range. Trajectories (whole groups) more than ``max_staleness`` versions stale are

* ``staleness="drop"``: dropped (counted in ``async/dropped_trajectories``; the producer makes a replacement
  batch), or
* ``staleness="tis"``: corrected with truncated importance sampling (decoupled PPO): the current weights'
  logprobs ``pi_cur`` of the sampled tokens are computed once (no gradient), the clipped ratio is taken
  against ``pi_cur`` instead of the stale rollout logprobs (the trust region is around the current policy),
  and each token's loss weight is multiplied by ``min(pi_cur / pi_rollout, correction_cap)`` (the algorithm's
  cap, e.g. ``grpo.correction_cap``), the importance weight from the rollout's distribution to the current
  one, truncated to bound its variance.

The rollout correction of GRPO/PPO (``grpo.correction``, on by default with a server policy:
:func:`~agentrl.algos.training.update.resolve_correction`) runs here as in the synchronous trainer: its
``pi_old`` is the first epoch's own logprobs, which here are the *current* weights' (the trainer has moved on
since the batch was sampled), so every row is trained as decoupled PPO around the current policy, with
``min(pi_cur / pi_rollout, correction_cap)`` correcting staleness and the server's numerics together (a row
already corrected by ``staleness="tis"`` has ``pi_old = pi_cur`` and gets weight 1 there).

Everything else is the synchronous trainer's: task order (a batch's tasks and rollout seed are a function of its
data position), advantages and losses (``algo.prepare`` / ``algo.loss``), micro-batching, checkpoints (the data
position saved is that of the last batch *consumed*, so batches still queued at a kill are collected again on
``--resume``) and metrics, plus ``async/*`` metrics: ``staleness_mean``/``staleness_max``, ``dropped_trajectories``,
``tis_corrected``, ``tis_weight_mean``, ``wait_s`` (trainer idle, waiting for a batch), ``publish_wait_s``
(trainer waiting for the producer's collect to end before it can publish) and ``queue_depth``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.algos.objectives.base import RowGroup
from agentrl.algos.objectives.batching import TrainRow
from agentrl.algos.policy.base import GenerationRequest, Policy, SamplingParams, Session
from agentrl.algos.rollout.trajectory import Trajectory
from agentrl.algos.training.config import AsyncConfig
from agentrl.algos.training.sampler import signal_metrics
from agentrl.algos.training.trainer import Trainer, rollout_metrics
from agentrl.algos.training.update import rows_logprobs

logger = logging.getLogger(__name__)

__all__ = ["AsyncTrainer", "VersionedPolicy", "split_stale", "tis_correct", "tis_weights"]


# ---------------------------------------------------------------------------------------------- versions


class VersionedPolicy(Policy):
    """A policy shared by a producer thread (sampling) and the trainer (publishing weights).

    ``version`` counts :meth:`update_weights` calls and is what the collector records in
    ``Trajectory.policy_version``. ``lock`` is held by the producer for a whole ``collect`` and by
    :meth:`update_weights`, so weights never change in the middle of a rollout batch. Sampling goes straight to
    the inner policy (:meth:`generate`, and :meth:`session`: the inner backend's own open generation, so an
    ``HFPolicy``'s batch that requests join while it decodes, or an ``OpenAIPolicy``'s requests in flight, work
    as in the synchronous trainer); it takes no lock of its own: the producer's collect holds ``lock``.
    """

    def __init__(self, inner: Policy):
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.lock = threading.Lock()
        self.version = 0
        self.publish_wait_s = 0.0
        """Seconds :meth:`update_weights` spent waiting for the lock (a rollout in progress), summed."""

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams):
        return self.inner.generate(requests, sampling)

    def session(self, sampling: SamplingParams) -> Session:
        return self.inner.session(sampling)

    def release(self, keys: Iterable[Hashable]) -> None:
        self.inner.release(keys)

    def update_weights(self, source_model) -> None:
        t0 = time.perf_counter()
        with self.lock:
            self.publish_wait_s += time.perf_counter() - t0
            self.inner.update_weights(source_model)
            self.version += 1


# ---------------------------------------------------------------------------------------------- staleness


def split_stale(trajectories: Sequence[Trajectory], current_version: int,
                max_staleness: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """Split into ``(fresh, stale)``: a group (``group_id``) is stale when any member was sampled more than
    ``max_staleness`` versions before ``current_version``. Whole groups move together (advantages are
    computed over whole groups); order is kept within each part."""
    too_old = {t.group_id for t in trajectories if current_version - t.policy_version > max_staleness}
    fresh = [t for t in trajectories if t.group_id not in too_old]
    stale = [t for t in trajectories if t.group_id in too_old]
    return fresh, stale


def tis_weights(current: Sequence[float], behaviour: Sequence[float], mask: Sequence[int],
                cap: float) -> list[float]:
    """Truncated importance weights ``min(exp(current - behaviour), cap)`` on tokens where ``mask`` is set,
    1.0 elsewhere (``current``/``behaviour``: per-token logprobs under the current and the sampling policy)."""
    return [min(math.exp(c - b), cap) if m else 1.0 for c, b, m in zip(current, behaviour, mask, strict=True)]


def tis_correct(row: TrainRow, current: Sequence[float], cap: float) -> list[float]:
    """Turn ``row`` (built from a stale trajectory) into a decoupled-PPO row, in place; returns the weights.

    Its loss weights are multiplied by :func:`tis_weights` and its ``old_logprobs`` (the ratio's denominator)
    become ``current`` on action tokens, so the clipped ratio is taken around the current policy.
    """
    w = tis_weights(current, row.old_logprobs, row.loss_mask, cap)
    row.weights = [x * wi for x, wi in zip(row.weights, w, strict=True)]
    row.old_logprobs = [float(c) if m else o for c, o, m in zip(current, row.old_logprobs, row.loss_mask,
                                                                  strict=True)]
    return w


# ---------------------------------------------------------------------------------------------- producer


@dataclass
class _Batch:
    position: int
    """Data position of the batch's first task."""
    num_tasks: int
    trajectories: list[Trajectory]
    seconds: float
    """Wall time of the collect."""


@dataclass
class _Producer:
    """The rollout thread: collects batch after batch, at most ``queue_size`` ahead of the trainer."""

    trainer: AsyncTrainer
    position: int
    queue_size: int
    budget: int
    """Batches it may still produce (the steps left; the trainer adds one per dropped batch)."""
    cond: threading.Condition = field(default_factory=threading.Condition)
    ready: deque = field(default_factory=deque)
    in_flight: int = 0
    max_ahead: int = 0
    """Most batches ever queued or being collected at once (never above ``queue_size``)."""
    error: BaseException | None = None
    stopped: bool = False
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        tr = self.trainer
        from agentrl.algos.rollout.collector import Collector

        collector = Collector(tr.policy, tr.config.collector)  # envs and env threads live for the whole run
        try:
            while True:
                with self.cond:
                    self.cond.wait_for(lambda: self.stopped or (self.budget > 0 and
                                                                len(self.ready) + self.in_flight < self.queue_size))
                    if self.stopped:
                        return
                    self.budget -= 1
                    self.in_flight += 1
                    self.max_ahead = max(self.max_ahead, len(self.ready) + self.in_flight)
                pos = self.position
                with tr.policy.lock:
                    trajs, n_tasks, seconds = tr._rollout(collector, pos)
                self.position += n_tasks
                with self.cond:
                    self.in_flight -= 1
                    self.ready.append(_Batch(pos, n_tasks, trajs, seconds))
                    self.cond.notify_all()
        except BaseException as e:  # handed to the trainer, which raises it
            logger.exception("rollout producer failed")
            with self.cond:
                self.error = e
                self.in_flight = max(0, self.in_flight - 1)
                self.cond.notify_all()
        finally:
            collector.close()

    def take(self) -> _Batch:
        """The next batch (blocks until there is one); frees its slot. Raises the producer's error."""
        with self.cond:
            self.cond.wait_for(lambda: self.ready or self.error is not None or self.stopped)
            if self.ready:
                batch = self.ready.popleft()
                self.cond.notify_all()
                return batch
            if self.error is not None:
                raise RuntimeError(f"the rollout producer failed: {self.error!r}") from self.error
            raise RuntimeError("the rollout producer was stopped")

    def add_budget(self, n: int = 1) -> None:
        with self.cond:
            self.budget += n
            self.cond.notify_all()

    def depth(self) -> int:
        with self.cond:
            return len(self.ready) + self.in_flight

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()  # at most the rollout in progress


# ---------------------------------------------------------------------------------------------- trainer


class AsyncTrainer(Trainer):
    """:class:`~agentrl.algos.training.trainer.Trainer` with rollouts produced concurrently (``config.asynchronous``).

    Same arguments as :class:`Trainer`; ``policy`` (default: an ``HFPolicy`` over the model) is wrapped in a
    :class:`VersionedPolicy`. Runs any rollout algorithm (grpo, ppo, dpo; ``staleness="tis"`` for grpo/ppo).
    """

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        if not self.algo.needs_rollouts:
            raise ValueError(f"asynchronous training overlaps rollouts with updates; {config.algo} has no rollouts")
        self.policy = VersionedPolicy(self.policy)
        self.async_config: AsyncConfig = config.asynchronous
        self.producer: _Producer | None = None
        a = self.async_config
        epochs = self.algo.epochs
        if a.staleness == "drop" and a.queue_size * epochs > a.max_staleness:
            logger.info("async: batches may reach %d versions of staleness (queue_size %d x %d epochs); those over "
                        "max_staleness=%d are dropped and re-collected", a.queue_size * epochs, a.queue_size,
                        epochs, a.max_staleness)

    def train(self) -> list[dict[str, Any]]:
        """Start the producer, run the trainer's loop to ``config.steps``, stop the producer."""
        self.producer = _Producer(self, position=self.data_pos, queue_size=self.async_config.queue_size,
                                  budget=max(0, self.config.steps - self.global_step))
        self.producer.start()
        try:
            return super().train()
        finally:
            self.producer.stop()

    def step(self) -> dict[str, Any]:
        """Take the next rollout batch, drop or correct stale groups, update, publish (in :meth:`apply_update_rows`)."""
        if self.producer is None:
            raise RuntimeError("AsyncTrainer.step runs inside train() (it needs the producer thread)")
        a = self.async_config
        t_step = time.perf_counter()
        wait = 0.0
        dropped = 0
        while True:
            t0 = time.perf_counter()
            batch = self.producer.take()
            wait += time.perf_counter() - t0
            self.data_pos = batch.position + batch.num_tasks
            current = self.policy.version
            fresh, stale = split_stale(batch.trajectories, current, a.max_staleness)
            if a.staleness == "tis" or fresh:
                break
            dropped += len(stale)
            self.producer.add_budget(1)  # a replacement batch
            logger.info("async: dropped a batch %d versions stale (max_staleness %d)",
                        current - min(t.policy_version for t in stale), a.max_staleness)
        if a.staleness == "drop":
            dropped += len(stale)
            trajs = fresh
        else:
            trajs = batch.trajectories
        publish_wait0 = self.policy.publish_wait_s
        metrics = rollout_metrics(batch.trajectories, batch.seconds)
        metrics.update(signal_metrics(self.sampler, trajs, self.global_step))  # the groups trained on (sampler.md)
        ages = [current - t.policy_version for t in batch.trajectories]
        metrics.update({"async/staleness_mean": sum(ages) / len(ages) if ages else 0.0,
                        "async/staleness_max": max(ages, default=0), "async/dropped_trajectories": dropped,
                        "async/wait_s": wait, "async/queue_depth": self.producer.depth(),
                        "async/policy_version": current})
        rows, prep_stats = self.algo.prepare(trajs)
        if a.staleness == "tis" and stale:
            metrics.update(self._correct_stale(rows, trajs, {id(t) for t in stale}))
        out = self._optimize(rows, prep_stats, metrics, t_step)
        out["async/publish_wait_s"] = self.policy.publish_wait_s - publish_wait0
        return out

    def _correct_stale(self, rows: list[RowGroup], trajs: list[Trajectory], stale_ids: set[int]) -> dict:
        """Apply :func:`tis_correct` to the rows of stale trajectories, with the current weights' logprobs.

        Demonstration rows (``off_policy``, numbered after the batch's samples by ``GRPO.prepare``) were sampled
        by no policy: they are left as they are."""
        stale = [row for g in rows for row in g
                 if not row.off_policy and id(trajs[row.meta["index"]]) in stale_ids]
        if not stale:
            return {"async/tis_corrected": 0}
        cfg = self.config
        current = rows_logprobs(self.model, stale, temperature=self.rollout_temperature, pad_id=self.pad_id,
                                micro_batch_tokens=self.micro_batch_tokens, logprob_chunk=cfg.logprob_chunk)
        cap = cfg.algorithm.correction_cap  # one cap for the truncated importance weight
        weights: list[float] = []
        for it, lp in zip(stale, current, strict=True):
            w = tis_correct(it, lp, cap)
            weights.extend(x for x, m in zip(w, it.loss_mask, strict=True) if m)
        n = len(weights)
        return {"async/tis_corrected": len(stale), "async/tis_weight_mean": sum(weights) / n if n else 1.0,
                "async/tis_truncated_frac": sum(1 for x in weights if x >= cap) / n if n else 0.0}
