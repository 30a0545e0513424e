"""A walk's weights: what a replica loads from another group's networks, through the sync its transfer names.

The walker decides *which* weights a segment needs (every replica keeps the same bookkeeping of who
wrote what); how they move is the Script's transfer's operator, whose implementation
(:mod:`fragnb.runtime.net.weights`) this part of the walk calls and serves as its link: sending to
peers, finding their messages, idling on the timeline while it waits.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...plan.keys import WeightsKey
from ...plan.script import ReplicaId, peers
from ...shards import network
from ..net.weights import SYNCS, WeightSync
from .edges import combine, to_device
from .timing import note

if TYPE_CHECKING:
    from ...plan.program import Segment
    from ...policies.transfers import Transfer

__all__ = ["Loads"]

_POLL_S = 0.05


class Loads:
    """The weights part of :class:`~fragnb.runtime.worker.walker.Walker` (which keeps ``syncs``, ``moved_by``,
    ``held`` and the replica's channels): a walker is the :class:`~fragnb.runtime.net.weights.Link` of its syncs."""

    syncs: dict[tuple[str, int], WeightSync]  # (owner group, segment) -> how its weights move
    moved_by: dict[tuple[str, int], Transfer]  # the same -> its transfer

    def sync(self, owner: str, seg: Segment) -> WeightSync:
        """How the weights ``seg`` loads from ``owner``'s group move: the implementation of the Script's
        transfer's operator (:mod:`fragnb.runtime.net.weights`), one per segment, kept for the run."""
        key = (owner, seg.index)
        if key not in self.syncs:
            transfer = self.script.transfer(owner, seg.group, "state")
            self.syncs[key] = SYNCS[transfer.operator](
                self,
                str(seg.index),
                peers(owner, self.script.groups[owner]),
                peers(seg.group, self.script.groups[seg.group]),
            )
            self.moved_by[key] = transfer
        return self.syncs[key]

    def version_of(self, keys: list[WeightsKey]) -> int:
        """The version of ``keys`` this walk is at: how often their owner has written them (every replica
        counts alike)."""
        return self.held.version(keys)

    def min_version(self, keys: list[WeightsKey]) -> int:
        """The oldest version of ``keys`` a segment may load: the one the walk is at (a synchronous run's
        replicas act with exactly the weights plain Python's would)."""
        return self.version_of(keys)

    def load(self, owner: str, seg: Segment, nets: list[tuple[WeightsKey, WeightsKey]]) -> int:
        """Load the weights ``seg`` needs from ``owner``'s group, as its transfer's sync delivers them (none
        when what this replica holds is new enough); returns their version."""
        rep, script = self.rep, self.script
        version, parts = self.sync(owner, seg).latest(self.min_version([key for key, _ in nets]))
        for key, into in nets if parts else ():
            weights = combine(
                key,
                [p[key] for p in parts],
                kind="replicated",
                origin=f"the weights of {key.component}",
                strict=script.strict,
            )  # whole on every replica, never split along the environments; the owners agree
            network(rep.ns[into.component], into.attribute).load_state_dict(to_device(weights, rep.device))
        return version

    def moved(self) -> dict[str, int]:
        """How many versions of weights this replica loaded, by transfer, named as the drawing names it but
        with the operator of the sync that moved them (what ran, to compare with what was drawn)."""
        out: dict[str, int] = {}
        for key, sync in self.syncs.items():
            name = str(replace(self.moved_by[key], operator=sync.operator))
            out[name] = out.get(name, 0) + sync.loads
        return out

    # Link (:class:`fragnb.runtime.net.weights.Link`): what the syncs move weights with
    def send_to(self, peers: list[str], tag: str, value: Any) -> None:
        self.ch.send(peers, tag, value)

    def find(self, peer: str, match) -> tuple[str, Any] | None:
        return self.ch.find(peer, match)

    def idle(self, whom: str) -> None:
        """Wait a little for messages, as a wait for ``whom`` on the timeline."""
        start = time.perf_counter()
        self.ch.poll(_POLL_S)
        end = time.perf_counter()
        group = whom if whom in self.script.groups else ReplicaId.parse(whom).group
        note(self.rep.intervals, f"waits for {group}", "wait", start, end)
        self.rep.waited += end - start
