"""Weight sync: how a network's weights (or a replicated group's gradients) reach the replicas that use them.

One interface, :class:`WeightSync`: the owner's side calls ``publish(version, state)``, the user's side
``latest(min_version)``. The operator of the Script's transfer picks its implementation
(:data:`SYNCS`), as TorchRL separates a weight-sync scheme from the transport under it; the walkers
call what the transfer names and move weights in no other way, so the operator the drawing shows on
an edge is the one that runs.

- :class:`Broadcast` (synchronous policies): every owner replica sends each version to every replica
  that loads it; a user waits for exactly the version the walk is at, from each owner (they agree).
- :class:`VersionedPull` (decoupled policies, after IMPALA and Sample Factory): the owner sends each
  version as it makes it; a user takes the newest that has arrived, and waits only while even that is
  older than ``min_version`` (its own pace less the staleness bound).
- :class:`AllReduce` (DD-PPO, ``data_parallel``): the replicas of one group each publish their
  gradients, and each reads back their mean over the group, through torch.distributed.

``local`` moves nothing (independent copies): it has no implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch

from ...policies.operators import Operator

__all__ = ["WeightSync", "Link", "Broadcast", "VersionedPull", "AllReduce", "SYNCS", "tag_of", "version_in"]


class WeightSync(Protocol):
    """How one transfer's state moves: the owner publishes each version, a user reads one at least as new
    as it needs."""

    operator: ClassVar[Operator]

    def publish(self, version: int, state: Any) -> None:
        """Make ``version`` of ``state`` available to the users (from one owner replica)."""

    def latest(self, min_version: int) -> tuple[int, list]:
        """(version, what arrived of it): one at least ``min_version``, waiting until there is one. The
        list holds one state per owner replica that sent it, or is empty when what this replica holds
        already is new enough."""


class Link(Protocol):
    """What a channel-borne sync needs of its replica's walk: sending to peers, and receiving from them."""

    name: str

    def send_to(self, peers: list[str], tag: str, value: Any) -> None:
        """Send ``value`` to each of ``peers``."""

    def recv(self, peer: str, tag: str) -> Any:
        """The next message from ``peer`` tagged ``tag``, waiting for it."""

    def find(self, peer: str, match) -> tuple[str, Any] | None:
        """(tag, value) of the first message from ``peer`` whose tag matches, if one has arrived."""

    def idle(self, peer: str) -> None:
        """Wait a little for messages from ``peer``."""


def tag_of(where: str, version: int) -> str:
    """The tag of ``version`` of the weights a segment (``where``) loads."""
    return f"weights:{where}@{version}"


def version_in(tag: str) -> int:
    """The version in a tag :func:`tag_of` made."""
    return int(tag.rsplit("@", 1)[1])


class _OverChannels:
    """A sync between one group's replicas (``owners``) and another's (``users``) over the replicas' channels,
    for the weights one segment (``where``) loads."""

    operator: ClassVar[Operator]

    def __init__(self, link: Link, where: str, owners: list[str], users: list[str]):
        self.link, self.where, self.owners, self.users = link, where, owners, users
        self.held = 0  # the version this replica holds (every replica starts with version 0)
        self.loads = 0  # versions it has loaded: what the run reports this transfer moved


class Broadcast(_OverChannels):
    """Every owner replica sends each version to every user; a user waits for exactly that version."""

    operator = Operator.BROADCAST

    def publish(self, version: int, state: Any) -> None:
        self.link.send_to(self.users, tag_of(self.where, version), state)

    def latest(self, min_version: int) -> tuple[int, list]:
        tag = tag_of(self.where, min_version)
        parts = [self.link.recv(owner, tag) for owner in self.owners]
        self.held, self.loads = min_version, self.loads + 1
        return min_version, parts


class VersionedPull(_OverChannels):
    """The first owner replica sends each version as it makes it; a user takes the newest that has arrived,
    waiting only while neither it nor what it holds is ``min_version`` or newer."""

    operator = Operator.VERSIONED_PULL

    def publish(self, version: int, state: Any) -> None:
        if self.link.name == self.owners[0]:
            self.link.send_to(self.users, tag_of(self.where, version), state)

    def latest(self, min_version: int | Callable[[], int]) -> tuple[int, list]:
        """As :meth:`WeightSync.latest`; ``min_version`` may be a function, asked again after every wait (a
        bound that falls while it waits: the survivors of a lost actor make up for it)."""
        owner, prefix = self.owners[0], tag_of(self.where, "")
        bound = min_version if callable(min_version) else lambda: min_version
        newest: tuple[int, Any] | None = None
        while True:
            while (got := self.link.find(owner, lambda t: t.startswith(prefix))) is not None:
                newest = (version_in(got[0]), got[1])  # one peer's messages arrive in order: the last is the newest
            if newest is not None and newest[0] >= self.held:
                self.held, self.loads = newest[0], self.loads + 1
            if self.held >= bound():
                return self.held, [newest[1]] if newest is not None else []
            self.link.idle(owner)


class AllReduce:
    """The replicas of one group each publish their gradients (or any tensors of one shape on every
    replica) and read back their mean over the group: one flat bucket, summed by ``all_reduce`` (in
    place: ``torch.distributed.all_reduce``) across ``world`` replicas."""

    operator = Operator.ALL_REDUCE

    def __init__(self, world: int, all_reduce=None):
        self.world = world
        self.all_reduce = all_reduce if all_reduce is not None else torch.distributed.all_reduce
        self.sum: tuple[int, torch.Tensor] | None = None

    def publish(self, version: int, state: list[torch.Tensor]) -> None:
        flat = torch.cat([t.reshape(-1) for t in state])
        self.all_reduce(flat)
        self.sum = (version, flat)

    def latest(self, min_version: int) -> tuple[int, list]:
        version, flat = self.sum
        if version < min_version:
            raise RuntimeError(f"the group has published version {version}, not {min_version}: a replica skipped one")
        return version, [flat / self.world]


#: The implementation of each operator that moves weights or gradients.
SYNCS: dict[Operator, type] = {s.operator: s for s in (Broadcast, VersionedPull, AllReduce)}
