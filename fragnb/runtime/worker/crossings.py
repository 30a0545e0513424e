"""A walk's values: what a replica sends another group's segment, and what it receives for its own.

Which values a segment needs is the walker's bookkeeping (:class:`~fragnb.runtime.worker.machine.Holdings`);
this part of the walk moves them as the Script's transfer between the two groups says (its operator:
:func:`~fragnb.runtime.worker.machine.routed`), and cuts this replica's share out of what arrives.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...plan.keys import RecordKey, WeightsKey
from ...plan.script import ReplicaId
from ...policies.modes import Lockstep
from ...policies.operators import Operator
from ...shards import network
from ..net.channels import Unsendable, dumps
from .bindings import MISSING
from .edges import combine, to_device
from .machine import partners, share
from .timing import note
from .travel import unsendable

if TYPE_CHECKING:
    from ...plan.script import Script
    from ..net.channels import Channels
    from .replica import ReplicaState

__all__ = ["Crossings"]


class Crossings:
    """The values part of :class:`~fragnb.runtime.worker.walker.Walker` (which keeps the replica, the Script
    and the channels)."""

    rep: ReplicaState
    script: Script
    ch: Channels

    def send(self, group: str, tag: str, out: dict) -> None:
        """Send a segment of ``group`` what it reads from this replica."""
        try:
            self.ch.send(self.partners(group, list(out), sending=True), tag, out)
        except Unsendable:
            raise unsendable(out, dumps, self.script.program.origin, self.rep.group, group) from None

    def receive(self, group: str, tag: str, keys: list[str]) -> list[dict]:
        """What each replica of ``group`` sent this replica for a segment (``keys``)."""
        return [self.recv(peer, tag) for peer in self.partners(group, keys)]

    def operator_of(self, src: str, dst: str) -> Operator:
        """The operator of the Script's transfer of values from group ``src`` to ``dst``: a crossing moves as
        the placement drew it (inside one group, nothing crosses); a value the graph draws no edge for, by the
        groups' replica counts, as a synchronous mode moves values (:meth:`~fragnb.policies.modes.Mode.operator`;
        the graph's reach misses a later loop header's rebinding), so that the run keeps plain Python's values."""
        script = self.script
        if src == dst:
            return Operator.LOCAL
        drawn = next((t for t in script.transfers if t.key == (src, dst, "data")), None)
        if drawn is not None:
            return drawn.operator
        return Lockstep().operator("data", (src, script.groups[src]), (dst, script.groups[dst]), None)

    def partners(self, group: str, keys: list[str], sending: bool = False) -> list[str]:
        """The replicas of ``group`` this replica sends ``keys`` to (``sending``) or receives them from."""
        script, me = self.script, self.rep.group
        operator = self.operator_of(me, group) if sending else self.operator_of(group, me)
        chosen = partners(
            operator,
            self.rep.index,
            script.groups[me],
            script.groups[group],
            keys,
            script.program.kinds,
            script.num_envs,
        )
        return [str(ReplicaId(group, j)) for j in chosen]

    def share(self, sender: str, keys: list[str]) -> tuple[int, int, int | None]:
        """(index, count, environments) that cut this replica's share out of what ``sender``'s partners sent."""
        return share(
            self.operator_of(sender, self.rep.group),
            self.rep.index,
            self.rep.count,
            self.script.groups[sender],
            keys,
            self.script.program.kinds,
            self.script.num_envs,
        )

    def recv(self, peer: str, tag: str) -> Any:
        start = time.perf_counter()
        value = self.ch.recv(peer, tag)
        end = time.perf_counter()
        note(self.rep.intervals, f"waits for {ReplicaId.parse(peer).group}", "wait", start, end)
        self.rep.waited += end - start
        return value

    def export(self, key: str) -> Any:
        ns = self.rep.ns
        if isinstance(key, WeightsKey):
            return network(ns[key.component], key.attribute).state_dict()
        if isinstance(key, RecordKey):
            return self.rep.records.pop(key, [])
        return ns[key] if key in ns else MISSING

    def combine_into(self, key: str, into: str, parts: list, cut: tuple[int, int, int | None]) -> None:
        """Combine the senders' ``parts`` of ``key`` into this replica's share (``cut``: its index and
        count among the replicas sharing what the parts make up, and their environments), on its device."""
        rep, script, program = self.rep, self.script, self.script.program
        kinds, origin = program.kinds, program.origin
        index, count, num_envs = cut

        def share(var: str, values: list):
            value = combine(
                var,
                values,
                index=index,
                count=count,
                num_envs=num_envs,
                kind=kinds.get(var, "sharded"),
                origin=origin.get(var, ""),
                strict=script.strict,
                full=script.shapes.get(var),
                axis=program.axes.get(var, 0),
            )
            return to_device(value, rep.device)

        if isinstance(key, RecordKey):
            rep.replays[key] = [{v: share(v, [p[v] for p in steps]) for v in steps[0]} for steps in zip(*parts)][::-1]
        elif not any(p is MISSING for p in parts):
            rep.ns[into] = share(key, parts)
