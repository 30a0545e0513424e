"""What a replica tells the notebook, as typed values: progress events while it runs, and its report
(:class:`Finals`) when its program ends.

Events travel through Dask's event log, which carries plain data (msgpack): each event goes as a
dict with its ``kind`` (:meth:`Progress.wire`) and is rebuilt on the notebook's side by
:func:`event_of`. :class:`Finals` travels as a task's result (pickled), as it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Progress", "Checkpointed", "event_of", "Finals", "plain_order", "arrival_order", "Episode"]

#: A finished episode as replicas report it: [wall time it ended, environment id, env steps of the
#: whole batch when it ended, return]. A list, not a tuple: it travels through msgpack.
Episode = list


def plain_order(episode: Episode) -> tuple[int, int]:
    """Sort key of episodes in plain Python's order: by step, then environment, not by arrival; every
    synchronous policy then sees the same curve (and ``until`` the same returns)."""
    return episode[2], episode[1]


def arrival_order(episode: Episode) -> tuple[float, int]:
    """Sort key of episodes by when they ended: decoupled actors' steps are not one sequence."""
    return episode[0], episode[1]


#: The sort key of each order a mode gives its episodes (:meth:`fragnb.policies.modes.Mode.episode_order`).
ORDERS = {"plain": plain_order, "arrival": arrival_order}


@dataclass
class Progress:
    """A replica finished iterations up to ``iteration``: their new episodes, its env steps so far, each
    fragment's seconds so far, (a decoupled learner) each iteration's staleness of every trajectory it
    trained on, and the seconds it has waited for other groups so far."""

    replica: str
    iteration: int
    episodes: list[Episode]
    steps: int
    seconds: dict[str, float]
    staleness: list[list[int]] = field(default_factory=list)  # one list per iteration the event covers
    waited: float = 0.0
    calls: bytes = b""  # the calls on sinks made since the last event, pickled (fragnb.sinks: {name: [Call]})

    def wire(self) -> dict:
        return {"kind": "progress", **dataclasses.asdict(self)}


@dataclass
class Checkpointed:
    """A replica kept its state after ``iteration`` (``bytes`` of it) for the notebook to fetch."""

    replica: str
    iteration: int
    bytes: int

    def wire(self) -> dict:
        return {"kind": "checkpointed", **dataclasses.asdict(self)}


_EVENTS = {"progress": Progress, "checkpointed": Checkpointed}


def event_of(msg: dict) -> Progress | Checkpointed:
    """The event a replica sent (:meth:`Progress.wire`), as its type. (Dask's event log adds keys of
    its own to a dict, e.g. ``worker``: only the event's fields are read.)"""
    kind = _EVENTS[msg["kind"]]
    return kind(**{f.name: msg[f.name] for f in dataclasses.fields(kind) if f.name in msg})


@dataclass
class Finals:
    """What one replica hands back when its program ends, for the notebook to merge and report.

    ``variables`` and ``components`` are its part of the namespace (the variables its group assigned
    last, its shards of the components); the rest is the run's record as this replica saw it.
    Decoupled policies' learner adds its trajectory bookkeeping; a replica lost with its worker
    (``lost``) is stood in for with what the notebook knew of it.
    """

    variables: dict[str, Any]
    components: dict[str, Any]
    scalars: dict[str, Any] = field(default_factory=dict)  # variables of the loops every replica iterates
    last_writer: dict[str, str] = field(default_factory=dict)  # variable -> the group that assigned it last
    streams: dict[str, Any] = field(default_factory=dict)  # EnvStreams name -> its counters here
    iterations: int = 0
    stopped: str = ""
    steps: int = 0
    episodes: list[Episode] = field(default_factory=list)
    ticks: list[float] = field(default_factory=list)  # wall time at the end of each iteration
    seconds: dict[str, float] = field(default_factory=dict)
    intervals: list[tuple[str, str, float, float]] = field(default_factory=list)  # (label, kind, start, end), wall time
    bytes_sent: int = 0
    messages_sent: int = 0
    checkpoint_seconds: float = 0.0
    moved: dict[str, int] = field(default_factory=dict)  # transfer (as drawn) -> versions of weights it loaded
    records: list = field(default_factory=list)  # the recorded statements' calls it kept (recorder.Call)
    records_dropped: int = 0  # those past its share of the bound
    calls: dict[str, list] = field(default_factory=dict)  # sink name -> the calls it kept on it (fragnb.sinks.Call)
    lost: bool = False
    # -- a decoupled policy's learner -----------------------------------------------------------
    staleness: list[list[int]] = field(default_factory=list)  # per iteration, each trajectory's staleness
    dropped: int = 0  # trajectories dropped as staler than the bound
    ahead: int = 0  # iterations that sampled the replay before a new trajectory arrived (samples_per_insert)
    depth: list[int] = field(default_factory=list)  # replicas waiting each time it took a trajectory
    taken: dict[str, int] = field(default_factory=dict)  # free replica -> trajectories it consumed or dropped
    produced: dict[str, int] = field(default_factory=dict)  # free replica -> whole trajectories delivered
