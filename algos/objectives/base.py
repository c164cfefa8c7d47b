"""The contract between the training loop and an algorithm (what a new algorithm implements).

The loop (:mod:`agentrl.algos.training`) owns everything an algorithm shares with the others: rollouts, task
order, micro-batching, the forward pass, gradient accumulation, the optimizer step, checkpoints and logging.
An algorithm only says what to train on and what the loss is::

    rows, stats = algo.prepare(batch)          # batch: a rollout's Trajectory list (or offline examples)
    for epoch in range(algo.epochs):
        for micro-batch of row groups:         # each row group stays in one micro-batch (a DPO pair)
            loss, stats = algo.loss(logprobs, ref_logprobs, batch)
            loss.backward()
        optimizer.step()

``prepare`` sees the whole batch before it is cut into micro-batches, so advantages and pairs are computed over
whole groups and every token's weight is fixed on the global batch (:mod:`~agentrl.algos.objectives.batching`).

An algorithm without rollouts (``needs_rollouts = False``, e.g. SFT) trains on data it names itself: the loop
calls :meth:`Algorithm.offline_data` once and, each step, hands ``prepare`` the next :attr:`Algorithm.batch_size`
examples of it by data position. A new offline algorithm is one file (its config, ``offline_data``, ``prepare``,
``loss``) plus one registry line; :class:`~agentrl.algos.rollout.demonstrations.Demonstrations` renders env demos
or JSONL conversations into ``(token_ids, loss_mask)`` examples for it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from agentrl.algos.objectives.batching import TrainRow

#: Rows that must share a micro-batch (one row for GRPO/PPO/SFT, ``[chosen, rejected]`` for DPO).
RowGroup = list["TrainRow"]


class LazyModule:
    """A module imported on its first attribute access, so that reading an algorithm's config class (the
    ``<name>.`` section every :class:`~agentrl.algos.training.config.TrainConfig` builds) imports no torch.

    The built-in algorithm files open with::

        if TYPE_CHECKING:
            import torch
        else:
            torch = LazyModule("torch")

    (type checkers see the real module). Each access is a ``sys.modules`` look-up; the import itself runs once,
    under the import system's lock.
    """

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<LazyModule {self._name!r}>"


class Algorithm(ABC):
    """Base class of every algorithm; subclass it, then add one line to :data:`agentrl.algos.objectives.ALGORITHMS`.

    Class attributes say what the loop must provide; ``config`` is an instance of :attr:`config_class`, the
    dataclass whose fields are the algorithm's ``<name>.<field>`` config keys.
    """

    config_class: ClassVar[type]
    """The algorithm's config dataclass (every field needs a default)."""
    needs_rollouts: ClassVar[bool] = True
    """``prepare`` takes a rollout's trajectories; False: it takes examples of :meth:`offline_data`."""
    needs_reference: ClassVar[bool] = False
    """``loss`` gets the reference policy's logprobs: the policy as it was when the training stage started
    (:mod:`agentrl.algos.training.reference`); the loop skips that pass otherwise."""
    min_group_size: ClassVar[int] = 1
    """The smallest ``group_size`` the algorithm accepts (2 when it compares samples within a group)."""
    uses_rollout_temperature: ClassVar[bool] = True
    """The loss's logprobs (policy and reference) are those of the distribution the rollout sampled from, the
    logits divided by the rollout temperature, as a ratio against the rollout logprobs needs (PPO, GRPO).
    False: the model's own distribution (temperature 1), as DPO's implicit reward is defined. An algorithm
    without rollouts (SFT) always gets temperature 1: there is no rollout."""
    mean_weight: ClassVar[str] = "loss_tokens"
    """The count that weighs this algorithm's averaged statistics across micro-batches (see :meth:`loss`)."""
    summed_stats: ClassVar[tuple[str, ...]] = ("loss_tokens",)
    """Statistics that are counts: summed over the micro-batches of the first epoch (see :meth:`loss`)."""
    token_level: ClassVar[bool] = False
    """The loss is a per-token policy gradient whose token weights and ``old_logprobs`` may be corrected
    (the asynchronous trainer's truncated importance sampling needs this)."""

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.config_class()

    @property
    def dropout(self) -> bool:
        """Whether the loss's forward pass runs in training mode (LoRA dropout on); gradients flow either way.

        Default: only for algorithms without rollouts (SFT: a likelihood on fixed data, where dropout
        regularises). A rollout algorithm compares the policy with ``pi_old`` and the reference, so its
        logprobs are those of the policy itself, dropout off (as TRL's ``disable_dropout`` does); the
        reference pass always runs with dropout off. A subclass may override this with a class attribute.
        """
        return not self.needs_rollouts

    @property
    def epochs(self) -> int:
        """Optimizer steps on each prepared batch (``config.epochs`` when the config has it, else 1)."""
        return int(getattr(self.config, "epochs", 1))

    @property
    def batch_size(self) -> int:
        """Examples per step of an algorithm without rollouts (``config.batch_size`` when the config has it, else 1)."""
        return int(getattr(self.config, "batch_size", 1))

    @property
    def uses_demonstrations(self) -> bool:
        """A rollout algorithm that also consults demonstrations (GRPO's ``guidance``): the loop then calls
        :meth:`offline_data` once for it too, and the algorithm keeps what it returns."""
        return False

    def offline_data(self, tokenizer, tasks, env_id: str) -> Sequence[Any]:
        """The training examples of an algorithm without rollouts, by data position: example ``k`` is ``data[k]``
        (a sequence that cycles, like ``Demonstrations``, trains for any number of steps). Called once when the
        trainer is built, with the run's tokenizer, task source (``.env``, ``.task(k)``) and env id (for errors);
        for a rollout algorithm only when :attr:`uses_demonstrations`."""
        raise NotImplementedError(f"{type(self).__name__} has no rollouts: it must implement offline_data")

    @abstractmethod
    def prepare(self, batch: list[Any]) -> tuple[list[RowGroup], dict[str, float]]:
        """Turn a whole batch into row groups for the loss, plus statistics logged as ``train/<key>``.

        An empty list means nothing to train on: the loop then makes no optimizer step.
        """

    @abstractmethod
    def loss(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
             batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one micro-batch (its weighted sum over micro-batches is the batch loss) and statistics.

        ``logprobs``/``ref_logprobs`` are ``[B, T]`` token logprobs aligned with ``batch["input_ids"]``
        (``ref_logprobs`` is ``None`` unless :attr:`needs_reference`); ``batch`` is
        :func:`~agentrl.algos.objectives.batching.collate`'s output.

        How the loop combines the statistics of the micro-batches into the step's ``train/<key>``: keys in
        :attr:`summed_stats` are counts, summed (over the first epoch); keys ending in ``_max`` are maxima;
        every other key is a mean over the micro-batches weighted by the micro-batch's own
        ``stats[mean_weight]`` (:attr:`mean_weight`: ``loss_tokens`` for a per-token loss, ``pairs`` for a
        per-pair one), so each statistic is averaged over the units it was computed on.
        """
