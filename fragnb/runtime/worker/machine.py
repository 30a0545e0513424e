"""The engine's decisions, apart from the code that sends and waits (as Dask keeps
``worker_state_machine.py`` apart from ``worker.py``): pure functions of counts, kinds, tags and
versions, tested without a cluster or a network.

- **Routing**: what a segment receives (and what its group then holds), which replicas of a group a
  replica exchanges a segment's values with, and which share of what arrives is its own.
- **Trajectory selection** (decoupled policies): which trajectory the learner takes next, drops or
  waits for, whether a whole round is fresh enough to train on, and when a free replica must wait
  for newer weights.
- **Message tags**: what a tag says (``segment:K``, ``segment:K@ITERATION/VERSION``, ``control:news@I``).

How values of replicas combine is :mod:`fragnb.runtime.worker.edges`; the safety net's comparison is
:func:`fragnb.runtime.check.difference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from ...plan.keys import kind_of
from ...policies.operators import Operator

if TYPE_CHECKING:
    from ...plan.script import Weights

__all__ = [
    "overlap",
    "routed",
    "partners",
    "share",
    "is_variable",
    "segment_inputs",
    "Holdings",
    "Arrival",
    "earliest",
    "fresh",
    "Take",
    "next_trajectory",
    "round_is_fresh",
    "pace",
    "oldest_version",
    "may_sample_ahead",
    "in_replica_order",
    "segment_tag",
    "news_tag",
    "stamped",
    "iteration_of",
    "version_of",
    "is_segment",
    "is_news",
]


# -- routing --------------------------------------------------------------------------------------
def overlap(index: int, count: int, other: int) -> list[int]:
    """The replicas of an ``other``-replica group whose environments overlap those of replica
    ``index`` of ``count`` (one count divides the other; shares are contiguous and even)."""
    return (
        list(range(index * (other // count), (index + 1) * (other // count)))
        if count <= other
        else [index // (count // other)]
    )


def is_variable(key: str) -> bool:
    """Whether an exported key is one of the cell's variables (not a network's weights or a split loop's record)."""
    return kind_of(key) == "variable"


def routed(
    operator: Operator, senders: int, receivers: int, keys: list[str], kinds: dict[str, str], num_envs: int | None
) -> bool:
    """Whether a transfer moved by ``operator`` goes only between replicas that hold the same environments:
    an exchange (or ``srl``'s inference stream) between replicated groups, one count dividing the other,
    every value split along the environments. (Else every replica sends all of its share to every replica, which takes its slice: a
    gather's one receiver joins every sender's share, a scatter's receivers each cut theirs out of the one.)"""
    return (
        operator in (Operator.EXCHANGE, Operator.INFERENCE_STREAM)
        and senders > 1
        and receivers > 1
        and (senders % receivers == 0 or receivers % senders == 0)
        and num_envs is not None
        and all(is_variable(k) and kinds.get(k, "sharded") == "sharded" for k in keys)
    )


Versions = dict  # exported key -> (group that wrote it last, version)


def segment_inputs(
    group: str,
    reads: set[str],
    components: set[str],
    replays: set[str],
    weights: Sequence[Weights],
    latest: Versions,
    received: dict[tuple[str, str], tuple[str, int]],
    loaded: dict[tuple[str, str], int],
) -> tuple[list[tuple[str, str, str]], dict, dict]:
    """What a segment of ``group`` receives before it runs, from the versions every replica agrees on.

    ``weights`` are the Script's (:class:`~fragnb.plan.script.Weights`: which network goes from its owner to
    which component of which group); ``latest`` says which group wrote each exported key last and how often; ``received`` and
    ``loaded`` what ``group`` holds already. A group holds what it received until the sender writes it
    again: ``fine``'s actor side reads each step's observations twice (to act, to store them) and
    receives them once. Returns the inputs (sending group, key, where it goes) and the entries of
    ``received`` and ``loaded`` that hold after it.
    """
    out, got, load = [], {}, {}
    for var in sorted(reads):
        if (w := latest.get(var)) and w[0] != group and received.get((group, var)) != w:
            out.append((w[0], var, var))
            got[(group, var)] = w
    for w in weights:
        v = latest.get(w.source)
        if v and w.group == group and w.target_comp in components and loaded.get((group, w.target)) != v[1]:
            out.append((v[0], w.source, w.target))
            load[(group, w.target)] = v[1]
    out += [(latest[key][0], key, key) for key in sorted(replays)]
    return out, got, load


def partners(
    operator: Operator,
    index: int,
    count: int,
    other: int,
    keys: list[str],
    kinds: dict[str, str],
    num_envs: int | None,
) -> list[int]:
    """The replicas of an ``other``-replica group that replica ``index`` of ``count`` exchanges ``keys``
    with (either way) over a transfer moved by ``operator``: those holding its environments when the
    transfer is :func:`routed`, else all."""
    if routed(operator, count, other, keys, kinds, num_envs):
        return overlap(index, count, other)
    return list(range(other))


def share(
    operator: Operator,
    index: int,
    count: int,
    senders: int,
    keys: list[str],
    kinds: dict[str, str],
    num_envs: int | None,
) -> tuple[int, int, int | None]:
    """(index, count, environments) that cut replica ``index`` of ``count``'s share out of what its
    partners among ``senders`` replicas sent over a transfer moved by ``operator``: the arguments
    :func:`fragnb.runtime.worker.edges.combine` takes."""
    if not routed(operator, senders, count, keys, kinds, num_envs):
        return index, count, num_envs
    if senders >= count:  # its partners' shares make up exactly this replica's
        return 0, 1, None
    k = count // senders  # one partner holds this replica's share and k - 1 others'
    return index % k, k, num_envs // senders


@dataclass
class Holdings:
    """What every replica of a walk keeps alike about who holds what, as segments run (events in: a segment is
    about to run, a segment ran; instructions out: what it receives first), tested as sequences without a
    cluster: the version of each exported key and the group that wrote it last, what each group holds
    already (values received, weights loaded), and the group that assigned each variable last.

    Parameters
    ----------
    weights : sequence of Weights
        The Script's networks that travel (:class:`~fragnb.plan.script.Weights`).
    """

    weights: Sequence[Weights] = ()
    latest: Versions = field(default_factory=dict)
    received: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    loaded: dict[tuple[str, str], int] = field(default_factory=dict)
    last_writer: dict[str, str] = field(default_factory=dict)

    def inputs(self, seg) -> list[tuple[str, str, str]]:
        """(sending group, key it exports, where it goes) for each value ``seg`` receives before it runs
        (:func:`segment_inputs`); from then on its group holds them."""
        out, got, load = segment_inputs(
            seg.group, seg.reads, seg.components, seg.replays, self.weights, self.latest, self.received, self.loaded
        )
        self.received.update(got)
        self.loaded.update(load)
        return out

    def ran(self, seg) -> None:
        """``seg`` ran: a new version of what it exports (its group's networks that travel included), and
        who assigned what."""
        owned = {w.source for w in self.weights if w.owner == seg.group and w.owner_comp in seg.components}
        for key in seg.exports | owned:
            self.latest[key] = (seg.group, self.latest.get(key, ("", 0))[1] + 1)
        for var in seg.writes:
            self.last_writer[var] = seg.group

    def version(self, keys) -> int:
        """The version of ``keys`` the walk is at: how often their owner has written them."""
        return max(self.latest[key][1] for key in keys)


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


class Take(NamedTuple):
    """What the learner does with the earliest whole trajectory waiting (``async``)."""

    arrival: Arrival | None  # None: nothing is waiting, it waits
    usable: bool  # False: staler than the bound, dropped and counted


def next_trajectory(waiting: list[Arrival], learner_version: int, max_staleness: int) -> Take:
    """async: the earliest whole trajectory waiting, whichever replica it comes from, and whether the
    learner trains on it or drops it as staler than ``max_staleness``."""
    if not waiting:
        return Take(None, False)
    first = earliest(waiting)
    return Take(first, fresh(learner_version, first.version, max_staleness))


def round_is_fresh(learner_version: int, versions: list[int], max_staleness: int) -> bool:
    """srl: a round (one iteration of every free replica) trains the learner only if its oldest
    trajectory is within the bound; else the whole round is dropped."""
    return fresh(learner_version, min(versions), max_staleness)


def pace(iterations: int, count: int, gone: int) -> int:
    """The learner version a free replica's ``iterations`` stand for: its iteration while all ``count``
    replicas of its group deliver one trajectory per learner iteration; fewer once ``gone`` of them
    died (the survivors make up for them)."""
    return iterations * (count - gone) // count


def oldest_version(pace_now: int, max_staleness: int) -> int:
    """The oldest version of the weights a free replica at ``pace_now`` may act with (it waits for newer ones
    while it holds none as new: :class:`~fragnb.runtime.net.weights.VersionedPull`)."""
    return pace_now - max_staleness


def may_sample_ahead(sampled: int, inserted: int, next_samples: int, samples_per_insert: float) -> bool:
    """Whether the learner may run an iteration's updates on its replay buffer before any new trajectory
    arrives (``samples_per_insert``): drawing ``next_samples`` more (what its last iteration drew) must keep
    the samples drawn per transition inserted within the bound. Reverb's ``SampleToInsertRatio`` rate
    limiter, the learner's side of it (Acme; Ape-X's learner samples while the actors insert): past the bound
    the learner waits for insertion. Nothing inserted yet: it waits."""
    return inserted > 0 and sampled + next_samples <= samples_per_insert * inserted


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
