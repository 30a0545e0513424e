"""Collectives: a torch.distributed process group across the replicas of a group, and gradient
all-reduce for their learners (DD-PPO style: every replica steps with the mean gradient), or for
every optimiser a whole-cell replica steps (``data_parallel``). The mean goes through the transfer's
weight sync, :class:`~fragnb.runtime.net.weights.AllReduce`.

Each replica's part is a :class:`Member` (what it averages, through which group): on workers the
process's torch.distributed group (:class:`Gloo`, one replica per process), or where every replica of the
group is on one machine a shared-memory group beside it (:class:`~fragnb.runtime.net.shm.SharedMemory`: a
tiny all-reduce in tens of microseconds, not gloo's loopback round trips); in a replay of a failed run
(:mod:`fragnb.runtime.replay`) the replicas are threads of the kernel, and :class:`InProcess` sums their
tensors in rank order, which for two replicas is gloo's sum to the bit (a + b = b + a)."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from . import shm
from .weights import AllReduce

__all__ = [
    "join",
    "attach",
    "leave",
    "abort",
    "group_of",
    "average",
    "settle",
    "Member",
    "Gloo",
    "InProcess",
    "Rendezvous",
]

_JOINED: set[str] = set()
_SHARED: dict[str, shm.SharedMemory] = {}  # run -> this process's shared-memory group, where the run has one


class Gloo:
    """This process's torch.distributed group (gloo on CPUs, NCCL on GPUs): one replica per process."""

    def __init__(self):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def all_reduce(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        dist.broadcast(tensor, src=src)


class Rendezvous:
    """Where the replicas of one group, threads of one process, meet for a collective."""

    def __init__(self, world: int):
        self.world, self.slots, self.barrier = world, [None] * world, threading.Barrier(world)

    def abort(self) -> None:
        """A replica failed: the others' waits end (BrokenBarrierError) instead of hanging."""
        self.barrier.abort()


class InProcess:
    """Replica ``rank`` of a group whose replicas are threads of this process (a replay): sums in rank order.
    ``aside()`` is entered around each wait for the others (the replica's generators stepping aside, so that
    a peer that draws on its way to the same collective can)."""

    def __init__(self, rank: int, meeting: Rendezvous, aside=contextlib.nullcontext):
        self.rank, self.world, self.meeting, self.aside = rank, meeting.world, meeting, aside

    def wait(self) -> None:
        with self.aside():
            self.meeting.barrier.wait()

    def all_reduce(self, tensor: torch.Tensor) -> None:
        meeting = self.meeting
        meeting.slots[self.rank] = tensor.clone()
        self.wait()
        total = meeting.slots[0].clone()
        for part in meeting.slots[1:]:
            total += part
        self.wait()  # every replica has read the parts before any writes its next
        tensor.copy_(total)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        meeting = self.meeting
        if self.rank == src:
            meeting.slots[src] = tensor.clone()
        self.wait()
        tensor.copy_(meeting.slots[src])
        self.wait()


@dataclass
class Member:
    """One replica's part in its group's collectives: through ``group``, the optimisers its whole-cell copy
    steps (``steppers``, in the same order on every replica: ``data_parallel``) and the tensors no optimiser
    steps, which follow replica 0's after every iteration (``followers``)."""

    group: Gloo | InProcess | shm.SharedMemory
    steppers: list[torch.optim.Optimizer] = field(default_factory=list)
    followers: list[torch.Tensor] = field(default_factory=list)
    shadow: bool = False  # stepping in settle(): the step pre-hook lets it through
    #: The followers' values at the last broadcast (every replica's the same), and whether any replica's
    #: differ from them now, as the last collective round of settle() added it up.
    settled: torch.Tensor | None = None
    changed: bool = True
    #: What the last round's header carried of the leader's verdict on the iteration: (stop, keep a checkpoint).
    verdict: tuple[bool, bool] = (False, False)


def join(
    run_id: str,
    rank: int,
    world: int,
    address: str,
    backend: str,
    timeout_s: float = 60.0,
    shared: str | None = None,
) -> int:
    """Join the run's process group as ``rank`` (then :func:`attach` a replica to it, through :func:`group_of`);
    with ``shared`` (every replica on this machine), also the shared-memory group of that name, which the
    replica's CPU all-reduces then go through."""
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
    if shared is not None and backend == "gloo" and shm.available():
        _SHARED[run_id] = shm.SharedMemory(shared, rank, world, fallback=Gloo(), timeout_s=timeout_s)
    return rank


def group_of(run_id: str) -> Gloo | shm.SharedMemory:
    """The group this process's replica of ``run_id`` all-reduces through: shared memory where it joined one."""
    return _SHARED.get(run_id) or Gloo()


def attach(
    group: Gloo | InProcess,
    modules: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer] = (),
    followers: list[torch.Tensor] = (),
) -> Member:
    """Average the gradients of ``modules`` (the learners' networks) across ``group`` after each backward,
    and those each of ``optimizers`` applies before each of its steps; ``followers`` take replica 0's
    values after every iteration (:func:`settle`)."""
    member = Member(group, list(optimizers), list(followers))
    for module in modules:
        _average_gradients(module, group)
    for optimizer in optimizers:
        optimizer.register_step_pre_hook(functools.partial(_average_before_step, member))
    return member


def _bind_collectives_to(host: str) -> None:
    """Make gloo and NCCL open their sockets on the interface that holds ``host`` (loopback for
    fragnb's own cluster), not on whichever the machine's hostname resolves to."""
    import psutil

    name = next((n for n, addrs in psutil.net_if_addrs().items() if any(a.address == host for a in addrs)), None)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = name


def _average_gradients(module: torch.nn.Module, group: Gloo | InProcess) -> None:
    """Once backward has produced every gradient of ``module``, replace them by their mean over the
    replicas (:func:`average`), in one all-reduce (one call per backward, not one per tensor)."""
    params = [p for p in module.parameters() if p.requires_grad]
    pending = {"count": 0, "backwards": 0}
    sync = AllReduce(group.world, group.all_reduce)

    def on_grad(_param: torch.Tensor) -> None:
        pending["count"] += 1
        if pending["count"] < len(params):
            return
        pending["count"] = 0
        pending["backwards"] += 1
        average([p.grad for p in params], sync, pending["backwards"])

    for p in params:
        p.register_post_accumulate_grad_hook(on_grad)


def _average_before_step(member: Member, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """An optimiser's step pre-hook (``data_parallel``): the gradients it is about to apply become
    their mean over the replicas that step it now. PyTorch DDP averages at backward instead; at the
    step, a loop's own clipping and gradient accumulation stay as written."""
    if not member.shadow:
        _round(member, member.steppers.index(optimizer))


def settle(member: Member | None, verdict: tuple[bool, bool] | None = None) -> tuple[bool, bool] | None:
    """At the end of an iteration (``data_parallel``): take part in the other replicas' steps, with no
    gradients of this one's, and apply them too, until every replica has reached it. Episodes of
    different lengths step the optimisers different numbers of times (PyTorch's ``Join`` shadows
    uneven inputs the same way); applying the steps it shadows keeps every replica's networks and
    optimiser states equal, where DDP's Join broadcasts the final model instead.

    ``verdict``: the leader's (stop, keep a checkpoint) on this iteration, ``(False, False)`` from the others.
    It rides in the rounds' header, and the last round, which every replica reaches, tells it to all: returned,
    where the run has such a round (None: the caller asks the leader itself). A loop of a millisecond an
    iteration paid a round trip to the leader for it on top of this round (CleanRL's dqn.py: a sixth of a
    replica's time, 2026-12-05)."""
    if member is None:  # its gradients are its own (the transfer's operator is "local"): nothing to settle
        return None
    flat = None
    if member.followers:  # no optimiser steps them, so the rounds below leave them as they are now
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).double() for t in member.followers])
    # Whether this replica's followers moved since the last broadcast rides in every round's header, so the
    # last round (none steps) tells every replica whether any moved: only then is a broadcast needed.
    moved = flat is not None and (member.settled is None or not torch.equal(flat, member.settled))
    member.changed = True
    while member.steppers and _round(member, None, moved, verdict or (False, False)):
        pass
    if flat is not None and (member.changed or not member.steppers):
        # as DDP broadcasts buffers: target networks updated by hand, running statistics, take replica 0's
        with torch.no_grad():
            member.group.broadcast(flat, 0)
            offset = 0
            for t in member.followers:
                t.copy_(flat[offset : offset + t.numel()].view_as(t).to(t.dtype))
                offset += t.numel()
        member.settled = flat
    return member.verdict if member.steppers and verdict is not None else None


def _round(member: Member, which: int | None, moved: bool = False, verdict: tuple[bool, bool] = (False, False)) -> int:
    """One collective round of a whole-cell run: how many replicas step an optimiser now and which
    (``which``: this replica's, by its index in every replica's list; None: none, it waits at the end of
    an iteration), whether any replica's followers moved (``moved``: this one's; the sum lands in
    ``member.changed``) and the leader's ``verdict`` (:func:`settle`; in ``member.verdict``); then that
    optimiser's gradients, summed with a count per parameter of the replicas that have one, and each divided
    by its count. Returns how many replicas stepped.

    Where the cell steps one optimiser (most loops), its gradients ride in the header's all-reduce: one
    meeting of the replicas a step, not two. A loop that steps after every environment step (the DQN
    tutorial) waits at each meeting for the slower replica, which on a machine whose cores are all busy is
    most of what it pays."""
    steppers = member.steppers
    device = next(p.device for opt in steppers for g in opt.param_groups for p in g["params"])
    mine = which is not None
    header = [float(mine), which or 0, (which or 0) ** 2, float(moved), *map(float, verdict)]
    single = len(steppers) == 1
    if single:  # small integers in the gradients' dtype: summed exactly, and the gradients as before
        params, dtype = _stepped(steppers[0])
        flat = torch.cat([torch.tensor(header, dtype=dtype, device=device), _gradients(params, mine, dtype, device)])
        member.group.all_reduce(flat)
        head, flat = flat[: len(header)], flat[len(header) :]
    else:
        head = torch.tensor(header, dtype=torch.float64, device=device)
        member.group.all_reduce(head)
    member.changed = bool(head[3])
    member.verdict = (bool(head[4]), bool(head[5]))
    active = int(head[0])
    if not active:
        return 0
    index = head[1].item() / active
    if head[2].item() / active - index**2 > 1e-6:
        raise RuntimeError(
            "the replicas stepped different optimisers at the same moment: data_parallel pairs every replica's "
            "k-th optimizer.step() in an iteration, so each iteration must step the optimisers in the same order "
            "on every replica (steps that depend on a replica's own episodes, such as `if done: actor_opt.step()`, "
            "break that)"
        )
    if not single:
        params, dtype = _stepped(steppers[round(index)])
        flat = _gradients(params, mine, dtype, device)
        member.group.all_reduce(flat)
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
        member.shadow = True
        try:
            steppers[round(index)].step()
        finally:
            member.shadow = False
    return active


def _stepped(optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], torch.dtype]:
    """The parameters ``optimizer`` steps, and the dtype their gradients are summed in."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return params, torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32


def _gradients(params: list[torch.Tensor], mine: bool, dtype: torch.dtype, device) -> torch.Tensor:
    """This replica's gradients of ``params`` in one flat tensor (zeros where it has none, or steps none now:
    ``mine``), then whether it has each, as the all-reduce sums them."""
    has = [mine and p.grad is not None for p in params]
    return torch.cat(
        [(p.grad if h else torch.zeros_like(p)).reshape(-1).to(dtype) for p, h in zip(params, has)]
        + [torch.tensor(has, dtype=dtype, device=device)]
    )


def average(grads: list[torch.Tensor], sync: AllReduce, version: int = 0) -> None:
    """Replace ``grads`` in place by their mean over the group: published as ``version`` through
    ``sync`` (every replica's k-th backward is version k), read back, copied in."""
    sync.publish(version, grads)
    _, (mean,) = sync.latest(version)
    offset = 0
    for g in grads:
        g.copy_(mean[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def abort(run_id: str) -> None:
    """End this process's waits in ``run_id``'s shared-memory all-reduce, and its peers' (they raise)."""
    if run_id in _SHARED:
        shm.abort(_SHARED[run_id].name)


def leave(run_id: str) -> None:
    if run_id in _SHARED:
        _SHARED.pop(run_id).close()
    if run_id in _JOINED:
        _JOINED.discard(run_id)
        if dist.is_initialized():
            dist.destroy_process_group()
