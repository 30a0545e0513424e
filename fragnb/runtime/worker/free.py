"""Decoupled policies (``async``, ``srl``): groups that run free of the learner.

Under a synchronous policy every replica walks every iteration in step. Under a decoupled one the
*free* groups (actors, and ``srl``'s policy workers) run their own iterations as fast as they can,
and the *leader*'s group (the learner with the cell's bookkeeping) consumes what they produce as it
arrives. The walk is the same program as :mod:`fragnb.runtime.worker.walker`'s; only three of its exchanges change:

- **The sample stream.** A free replica tags what it sends the learner with its own iteration and the
  version of the weights it acted with. The learner fills each iteration with the first
  trajectories to arrive, one per replica slot of the group, whichever replicas they come from. A
  trajectory whose *staleness* (learner version minus the version that produced it) is above
  ``max_staleness`` is **dropped**, and counted, as Sample Factory drops experience older than its
  policy lag: the learner never trains on data older than the bound.
- **Versioned weights.** The learner sends its weights after every update, tagged with its version;
  a free replica loads the newest that has arrived when its segment needs them, and **waits** only
  when even that is more than ``max_staleness`` versions behind its own iteration, which bounds how
  far actors run ahead (and how much they would produce for nothing). That is the weights transfer's
  operator, ``versioned pull`` (:class:`~fragnb.runtime.net.weights.VersionedPull`); this walker only
  says what a version is inside the loop (the learner's iteration) and how old one may be.
- **Sampling ahead** (``samples_per_insert``, Ape-X's learner). The learner need not wait for a
  trajectory: when none is waiting, it runs the iteration's updates on its replay buffer alone (the
  segment's *ahead* variant, :func:`fragnb.plan.decoupled.sample_ahead`), as long as the samples it has
  drawn per transition inserted stay within the bound (:func:`~.machine.may_sample_ahead`); past it,
  it waits for insertion. Replay is off-policy, so no trajectory is dropped as stale then: the bound on
  staleness only keeps the actors from running further ahead.
- **Halting.** The learner alone decides when the run ends (its loop's end, a stop condition,
  Ctrl-C) and tells the free replicas, which stop where they are; what they produced after the
  learner's last iteration is reported as unconsumed.

Values the actors compute alike under a synchronous policy (a step counter, the loop variable)
differ between actors at different iterations: the learner takes the first trajectory's, as plain
Python has no answer to which it should be.

Free groups that talk to each other (``srl``'s actor and policy workers) do so in step, iteration by
iteration, as under a synchronous policy; the learner then takes whole *rounds* (one iteration of
every free replica) instead of first arrivals, so that an actor worker's samples and the actions its
policy worker sent it stay together.

What such a run cannot reproduce is refused before any worker starts (:func:`fragnb.plan.decoupled.refuse`):
free groups must need nothing but weights from the learner inside the loop.
"""

from __future__ import annotations

import itertools
from typing import Any

from ...plan.program import DrivenLoop
from ...plan.script import ReplicaId, peers
from ...policies.operators import Operator
from .bindings import bind
from .machine import (
    Arrival,
    in_replica_order,
    is_news,
    is_segment,
    iteration_of,
    may_sample_ahead,
    news_tag,
    next_trajectory,
    oldest_version,
    pace,
    round_is_fresh,
    stamped,
    version_of,
)
from .report import Finals
from .stops import learner_ended
from .walker import Walker

__all__ = ["FreeWalker"]

HALT = "control:halt"


class _Halted(Exception):
    """The learner ended the run while this free replica was waiting."""


class FreeWalker(Walker):
    """:class:`~fragnb.runtime.worker.walker.Walker` for decoupled policies (see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        script = self.script
        self.home = ReplicaId.parse(script.leader).group
        self.free = self.rep.group != self.home
        self.looping = False  # inside the iteration loop: exchanges are tagged by iteration
        self.version = 0  # free: the version of the weights it acts with
        self.cursor = {
            p: 0 for g, n in script.groups.items() if g != self.home for p in peers(g, n)
        }  # leader: next iteration per replica
        self.slots: dict[
            str, list[tuple[str, int, int]]
        ] = {}  # leader: this iteration's (replica, its iteration, version) per group
        self.considered: list[tuple[str, int, bool]] = []  # leader: (replica, iteration, consumed) whose news is due
        self.staleness: list[list[int]] = []  # leader: per iteration, the staleness of each trajectory consumed
        self.ages: list[int] = []  # leader: this iteration's
        self.depth: list[int] = []  # leader: trajectories waiting when it took one
        self.dropped = 0
        self.halted = False
        self.constants: dict[str, Any] = {}
        self.streams: set[str] = set()  # leader: the groups whose trajectories it consumes
        # srl: free groups that exchange values every step are in step: the learner takes whole rounds
        self.lockstep = sum(g != self.home for g in script.groups) > 1
        self.round: int | None = None  # leader, lockstep: the round this iteration takes
        self.next_round = 0
        # leader, samples_per_insert: this iteration samples ahead of insertion; how many did; what the
        # last iteration drew, and the replay's draws when this one began
        self.sampling_ahead = False
        self.ahead = 0
        self.last_samples: int | None = None
        self.drawn_before = 0
        # What the leader reads that one free group alone writes, by variable: every trajectory carries it
        # (:meth:`inputs`); (iteration, variable) pairs already carried this iteration.
        writers: dict[str, set[str]] = {}
        for seg in script.program.segments:
            for var in seg.writes:
                writers.setdefault(var, set()).add(seg.group)
        self.free_writer = {v: next(iter(gs)) for v, gs in writers.items() if len(gs) == 1 and self.home not in gs}
        self.carried: set[tuple[int, str]] = set()

    # -- the iteration loop ---------------------------------------------------------------------
    def iterate(self, loop: DrivenLoop, iterable) -> None:
        self.looping = True
        try:
            if not self.free:
                super().iterate(loop, iterable)
                self.halt(self.stopped or learner_ended())
                return
            # A free replica's own count of iterations goes on past the learner's: `range(n)` continues.
            last = iterable[-1] if len(iterable) else iterable.start - iterable.step
            values = itertools.chain(iterable, itertools.count(last + iterable.step, iterable.step))
            if self.script.limit is not None:  # the safety net's first iteration(s): no further
                values = itertools.islice(values, self.script.limit)
            try:
                for value in values:
                    bind(loop.node.target, value, self.scalars)
                    self.path = (self.at[0], self.iterations)  # its own iterations: a sink call's place
                    self.walk(loop.body)
                    self.iterations += 1
                    if self.decide(self.progress())[0]:
                        break
            except _Halted:
                pass
        finally:
            self.looping = False

    def before_iteration(self) -> None:
        """Leader, ``samples_per_insert``: sample the replay ahead of insertion this iteration if no
        trajectory is waiting to fill it and the bound allows what the last iteration drew."""
        if self.free or self.script.samples_per_insert is None:
            return
        replay = self.rep.ns[self.script.replay]
        self.drawn_before = replay.sampled
        self.sampling_ahead = (
            self.script.limit is None  # the safety net compares whole iterations with plain Python's
            and self.last_samples is not None  # the first iteration measures what one draws
            and not self.trajectories_waiting()
            and may_sample_ahead(replay.sampled, replay.inserted, self.last_samples, self.script.samples_per_insert)
        )

    def trajectories_waiting(self) -> bool:
        """Whether whole trajectories have arrived for every slot of the free groups (insertion first)."""
        self.ch.poll()
        for group, n in self.script.groups.items():
            if group == self.home:
                continue
            whole = sum(
                1
                for peer in peers(group, n)
                for _, t in self.ch.arrived(peer)
                if is_news(t) and iteration_of(t) >= self.cursor[peer]
            )
            if whole < n:
                return False
        return True

    def segment(self, seg) -> None:
        if self.sampling_ahead and seg.group == self.rep.group and ("ahead", seg.index) in self.rep.codes:
            self.execute(seg, self.rep.codes["ahead", seg.index])  # receives nothing: no trajectory is taken
            self.wrote(seg)
            return
        super().segment(seg)

    def decide(self, news: tuple[list, int], ruled: None = None) -> tuple[bool, bool]:
        """As :meth:`Walker.decide`; a decoupled run keeps no checkpoints, and splits its loop, so no collective
        round carries a ruling (``ruled``)."""
        if self.script.samples_per_insert is not None and not self.free:
            self.last_samples = self.rep.ns[self.script.replay].sampled - self.drawn_before
            self.ahead += self.sampling_ahead
            self.sampling_ahead = False
        if self.free:
            self.ch.send([self.script.leader], news_tag(self.iterations - 1), news)
            self.ch.poll()
            return self.check_halt(), False
        reports = [news]
        for peer, it, consumed in self.considered:
            reports.append(self.wait(peer, news_tag(it).__eq__))
            if not consumed:  # every message of that iteration has arrived before its news: discard them
                while self.ch.find(peer, lambda t, it=it: is_segment(t) and iteration_of(t) == it):
                    pass
        self.considered = []
        self.slots = {}
        self.round = None
        self.staleness.append(self.ages)
        self.ages = []
        self.stopped = self.judge(reports)
        return bool(self.stopped), False

    def halt(self, reason: str) -> None:
        if not self.halted:
            self.halted = True
            others = [
                p
                for p in self.script.replicas()
                if p != self.name and (not self.free or ReplicaId.parse(p).group not in (self.rep.group, self.home))
            ]
            self.ch.send(others, HALT, reason)

    def check_halt(self) -> bool:
        """Whether a halt has arrived (from the learner, or from a free peer that stopped mid-iteration)."""
        for peer in self.ch.peers:
            if (got := self.ch.find(peer, HALT.__eq__)) is not None:
                self.stopped = got[1]
                self.halt(got[1])  # free peers in step with this one must not wait for it
                return True
        return False

    # -- exchanges ------------------------------------------------------------------------------
    def inputs(self, seg) -> list[tuple[str, str, str]]:
        """As a synchronous walk decides, and: inside the loop, a leader's segment takes every value it reads
        that a free group writes from the trajectories it consumes, once an iteration, whether or not it
        holds a version already. What it holds came from other trajectories: an actor's iteration 0 sends
        no ``prompts`` (the learner has the setup's), its iteration 5 does, and a learner taking those two
        together paired one actor's prompts with both actors' completions. Both ends decide this alike,
        each from its own iteration."""
        out = super().inputs(seg)
        if not self.looping or seg.group != self.home:
            return out
        for _, key, _ in out:
            if isinstance(key, str):
                self.carried.add((self.iterations, key))
        for var in sorted(seg.reads):
            group = self.free_writer.get(var)
            if group is not None and (self.iterations, var) not in self.carried:
                out.append((group, var, var))
                self.carried.add((self.iterations, var))
        return out

    def send(self, group: str, tag: str, out: dict) -> None:
        if self.looping:
            tag = stamped(tag, self.iterations, self.version if self.free else None)
        super().send(group, tag, out)

    def receive(self, group: str, tag: str, keys: list[str]) -> list[dict]:
        """What ``group``'s replicas sent for a segment: before the loop every group is in step; inside it, as
        the operator of the Script's transfer from ``group`` says (:data:`STREAMS`)."""
        if not self.looping:
            return [self.ch.take(peer, tag) for peer in self.partners(group, keys)]
        transfer = self.script.transfer(group, self.rep.group, "data")
        if transfer.operator not in STREAMS:
            raise RuntimeError(f"{transfer}: a decoupled walk moves values by {sorted(STREAMS)} only")
        return STREAMS[transfer.operator](self, group, tag, keys)

    def in_step(self, group: str, tag: str, keys: list[str]) -> list[dict]:
        """An inference stream: another free group, in step with this one, sent what it computed this
        iteration, with the version of the weights it acted with."""
        got = [
            self.wait(peer, lambda t: t.startswith(stamped(tag, self.iterations) + "/"), tagged=True)
            for peer in self.partners(group, keys)
        ]
        # srl: actor workers learn the version their policy workers act with (never older than their own)
        self.version = max([self.version] + [version_of(t) for t, _ in got])
        return [value for _, value in got]

    def streamed(self, group: str, tag: str, keys: list[str], rounds: bool | None = None) -> list[dict]:
        """A sample stream: the learner takes this iteration's trajectories from ``group`` (:meth:`assign`):
        whole rounds where free groups serve each other in step (srl), else the first to arrive.
        A replica's version may grow within an iteration (a learner that updates every step): match any."""
        rounds = self.lockstep if rounds is None else rounds
        return [
            self.wait(peer, lambda t, a=a: t.startswith(stamped(tag, a) + "/"))
            for peer, a, _ in self.assign(group, rounds)
        ]

    def gathered(self, group: str, tag: str, keys: list[str]) -> list[dict]:
        """A gather into a free-running walk's learner (``coarse`` with its weights relaxed): one iteration of
        every replica of ``group`` each iteration, in order, dropping those staler than the bound."""
        return self.streamed(group, tag, keys, rounds=True)

    # -- versioned weights (the transfer's sync: :class:`~fragnb.runtime.net.weights.VersionedPull`) ------------------
    def version_of(self, keys) -> int:
        """Inside the loop, the learner's weights are versioned by its iterations (staleness is counted in them)."""
        return self.iterations if self.looping else super().version_of(keys)

    def min_version(self, keys):
        """Inside the loop, a free replica may act with weights up to ``max_staleness`` versions behind its
        pace, which falls while it waits if an actor is lost (so asked again after every wait)."""
        if self.looping and self.free:
            return lambda: oldest_version(self.pace(), self.script.max_staleness)
        return super().min_version(keys)

    def load(self, owner, seg, nets) -> int:
        version = super().load(owner, seg, nets)
        if self.looping:
            self.version = max(self.version, version)
        return version

    def pace(self) -> int:
        """The learner's version this replica's iteration stands for (:func:`~.machine.pace`)."""
        gone = sum(ReplicaId.parse(p).group == self.rep.group for p in self.rep.gone)
        return pace(self.iterations, self.script.groups[self.rep.group], gone)

    def assign(self, group: str, rounds: bool) -> list[tuple[str, int, int]]:
        """This iteration's trajectories from ``group``: (replica, its iteration, version) per replica slot,
        the oldest whole round of its replicas' iterations (``rounds``) or the first to arrive."""
        if group not in self.slots:
            self.streams.add(group)
            chosen = self.round_of(group) if rounds else self.first_arrivals(group)
            chosen = in_replica_order(chosen, lambda name: ReplicaId.parse(name).index)
            self.ages += [self.iterations - v for _, _, v in chosen]
            self.slots[group] = chosen
        return self.slots[group]

    def first_arrivals(self, group: str) -> list[tuple[str, int, int]]:
        """async: the first trajectories to arrive, whichever replicas they come from, dropping those
        more than ``max_staleness`` versions old. Only whole ones: an actor whose worker dies mid-trajectory
        then never holds the learner up (the others fill the slots) and loses only what was in flight."""
        chosen: list[tuple[str, int, int]] = []
        while len(chosen) < self.script.groups[group]:
            waiting = []
            for peer in peers(group, self.script.groups[group]):
                seq, version = self.arrival(peer, self.cursor[peer], whole=True)
                if seq is not None:
                    waiting.append(Arrival(seq, peer, self.cursor[peer], version))
            arrival, usable = next_trajectory(waiting, self.iterations, self.script.max_staleness)
            usable = usable or self.script.samples_per_insert is not None  # replay is off-policy: keep it all
            if arrival is None:
                self.idle(group)
                continue
            _, peer, it, version = arrival
            self.cursor[peer] += 1
            self.considered.append((peer, it, usable))
            if not usable:
                self.dropped += 1
                continue
            self.depth.append(len(waiting))
            chosen.append((peer, it, version))
        return chosen

    def round_of(self, group: str) -> list[tuple[str, int, int]]:
        """srl: free groups serve each other in step, so the learner takes one whole iteration (a
        round) of every free replica, the oldest not yet taken, dropping rounds staler than the bound."""
        free = list(self.cursor)
        while self.round is None:
            a = self.next_round
            versions = [self.arrived_version(peer, a) for peer in peers(group, self.script.groups[group])]
            self.next_round += 1
            usable = round_is_fresh(self.iterations, versions, self.script.max_staleness)
            self.considered += [(peer, a, usable) for peer in free]
            if usable:
                self.round = a
                self.depth.append(
                    min(len({iteration_of(t) for _, t in self.ch.arrived(p) if is_segment(t)}) for p in free)
                )
            else:
                self.dropped += len(versions)
        for peer in free:
            self.cursor[peer] = self.next_round
        return [
            (peer, self.round, self.arrived_version(peer, self.round))
            for peer in peers(group, self.script.groups[group])
        ]

    def arrival(self, peer: str, it: int, whole: bool = False) -> tuple[int | None, int | None]:
        """(arrival number, version) of the first message ``peer`` sent this replica in its iteration ``it``,
        if it has arrived (and, if ``whole``, the iteration's news too: the peer sends it last)."""
        arrived = self.ch.arrived(peer)
        if whole and not any(t == news_tag(it) for _, t in arrived):
            return None, None
        return next(
            ((seq, version_of(t)) for seq, t in arrived if is_segment(t) and iteration_of(t) == it), (None, None)
        )

    def produced(self) -> dict[str, int]:
        """Leader: how many whole trajectories each free replica has delivered (taken, dropped or waiting)."""
        self.ch.poll()
        out = dict(self.cursor)
        for peer in out:
            its = [iteration_of(t) + 1 for _, t in self.ch.arrived(peer) if is_news(t)]
            out[peer] = max([out[peer], *its])
        return out

    def arrived_version(self, peer: str, it: int) -> int:
        """The version ``peer`` acted with in its iteration ``it``, waiting for its first message of it."""
        while (version := self.arrival(peer, it)[1]) is None:
            self.idle(peer)
        return version

    def wait(self, peer: str, match, tagged: bool = False) -> Any:
        """The first message from ``peer`` whose tag matches (with its tag if ``tagged``), waiting for it
        (a halt ends a free replica's wait)."""
        while (got := self.ch.find(peer, match)) is None:
            self.idle(peer)
        return got if tagged else got[1]

    def idle(self, whom: str) -> None:
        """As :meth:`Walker.idle`; a halt ends a free replica's wait."""
        if self.free and self.check_halt():
            raise _Halted
        super().idle(whom)

    def recv(self, peer: str, tag: str) -> Any:
        return self.wait(peer, tag.__eq__)  # peers' messages interleave differently from run to run

    def control(self, name: str, default: Any = None) -> Any:
        # Refused unless assigned before the loop: constant inside it, so fetched once, not every iteration.
        if name not in self.constants:
            value = super().control(name, default)
            if not self.looping:
                return value
            self.constants[name] = value
        return self.constants[name]

    def staleness_now(self) -> list[int]:
        return [] if self.free else list(self.ages)

    def finals(self, components: list[str]) -> Finals:
        out = super().finals(components)
        streams = {p for g in self.streams for p in peers(g, self.script.groups[g])}
        out.taken = {
            p: n for p, n in self.cursor.items() if p in streams
        }  # trajectories it consumed or dropped, per replica
        out.staleness, out.dropped, out.depth, out.ahead = self.staleness, self.dropped, self.depth, self.ahead
        out.produced = self.produced() if not self.free else {}
        return out


#: How a decoupled walk receives values inside its loop, by the operator of the transfer that brings them
#: (:meth:`fragnb.policies.modes.Decoupled.operator`); weights are the transfer's sync (:mod:`.loads`).
STREAMS = {
    Operator.INFERENCE_STREAM: FreeWalker.in_step,
    Operator.SAMPLE_STREAM: FreeWalker.streamed,
    Operator.GATHER: FreeWalker.gathered,
}
