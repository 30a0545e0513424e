"""The engine's decisions, apart from the code that sends and waits (as Dask keeps
``worker_state_machine.py`` apart from ``worker.py``): pure functions of counts, kinds, tags and
versions, tested without a cluster or a network.

- **Routing**: which replicas of a group a replica exchanges a segment's values with, and which
  share of what arrives is its own.
- **Trajectory selection** (decoupled policies): which trajectory the learner takes next, and
  whether it, or a whole round, is fresh enough to train on.
- **Message tags**: what a tag says (``segment:K``, ``segment:K@ITERATION/VERSION``, ``control:news@I``).

How values of replicas combine is :mod:`fragnb.runtime.worker.edges`; the safety net's comparison is
:func:`fragnb.runtime.check.difference`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["overlap", "routed", "partners", "share", "is_variable", "Arrival", "earliest", "fresh", "in_replica_order",
           "segment_tag", "news_tag", "stamped", "iteration_of", "version_of", "is_segment", "is_news"]


# -- routing --------------------------------------------------------------------------------------
def overlap(index: int, count: int, other: int) -> list[int]:
    """The replicas of an ``other``-replica group whose environments overlap those of replica
    ``index`` of ``count`` (one count divides the other; shares are contiguous and even)."""
    return list(range(index * (other // count), (index + 1) * (other // count))) if count <= other else [index // (count // other)]


def is_variable(key: str) -> bool:
    """Whether an exported key is one of the cell's variables (not ``weights:...`` or ``record:...``)."""
    return ":" not in key


def routed(senders: int, receivers: int, keys: list[str], kinds: dict[str, str], num_envs: int | None) -> bool:
    """Whether values go only between replicas that hold the same environments: both groups are
    replicated, one count divides the other, and every value is split along the environments.
    (Else every replica sends all of its share to every replica, which takes its slice.)"""
    return (senders > 1 and receivers > 1 and (senders % receivers == 0 or receivers % senders == 0) and num_envs is not None
            and all(is_variable(k) and kinds.get(k, "sharded") == "sharded" for k in keys))


def partners(index: int, count: int, other: int, keys: list[str], kinds: dict[str, str], num_envs: int | None,
             same_group: bool = False) -> list[int]:
    """The replicas of an ``other``-replica group that replica ``index`` of ``count`` exchanges ``keys``
    with (either way): those holding its environments when the values are routed, else all."""
    if not same_group and (routed(count, other, keys, kinds, num_envs) or routed(other, count, keys, kinds, num_envs)):
        return overlap(index, count, other)
    return list(range(other))


def share(index: int, count: int, senders: int, keys: list[str], kinds: dict[str, str],
          num_envs: int | None) -> tuple[int, int, int | None]:
    """(index, count, environments) that cut replica ``index`` of ``count``'s share out of what its
    partners among ``senders`` replicas sent: the arguments :func:`fragnb.runtime.worker.edges.combine` takes."""
    if not routed(senders, count, keys, kinds, num_envs):
        return index, count, num_envs
    if senders >= count:  # its partners' shares make up exactly this replica's
        return 0, 1, None
    k = count // senders  # one partner holds this replica's share and k - 1 others'
    return index % k, k, num_envs // senders


# -- trajectory selection (async, srl) ------------------------------------------------------------
class Arrival(NamedTuple):
    """A whole trajectory waiting for the learner: when it arrived (an order over all peers), from
    which replica, that replica's iteration, and the version of the weights it acted with."""

    seq: int
    replica: str
    iteration: int
    version: int


def fresh(learner_version: int, version: int, max_staleness: int) -> bool:
    """Whether data made with weights of ``version`` may train the learner at ``learner_version``."""
    return learner_version - version <= max_staleness


def earliest(waiting: list[Arrival]) -> Arrival:
    """async: the learner takes trajectories in the order they arrived, whichever replicas they come from."""
    return min(waiting)


def in_replica_order(chosen: list[tuple[str, int, int]], index_of) -> list[tuple[str, int, int]]:
    """An iteration's trajectories (replica, its iteration, version) in replica order, not arrival
    order: with ``max_staleness=0`` each iteration then holds one trajectory of every replica in the
    order ``coarse`` gathers them, and the run is coarse's."""
    return sorted(chosen, key=lambda c: (index_of(c[0]), c[1]))


# -- message tags ---------------------------------------------------------------------------------
def segment_tag(index: int) -> str:
    return f"segment:{index}"


def news_tag(iteration: int) -> str:
    """The tag of a free replica's news (episodes, steps) after its ``iteration``: sent last, so a
    trajectory is whole once its news has arrived."""
    return f"control:news@{iteration}"


def stamped(tag: str, iteration: int, version: int | None = None) -> str:
    """``tag`` with the sender's iteration, and for a free replica the version of its weights."""
    return f"{tag}@{iteration}" + ("" if version is None else f"/{version}")


def is_segment(tag: str) -> bool:
    return tag.startswith("segment:")


def is_news(tag: str) -> bool:
    return tag.startswith("control:news@")


def iteration_of(tag: str) -> int:
    """The sender's iteration in a tag ``...@ITERATION[/VERSION]``."""
    return int(tag.rsplit("@", 1)[1].split("/")[0])


def version_of(tag: str) -> int:
    """The version of the weights a free replica acted with, in a tag ``...@ITERATION/VERSION``."""
    return int(tag.rsplit("/", 1)[1])
