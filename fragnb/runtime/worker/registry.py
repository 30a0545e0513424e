"""Registry: the replicas a worker holds now, by run, and the calls that reach them by run.

A replica lives in its worker from :func:`fragnb.runtime.worker.entry.init_replica` until its run is
dropped; the notebook reaches it meanwhile only by its run's id, through ``client.run`` on the
worker (:func:`request_stop`, :func:`forsake`, :func:`abort_run`, :func:`checkpoint_of`,
:func:`drop_run`; the safety net's threads, whose replicas live in the notebook's process, call
:func:`drop_run` there). The entry points find their replicas with :func:`add`, :func:`get` and
:func:`of_run`; nothing else touches the dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...plan.script import ReplicaId
from ..net import collectives

if TYPE_CHECKING:
    from .replica import Replica

__all__ = ["add", "get", "of_run", "checkpoint_of", "held", "forsake", "request_stop", "abort_run", "drop_run"]

_REPLICAS: dict[tuple[str, str, int], Replica] = {}  # (run id, group, replica index) -> this worker's replicas


def add(run_id: str, rep: Replica) -> None:
    """Hold ``rep`` as a replica of ``run_id`` (one of its group and index replaces another)."""
    _REPLICAS[(run_id, rep.group, rep.index)] = rep


def get(run_id: str, group: str, index: int) -> Replica:
    """Replica ``index`` of ``group`` in ``run_id``, held by this worker."""
    return _REPLICAS[(run_id, group, index)]


def of_run(run_id: str) -> list[Replica]:
    """The replicas of ``run_id`` this worker holds, in the order they were first added."""
    return [rep for (rid, _, _), rep in list(_REPLICAS.items()) if rid == run_id]


def checkpoint_of(run_id: str, iteration: int) -> dict[str, tuple[int, bytes]]:
    """The checkpoint each of this worker's replicas of ``run_id`` kept after ``iteration``, by replica, as
    (its iteration, its bytes); a replica that has kept a newer one since, and dropped that one (it holds two:
    :meth:`~fragnb.runtime.worker.replica.Replica.keep`), gives its newest instead (a notebook slow to read the
    run's events asks after the run has moved on). Older ones are dropped: the notebook holds what it read."""
    out = {}
    for rep in of_run(run_id):
        held = [k for k in rep.checkpoints if k >= iteration]
        if held:
            at = iteration if iteration in held else max(held)
            out[str(ReplicaId(rep.group, rep.index))] = (at, rep.checkpoints[at])
            for old in [k for k in rep.checkpoints if k < at]:
                rep.checkpoints.pop(old, None)
    return out


def held() -> list[str]:
    """The replicas this worker holds now, by name (``client.run(held)`` asks every worker: which
    worker a failure drill must kill to lose a given replica)."""
    return sorted(str(ReplicaId(group, index)) for _, group, index in _REPLICAS)


def forsake(run_id: str, names: list[str]) -> int:
    """Tell this worker's replicas of ``run_id`` that the run goes on without ``names`` (their worker died)."""
    reps = of_run(run_id)
    for rep in reps:
        rep.gone.update(names)
    return len(reps)


def request_stop(run_id: str) -> int:
    """Ask the replicas of ``run_id`` in this worker to stop after the current iteration."""
    reps = of_run(run_id)
    for rep in reps:
        rep.stop.set()
    return len(reps)


def abort_run(run_id: str, reason: str) -> int:
    """End the waits of every replica of ``run_id`` in this worker with ``reason`` (runs beside them)."""
    reps = [r for r in of_run(run_id) if r.channels is not None]
    for rep in reps:
        rep.channels.abort(reason)
    collectives.abort(run_id)  # a replica waiting in a shared-memory all-reduce ends too
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
