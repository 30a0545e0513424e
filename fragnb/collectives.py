"""Collectives: a torch.distributed process group across the replicas of a group, and gradient
all-reduce for their learners (DD-PPO style: every replica steps with the mean gradient)."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from .components import Learner

__all__ = ["join", "leave"]

_JOINED: set[str] = set()


def join(run_id: str, rank: int, world: int, address: str, backend: str, timeout_s: float = 60.0) -> int:
    """Join the run's process group, then average gradients of every learner's networks across it."""
    from .replica import _REPLICAS

    if dist.is_initialized():  # a previous run on this worker did not leave (e.g. it was interrupted)
        dist.destroy_process_group()
    dist.init_process_group(backend, init_method=address, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    _JOINED.add(run_id)
    rep = next(r for (rid, _, i), r in _REPLICAS.items() if rid == run_id and i == rank)
    for learner in (v for v in rep.ns.values() if isinstance(v, Learner)):
        for module in (m for m in vars(learner).values() if isinstance(m, torch.nn.Module)):
            for p in module.parameters():
                p.register_hook(_mean_over_replicas)
    return rank


def _mean_over_replicas(grad: torch.Tensor) -> torch.Tensor:
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad.div_(dist.get_world_size())


def leave(run_id: str) -> None:
    if run_id in _JOINED:
        _JOINED.discard(run_id)
        if dist.is_initialized():
            dist.destroy_process_group()
