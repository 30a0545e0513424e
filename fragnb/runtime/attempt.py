"""One attempt at a distributed run on a cluster: its replicas placed, started, watched and stopped.

:class:`~fragnb.runtime.plane.OnDask` makes one :class:`Attempt` per start (a run that loses a worker
starts another from the last checkpoint): it places each replica program on a worker, opens its channels,
joins the process groups the Script's transfers average in, starts the long-lived programs, and reads the
replicas' small events through one :class:`~fragnb.runtime.events.EventStream` until they end, tallying
their progress for the live view (:class:`Tally`).
"""

from __future__ import annotations

import pickle
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable

import cloudpickle

from ..plan.script import ReplicaId, Script
from ..policies import Placement
from ..policies.transfers import averaged
from ..shards import shard
from .cluster.clusters import ClusterError, workers
from .cluster.jobs import job_ends, job_ids
from .cluster.silence import Silence, waiting
from .events import EventStream
from .net import shm
from .net.channels import root_cause
from .slots import slots
from .worker import entry, registry
from .worker.payload import Payload
from .worker.report import ORDERS, Checkpointed, Finals, Progress, event_of

__all__ = ["Attempt", "LostWorker", "Tally"]

LIVENESS_S = 0.5  # how often the notebook asks the scheduler which workers are alive


class LostWorker(ClusterError):
    """A worker holding replicas of the run died (out of memory, killed, its machine gone)."""


class Attempt:
    """One run's replicas on a Dask cluster."""

    #: called with each checkpoint the notebook fetches (iteration, states by replica): a Store writes it
    on_saved = None

    def __init__(
        self,
        placement: Placement,
        script: Script,
        ns: dict,
        client,
        payloads: dict[str, Payload],
        saved: tuple[int, dict[str, bytes]] | None = None,
        wait_s: float = 0.0,
    ):
        self.placement, self.script, self.ns, self.client, self.payloads = placement, script, ns, client, payloads
        self.saved, self.wait_s = saved, wait_s  # the checkpoint it starts from, and how long to wait for workers
        self.resume = saved[1] if saved else {}
        self.reported: dict[int, set[str]] = {}  # iteration -> replicas that kept a checkpoint after it
        self.fetch_seconds = 0.0
        self.forsaken: list[str] = []  # replicas whose worker died and the run went on without (async's actors)
        self.lost: list[str] = []  # why
        self.run_id = uuid.uuid4().hex[:12]
        self.topic = f"fragnb-{self.run_id}"
        self.stream = EventStream(client, self.topic)  # the tasks it submits and the events they send
        self.tasks: list[list[str]] = []  # the replicas of each long-lived task
        self.slots: dict[str, str] = {}  # replica -> worker address
        self.futures: dict[str, object] = {}
        self.client_bytes = 0
        self.start_wall = time.time()
        self.checked = time.monotonic()  # when the workers' liveness was last read
        self.logs = None  # the run's sinks on the notebook's side (fragnb.sinks.Logs), if it makes their calls live
        self.jobs: dict[str, str] = {}  # worker address -> its batch job, where a batch system ran it
        self.silence = Silence()  # workers whose heartbeats stopped (a host cut off): lost, as a dead one

    def start(self) -> None:
        """Place every task (one replica, or several as threads) on a worker thread of its own, ship
        each replica its objects and code, open its channel inbox, and start its program."""
        placement, script = self.placement, self.script
        self.tasks, self.slots = self.place()
        self.jobs = job_ids(self.client, set(self.slots.values()))  # a batch system's workers: their jobs
        setup = {}
        key = secrets.token_bytes(32)  # signs the run's channel messages; travels only through Dask
        for g, (n, device) in placement.groups.items():
            source = (script.filename, placement.graph.source)
            for i in range(n):
                name = str(ReplicaId(g, i))
                setup[name] = self.submit(
                    name,
                    entry.open_replica,
                    self.run_id,
                    g,
                    i,
                    n,
                    device=device,
                    payload=self.payloads[g],
                    source=source,
                    host=host_of(self.slots[name]),
                    secret=key,
                    fused=script.mode.fuses(),
                    resume=self.resume.get(name),
                )
        addresses = dict(zip(setup, self.wait_all(list(setup.values()))))
        if averaged(script.transfers):
            self.join_process_groups()
        blob = cloudpickle.dumps(script)  # the stop condition may be a notebook lambda
        components = script.components()
        self.start_wall = time.time()
        hosts = list(self.slots.values())
        # Dask keeps no event logged before the notebook subscribes: subscribed only in watch(), a run whose view
        # took a while to show lost its first iterations' progress and checkpoints (a busy machine's CI, 2026-12-05)
        self.stream.open()
        self.futures = {
            task[0]: self.submit(
                task[0],
                entry.run_program,
                self.run_id,
                names=task,
                addresses=addresses,
                script=blob,
                components=components,
                topic=self.topic,
                shared=hosts.count(self.slots[task[0]]) > 1,
            )
            for task in self.tasks
        }

    def place(self) -> tuple[list[list[str]], dict[str, str]]:
        """The tasks and a worker thread for each (:func:`~fragnb.runtime.slots.slots`); a restart waits
        ``wait_s`` for the cluster to replace a lost worker (a nanny restarts it, an adaptive cluster adds one)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                threads = {w: info.get("nthreads", 1) for w, info in workers(self.client).items()}
                return slots(
                    self.script.groups, self.placement.colocated, bool(averaged(self.script.transfers)), threads
                )
            except ClusterError as e:
                if time.monotonic() > deadline:
                    if self.wait_s:
                        raise ClusterError(f"no spare capacity to resume the run: {e}") from None
                    raise
                time.sleep(0.5)

    def join_process_groups(self) -> None:
        """The groups whose transfers average their gradients join a process group each."""
        for g in averaged(self.script.transfers):
            n, device = self.placement.groups[g]
            first = str(ReplicaId(g, 0))
            host = host_of(self.slots[first])
            (port,) = self.wait_all([self.submit(first, free_port, host)])
            backend = "nccl" if device == "cuda" else "gloo"
            hosts = {host_of(self.slots[str(ReplicaId(g, i))]) for i in range(n)}
            shared = self.shared(g) if len(hosts) == 1 else None  # one machine: its replicas meet in shared memory
            self.wait_all(
                [
                    self.submit(
                        str(ReplicaId(g, i)),
                        entry.join_process_group,
                        self.run_id,
                        i,
                        n,
                        f"tcp://{host}:{port}",
                        backend,
                        self.script.mode.whole_copies(),
                        shared,
                    )
                    for i in range(n)
                ]
            )

    def shared(self, group: str) -> str:
        """The name of ``group``'s shared-memory group in this run (:mod:`fragnb.runtime.net.shm`)."""
        return f"{self.run_id}-{group}"

    def submit(self, name: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` as a task on the worker of replica ``name`` (``kwargs`` must not use
        the names of ``Client.submit``'s own parameters: ``key``, ``workers``, ``pure``...)."""
        return self.stream.submit(fn, *args, where=[self.slots[name]], **kwargs)

    def wait_all(self, futures: list) -> list:
        """Results of set-up tasks; a replica's worker that disappears is an error, not a hang."""
        while not all(f.done() for f in futures):
            time.sleep(0.02)
            self.check_alive()
        return self.client.gather(futures)

    def watch(self, live, stop: threading.Event) -> dict[str, Finals]:
        """Wait for every replica's program to end, showing its progress; the first failure, or a
        lost worker, ends the run with an error naming the replica. A first KeyboardInterrupt, or
        ``stop`` being set, asks the replicas to stop after the current iteration; a second
        KeyboardInterrupt aborts."""
        progress = Tally(live, self.script.replicas(), ORDERS[self.script.mode.episode_order()], self.logs)
        try:
            self.stream.watch(lambda: self.poll(progress), self.request_stop, stop)
            finals = {name: f for task in self.client.gather(list(self.futures.values())) for name, f in task.items()}
            finals.update({name: self.stand_in(name, progress) for name in self.forsaken})
            self.drain(progress, {name: f.iterations for name, f in finals.items()})
        finally:
            self.close_stream()  # never masks the error that ends the watch
            progress.close()
        return finals

    def poll(self, progress: Tally) -> bool:
        """One round of watching: progress events for up to 50 ms, then failures and lost workers.
        Whether every replica has finished."""
        if self.show_event(progress):
            return False
        if any(f.status == "error" for f in self.futures.values()):
            raise self.failure()
        if all(f.status == "finished" for f in self.futures.values()):
            return True
        if time.monotonic() - self.checked > LIVENESS_S:
            self.checked = time.monotonic()
            self.check_alive()
            for name in self.forsaken:
                progress.done.pop(name, None)  # the live view no longer waits for its iterations
        return False

    def show_event(self, progress: Tally) -> bool:
        """Take the next event a replica sent, if one arrives within 50 ms; whether one did."""
        msg = self.stream.next(0.05)
        if msg is None:
            return False
        self.show(msg, progress)
        return True

    def show(self, msg: dict, progress: Tally) -> None:
        """A replica's event: a checkpoint it kept, or its progress for the live view."""
        self.client_bytes += len(pickle.dumps(msg))
        event = event_of(msg)
        if isinstance(event, Checkpointed):
            self.kept(event.replica, event.iteration)
        else:
            progress.add(event)

    def kept(self, name: str, iteration: int) -> None:
        """A replica kept its state after ``iteration``: once all have, fetch them into the notebook,
        where they survive any worker."""
        self.reported.setdefault(iteration, set()).add(name)
        if len(self.reported[iteration]) < len(self.slots):
            return
        del self.reported[iteration]
        if self.saved and self.saved[0] >= iteration:
            return  # read late: the notebook already holds a newer one
        # a worker the scheduler has dropped (it knows within 12 ms of a SIGKILL) ends the run here: asked for
        # its checkpoint, it made the notebook wait out a 30 s connect (measured 2026-12-05)
        self.check_alive()
        start = time.perf_counter()
        every = sorted(set(self.slots.values()))
        ask = lambda: self.client.run(registry.checkpoint_of, self.run_id, iteration, workers=every, on_error="ignore")  # noqa: E731
        per_worker = waiting(ask, self.check_alive, LIVENESS_S)  # a worker cut off mid-fetch: lost, not waited on
        got = {name: kept for reply in per_worker.values() if isinstance(reply, dict) for name, kept in reply.items()}
        at = {it for it, _ in got.values()}
        # Every replica's, after the same iteration: else a worker died meanwhile, or (read late) its replicas
        # had moved one checkpoint further than another's; the last whole checkpoint stays, a later event's comes
        if got.keys() == self.slots.keys() and len(at) == 1:
            self.saved = (at.pop(), {name: blob for name, (_, blob) in got.items()})
            if self.on_saved is not None:
                self.on_saved(*self.saved)
        self.fetch_seconds += time.perf_counter() - start

    def drain(self, progress: Tally, iterations: dict[str, int], timeout: float = 2.0) -> None:
        """Progress events still on their way once every replica has ended (they travel through the
        scheduler): show them, so the bar and the curve end where the run did."""
        self.stream.drain(
            lambda msg: self.show(msg, progress),
            lambda: all(progress.done[r] >= n for r, n in iterations.items() if r in progress.done),
            timeout,
        )

    def request_stop(self) -> None:
        """Ask the replica that decides for all to end the run after the current iteration."""
        self.client.run(registry.request_stop, self.run_id, workers=[self.slots[self.script.leader]], on_error="ignore")

    def check_alive(self) -> None:
        known = workers(self.client)
        quiet = self.silence.lost(self.client, known, set(self.slots.values()))  # address -> why
        alive = set(known) - set(quiet)
        gone: dict[str, list[str]] = {}
        for name, w in self.slots.items():
            if w not in alive and name not in self.forsaken:
                gone.setdefault(w, []).append(name)
        lost = [f"replica{'s' if len(names) > 1 else ''} {', '.join(names)} on {w}" for w, names in gone.items()]
        script = self.script
        names = [n for names in gone.values() for n in names]
        if lost and self.futures and script.mode.goes_on_without(names, self.forsaken, script.groups, script.leader):
            self.forsaken += [n for names in gone.values() for n in names]
            self.lost.append(f"lost the worker of {'; '.join(lost)}; the run went on with the other actors")
            print(f"fragnb: {self.lost[-1]} (the trajectory it was producing is lost)", file=sys.stderr)
            for name in (n for names in gone.values() for n in names):
                self.futures.pop(name, None)
            survivors = sorted({self.slots[n] for n in self.futures} & alive)
            self.client.run(registry.forsake, self.run_id, self.forsaken, workers=survivors, on_error="ignore")
            return
        if lost:
            ends = job_ends({w: self.jobs[w] for w in gone if w in self.jobs})
            ends.update({w: quiet[w] for w in gone if w in quiet})
            why = "; ".join(ends.values()) or "a worker can die when it runs out of memory"
            reason = f"lost the worker of {'; '.join(lost)} during the run ({why}); the state of its replicas is gone with it"
            self.abort(reason)
            raise LostWorker(reason)

    def stand_in(self, name: str, progress: Tally) -> Finals:
        """What the notebook merges for a replica whose worker died (async's actors): the episodes and
        steps it reported, and its components as they were before the run (their state died with it)."""
        group, index = ReplicaId.parse(name)
        ns, sharded = self.ns, self.payloads[group].sharded
        n = self.script.groups[group]
        components = {c: shard(ns[c], index, n) if c in sharded else ns[c] for c in self.script.components()[group]}
        return Finals(
            {},
            components,
            lost=True,
            iterations=progress.done.get(name, 0),
            steps=progress.steps.get(name, 0),
            episodes=progress.by_replica.get(name, []),
        )

    def failure(self) -> BaseException:
        """The error that ended the run: the replica that failed first, not the peers it stopped."""
        start = time.monotonic()
        # A lost worker shows first as its peers' errors (gloo: "connection reset"): watch liveness for
        # a second, so that the error names the lost replica instead; a dead replica's task never ends.
        while time.monotonic() - start < 5.0:
            self.check_alive()
            if time.monotonic() - start > 1.0 and all(f.done() for f in self.futures.values()):
                break
            time.sleep(0.05)
        errors = [f.exception() for f in self.futures.values() if f.status == "error"]
        return root_cause(errors)

    def abort(self, reason: str) -> None:
        """End every replica's waits (they raise ChannelError with ``reason``)."""
        self.close_stream()
        alive = set(workers(self.client)) & set(self.slots.values())
        if alive:
            try:
                self.client.run(registry.abort_run, self.run_id, reason, workers=sorted(alive), on_error="ignore")
            except Exception:  # the cluster may be going away; its processes end with it
                pass
        self.remove_shared()

    def remove_shared(self) -> None:
        """Remove the run's shared-memory files, where its workers share this machine (what maps them keeps
        its mapping until it unmaps): a failed run, whose workers may end before they leave, leaves none."""
        for g in averaged(self.script.transfers):
            shm.remove(self.shared(g))

    def close_stream(self) -> None:
        try:
            self.stream.close()
        except Exception:  # the client may be closing; its subscriptions go with it
            pass

    def forget(self) -> None:
        self.close_stream()
        try:
            self.client.cancel(list(self.futures.values()))
            self.client.run(registry.drop_run, self.run_id, on_error="ignore")
        except Exception:  # the cluster may already be gone; nothing is left to forget then
            pass
        self.remove_shared()  # a worker that died cannot remove its group's file


class Tally:
    """The notebook's view of a run: iterations every replica has finished, episodes, env steps."""

    def __init__(self, live, replicas: list[str], order: Callable[[list], tuple], logs=None):
        self.live, self.order, self.logs = live, order, logs
        self.done = dict.fromkeys(replicas, 0)
        self.episodes: list = []
        self.by_replica: dict[str, list] = {}
        self.steps: dict[str, int] = {}
        self.shown = 0
        self.staleness: list[float] = []  # decoupled policies: the learner's mean per iteration
        self.seconds: dict[str, dict[str, float]] = {}  # replica -> fragment -> seconds so far
        self.waited: dict[str, float] = {}  # replica -> seconds it waited for other groups so far

    def add(self, event: Progress) -> None:
        if event.replica not in self.done:
            return  # a replica whose worker died, and the run went on without (async)
        self.done[event.replica] = event.iteration
        self.episodes += event.episodes
        self.by_replica.setdefault(event.replica, []).extend(event.episodes)
        self.steps[event.replica] = event.steps
        self.seconds[event.replica] = event.seconds
        self.waited[event.replica] = event.waited
        self.staleness += [sum(per) / len(per) for per in event.staleness if per]
        if event.calls and self.logs is not None:
            self.logs.add(tuple(ReplicaId.parse(event.replica)), pickle.loads(event.calls))
        if min(self.done.values()) > self.shown:
            self.episodes.sort(key=self.order)
        while min(self.done.values()) > self.shown:  # an iteration every replica has finished
            self.shown += 1
            if self.logs is not None:
                self.logs.upto(self.shown)
            self.live.update(
                self.curve(), sum(self.steps.values()), self.staleness, self.fragment_seconds(), self.idle()
            )

    def fragment_seconds(self) -> dict[str, float]:
        """Seconds each fragment has taken so far: a replicated fragment's slowest replica's, as the run's
        result counts them (``RunResult.of_replicas``), so that the live view shows the summary's shares."""
        total: dict[str, float] = {}
        for per in self.seconds.values():
            for name, sec in per.items():
                total[name] = max(total.get(name, 0.0), sec)
        return total

    def idle(self) -> dict[str, float]:
        """Each group's share of its replicas' time so far spent waiting for another group."""
        shares: dict[str, list[float]] = {}
        for name, waited in self.waited.items():
            busy = sum(self.seconds.get(name, {}).values())
            group = shares.setdefault(ReplicaId.parse(name)[0], [0.0, 0.0])
            group[0], group[1] = group[0] + waited, group[1] + busy + waited
        return {g: waited / total for g, (waited, total) in shares.items() if total > 0}

    def curve(self) -> list[tuple[int, float]]:
        return [(s, r) for _, _, s, r in self.episodes]

    def close(self) -> None:
        self.episodes.sort(key=self.order)
        self.live.close(self.curve())


def host_of(address: str) -> str:
    return address.split("://")[-1].rsplit(":", 1)[0]


def free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
