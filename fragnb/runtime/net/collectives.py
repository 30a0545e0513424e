"""Collectives: a torch.distributed process group across the replicas of a group, and gradient
all-reduce for their learners (DD-PPO style: every replica steps with the mean gradient)."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["join", "leave", "average"]

_JOINED: set[str] = set()


def join(
    run_id: str,
    rank: int,
    world: int,
    address: str,
    backend: str,
    modules: list[torch.nn.Module],
    timeout_s: float = 60.0,
) -> int:
    """Join the run's process group, then average the gradients of ``modules`` (the learners' networks) across it."""
    if dist.is_initialized():  # a previous run on this worker did not leave (e.g. it was interrupted)
        dist.destroy_process_group()
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    timeout = timedelta(seconds=timeout_s)
    _bind_collectives_to(host)
    if rank == 0:
        # torch's TCPStore listens on every interface unless handed a socket: bind one to the worker's address
        listener = socket.create_server((host, int(port)))
        store = dist.TCPStore(host, int(port), world, True, timeout, master_listen_fd=listener.detach())
    else:
        store = dist.TCPStore(host, int(port), world, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    _JOINED.add(run_id)
    for module in modules:
        _average_gradients(module)
    return rank


def _bind_collectives_to(host: str) -> None:
    """Make gloo and NCCL open their sockets on the interface that holds ``host`` (loopback for
    fragnb's own cluster), not on whichever the machine's hostname resolves to."""
    import psutil

    name = next((n for n, addrs in psutil.net_if_addrs().items() if any(a.address == host for a in addrs)), None)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = name


def _average_gradients(module: torch.nn.Module) -> None:
    """Once backward has produced every gradient of ``module``, replace them by their mean over the
    replicas (:func:`average`), in one all-reduce (one call per backward, not one per tensor)."""
    params = [p for p in module.parameters() if p.requires_grad]
    pending = {"count": 0}

    def on_grad(_param: torch.Tensor) -> None:
        pending["count"] += 1
        if pending["count"] < len(params):
            return
        pending["count"] = 0
        average([p.grad for p in params], dist.all_reduce, dist.get_world_size())

    for p in params:
        p.register_post_accumulate_grad_hook(on_grad)


def average(grads: list[torch.Tensor], all_reduce, world: int) -> None:
    """Replace ``grads`` in place by their mean over ``world`` replicas: one flat bucket, summed
    across them by ``all_reduce`` (in place: ``torch.distributed.all_reduce``), divided, copied back."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def leave(run_id: str) -> None:
    if run_id in _JOINED:
        _JOINED.discard(run_id)
        if dist.is_initialized():
            dist.destroy_process_group()
