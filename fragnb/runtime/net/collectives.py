"""Collectives: a torch.distributed process group across the replicas of a group, and gradient
all-reduce for their learners (DD-PPO style: every replica steps with the mean gradient), or for
every optimiser a whole-cell replica steps (``data_parallel``). The mean goes through the transfer's
weight sync, :class:`~fragnb.runtime.net.weights.AllReduce`."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from .weights import AllReduce

__all__ = ["join", "leave", "average", "settle"]

_JOINED: set[str] = set()
#: The optimisers this process's whole-cell replica steps, in the same order on every replica (data_parallel).
_STEPPERS: list[torch.optim.Optimizer] = []
_SHADOW = False  # stepping in settle(): the step pre-hook lets it through
#: Tensors of such a replica that no optimiser steps, which follow replica 0's after every iteration.
_FOLLOWERS: list[torch.Tensor] = []


def join(
    run_id: str,
    rank: int,
    world: int,
    address: str,
    backend: str,
    modules: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer] = (),
    followers: list[torch.Tensor] = (),
    timeout_s: float = 60.0,
) -> int:
    """Join the run's process group, then average the gradients of ``modules`` (the learners' networks)
    across it after each backward, and those each of ``optimizers`` applies before each of its steps;
    ``followers`` take replica 0's values after every iteration (:func:`settle`)."""
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
    _STEPPERS[:] = optimizers
    _FOLLOWERS[:] = followers
    for optimizer in optimizers:
        optimizer.register_step_pre_hook(_average_before_step)
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
    pending = {"count": 0, "backwards": 0}
    sync = AllReduce(dist.get_world_size())

    def on_grad(_param: torch.Tensor) -> None:
        pending["count"] += 1
        if pending["count"] < len(params):
            return
        pending["count"] = 0
        pending["backwards"] += 1
        average([p.grad for p in params], sync, pending["backwards"])

    for p in params:
        p.register_post_accumulate_grad_hook(on_grad)


def _average_before_step(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """An optimiser's step pre-hook (``data_parallel``): the gradients it is about to apply become
    their mean over the replicas that step it now. PyTorch DDP averages at backward instead; at the
    step, a loop's own clipping and gradient accumulation stay as written."""
    if not _SHADOW:
        _round(_STEPPERS.index(optimizer))


def settle() -> None:
    """At the end of an iteration (``data_parallel``): take part in the other replicas' steps, with no
    gradients of this one's, and apply them too, until every replica has reached it. Episodes of
    different lengths step the optimisers different numbers of times (PyTorch's ``Join`` shadows
    uneven inputs the same way); applying the steps it shadows keeps every replica's networks and
    optimiser states equal, where DDP's Join broadcasts the final model instead."""
    if _STEPPERS or _FOLLOWERS:
        while _STEPPERS and _round(None):
            pass
    if _FOLLOWERS:  # as DDP broadcasts buffers: target networks updated by hand, running statistics
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).double() for t in _FOLLOWERS])
            dist.broadcast(flat, src=0)
            offset = 0
            for t in _FOLLOWERS:
                t.copy_(flat[offset : offset + t.numel()].view_as(t).to(t.dtype))
                offset += t.numel()


def _round(which: int | None) -> int:
    """One collective round of a whole-cell run: how many replicas step an optimiser now and which
    (``which``: this replica's, by its index in every replica's list; None: none, it waits at the end of
    an iteration); then that optimiser's gradients, summed with a count per parameter of the replicas
    that have one, and each divided by its count. Returns how many replicas stepped."""
    device = next(p.device for opt in _STEPPERS for g in opt.param_groups for p in g["params"])
    mine = which is not None
    header = torch.tensor([float(mine), which or 0, (which or 0) ** 2], dtype=torch.float64, device=device)
    dist.all_reduce(header)
    active = int(header[0])
    if not active:
        return 0
    index = header[1].item() / active
    if header[2].item() / active - index**2 > 1e-6:
        raise RuntimeError(
            "the replicas stepped different optimisers at the same moment: data_parallel pairs every replica's "
            "k-th optimizer.step() in an iteration, so each iteration must step the optimisers in the same order "
            "on every replica (steps that depend on a replica's own episodes, such as `if done: actor_opt.step()`, "
            "break that)"
        )
    params = [p for group in _STEPPERS[round(index)].param_groups for p in group["params"]]
    dtype = torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32
    has = [mine and p.grad is not None for p in params]
    flat = torch.cat(
        [(p.grad if h else torch.zeros_like(p)).reshape(-1).to(dtype) for p, h in zip(params, has)]
        + [torch.tensor(has, dtype=dtype, device=device)]
    )
    dist.all_reduce(flat)
    counts, offset = flat[-len(params) :].tolist(), 0
    for p, n in zip(params, counts):
        mean = (flat[offset : offset + p.numel()] / n).view_as(p).to(p.dtype) if n else None
        if mean is not None and p.grad is None:
            p.grad = mean.clone()
        elif mean is not None:
            p.grad.copy_(mean)
        elif not mine:
            p.grad = None  # no replica has one: the step skips it, as theirs do
        offset += p.numel()
    if not mine:  # the step the others take now, taken here too
        global _SHADOW
        _SHADOW = True
        try:
            _STEPPERS[round(index)].step()
        finally:
            _SHADOW = False
    return active


def average(grads: list[torch.Tensor], sync: AllReduce, version: int = 0) -> None:
    """Replace ``grads`` in place by their mean over the group: published as ``version`` through
    ``sync`` (every replica's k-th backward is version k), read back, copied in."""
    sync.publish(version, grads)
    _, (mean,) = sync.latest(version)
    offset = 0
    for g in grads:
        g.copy_(mean[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def leave(run_id: str) -> None:
    if run_id in _JOINED:
        _STEPPERS.clear()
        _FOLLOWERS.clear()
        _JOINED.discard(run_id)
        if dist.is_initialized():
            dist.destroy_process_group()
