"""Walker: one replica's long-lived run of the whole program.

Every replica of every group walks the same program (:mod:`fragnb.plan.program`): the same loops over
the same iterables, the same segments in the same order. At a segment of its own group a replica
receives what the segment reads from other groups, then executes it; at another group's segment
it sends that segment what it reads from this group, and walks on. Sends never block, so the
sending side runs ahead until it needs something back: a ``coarse`` actor starts its next rollout
as soon as the learner's new weights arrive, the learner waits only for trajectories.

Because all replicas keep the same bookkeeping (which group last wrote each variable, which
version of each network a group holds), sender and receiver agree on every message without
asking anyone: the notebook only starts the replicas, watches them and reads small progress events.
"""

from __future__ import annotations

import ast
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...plan.instrument import DRIVER
from ...plan.keys import WeightsKey
from ...plan.program import DrivenLoop, Segment
from ...plan.script import ReplicaId, Script, peers
from ...policies.transfers import Transfer
from ...sinks import calls_of
from ..net import collectives
from ..net.weights import WeightSync
from .bindings import CellExit, bind, holdings, shape_error, where
from .crossings import Crossings
from .edges import combine, refuse_autograd, to_device
from .loads import Loads
from .machine import Holdings, segment_tag
from .recorder import Recorder, shipped
from .report import Checkpointed, Finals, Progress
from .rulings import Ruling
from .stops import interrupted, own_condition
from .travel import pickled

if TYPE_CHECKING:
    from ..net.channels import Channels
    from .replica import ReplicaState

__all__ = ["Walker", "REPORT_EVERY_S"]

#: A replica tells the notebook its progress at most this often, and after its last iteration. An event
#: every iteration crosses to the scheduler and on to the client over TLS, both in the notebook's process:
#: on a loop of a millisecond an iteration (CleanRL's dqn.py under data_parallel) that process took a core's
#: worth of the 2-core machine, and the run went at half the speed it did with no events (2026-12-05).
REPORT_EVERY_S = 0.1


#: What :class:`~.machine.Holdings` keeps of a walk, in a checkpoint.
_HELD = ("latest", "loaded", "received", "last_writer")


class Walker(Loads, Crossings):
    """Walks ``script`` as replica ``rep`` (what it needs of one:
    :class:`~fragnb.runtime.worker.replica.ReplicaState`), exchanging values over ``channels``.

    ``events`` (if given) receives a small dict (a :class:`~.report.Progress` on the wire) for the iterations
    finished since the last one, at most every :data:`REPORT_EVERY_S`: this replica's finished episodes and
    env steps, for the notebook's live progress.
    """

    def __init__(
        self, rep: ReplicaState, script: Script, channels: Channels, events: Callable[[dict], Any] | None = None
    ):
        self.rep, self.script, self.ch, self.events = rep, script, channels, events
        self.name = str(ReplicaId(rep.group, rep.index))
        #: who holds what, kept alike on every replica as segments run (a pure object: machine.Holdings)
        self.held = Holdings(script.weights)
        self.scalars: dict[str, Any] = {}  # variables of the loops every replica iterates
        self.iterations = 0
        self.episodes: list[list] = []  # [wall time, env id, env steps of the whole batch, return]
        self.ticks: list[float] = []  # wall time at the end of each iteration
        self.clock = time.time() - time.perf_counter()  # perf_counter -> wall time, comparable across machines
        self.headers: dict[int, Any] = {}
        self.stopped = ""  # why the iteration loop ended early, if it did
        #: the leader's rulings after each iteration: stop, keep a checkpoint (a pure object: rulings.Ruling)
        self.ruling = Ruling.of(script, fetched=events is not None)
        self.at = (0, 0)  # where the walk is: (item of the program's top level, values its loop has taken)
        self.path: tuple = ()  # the same, down the loops the walk is in (a segment's place: rep.where)
        self.resume = (0, 0)  # where a run restored from a checkpoint starts again
        self.checkpoint_seconds = 0.0
        self.syncs: dict[tuple[str, int], WeightSync] = {}  # (owner group, segment) -> how its weights move
        self.moved_by: dict[tuple[str, int], Transfer] = {}  # the same -> its transfer
        # Progress not yet told to the notebook: the episodes, and each iteration's staleness (report())
        self.unreported: tuple[list, list[list[int]]] = ([], [])
        self.reported_at, self.steps_now = -float("inf"), 0  # the first iteration is told at once
        self.told: dict[str, int] = {}  # sink name -> its calls told to the notebook (a resumed replica tells its all)
        if script.recording is not None and script.recording.fragments:  # fragnb.run(..., record=[...])
            rep.recorder = Recorder(
                script.recording,
                self.name,
                script.recording.bytes // len(script.replicas()),
                lambda: rep.ns,
                lambda: self.iterations,
            )

    # -- walking --------------------------------------------------------------------------------
    def run(self) -> None:
        self.walk(self.script.program.items, top=True)

    def walk(self, items: list, top: bool = False) -> None:
        base = self.path  # where these items are: the loops around them, each with the values it has taken
        for index, item in enumerate(items):
            if top and index < self.resume[0]:
                continue  # done before the checkpoint this run resumes from
            if isinstance(item, Segment):
                self.rep.where = (*base, index)  # a sink call's place in plain Python's order (fragnb.sinks)
                self.segment(item)
            elif top:
                self.at = (index, self.resume[1] if index == self.resume[0] else 0)
                self.iterate(item, self.iterable(item.node))
                self.path = base
                self.report()  # the bar and the curve end where the run did
            else:
                for taken, value in enumerate(self.iterable(item.node)):
                    bind(item.node.target, value, self.scalars)
                    self.path = (*base, index, taken)
                    self.walk(item.body)
                self.path = base

    def iterate(self, loop: DrivenLoop, iterable) -> None:
        """The iteration loop: after each iteration, report progress and decide whether to go on."""
        iterable = itertools.islice(
            iterable, self.at[1], self.script.limit
        )  # a resumed run skips what its checkpoint holds
        self.ruling.starting(self.iterations, time.perf_counter())
        for value in iterable:
            if self.flagged():
                break
            bind(loop.node.target, value, self.scalars)
            self.before_iteration()
            self.path = self.at  # (the loop's place, the iteration): the same on every replica, and after a resume
            self.walk(loop.body)
            ruled = None
            if (
                self.script.mode.whole_copies()
            ):  # replicas whose episodes were shorter take part in the others' last steps
                ruled = collectives.settle(self.rep.collective, self.verdict_ahead())
            self.iterations += 1
            self.at = (self.at[0], self.at[1] + 1)
            stop, keep = self.decide(self.progress(), ruled)
            if stop:
                break
            if keep:
                self.checkpoint()

    def before_iteration(self) -> None:
        """Called before each iteration of the iteration loop is walked (a decoupled learner decides there
        whether it samples ahead of insertion)."""

    # -- checkpoints ----------------------------------------------------------------------------
    #: The bookkeeping a run resumed from a checkpoint needs to walk on as if it had never stopped.
    _STATE = ("scalars", "iterations", "episodes", "ticks", "at")

    def get_state(self) -> dict:
        """This walker's bookkeeping and its replica's global generators, for a checkpoint."""
        held = {k: getattr(self.held, k) for k in _HELD}  # saved under their own names, as before Holdings held them
        state = {**held, **{k: getattr(self, k) for k in self._STATE}, "everyone": self.ruling.everyone}
        return {**state, "generators": self.rep.generators()}

    def set_state(self, state: dict) -> None:
        """Go on from a checkpoint's :meth:`get_state` (the replica holds its namespace then)."""
        state = dict(state)
        self.rep.restore_generators(state.pop("generators"))  # the replica's generators as they were then
        for key in self._STATE:
            setattr(self, key, state[key])
        self.ruling.everyone = state["everyone"]
        self.held = Holdings(self.script.weights, **{k: state[k] for k in _HELD})
        self.resume = self.at

    def checkpoint(self) -> None:
        """Keep this replica's state at this iteration boundary (every replica has received all it
        was sent in the iteration, and agreed to go on), and tell the notebook, which fetches it."""
        start = time.perf_counter()
        blob = pickled({"replica": self.rep.get_state(), "walker": self.get_state()})
        self.rep.keep(self.iterations, blob)
        took = time.perf_counter() - start
        self.checkpoint_seconds += took
        self.ruling.checkpointed(self.iterations, time.perf_counter(), took)
        self.report()  # the notebook's view reaches the checkpoint before it hears of it
        self.events(Checkpointed(self.name, self.iterations, len(blob)).wire())

    def iterable(self, loop: ast.For):
        """The loop's iterable, evaluated alike on every replica: names the cell assigns come from
        the group that assigned them last."""
        if id(loop) not in self.headers:
            names = sorted({n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)})
            self.headers[id(loop)] = (compile(ast.Expression(loop.iter), self.script.filename, "eval"), names)
        code, names = self.headers[id(loop)]
        local = dict(self.scalars)
        for name in names:
            if name in self.held.last_writer and name not in self.scalars:
                local[name] = self.control(name)
        return eval(code, self.rep.ns, local)

    def flagged(self) -> bool:
        """Whether a stop flag (`break`, a `while` condition) holds, as the group that assigns it says."""
        if any(bool(self.control(flag, False)) for flag in self.script.stop_flags if flag in self.held.last_writer):
            self.stopped = own_condition()
            return True
        return False

    def verdict_ahead(self) -> tuple[bool, bool] | None:
        """What the leader rules on the iteration ending now, before its last collective round (which carries
        it to every replica: :func:`~fragnb.runtime.net.collectives.settle`): :meth:`.rulings.Ruling.ahead`."""
        leader = self.name == self.script.leader
        return self.ruling.ahead(leader, self.rep.stop.is_set(), self.iterations + 1, time.perf_counter())

    def decide(self, news: tuple[list, int], ruled: tuple[bool, bool] | None = None) -> tuple[bool, bool]:
        """Whether the run ends after this iteration (its stop condition holds, or the user asked it
        to stop: Ctrl-C in the notebook), and whether every replica keeps a checkpoint now. One replica
        (Script.leader) gathers every replica's new episodes, decides both, and tells the others, so
        that all stop after the same iteration and keep the same ones; or it ``ruled`` already, and the
        iteration's last collective round told every replica (:meth:`verdict_ahead`)."""
        if ruled is not None:
            stop, keep = ruled
            self.stopped = interrupted(self.iterations) if stop else ""
            return stop, keep
        leader = self.script.leader
        others = [r for r in self.script.replicas() if r != leader]
        tag = "control:stop"
        if self.name != leader:
            self.ch.send([leader], tag, news if self.script.until else ([], 0))
            self.stopped, keep = self.recv(leader, tag)
            return bool(self.stopped), keep
        reports = [news] + [self.recv(peer, tag) for peer in others]
        self.stopped, keep = self.ruling.rule(self.rep.stop.is_set(), reports, self.iterations, time.perf_counter())
        self.ch.send(others, tag, (self.stopped, keep))
        return bool(self.stopped), keep

    def judge(self, reports: list[tuple[list, int]]) -> str:
        """Why the run ends after this iteration ("" if it goes on), given every replica's news
        (:meth:`.rulings.Ruling.judge`)."""
        return self.ruling.judge(self.rep.stop.is_set(), reports, self.iterations)

    def control(self, name: str, default: Any = None) -> Any:
        """A value every replica needs to walk on (a stop flag, a loop bound): the replicas of the
        group that assigned it last send it to everyone."""
        group = self.held.last_writer[name]
        tag = f"control:{name}"
        senders = peers(group, self.script.groups[group])
        mine = None
        if self.rep.group == group:
            mine = to_device(self.rep.ns.get(name, default), "cpu")
            self.ch.send([p for p in self.script.replicas() if p != self.name], tag, mine)
        parts = [mine if peer == self.name else self.recv(peer, tag) for peer in senders]
        program = self.script.program
        return combine(
            name,
            parts,
            kind=program.kinds.get(name, "replicated"),
            origin=program.origin.get(name, ""),
            strict=self.script.strict,
        )

    def segment(self, seg: Segment) -> None:
        group = seg.group
        inputs = self.inputs(seg)
        tag = segment_tag(seg.index)
        keys: dict[str, list[str]] = {}  # values, by sending group
        nets: dict[str, list[tuple[WeightsKey, WeightsKey]]] = {}  # weights (owner's, where they load), by owner
        for sender, key, into in inputs:
            if isinstance(key, WeightsKey):
                nets.setdefault(sender, []).append((key, into))
            else:
                keys.setdefault(sender, []).append(key)
        if self.rep.group in nets:  # weights first, values after: both ends take them in that order
            owned = [key for key, _ in nets[self.rep.group]]
            state = to_device({key: self.export(key) for key in owned}, "cpu")
            self.sync(self.rep.group, seg).publish(self.version_of(owned), state)
        if self.rep.group in keys:
            out = {key: self.export(key) for key in keys[self.rep.group]}
            refuse_autograd(out, self.script.program.origin, self.rep.group, group)
            self.send(group, tag, to_device(out, "cpu"))
        if group == self.rep.group:
            for owner in sorted(nets):
                self.load(owner, seg, nets[owner])
            received = {s: self.receive(s, tag, keys[s]) for s in sorted(keys)}
            for sender, key, into in inputs:
                if sender in received and (parts := [r[key] for r in received[sender] if key in r]):
                    self.combine_into(key, into, parts, self.share(sender, keys[sender]))
            self.execute(seg)
        self.wrote(seg)

    def wrote(self, seg: Segment) -> None:
        """What every replica records once ``seg`` has run (:meth:`~.machine.Holdings.ran`)."""
        self.held.ran(seg)

    def inputs(self, seg: Segment) -> list[tuple[str, str, str]]:
        """(sending group, key it exports, where it goes) for each value ``seg`` needs from another group
        (:meth:`~.machine.Holdings.inputs`)."""
        return self.held.inputs(seg)

    def execute(self, seg: Segment, code: Any = None) -> None:
        """Run ``seg`` in this replica's namespace (or ``code``, a variant of it compiled alongside)."""
        rep = self.rep
        ns = rep.ns
        for k in seg.reads & self.scalars.keys():
            ns[k] = self.scalars[k]
        ns[DRIVER] = rep
        try:
            with rep.drawing(seg.index, self.script.drawing):
                try:
                    exec(rep.codes[seg.index] if code is None else code, ns)
                except (KeyboardInterrupt, SystemExit) as e:
                    raise CellExit(e).with_traceback(e.__traceback__) from None
        except Exception as e:
            e.add_note(where(e, f"replica {rep.index} of {rep.group!r}"))
            if self.script.mode.unreplayable() and self.script.recording is not None:  # fragnb.debug()'s closest
                e._fragnb_inputs = shipped(self.script.recording, e, ns, self.name, self.iterations)
            if rep.count > 1 and self.script.num_envs and shape_error(e):
                share = self.script.num_envs // rep.count
                e.add_note(
                    f"This replica steps {share} of the {self.script.num_envs} environments: a tensor sized from the "
                    f"whole batch in the loop (`torch.zeros(num_envs)`) does not fit its share. Size it from what the "
                    f"replica holds (`torch.zeros_like(reward)`, `len(next_obs)`), or allocate it in an earlier cell, "
                    f"where fragnb splits it along its environments"
                )
            raise
        finally:
            ns.pop(DRIVER, None)

    def collect(self) -> tuple[list, int]:
        """Episodes finished since the last call, and env steps so far."""
        episodes, steps = self.rep.report()
        new = [[ep.time + self.clock, ep.env_id, steps, float(ep.ret)] for ep, steps in episodes]
        self.episodes += new
        return new, steps

    def progress(self) -> tuple[list, int]:
        """This iteration's new episodes and the env steps so far; told to the notebook at most every
        :data:`REPORT_EVERY_S` (:meth:`report`)."""
        new, steps = self.collect()
        self.ticks.append(time.perf_counter() + self.clock)
        if self.events is None:  # no notebook listens (a replay): nothing to gather
            return new, steps
        self.unreported[0].extend(new)
        self.unreported[1].append(self.staleness_now())
        self.steps_now = steps
        if time.perf_counter() - self.reported_at >= REPORT_EVERY_S:
            self.report()
        return new, steps

    def report(self) -> None:
        """Tell the notebook the iterations finished since the last :class:`~.report.Progress` (their episodes
        and staleness), if any: after the last iteration, before a checkpoint, and every REPORT_EVERY_S."""
        episodes, staleness = self.unreported
        if self.events is None or not staleness:
            return
        self.unreported = ([], [])
        self.reported_at = time.perf_counter()
        calls = {name: made[self.told.get(name, 0) :] for name, made in calls_of(self.rep.ns).items()}
        self.told.update({name: self.told.get(name, 0) + len(new) for name, new in calls.items()})
        said = pickled({n: new for n, new in calls.items() if new}) if any(calls.values()) else b""
        self.events(
            Progress(
                self.name,
                self.iterations,
                episodes,
                self.steps_now,
                dict(self.rep.seconds),
                staleness,
                self.rep.waited,
                said,
            ).wire()
        )

    def staleness_now(self) -> list[int]:
        """The staleness of each trajectory this iteration trained on (a decoupled policy's learner)."""
        return []

    def finals(self, components: list[str]) -> Finals:
        """What the notebook merges: the variables this group assigned last, its components, and the run's record."""
        rep = self.rep
        variables, comps = holdings(self.script, rep.group, rep.ns, components)
        return Finals(
            variables,
            comps,
            scalars=dict(self.scalars),
            last_writer=dict(self.held.last_writer),
            streams={name: rep.ns[name].counters for name in rep.streams},
            iterations=self.iterations,
            stopped=self.stopped,
            steps=self.collect()[1],
            episodes=self.episodes,
            ticks=self.ticks,
            seconds=dict(rep.seconds),
            intervals=[(label, kind, a + self.clock, b + self.clock) for label, kind, a, b in rep.intervals],
            bytes_sent=self.ch.bytes_sent,
            messages_sent=self.ch.messages_sent,
            moved=self.moved(),
            checkpoint_seconds=self.checkpoint_seconds,
            records=rep.recorder.calls if rep.recorder else [],
            records_dropped=rep.recorder.dropped if rep.recorder else 0,
            calls=calls_of(rep.ns),
        )
