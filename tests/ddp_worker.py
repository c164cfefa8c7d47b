"""One rank of the data-parallel tests (run by tests/test_distributed.py through torchrun; not a test module).

    python -m torch.distributed.run --nproc_per_node 2 tests/ddp_worker.py OUT STEPS [--resume] [--kill-in-step K]
        [--out-per-rank]

``--out-per-rank``: rank r works in ``OUT/node<r>`` (each node of a run without a shared filesystem).

Trains the tiny GRPO config of tests/helpers.py. Rank 0 records, for the first step it runs, the whole batch of
trajectories the update saw (``OUT/batch.pt``) and the summed gradient the optimizer stepped with
(``OUT/grads.pt``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from helpers import kill_in_step, tiny_train_config, tiny_train_model

from agentrl.algos import Trainer
from agentrl.algos.models import load_tokenizer
from agentrl.algos.training import distributed


def ddp_config(out: Path, steps: int):
    return tiny_train_config(out, steps=steps, tasks_per_step=4, group_size=4, save_every=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("steps", type=int)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--kill-in-step", type=int)
    ap.add_argument("--out-per-rank", action="store_true")
    args = ap.parse_args()
    out = Path(args.out) / f"node{os.environ['RANK']}" if args.out_per_rank else Path(args.out)
    tok = load_tokenizer()
    trainer = Trainer(ddp_config(out, args.steps), model=tiny_train_model(tok), tokenizer=tok, resume=args.resume)
    if args.kill_in_step is not None:
        kill_in_step(trainer, args.kill_in_step)
    if trainer.ranks.is_main and not (out / "grads.pt").exists():
        prepare, step = trainer.algo.prepare, trainer.optimizer.step

        def recording_prepare(trajectories):
            torch.save([t.to_dict() for t in trajectories], out / "batch.pt")
            return prepare(trajectories)

        def recording_step(*a, **kw):
            if not (out / "grads.pt").exists():
                torch.save([p.grad.clone() for p in trainer.params], out / "grads.pt")
            return step(*a, **kw)

        trainer.algo.prepare, trainer.optimizer.step = recording_prepare, recording_step
    trainer.train()
    distributed.finish(trainer.ranks)


if __name__ == "__main__":
    main()
