"""Replica: one replica of one worker group, living in a Dask worker (or a thread, for the safety net).

A replica holds its own namespace (its shard of the components and the loop's variables) and
walks the whole program in one long-lived task (:mod:`fragnb.runtime.worker.walker`), so heavy state stays put
and only the values an edge carries move, worker to worker over channels. Values crossing an
edge are combined on the receiving side (:mod:`~fragnb.runtime.worker.edges`): ``gather`` concatenates
the senders' parts along the environment axis, ``scatter`` takes this replica's slice of one sender's
value, ``broadcast`` takes it whole.

Two shapes of one replica: :class:`ReplicaState` is what its walker takes (who it is, its namespace,
code, bookkeeping and checkpoints; the driver its segments call), and :class:`Replica` adds what its
worker starts and ends it with (its channels, the checkpoint it resumes from). The functions Dask calls
to build and run replicas are :mod:`~fragnb.runtime.worker.entry`'s; the replicas a worker holds,
:mod:`~fragnb.runtime.worker.registry`'s; their episodes and env steps, a
:class:`~fragnb.runtime.worker.ledger.Ledger`'s.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...components import Env
from ...plan.instrument import Driver
from .generators import Own, restore, states
from .ledger import Ledger
from .timing import Timer

if TYPE_CHECKING:
    from ..net.channels import Channels

__all__ = ["ReplicaState", "Replica"]


# -- what a walker needs of a replica -----------------------------------------------------------
@dataclass
class ReplicaState(Driver):
    """What a walker (:class:`~fragnb.runtime.worker.walker.Walker`, :class:`~fragnb.runtime.worker.free.FreeWalker`)
    needs of a replica: who it is, its namespace and code, its bookkeeping and its checkpoints. It is
    also the driver its segments' instrumented code calls (timers, plain env steps, records and replays).

    Parameters
    ----------
    group, index, count : str, int, int
        Replica ``index`` of the ``count`` replicas of worker group ``group``.
    device : str
        Where its networks live (``"cpu"``, ``"cuda:0"``).
    ns : dict
        Its namespace: its shard of the components and the loop's variables.
    codes : dict
        Its segments' compiled code, by segment index (``("ahead", index)``: a learner's sampling-ahead variant).
    """

    group: str
    index: int
    count: int
    device: str
    ns: dict[str, Any]
    codes: dict[int, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    ledger: Ledger = field(init=False)  # its episodes and env steps since the run began (scaled by its count)
    streams: list[str] = field(default_factory=list)  # EnvStreams its networks' methods draw from (Payload.streams)
    timers: dict[str, Timer] = field(default_factory=dict)
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
    gone: set[str] = field(default_factory=set)  # peers whose worker died, that the run goes on without (async)
    own: Own | None = None  # its global generators' states, when it shares its process with other replicas
    collective: Any = None  # its part in its group's all-reduce (collectives.Member), where the group averages
    recorder: Any = None  # what it keeps of the statements the run records (recorder.Recorder), if any
    where: tuple = ()  # the walk's place in the program (the segment running: Walker.walk), for sink calls
    calls_made: int = 0  # sink calls made so far: their order within one place and vector step

    def __post_init__(self):
        # Nothing counted yet: a replica built from a payload starts its ledger from its environments
        # (entry.init_replica), one resumed from a checkpoint takes the checkpoint's counts (set_state).
        self.ledger = Ledger(scale=self.count)

    def drawing(self, segment: int, drawing: frozenset[int] | None):
        """Around a segment: a replica sharing its process draws from its own generators where the
        segment draws (``drawing``: the segments that do; ``None``: not known, any may)."""
        if self.own is None or (drawing is not None and segment not in drawing):
            return contextlib.nullcontext()
        return self.own.drawing()

    #: What a checkpoint keeps of a replica besides its walker's bookkeeping and its ledger's counts (code,
    #: channels and locks are made anew).
    _STATE = ("ns", "records", "replays", "seconds")

    def get_state(self) -> dict:
        """Its namespace and bookkeeping now, for a checkpoint (the cell's ``print`` is the worker's own)."""
        state = {k: getattr(self, k) for k in self._STATE}
        state["ns"] = {k: v for k, v in self.ns.items() if k not in ("__builtins__", "print")}
        state["ledger"] = self.ledger.get_state()  # a resumed run goes on counting its episodes and steps
        return state

    def set_state(self, state: dict) -> None:
        """Take a checkpoint's :meth:`get_state` as its own."""
        for key in self._STATE:
            setattr(self, key, state[key])
        self.ledger.set_state(state["ledger"])

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

    def record(self, key: str, names: tuple[str, ...], keys: tuple = ()) -> None:
        """Keep the values another group's statement reads here, as they are at its place in the loop; a
        dict that statement reads only by constant keys (``keys``: name -> its keys) cut to them."""
        only = dict(keys)
        self.records.setdefault(key, []).append(
            {n: _snapshot(_cut(self.ns[n], only.get(n))) for n in names if n in self.ns}
        )

    def replay(self, key: str) -> None:
        """Bind the next recorded values before this group's statement that reads them."""
        self.ns.update(self.replays[key].pop())

    def timer(self, name: str) -> Timer:
        # Called on every timed block of the rollout: reuse one Timer per fragment.
        if name not in self.timers:
            self.timers[name] = Timer(self.seconds, name, self.intervals)
        return self.timers[name]

    def stepped(self, n: int) -> None:
        self.ledger.stepped(n)

    def recording(self, index: int) -> contextlib.AbstractContextManager:
        return self.recorder.around(index)

    def sink_key(self) -> tuple:
        """Where a sink call made now falls in plain Python's order (:mod:`fragnb.sinks`): the segment's place
        in the program, the vector steps taken (by this replica's shard, as by plain Python's batch), this
        replica (it holds the environments after the previous one's), and its own count."""
        self.calls_made += 1
        return self.where, self.ledger.vector_steps(self.envs()), self.index, self.calls_made

    def envs(self) -> dict[str, Env]:
        """The env components its namespace holds now, by name."""
        return {k: v for k, v in self.ns.items() if isinstance(v, Env)}

    def report(self) -> tuple[list, int]:
        """Episodes finished since the last report, as (episode, env steps of the whole batch since the
        run began when it ended), and env steps taken by this replica since the run began."""
        episodes = self.ledger.episodes(self.envs())
        return episodes, self.ledger.env_steps(self.envs())


# -- the replica as its worker holds it ---------------------------------------------------------
@dataclass
class Replica(ReplicaState):
    """One replica of a run as its worker holds it (:mod:`~fragnb.runtime.worker.registry`): its
    :class:`ReplicaState`, which its walker takes, and what the worker starts and ends it with: its
    channels, the checkpoint it resumes from, and whether its program's thread has taken its sockets."""

    channels: Channels | None = None  # its inbox and its peers' (a Dask run)
    resumed: dict | None = None  # the walker's bookkeeping at the checkpoint this replica started from
    playing: bool = False  # its program's thread owns its channels' sockets (zmq sockets belong to one thread)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _cut(value, keys: tuple[str, ...] | None):
    """``value`` with only ``keys``, where it is a plain dict (a subclass may answer a missing key)."""
    return {k: value[k] for k in keys if k in value} if keys is not None and type(value) is dict else value


def _snapshot(value):
    # Containers the recording group may still append to are copied; tensors crossing an edge are immutable.
    return type(value)(value) if type(value) in (list, dict, set) else value
