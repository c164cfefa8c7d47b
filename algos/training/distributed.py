"""Data-parallel training: N trainer processes, one model replica each, launched by torchrun or accelerate.

::

    torchrun --nproc_per_node 4 -m agentrl.algos.cli train --algo grpo ...     # or: accelerate launch -m ...

The launcher sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; a run without them
is one process and nothing here does anything. One step with N ranks::

    rank r collects tasks[r::N] of the step's tasks        its share of the groups, with its own rollout seed
    every rank gathers every trajectory                     group ids renumbered to the step's task index
    algo.prepare(all trajectories)                          identical on every rank: advantages over whole groups,
                                                            token weights fixed on the whole batch
    rank r backpropagates the row groups [r::N]             its share of the loss
    all-reduce (sum) of the LoRA gradients                  = the one-process gradient, because every row's weight
                                                            was fixed on the whole batch before it was shared out
    every rank steps its optimizer identically; rank 0 logs, checkpoints and saves the adapter

A script that builds a :class:`~agentrl.algos.training.trainer.Trainer` itself ends with :func:`finish` (as
``agentrl train`` does) so that no rank exits while another still holds the process group.

Only the LoRA parameters have gradients, so the all-reduce moves megabytes, not the model. Every rank clips and
steps the same summed gradient, so every rank holds the same adapter after each step: ranks that sample through
one server (``--policy-url``, or the node's ``--engine``) publish each version there once (:func:`share_servers`).
Environments may still run elsewhere (``executor=ray`` env actors).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in a data-parallel run (``rank 0 of 1`` when there is none)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs, checkpoints and saves."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of ``items``: every ``world``-th item from position ``rank``."""
        return list(items[self.rank::self.world])


def setup(device: str) -> Ranks:
    """Join the process group the launcher describes in the environment (no-op for a single process).

    The backend is NCCL for CUDA devices and gloo otherwise; a CUDA rank uses the GPU ``LOCAL_RANK``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if not dist.is_initialized():
        cuda = str(device).startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if cuda else "gloo")
    return Ranks(rank=rank, world=world, local_rank=local_rank)


def rank_device(device: str, ranks: Ranks) -> str:
    """``device`` for this rank: a bare ``cuda`` becomes ``cuda:<LOCAL_RANK>`` in a data-parallel run."""
    return f"cuda:{ranks.local_rank}" if ranks.distributed and device == "cuda" else device


def gather_trajectories(trajectories: list[Any], ranks: Ranks) -> list[Any]:
    """Every rank's trajectories of a step, in the order one process would have collected them.

    Rank r collected ``tasks[r::world]``, so its local group ``g`` is the step's task ``r + g * world``; group
    ids are renumbered to that (a no-op in one process) and the union is sorted by group, each group's samples
    in their sampled order.
    """
    for t in trajectories:
        t.group_id = ranks.rank + t.group_id * ranks.world
    if not ranks.distributed:
        return trajectories
    import torch.distributed as dist

    parts: list[list[Any] | None] = [None] * ranks.world
    dist.all_gather_object(parts, trajectories)
    return sorted((t for part in parts for t in part), key=lambda t: t.group_id)


def all_reduce_gradients(params: Sequence[Any], ranks: Ranks) -> None:
    """Sum every parameter's gradient over the ranks, in one collective (a rank without rows adds zeros)."""
    if not ranks.distributed:
        return
    import torch
    import torch.distributed as dist

    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def gather_objects(obj: Any, ranks: Ranks) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (``[obj]`` in one process)."""
    if not ranks.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ranks.world
    dist.all_gather_object(out, obj)
    return out


def share_servers(policy: Any, ranks: Ranks) -> None:
    """Let the ranks that sample through one server publish each adapter version there once: every rank gathers
    every rank's server (``policy.server_key()``) and joins the group of its own
    (``policy.join_group``, :class:`~agentrl.algos.policy.adapter_group.ServerGroup`; its lowest rank loads, the
    others sample with that name). Every rank calls this once, before the policy's first ``update_weights``;
    nothing happens in one process, or unless every rank's policy can share (an ``OpenAIPolicy``)."""
    if not ranks.distributed:
        return
    key = policy.server_key() if callable(getattr(policy, "join_group", None)) else None
    everyone = gather_objects(key, ranks)
    if all(k is not None for k in everyone):
        policy.join_group(everyone, ranks.rank, lambda obj: gather_objects(obj, ranks))


def barrier(ranks: Ranks) -> None:
    """Wait for every rank (e.g. until rank 0 has written a checkpoint the others may read)."""
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def finish(ranks: Ranks) -> None:
    """Leave the process group at the end of a run: wait for every rank, then destroy the group (no-op in one
    process). A rank that exits while another still holds the group can die in gloo's destructor at interpreter
    exit (``terminate called without an active exception``, SIGABRT), which fails the whole launch."""
    if not ranks.distributed:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class RanksDisagree(ValueError):
    """The ranks of a data-parallel run do not start from the same state."""


#: What the ranks compare at start (:func:`check_ranks_agree`), in this order, with the words a refusal uses.
AGREED = {"step": "step", "data_position": "data position", "config": "config (sha256)",
          "adapter": "adapter weights (sha256)"}


def disagreement(states: Sequence[dict[str, Any]], hint: str = "") -> str | None:
    """The one-line refusal when the ranks' ``states`` (one dict per rank, keys of :data:`AGREED`, each value
    optionally with an ``<key>_from`` saying where it came from) differ on a key, else None."""
    for key, words in AGREED.items():
        values = [s.get(key) for s in states]
        if len(set(map(repr, values))) > 1:
            shown = ", ".join(f"rank {r}: {v}" + (f" ({s[key + '_from']})" if s.get(key + "_from") else "")
                              for r, (s, v) in enumerate(zip(states, values, strict=True)))
            return f"the ranks start from different states: {words} differs ({shown}){hint}"
    return None


def check_ranks_agree(state: dict[str, Any], ranks: Ranks, *, hint: str = "") -> None:
    """Every rank gathers every rank's ``state`` and raises :class:`RanksDisagree` (the same one line on each)
    when they differ (:func:`disagreement`; ``hint``: what to do, appended). A no-op in one process."""
    if not ranks.distributed:
        return
    message = disagreement(gather_objects(state, ranks), hint)
    if message:
        raise RanksDisagree(message)


def weights_digest(params: Sequence[Any]) -> str:
    """The first 12 hex digits of the sha256 of ``params``' values (bit for bit, in order): equal on every rank
    that holds the same adapter."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:12]
