"""``agentrl.algos.train``: build the trainer a config asks for (synchronous or asynchronous) and run it."""

from __future__ import annotations

from agentrl.algos.training.async_trainer import AsyncTrainer
from agentrl.algos.training.config import TrainConfig
from agentrl.algos.training.trainer import Trainer


def train(config: TrainConfig, *, resume: bool = False, **kwargs) -> Trainer:
    """Build a :class:`~agentrl.algos.training.trainer.Trainer` for ``config`` (an
    :class:`~agentrl.algos.training.async_trainer.AsyncTrainer` when ``config.asynchronous.enabled``), run it to
    ``config.steps`` and return it."""
    trainer_class = AsyncTrainer if config.asynchronous.enabled else Trainer
    trainer = trainer_class(config, resume=resume, **kwargs)
    trainer.train()
    return trainer
