"""Slots: where a distributed run's replica programs go, and which replicas a run can lose and go on.

The control plane's decisions (:mod:`fragnb.runtime.plane` applies them), as pure functions of plain
values — group sizes, worker threads, names — so that they are tested without a cluster.
"""

from __future__ import annotations

from ..errors import ClusterError
from ..plan.script import ReplicaId

__all__ = ["task_counts", "tasks", "slots"]


def task_counts(
    groups: dict[str, int], colocated: dict[str, int], collectives: bool, capacity: int | None
) -> dict[str, int]:
    """How many long-lived tasks each group's replicas run in: one per replica (or per ring of
    ``colocated`` replicas, srl), unless that exceeds ``capacity`` worker threads; then replicated
    groups share what the others leave, in proportion to their replicas. A process group's members
    (``collectives``: multi_learner, gpu_only) need a process each: never folded."""
    counts = {g: -(-n // colocated.get(g, 1)) for g, n in groups.items()}
    foldable = [g for g, t in counts.items() if t > 1 and g not in colocated]
    room = (capacity or 0) - sum(t for g, t in counts.items() if g not in foldable)
    if capacity is None or sum(counts.values()) <= capacity or collectives or room < len(foldable):
        return counts  # fits as it is, or cannot fit at all (slots says so)
    total = sum(groups[g] for g in foldable)
    for g in foldable:  # a task each, and the rest of the room in proportion
        per_task = -(-groups[g] // (1 + (room - len(foldable)) * groups[g] // total))
        counts[g] = -(-groups[g] // per_task)
    return counts


def tasks(
    groups: dict[str, int], colocated: dict[str, int], collectives: bool, capacity: int | None = None
) -> list[list[str]]:
    """The replicas each long-lived task runs: one, or several that share a worker process as threads
    (srl's ring; or, where the cluster has fewer than ``capacity`` worker threads for one task per
    replica, replica i of a group with task i mod tasks, so the shares stay even)."""
    out = []
    for group, count in task_counts(groups, colocated, collectives, capacity).items():
        out += [[str(ReplicaId(group, i)) for i in range(w, groups[group], count)] for w in range(count)]
    return out


def slots(
    groups: dict[str, int], colocated: dict[str, int], collectives: bool, threads: dict[str, int]
) -> tuple[list[list[str]], dict[str, str]]:
    """The tasks, and a worker thread for each, spread over the workers (``threads``: worker -> its
    threads): a replica's program holds its thread for the whole run, so two on a one-thread worker
    would wait for each other forever. Returns the tasks and each replica's worker."""
    if not threads:
        raise ClusterError("the cluster has no workers; start some (`dask worker ADDRESS`) or use cluster='local'")
    threads = dict(sorted(threads.items()))
    if collectives:  # each replica of the process group in a process of its own
        threads = dict.fromkeys(threads, 1)
    free = [w for k in range(max(threads.values())) for w, n in threads.items() if n > k]
    planned = tasks(groups, colocated, collectives, len(free))
    if len(planned) > len(free):
        raise ClusterError(
            f"{len(planned)} replica programs each need a worker thread of their own for the whole run, and the "
            f"cluster has {len(free)}{' (one per process: the process group needs it)' if collectives else ''}; "
            "add workers or ask for fewer replicas"
        )
    return planned, {name: worker for task, worker in zip(planned, free) for name in task}
