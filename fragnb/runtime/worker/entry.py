"""Entry points: the functions Dask calls on a worker to start a replica and run its program.

The notebook's side (:mod:`fragnb.runtime.plane`) submits them by reference, so a worker runs them
from this module: :func:`open_replica` builds a replica from its group's payload (or a checkpoint)
and opens its channel inbox, :func:`join_process_group` joins a run's torch.distributed group, and
:func:`run_program` walks the program as one or more of the worker's replicas until the run ends.
The safety net's threads (:mod:`fragnb.runtime.threads`) call :func:`init_replica` and :func:`play`
the same way, on queues instead of sockets. The replicas a worker holds meanwhile, and the calls
that reach them by run (stop, forsake, abort, drop, fetch a checkpoint), are
:mod:`~fragnb.runtime.worker.registry`'s.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import pickle
import sys
import threading
from typing import TYPE_CHECKING

import distributed

from ...components import Component, Env, Learner, modules_of
from ...plan.instrument import remember_source
from ...plan.script import ReplicaId
from ...rows import whole_rows
from ...shards import faithful_copies, reseed, shard, torch_held
from ...sinks import Held
from ...streams import serving
from ..cluster import dask_profiler
from ..net import collectives
from ..net.channels import ChannelError, ZmqChannels, root_cause
from . import registry
from .edges import scatter
from .free import FreeWalker
from .generators import Own, own_random, restore, seeded
from .ledger import Ledger
from .payload import Payload
from .replica import Replica
from .report import Finals
from .travel import bound_to, refuse_unreturnable
from .walker import Walker

if TYPE_CHECKING:
    from ...plan.script import Script
    from ..net.channels import Channels

__all__ = [
    "WALKERS",
    "init_replica",
    "open_replica",
    "forward_print",
    "quiet_print",
    "transmissible",
    "play",
    "run_program",
    "join_process_group",
    "stepped_and_followed",
]

#: The walker each mode's replicas run, by the name the mode gives (:meth:`fragnb.policies.modes.Mode.walker`).
WALKERS = {"lockstep": Walker, "free": FreeWalker}


def init_replica(
    run_id: str,
    group: str,
    index: int,
    count: int,
    device: str,
    payload: Payload,
    source: tuple[str, str],
    fused: bool = False,
    resume: bytes | None = None,
) -> Replica:
    """Unpickle the notebook's objects, shard the components the payload names, move them to ``device``
    (environments too if ``fused``), and keep them here; or take them as they were at the checkpoint
    ``resume``."""
    import torch._dynamo  # noqa: F401  torch.optim imports it on a first step: 1 s a worker, paid here, not in the loop

    filename, text = source
    remember_source(filename, text)
    compiled = {i: compile(module, filename, "exec") for i, module in pickle.loads(payload.codes).items()}
    if resume is None:
        ns = pickle.loads(payload.objects)
        for name in payload.sharded:
            ns[name] = shard(ns[name], index, count)
        for name, axis in payload.scattered.items():
            ns[name] = scatter(ns[name], index, count, ns[name].shape[axis], axis)
        if payload.reseed is not None:  # whole copies: replica i's environments draw other numbers than replica 0's
            reseed(ns, index, payload.reseed)
        for name in payload.rebound:  # `global steps_done` in the notebook's function counts in this namespace
            ns[name] = bound_to(ns[name], ns)
        if (
            device != "cpu"
        ):  # environments stay on the CPU (actors answer them there) unless fused with them on the device
            for comp in (v for v in ns.values() if isinstance(v, Component) and (fused or not isinstance(v, Env))):
                comp.to(device)
        rep = Replica(group, index, count, device, ns, compiled, streams=payload.streams)
        rep.ledger = Ledger.start(rep.envs(), count)  # the run's counts begin with its shard as it arrived
    else:
        state = pickle.loads(resume)
        rep = Replica(group, index, count, device, {}, compiled, resumed=state["walker"], streams=payload.streams)
        rep.set_state(state["replica"])
    # the cell's prints reach the notebook, once: a whole-cell policy's other replicas print what replica 0 does
    rep.ns["print"] = forward_print if payload.reseed is None or index == 0 else quiet_print
    for sink in (v for v in rep.ns.values() if isinstance(v, Held)):  # it keys its calls by where the walk is
        sink.bind(rep)
    registry.add(run_id, rep)
    return rep


def forward_print(*args, sep: str | None = " ", end: str | None = "\n", file=None, flush: bool = False) -> None:
    """``print`` for the cell's code on a worker: the notebook's client prints it. (``distributed.print``
    also prints it here, to the worker's stdout, which a LocalCluster's workers share with the
    notebook's kernel: a terminal or ``nbconvert`` would show every line twice.) Off a worker (the
    safety net's threads), and to a file of the cell's own, it is the builtin."""
    try:
        worker = distributed.get_worker()
    except ValueError:
        worker = None
    if worker is None or file not in (None, sys.stdout, sys.stderr):
        builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
        return
    msg = {"args": tuple(map(str, args)), "sep": sep, "end": end, "flush": flush}
    if file is sys.stderr:
        msg["file"] = 2
    worker.log_event("print", msg)


def quiet_print(*args, file=None, **kwargs) -> None:
    """``print`` for replicas 1.. of a whole-cell policy: to the screen, nothing (replica 0 says it);
    to a file of the cell's own, the builtin."""
    if file not in (None, sys.stdout, sys.stderr):
        builtins.print(*args, file=file, **kwargs)


#: Frames of a failed task's traceback that travel to the notebook (the first ones: the task, the walker,
#: the cell's line and what it called).
_FRAMES = 64


def transmissible(task):
    """A task whose error always reaches the notebook: a traceback thousands of frames deep (a
    RecursionError in the cell, or in unpickling what the payload holds) is cut to its first
    :data:`_FRAMES` frames. Sent whole, the client never learned that the task had failed, and the run
    waited for it forever."""

    @functools.wraps(task)
    def run(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except BaseException as e:
            _cut(e)
            raise

    return run


def _cut(error: BaseException | None, depth: int = 0) -> None:
    if error is None or depth > 4:
        return
    tb, n = error.__traceback__, 1
    while tb is not None and tb.tb_next is not None:
        if n >= _FRAMES:
            tb.tb_next = None
            break
        tb, n = tb.tb_next, n + 1
    _cut(error.__cause__, depth + 1)
    _cut(error.__context__, depth + 1)


@transmissible
def open_replica(
    run_id: str,
    group: str,
    index: int,
    count: int,
    device: str,
    payload: Payload,
    source: tuple[str, str],
    host: str,
    secret: bytes,
    fused: bool = False,
    resume: bytes | None = None,
) -> dict:
    """On a worker: :func:`init_replica`, then open the replica's channel inbox on ``host`` (taking
    messages signed with ``secret``); returns its address."""
    rep = init_replica(run_id, group, index, count, device, payload, source, fused, resume)
    rep.channels = ZmqChannels(str(ReplicaId(group, index)), host, secret)
    return rep.channels.address


def play(rep: Replica, script: Script, channels: Channels, components: list[str], events=None) -> Finals:
    """Walk ``script`` as ``rep`` (from where its checkpoint left off, if it resumes one); return what
    the notebook merges. A failure tells every peer, so that none waits for this replica."""
    walker = WALKERS[script.mode.walker()](rep, script, channels, events)
    size = script.num_envs // rep.count if script.num_envs else 0
    share = (rep.index * size, size, script.num_envs)
    with (
        serving(*share) if size else contextlib.nullcontext(),
        whole_rows(*share) if size and script.whole_rows else contextlib.nullcontext(),
    ):
        if rep.resumed is not None:
            walker.set_state(rep.resumed)
        try:
            walker.run()
            return walker.finals(components)
        except BaseException as e:
            channels.abort_peers(f"replica {walker.name} failed: {type(e).__name__}: {e}")
            raise


@transmissible
def run_program(
    run_id: str,
    names: list[str],
    addresses: dict[str, dict],
    script: bytes,
    components: dict[str, list[str]],
    topic: str,
    shared: bool = False,
) -> dict[str, Finals]:
    """The long-lived task of one or more replicas of this worker (several: threads, as ``srl``'s
    ring or a group with more replicas than the cluster has workers): connect their channels, walk
    the program, report progress under ``topic`` (small events, no tensors). Returns what each
    replica holds at the end, by name. ``shared``: other replicas of the run live in this process
    (this task's, or other tasks' on a worker of several threads)."""
    worker = distributed.get_worker()
    plan = pickle.loads(script)
    faithful_copies()  # what the replicas return travels back to the notebook whole
    with (
        own_random(),  # the worker's own threads draw from Python's global `random` too
        dask_profiler.paused(worker),
        _ended_when_orphaned(worker, distributed.worker.thread_state.key, run_id),
    ):
        for name in names:
            group, index = ReplicaId.parse(name)
            start = plan.rng if group == plan.rng_group else seeded(plan.seed, name)
            if shared:
                registry.get(run_id, group, index).own = Own(start)
            else:
                restore(start)
        return _play_all(run_id, names, addresses, plan, components, topic, worker)


ORPHAN_S = 1.0  # how often a replica program asks whether the client that started it still wants it


@contextlib.contextmanager
def _ended_when_orphaned(worker, key, run_id: str):
    """Abort the run's replicas in this worker once the scheduler no longer wants this task: the client that
    started it (a kernel, a detached run's conductor) is gone, killed with its process. Left alone, they
    went on holding the worker's threads, and a conductor started again could not start (2026-12-06)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(ORPHAN_S):
            task = worker.state.tasks.get(key)
            if task is None or task.state in ("cancelled", "released", "forgotten"):
                registry.abort_run(run_id, "the kernel or conductor that started the run is gone")
                registry.drop_run(run_id)
                return

    threading.Thread(target=watch, daemon=True, name=f"fragnb orphan watch {run_id}").start()
    try:
        yield
    finally:
        done.set()


def _play_all(
    run_id: str,
    names: list[str],
    addresses: dict[str, dict],
    plan,
    components: dict[str, list[str]],
    topic: str,
    worker,
) -> dict[str, Finals]:

    def one(name: str) -> Finals:
        group, index = ReplicaId.parse(name)
        rep = registry.get(run_id, group, index)
        with rep.lock:
            if rep.channels.aborted.is_set():  # dropped before it started
                raise ChannelError(f"{name}: {rep.channels.reason}")
            rep.playing = True
        rep.channels.connect(addresses)
        try:
            return play(rep, plan, rep.channels, components[group], lambda msg: worker.log_event(topic, msg))
        finally:
            rep.channels.close()

    if len(names) == 1:
        results = {names[0]: one(names[0])}
        refuse_unreturnable(results, plan.program.origin)
        return results
    results: dict[str, Finals] = {}
    errors: list[BaseException] = []

    def thread(name: str) -> None:
        try:
            with own_random():
                results[name] = one(name)
        except BaseException as e:  # a failed replica has told its peers (play): the others end too
            errors.append(e)

    threads = [threading.Thread(target=thread, args=(name,), name=f"fragnb {name}", daemon=True) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise root_cause(errors)
    refuse_unreturnable(results, plan.program.origin)
    return results


@transmissible
def join_process_group(
    run_id: str, rank: int, world: int, address: str, backend: str, whole: bool = False, shared: str | None = None
) -> int:
    """Join the run's torch.distributed group as replica ``rank`` of this worker (and the shared-memory group
    ``shared``, where the group's replicas share this machine), and :func:`joined` it."""
    rep = next(r for r in registry.of_run(run_id) if r.index == rank)
    collectives.join(run_id, rank, world, address, backend, shared=shared)
    rep.collective = joined(rep, collectives.group_of(run_id), whole)
    return rank


def joined(rep, group, whole: bool) -> collectives.Member:
    """Replica ``rep``'s part in its group's collectives through ``group``: every learner's networks average
    their gradients across it (``whole``: every optimiser the cell steps averages the gradients it applies,
    whoever holds it)."""
    if whole:
        optimizers, followers = stepped_and_followed(rep.ns)
        return collectives.attach(group, [], optimizers, followers)
    learners = [v for v in rep.ns.values() if isinstance(v, Learner)]
    return collectives.attach(group, [m for learner in learners for m in modules_of(learner).values()])


def stepped_and_followed(ns: dict) -> tuple[list, list]:
    """What a whole-cell replica keeps equal to the others, in the same order on every replica: the
    torch optimisers its cell can step (averaged at each step), and the tensors no optimiser steps
    (a target network's weights, running statistics), which follow replica 0's after every iteration.
    Found among the namespace's values and what they hold (:func:`fragnb.shards.torch_held`: an agent's
    attributes, a network's own optimiser, ``optimize_model()``'s globals): an optimiser missed here would
    step each replica on its own data while its weights followed replica 0's, a run that looks data-parallel
    and learns from one replica's data."""
    import torch

    found = torch_held(ns.values())
    optimizers = [v for v in found if isinstance(v, torch.optim.Optimizer)]
    stepped = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    followed: dict[int, torch.Tensor] = {}
    for module in (v for v in found if isinstance(v, torch.nn.Module)):
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in stepped:
                followed.setdefault(id(t), t)
    return optimizers, list(followed.values())
