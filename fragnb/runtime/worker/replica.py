"""Replica: one replica of one worker group, living in a Dask worker (or a thread, for the safety net).

A replica holds its own namespace (its shard of the components and the loop's variables) and
walks the whole program in one long-lived task (:mod:`fragnb.runtime.worker.walker`), so heavy state stays put
and only the values an edge carries move, worker to worker over channels. Values crossing an
edge are combined here, on the receiving side: ``gather`` concatenates the senders' parts along
the environment axis, ``scatter`` takes this replica's slice of one sender's value, ``broadcast``
takes it whole.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import pickle
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import distributed

from ...components import Component, Env, Learner, modules_of
from ...plan.instrument import Driver, remember_source
from ...plan.script import ReplicaId
from ...shards import faithful_copies, reseed, shard
from ...streams import serving
from ..cluster import dask_profiler
from ..net import collectives
from ..net.channels import ChannelError, ZmqChannels, root_cause
from .edges import scatter
from .free import FreeWalker
from .generators import Own, own_random, restore, seeded, states
from .payload import Payload
from .report import Finals
from .timing import Timer
from .travel import bound_to, refuse_unreturnable
from .walker import Walker

#: The walker each mode's replicas run, by the name the mode gives (:attr:`fragnb.policies.modes.Mode.walker`).
WALKERS = {"lockstep": Walker, "free": FreeWalker}

if TYPE_CHECKING:
    from ...plan.script import Script
    from ..net.channels import Channels

__all__ = [
    "Replica",
    "init_replica",
    "open_replica",
    "forward_print",
    "play",
    "run_program",
    "join_process_group",
    "checkpoint_of",
    "forsake",
    "held",
    "request_stop",
    "abort_run",
    "drop_run",
]

_REPLICAS: dict[tuple[str, str, int], Replica] = {}  # (run id, group, replica index) -> this worker's replicas


# -- the replica --------------------------------------------------------------------------------
@dataclass
class Replica(Driver):
    """One replica's namespace, code and bookkeeping, living in a worker process."""

    group: str
    index: int
    count: int
    device: str
    ns: dict[str, Any]
    codes: dict[int, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # episodes already reported, per env component
    steps0: dict[str, int] = field(default_factory=dict)  # env steps of each env component at start
    plain_steps: int = 0  # steps of plain Gymnasium environments (stepped() counts them)
    streams: list[str] = field(default_factory=list)  # EnvStreams its networks' methods draw from (Payload.streams)
    timers: dict[str, Timer] = field(default_factory=dict)
    channels: Channels | None = None  # its inbox and its peers' (a Dask run)
    stop: threading.Event = field(
        default_factory=threading.Event
    )  # the user asked the run to stop (read by the deciding replica, Script.leader)
    intervals: list = field(default_factory=list)  # its timeline: (fragment or wait, "busy"/"wait", start, end)
    waited: float = 0.0  # seconds spent waiting for other groups so far (the live view's idle share)
    records: dict[str, list] = field(default_factory=dict)  # key -> values recorded for another group, step by step
    replays: dict[str, list] = field(default_factory=dict)  # key -> another group's recorded values, to replay
    checkpoints: dict[int, bytes] = field(
        default_factory=dict
    )  # iteration -> its state then, until the notebook has it
    resumed: dict | None = None  # the walker's bookkeeping at the checkpoint this replica started from
    gone: set[str] = field(default_factory=set)  # peers whose worker died, that the run goes on without (async)
    own: Own | None = None  # its global generators' states, when it shares its process with other replicas
    playing: bool = False  # its program's thread owns its channels' sockets (zmq sockets belong to one thread)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def drawing(self, segment: int, drawing: frozenset[int] | None):
        """Around a segment: a replica sharing its process draws from its own generators where the
        segment draws (``drawing``: the segments that do; ``None``: not known, any may)."""
        if self.own is None or (drawing is not None and segment not in drawing):
            return contextlib.nullcontext()
        return self.own.drawing()

    #: What a checkpoint keeps of a replica besides its walker's bookkeeping (code, channels and locks are made anew).
    _STATE = ("ns", "seen", "steps0", "plain_steps", "records", "replays", "seconds")

    def get_state(self) -> dict:
        """Its namespace and bookkeeping now, for a checkpoint (the cell's ``print`` is the worker's own)."""
        state = {k: getattr(self, k) for k in self._STATE}
        state["ns"] = {k: v for k, v in self.ns.items() if k not in ("__builtins__", "print")}
        return state

    def set_state(self, state: dict) -> None:
        """Take a checkpoint's :meth:`get_state` as its own."""
        for key in self._STATE:
            setattr(self, key, state[key])

    def generators(self) -> dict:
        """Its global generators' states now (kept in a checkpoint)."""
        return self.own.state if self.own is not None else states()

    def restore_generators(self, state: dict) -> None:
        if self.own is not None:
            self.own.state = state
        else:
            restore(state)

    def keep(self, iteration: int, blob: bytes) -> None:
        """Hold a checkpoint for the notebook; two at most (the notebook may still be fetching the older)."""
        self.checkpoints[iteration] = blob
        for old in sorted(self.checkpoints)[:-2]:
            self.checkpoints.pop(old, None)

    def record(self, key: str, names: tuple[str, ...]) -> None:
        """Keep the values another group's statement reads here, as they are at its place in the loop."""
        self.records.setdefault(key, []).append({n: _snapshot(self.ns[n]) for n in names if n in self.ns})

    def replay(self, key: str) -> None:
        """Bind the next recorded values before this group's statement that reads them."""
        self.ns.update(self.replays[key].pop())

    def timer(self, name: str) -> Timer:
        # Called on every timed block of the rollout: reuse one Timer per fragment.
        if name not in self.timers:
            self.timers[name] = Timer(self.seconds, name, self.intervals)
        return self.timers[name]

    def stepped(self, n: int) -> None:
        self.plain_steps += n

    def envs(self) -> dict[str, Env]:
        return {k: v for k, v in self.ns.items() if isinstance(v, Env)}

    def report(self) -> tuple[list, int]:
        """Episodes finished since the last report, as (episode, env steps of the whole batch since the
        run began when it ended), and env steps taken by this replica since the run began."""
        episodes = []
        for name, env in self.envs().items():
            batch, start = env.num_envs * self.count, self.steps0[name] // env.num_envs  # in vector steps
            episodes += [(ep, (ep.step - start) * batch) for ep in env.episodes[self.seen[name] :]]
            self.seen[name] = len(env.episodes)
        return episodes, sum(env.env_steps - self.steps0[name] for name, env in self.envs().items()) + self.plain_steps


def _snapshot(value):
    # Containers the recording group may still append to are copied; tensors crossing an edge are immutable.
    return type(value)(value) if type(value) in (list, dict, set) else value


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
        rep.seen = {name: len(env.episodes) for name, env in rep.envs().items()}
        rep.steps0 = {name: env.env_steps for name, env in rep.envs().items()}
    else:
        state = pickle.loads(resume)
        rep = Replica(group, index, count, device, {}, compiled, resumed=state["walker"], streams=payload.streams)
        rep.set_state(state["replica"])
    # the cell's prints reach the notebook, once: a whole-cell policy's other replicas print what replica 0 does
    rep.ns["print"] = forward_print if payload.reseed is None or index == 0 else quiet_print
    _REPLICAS[(run_id, group, index)] = rep
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
    walker = WALKERS[script.mode.walker](rep, script, channels, events)
    size = script.num_envs // rep.count if script.num_envs else 0
    with serving(rep.index * size, size, script.num_envs) if size else contextlib.nullcontext():
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
    with own_random(), dask_profiler.paused(worker):  # the worker's own threads draw from Python's global `random` too
        for name in names:
            group, index = ReplicaId.parse(name)
            start = plan.rng if group == plan.rng_group else seeded(plan.seed, name)
            if shared:
                _REPLICAS[(run_id, group, index)].own = Own(start)
            else:
                restore(start)
        return _play_all(run_id, names, addresses, plan, components, topic, worker)


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
        rep = _REPLICAS[(run_id, group, index)]
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
def join_process_group(run_id: str, rank: int, world: int, address: str, backend: str, whole: bool = False) -> int:
    """Join the run's torch.distributed group as replica ``rank`` of this worker; every learner's
    networks then average their gradients across the group (``whole``: every optimiser the cell
    steps averages the gradients it applies, whoever holds it)."""
    rep = next(r for (rid, _, i), r in _REPLICAS.items() if rid == run_id and i == rank)
    if whole:
        optimizers, followers = stepped_and_followed(rep.ns)
        return collectives.join(run_id, rank, world, address, backend, [], optimizers, followers)
    learners = [v for v in rep.ns.values() if isinstance(v, Learner)]
    return collectives.join(
        run_id, rank, world, address, backend, [m for learner in learners for m in modules_of(learner).values()]
    )


def stepped_and_followed(ns: dict) -> tuple[list, list]:
    """What a whole-cell replica keeps equal to the others, in the same order on every replica: the
    torch optimisers its cell can step (averaged at each step), and the tensors no optimiser steps
    (a target network's weights, running statistics), which follow replica 0's after every iteration.
    Found among the namespace's values, its components' attributes and what its functions reach
    (``optimize_model()`` from an earlier cell, stepping the optimiser among its globals)."""
    import torch

    found: dict[int, Any] = {}
    for value in ns.values():
        if isinstance(value, Component):
            held = list(vars(value).values())
        elif isinstance(value, types.FunctionType):
            held = [value.__globals__[n] for n in value.__code__.co_names if n in value.__globals__]
            held += [c.cell_contents for c in value.__closure__ or () if c.cell_contents is not None]
        else:
            held = []
        for v in (value, *held):
            if isinstance(v, (torch.optim.Optimizer, torch.nn.Module)):
                found.setdefault(id(v), v)
    optimizers = [v for v in found.values() if isinstance(v, torch.optim.Optimizer)]
    stepped = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    followed: dict[int, torch.Tensor] = {}
    for module in (v for v in found.values() if isinstance(v, torch.nn.Module)):
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in stepped:
                followed.setdefault(id(t), t)
    return optimizers, list(followed.values())


def checkpoint_of(run_id: str, iteration: int) -> dict[str, bytes]:
    """The checkpoints this worker's replicas of ``run_id`` kept after ``iteration``, by replica
    (read by the notebook, which then holds them); older ones are dropped."""
    out = {}
    for (rid, group, index), rep in list(_REPLICAS.items()):
        if rid == run_id and iteration in rep.checkpoints:
            out[str(ReplicaId(group, index))] = rep.checkpoints[iteration]
            for old in [k for k in rep.checkpoints if k <= iteration]:
                rep.checkpoints.pop(old, None)
    return out


def held() -> list[str]:
    """The replicas this worker holds now, by name (``client.run(held)`` asks every worker: which
    worker a failure drill must kill to lose a given replica)."""
    return sorted(str(ReplicaId(group, index)) for _, group, index in _REPLICAS)


def forsake(run_id: str, names: list[str]) -> int:
    """Tell this worker's replicas of ``run_id`` that the run goes on without ``names`` (their worker died)."""
    reps = [r for (rid, _, _), r in list(_REPLICAS.items()) if rid == run_id]
    for rep in reps:
        rep.gone.update(names)
    return len(reps)


def request_stop(run_id: str) -> int:
    """Ask the replicas of ``run_id`` in this worker to stop after the current iteration."""
    reps = [r for (rid, _, _), r in list(_REPLICAS.items()) if rid == run_id]
    for rep in reps:
        rep.stop.set()
    return len(reps)


def abort_run(run_id: str, reason: str) -> int:
    """End the waits of every replica of ``run_id`` in this worker with ``reason`` (runs beside them)."""
    reps = [r for (rid, _, _), r in list(_REPLICAS.items()) if rid == run_id and r.channels is not None]
    for rep in reps:
        rep.channels.abort(reason)
    return len(reps)


def drop_run(run_id: str) -> int:
    """Forget every replica of ``run_id`` in this worker (and leave its process group)."""
    keys = [k for k in _REPLICAS if k[0] == run_id]
    for key in keys:
        rep = _REPLICAS.pop(key)
        if rep.channels is None:
            continue
        # A replica still playing ends its waits at the abort and closes its own sockets: closing them from
        # this thread while its thread polls them aborts the whole worker process (a libzmq assertion).
        rep.channels.abort("the run was dropped")
        with rep.lock:
            if not rep.playing:
                rep.channels.close()
    collectives.leave(run_id)
    return len(keys)
