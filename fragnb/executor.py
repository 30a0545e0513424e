"""Executor: the control plane of a distributed run.

Dask places each replica on a worker, starts its long-lived program (:mod:`fragnb.walker`), watches
it, and says when a worker is lost. Replicas exchange values over channels (:mod:`fragnb.channels`),
worker to worker; the notebook reads only small progress events (finished episodes, step counts)
until the run ends, then merges what the replicas hold back into its namespace.
"""

from __future__ import annotations

import ast
import linecache
import pickle
import queue
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import cloudpickle

from . import replica
from .channels import ChannelError, QueueChannels
from .clusters import ClusterError, connect, shutdown, workers
from .clusters import dashboard as dashboard_link
from .components import Component, role_of
from .edges import combine
from .errors import FragmentError
from .live import LiveProgress
from .policies import Placement
from .program import Program, header_names
from .walker import Script, arrival_order, plain_order

__all__ = ["Outcome", "run_distributed", "simulate"]

LIVENESS_S = 0.5  # how often the notebook asks the scheduler which workers are alive


@dataclass
class Outcome:
    """What a distributed run measured; runtime turns it into a RunResult."""

    check_seconds: float
    iterations: int
    seconds: float
    env_steps: int
    fragment_seconds: dict[str, float]
    curve: list[tuple[int, float, float]]
    client_bytes: int
    transfer_bytes: int
    iteration_seconds: list[float]
    intervals: list[tuple[str, str, str, float, float]]
    messages: int
    stopped: str
    staleness: list[list[int]]
    dropped: int
    unconsumed: int
    queue_depth: list[int]
    #: Why each restart happened (a lost worker), and where it resumed from, in order; async: the actors it went on without.
    lost: list[str]
    #: async: trajectories lost with their actor's worker (the one each was producing).
    lost_trajectories: int
    checkpoint_every: int
    #: Seconds the replicas took to keep their checkpoints (the slowest replica) plus the notebook's to fetch them.
    checkpoint_seconds: float
    #: Bytes of the last checkpoint the notebook holds (all replicas).
    checkpoint_bytes: int


def run_distributed(placement: Placement, cluster, live, until=None, stop: threading.Event | None = None, dashboard: bool = True,
                    check: Callable[[], float] | None = None, restarts: int = 0, checkpoint_every: int = 0) -> Outcome:
    """Run ``placement`` on ``cluster``; leave the notebook namespace as plain execution would.
    ``live(total, title)`` gives the LiveProgress that shows it; ``until(curve, iterations, env_steps)``
    ends the run after the first iteration where it holds, as does setting ``stop``. ``check`` (the
    safety net; returns its seconds) runs once the objects are known to travel, before any worker starts.

    A synchronous run keeps every replica's state after every ``checkpoint_every`` iterations in the
    notebook. One that loses a worker starts again on fresh workers from the last checkpoint (or its
    beginning), up to ``restarts`` times; every random draw is counter-based, so it ends with the
    weights an uninterrupted run would have. When it cannot go on, the notebook takes the last checkpoint.
    """
    graph = placement.graph
    script = Script.of(placement, until=until, checkpoint_every=checkpoint_every)
    payloads = {g: _payload(placement, script, g) for g in placement.groups}  # what cannot travel fails here, before any worker
    checked = check() if check else 0.0
    filename = f"<fragment {graph.name}>"
    linecache.cache[filename] = (len(graph.source), None, graph.source.splitlines(True), filename)
    lost: list[str] = []
    saved: tuple[int, dict[str, bytes]] | None = None  # the last checkpoint: (iteration, state of each replica)
    began, fetch_seconds = None, 0.0
    while True:
        run = None
        try:
            client, owned = connect(cluster, len(_tasks(placement, script)), dashboard)
            run = _Run(placement, script, client, payloads, saved, wait_s=30.0 if lost else 0.0)
            run.start()
            began = began or run.start_wall
            view = live(_length(graph), f"{graph.name} ({placement.policy.name})")
            if link := dashboard_link(client):
                view.show_link(link)
            finals = run.watch(view, stop or threading.Event())
            break
        except BaseException as e:
            if run is not None:
                saved, fetch_seconds = run.saved, fetch_seconds + run.fetch_seconds
                run.abort(f"the run stopped: {type(e).__name__}")
                if owned:
                    shutdown()  # a replica may be stuck in a collective or the user's own code: end its process
                else:
                    run.forget()
            if isinstance(e, LostWorker) and len(lost) < restarts and not placement.policy.decoupled:
                where = f"the checkpoint after iteration {saved[0]}" if saved else "its beginning"
                lost.append(f"{e}; resumed from {where}")
                print(f"fragnb: {e}. Starting the run again from {where} on fresh workers "
                      f"(restart {len(lost)} of at most {restarts}); the notebook is as it was before the run", file=sys.stderr)
                continue
            if saved and isinstance(e, ClusterError):  # it cannot go on: keep what it had done
                try:
                    merge(placement, script, _checkpoint_finals(script, saved[1]))
                    e.add_note(f"The notebook now holds the state after iteration {saved[0]} (the last checkpoint), "
                               f"as plain Python would after {saved[0]} iterations.")
                except Exception as failed:  # e.g. GPU tensors in a notebook without a GPU
                    e.add_note(f"The last checkpoint (after iteration {saved[0]}) could not be loaded here "
                               f"({type(failed).__name__}: {failed}); the notebook is as it was before the run.")
            raise _without_dask_frames(e) from None
    run.forget()
    merge(placement, script, finals)
    kept = sum(map(len, run.saved[1].values())) if run.saved else 0
    return _outcome(finals, began, run.client_bytes, script, checked, lost + run.lost, (fetch_seconds + run.fetch_seconds, kept))


def _checkpoint_finals(script: Script, blobs: dict[str, bytes]) -> dict[str, dict]:
    """What the notebook merges, from every replica's checkpoint."""
    from .walker import held

    held_by = _held(script)
    finals = {}
    for name, blob in blobs.items():
        state = pickle.loads(blob)
        group = name.split("[")[0]
        finals[name] = {**held(script, group, state["ns"], held_by[group]), **{k: state["walker"][k] for k in ("scalars", "last_writer")}}
    return finals


class LostWorker(ClusterError):
    """A worker holding replicas of the run died (out of memory, killed, its machine gone)."""


class _Run:
    """One run's replicas on a Dask cluster."""

    def __init__(self, placement: Placement, script: Script, client, payloads: dict[str, tuple],
                 saved: tuple[int, dict[str, bytes]] | None = None, wait_s: float = 0.0):
        self.placement, self.script, self.client, self.payloads = placement, script, client, payloads
        self.saved, self.wait_s = saved, wait_s  # the checkpoint it starts from, and how long to wait for workers
        self.resume = saved[1] if saved else {}
        self.reported: dict[int, set[str]] = {}  # iteration -> replicas that kept a checkpoint after it
        self.fetch_seconds = 0.0
        self.forsaken: list[str] = []  # replicas whose worker died and the run went on without (async's actors)
        self.lost: list[str] = []  # why
        self.run_id = uuid.uuid4().hex[:12]
        self.topic = f"fragnb-{self.run_id}"
        self.slots: dict[str, str] = {}  # replica -> worker address
        self.futures: dict[str, object] = {}
        self.client_bytes = 0
        self.start_wall = time.time()
        self.checked = time.monotonic()  # when the workers' liveness was last read

    def start(self) -> None:
        """Place every replica on a worker thread of its own, ship it its objects and code, open
        its channel inbox, and start its program."""
        placement, script = self.placement, self.script
        self.slots = self.place()
        setup = {}
        key = secrets.token_bytes(32)  # signs the run's channel messages; travels only through Dask
        for g, (n, device) in placement.groups.items():
            payload, codes, sharded = self.payloads[g]
            source = (script.filename, placement.graph.source)
            for i in range(n):
                name = f"{g}[{i}]"
                setup[name] = self.submit(name, replica.init_replica, self.run_id, g, i, n, device, payload, codes, sharded, source,
                                          _host(self.slots[name]), key, placement.policy.fused, self.resume.get(name))
        addresses = dict(zip(setup, self.wait_all(list(setup.values()))))
        if placement.policy.collectives:
            self.join_process_groups()
        blob = cloudpickle.dumps(script)  # the stop condition may be a notebook lambda
        held = _held(script)
        self.start_wall = time.time()
        self.futures = {task[0]: self.submit(task[0], replica.run_program, self.run_id, task, addresses, blob, held, self.topic)
                        for task in _tasks(placement, script)}

    def place(self) -> dict[str, str]:
        """A worker thread for each replica's program; a restart waits ``wait_s`` for the cluster to
        replace a lost worker (a nanny restarts it, an adaptive cluster adds one)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return _slots(self.placement, self.script, workers(self.client))
            except ClusterError as e:
                if time.monotonic() > deadline:
                    if self.wait_s:
                        raise ClusterError(f"no spare capacity to resume the run: {e}") from None
                    raise
                time.sleep(0.5)

    def join_process_groups(self) -> None:
        for g, (n, device) in self.placement.groups.items():
            if n < 2:
                continue
            host = _host(self.slots[f"{g}[0]"])
            (port,) = self.wait_all([self.submit(f"{g}[0]", _free_port, host)])
            backend = "nccl" if device == "cuda" else "gloo"
            self.wait_all([self.submit(f"{g}[{i}]", _join, self.run_id, i, n, f"tcp://{host}:{port}", backend) for i in range(n)])

    def submit(self, name: str, fn, *args):
        return self.client.submit(fn, *args, workers=[self.slots[name]], allow_other_workers=False, pure=False)

    def wait_all(self, futures: list) -> list:
        """Results of set-up tasks; a replica's worker that disappears is an error, not a hang."""
        while not all(f.done() for f in futures):
            time.sleep(0.02)
            self.check_alive()
        return self.client.gather(futures)

    def watch(self, live: LiveProgress, stop: threading.Event) -> dict[str, dict]:
        """Wait for every replica's program to end, showing its progress; the first failure, or a
        lost worker, ends the run with an error naming the replica. A first KeyboardInterrupt, or
        ``stop`` being set, asks the replicas to stop after the current iteration; a second
        KeyboardInterrupt aborts."""
        events: queue.Queue = queue.Queue()
        self.client.subscribe_topic(self.topic, events.put)
        progress = _Progress(live, self.script.replicas(), arrival_order if self.script.decoupled else plain_order)
        stopping = False
        try:
            while True:
                try:
                    if self.poll(events, progress):
                        break
                    if stop.is_set() and not stopping:
                        stopping = True
                        self.request_stop()
                except KeyboardInterrupt:
                    if stopping:
                        raise
                    stopping = True
                    print("fragnb: stopping after the current iteration (interrupt again to abort)", file=sys.stderr)
                    self.request_stop()
            finals = {name: f for task in self.client.gather(list(self.futures.values())) for name, f in task.items()}
            finals.update({name: self.stand_in(name, progress) for name in self.forsaken})
            self.drain(events, progress, {name: f["iterations"] for name, f in finals.items()})
        finally:
            self.client.unsubscribe_topic(self.topic)
            progress.close()
        return finals

    def poll(self, events: queue.Queue, progress: _Progress) -> bool:
        """One round of watching: progress events for up to 50 ms, then failures and lost workers.
        Whether every replica has finished."""
        if self.take(events, progress):
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

    def take(self, events: queue.Queue, progress: _Progress) -> bool:
        """Show the next progress event, if one arrives within 50 ms; whether one did."""
        try:
            _, msg = events.get(timeout=0.05)
        except queue.Empty:
            return False
        self.client_bytes += len(pickle.dumps(msg))
        if "checkpoint" in msg:
            self.kept(msg["replica"], msg["checkpoint"])
        else:
            progress.add(msg)
        return True

    def kept(self, name: str, iteration: int) -> None:
        """A replica kept its state after ``iteration``: once all have, fetch them into the notebook,
        where they survive any worker."""
        self.reported.setdefault(iteration, set()).add(name)
        if len(self.reported[iteration]) < len(self.slots):
            return
        del self.reported[iteration]
        start = time.perf_counter()
        per_worker = self.client.run(replica.checkpoint_of, self.run_id, iteration, workers=sorted(set(self.slots.values())), on_error="ignore")
        blobs = {name: blob for got in per_worker.values() if isinstance(got, dict) for name, blob in got.items()}
        if blobs.keys() == self.slots.keys():  # else a worker died meanwhile: the last whole checkpoint stays
            self.saved = (iteration, blobs)
        self.fetch_seconds += time.perf_counter() - start

    def drain(self, events: queue.Queue, progress: _Progress, iterations: dict[str, int], timeout: float = 2.0) -> None:
        """Progress events still on their way once every replica has ended (they travel through the
        scheduler): show them, so the bar and the curve end where the run did."""
        deadline = time.monotonic() + timeout
        try:
            while any(progress.done[r] < n for r, n in iterations.items() if r in progress.done) and time.monotonic() < deadline:
                self.take(events, progress)
        except KeyboardInterrupt:  # the run has ended: nothing left to stop
            pass

    def request_stop(self) -> None:
        """Ask the replica that decides for all to end the run after the current iteration."""
        self.client.run(replica.request_stop, self.run_id, workers=[self.slots[self.script.leader]], on_error="ignore")

    def check_alive(self) -> None:
        alive = set(workers(self.client))
        gone: dict[str, list[str]] = {}
        for name, w in self.slots.items():
            if w not in alive and name not in self.forsaken:
                gone.setdefault(w, []).append(name)
        lost = [f"replica{'s' if len(names) > 1 else ''} {', '.join(names)} on {w}" for w, names in gone.items()]
        if lost and self.futures and self.goes_on_without([n for names in gone.values() for n in names]):
            self.forsaken += [n for names in gone.values() for n in names]
            self.lost.append(f"lost the worker of {'; '.join(lost)}; the run went on with the other actors")
            print(f"fragnb: {self.lost[-1]} (the trajectory it was producing is lost)", file=sys.stderr)
            for name in (n for names in gone.values() for n in names):
                self.futures.pop(name, None)
            survivors = sorted({self.slots[n] for n in self.futures} & alive)
            self.client.run(replica.forsake, self.run_id, self.forsaken, workers=survivors, on_error="ignore")
            return
        if lost:
            reason = (f"lost the worker of {'; '.join(lost)} during the run; its state is gone, so this run stops "
                      "(a worker can die when it runs out of memory)")
            self.abort(reason)
            raise LostWorker(reason)

    def goes_on_without(self, names: list[str]) -> bool:
        """Whether the run can go on without these replicas: under ``async`` the learner takes whole
        trajectories from whichever actors deliver them, so it can lose actors, but not all of them.
        (``srl``'s actor and policy workers wait for each other every step: they cannot.)"""
        script = self.script
        home = script.leader.split("[")[0]
        free = [g for g in script.groups if g != home]
        if not script.decoupled or len(free) != 1:
            return False
        survivors = [p for p in script.replicas() if p.startswith(f"{free[0]}[") and p not in self.forsaken + names]
        return all(n.startswith(f"{free[0]}[") for n in names) and bool(survivors)

    def stand_in(self, name: str, progress: _Progress) -> dict:
        """What the notebook merges for a replica whose worker died (async's actors): the episodes and
        steps it reported, and its components as they were before the run (their state died with it)."""
        group, index = name.split("[")[0], int(name.split("[")[1][:-1])
        ns, (_, _, sharded) = self.placement.graph.namespace, self.payloads[group]
        n = self.script.groups[group]
        return {"lost": True, "variables": {}, "iterations": progress.done.get(name, 0), "steps": progress.steps.get(name, 0),
                "components": {c: ns[c].shard(index, n) if c in sharded else ns[c] for c in _held(self.script)[group]},
                "episodes": progress.by_replica.get(name, []), "ticks": [], "intervals": [], "seconds": {},
                "bytes_sent": 0, "messages_sent": 0, "checkpoint_seconds": 0.0}

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
        return next((e for e in errors if not isinstance(e, ChannelError)), errors[0])

    def abort(self, reason: str) -> None:
        """End every replica's waits (they raise ChannelError with ``reason``)."""
        alive = set(workers(self.client)) & set(self.slots.values())
        if alive:
            try:
                self.client.run(replica.abort_run, self.run_id, reason, workers=sorted(alive), on_error="ignore")
            except Exception:  # the cluster may be going away; its processes end with it
                pass

    def forget(self) -> None:
        try:
            self.client.cancel(list(self.futures.values()))
            self.client.run(replica.drop_run, self.run_id, on_error="ignore")
        except Exception:  # the cluster may already be gone; nothing is left to forget then
            pass


class _Progress:
    """The notebook's view of a run: iterations every replica has finished, episodes, env steps."""

    def __init__(self, live: LiveProgress, replicas: list[str], order: Callable[[list], tuple]):
        self.live, self.order = live, order
        self.done = dict.fromkeys(replicas, 0)
        self.episodes: list = []
        self.by_replica: dict[str, list] = {}
        self.steps: dict[str, int] = {}
        self.shown = 0
        self.staleness: list[float] = []  # decoupled policies: the learner's mean per iteration
        self.seconds: dict[str, dict[str, float]] = {}  # replica -> fragment -> seconds so far

    def add(self, msg: dict) -> None:
        if msg["replica"] not in self.done:
            return  # a replica whose worker died, and the run went on without (async)
        self.done[msg["replica"]] = msg["iteration"]
        self.episodes += msg["episodes"]
        self.by_replica.setdefault(msg["replica"], []).extend(msg["episodes"])
        self.steps[msg["replica"]] = msg["steps"]
        self.seconds[msg["replica"]] = msg["seconds"]
        if msg.get("staleness"):
            self.staleness.append(sum(msg["staleness"]) / len(msg["staleness"]))
        while min(self.done.values()) > self.shown:  # an iteration every replica has finished
            self.shown += 1
            self.episodes.sort(key=self.order)
            self.live.update(self.curve(), sum(self.steps.values()), self.staleness, self.fragment_seconds())

    def fragment_seconds(self) -> dict[str, float]:
        """Seconds each fragment has taken so far, summed over its replicas."""
        total: dict[str, float] = {}
        for per in self.seconds.values():
            for name, sec in per.items():
                total[name] = total.get(name, 0.0) + sec
        return total

    def curve(self) -> list[tuple[int, float]]:
        return [(s, r) for _, _, s, r in self.episodes]

    def close(self) -> None:
        self.episodes.sort(key=self.order)
        self.live.close(self.curve())


def simulate(placement: Placement, iterations: int) -> Program:
    """Run the first ``iterations`` iterations of ``placement`` with every replica a thread of this
    process, through the same walker as a Dask run (channels are queues); leave the results in the
    graph's namespace."""
    script = Script.of(placement, limit=iterations)
    run_id = uuid.uuid4().hex[:12]
    source = (script.filename, placement.graph.source)
    boxes = {name: queue.Queue() for name in script.replicas()}
    abort = threading.Event()
    held = _held(script)
    finals: dict[str, dict] = {}
    errors: dict[str, BaseException] = {}

    def play(name: str, rep: replica.Replica) -> None:
        try:
            finals[name] = replica.play(rep, script, QueueChannels(name, boxes, abort), held[rep.group])
        except BaseException as e:
            errors[name] = e

    try:
        threads = []
        for g, (n, device) in placement.groups.items():
            payload, codes, sharded = _payload(placement, script, g)
            for i in range(n):
                replica.init_replica(run_id, g, i, n, device, payload, codes, sharded, source, fused=placement.policy.fused)
                threads.append(threading.Thread(target=play, args=(f"{g}[{i}]", replica._REPLICAS[(run_id, g, i)]), daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        replica.drop_run(run_id)
    if errors:
        raise next((e for e in errors.values() if not isinstance(e, ChannelError)), next(iter(errors.values())))
    merge(placement, script, finals)
    return script.program


def merge(placement: Placement, script: Script, finals: dict[str, dict]) -> None:
    """Variables from the group that assigned them last (gathered over its replicas); components
    merged from their shards and loaded in place, learners last so their networks win."""
    ns = placement.graph.namespace
    first = finals[script.leader]  # under a decoupled policy, actors count iterations of their own
    last_writer, scalars = first["last_writer"], first["scalars"]
    program = script.program

    def parts(g: str, section: str, name: str) -> list:
        return [finals[f"{g}[{i}]"][section][name] for i in range(script.groups[g])]

    for var in script.variables:
        if var in last_writer:
            g = last_writer[var]
            if any(finals[f"{g}[{i}]"].get("lost") for i in range(script.groups[g])):
                continue  # a replica's part died with its worker: the notebook keeps its value
            if var not in finals[f"{g}[0]"]["variables"]:
                ns.pop(var, None)  # the cell deleted it (`del`)
                continue
            ns[var] = combine(var, parts(g, "variables", var), 0, 1, None, program.kinds.get(var, "sharded"),
                              program.origin.get(var, ""), script.strict)
        elif var in scalars:
            ns[var] = scalars[var]
    comps = [(c, g) for g in script.groups for c in finals[f"{g}[0]"]["components"]]
    for name, g in sorted(comps, key=lambda cg: role_of(ns[cg[0]]) == "learner"):
        shards = parts(g, "components", name)
        _absorb(ns[name], type(shards[0]).merge(shards) if len(shards) > 1 else shards[0])


def _outcome(finals: dict[str, dict], start: float, client_bytes: int, script: Script, check_seconds: float, lost: list[str],
             checkpoints: tuple[float, int]) -> Outcome:
    """Times are wall-clock times the replicas took (comparable across machines), relative to ``start``."""
    episodes = sorted((e for f in finals.values() for e in f["episodes"]), key=arrival_order if script.decoupled else plain_order)
    leader = script.leader
    lead = finals[leader]
    iterations = lead["iterations"]
    ticks = [start] + [max(f["ticks"][k] for f in finals.values() if len(f["ticks"]) > k) for k in range(iterations)]
    end = max([ticks[-1]] + [b for f in finals.values() for *_, b in f["intervals"]])
    fragments = {name for f in finals.values() for name in f["seconds"]}
    return Outcome(
        check_seconds=check_seconds,
        lost=lost,
        checkpoint_every=script.checkpoint_every,
        checkpoint_seconds=max(f["checkpoint_seconds"] for f in finals.values()) + checkpoints[0],
        checkpoint_bytes=checkpoints[1],
        iterations=iterations,
        seconds=end - start,
        env_steps=sum(f["steps"] for f in finals.values()),
        fragment_seconds={name: max(f["seconds"].get(name, 0.0) for f in finals.values()) for name in sorted(fragments)},
        curve=[(steps, ret, t - start) for t, _, steps, ret in episodes],
        client_bytes=client_bytes,
        transfer_bytes=sum(f["bytes_sent"] for f in finals.values()),
        iteration_seconds=[b - a for a, b in zip(ticks, ticks[1:])],
        intervals=[(name, label, kind, a - start, b - start) for name, f in finals.items() for label, kind, a, b in f["intervals"]],
        messages=sum(f["messages_sent"] for f in finals.values()),
        stopped=lead["stopped"],
        staleness=lead.get("staleness", []),
        dropped=lead.get("dropped", 0),
        unconsumed=sum(finals[peer]["iterations"] - taken for peer, taken in lead.get("taken", {}).items() if not finals[peer].get("lost")),
        lost_trajectories=sum(1 for f in finals.values() if f.get("lost")),
        queue_depth=lead.get("depth", []),
    )


def _tasks(placement: Placement, script: Script) -> list[list[str]]:
    """The replicas each long-lived task runs: one, or a colocated group's replicas that share a
    worker process as threads (``srl``'s ring: replica i on worker i mod workers)."""
    tasks = []
    for group, n in script.groups.items():
        per_worker = placement.colocated.get(group, 1)
        workers = n // per_worker
        tasks += [[f"{group}[{i}]" for i in range(w, n, workers)] for w in range(workers)]
    return tasks


def _slots(placement: Placement, script: Script, workers: dict) -> dict[str, str]:
    """A worker thread for each task, spread over the workers: a replica's program holds its
    thread for the whole run, so two on a one-thread worker would wait for each other forever."""
    tasks = _tasks(placement, script)
    if not workers:
        raise ClusterError("the cluster has no workers; start some (`dask worker ADDRESS`) or use cluster='local'")
    threads = {w: info.get("nthreads", 1) for w, info in sorted(workers.items())}
    if placement.policy.collectives:  # each replica of the process group in a process of its own
        threads = dict.fromkeys(threads, 1)
    free = [w for k in range(max(threads.values())) for w, n in threads.items() if n > k]
    if len(tasks) > len(free):
        raise ClusterError(f"{len(tasks)} replica programs each need a worker thread of their own for the whole run, and the cluster "
                           f"has {len(free)}{' (one per process: the process group needs it)' if placement.policy.collectives else ''}; "
                           "add workers or ask for fewer replicas")
    return {name: worker for task, worker in zip(tasks, free) for name in task}


def _payload(placement: Placement, script: Script, group: str) -> tuple[bytes, bytes, list[str]]:
    """The notebook objects a group's statements and the loops' headers read (cloudpickled), its
    segments' code, and which of its components are split per replica."""
    ns = placement.graph.namespace
    segs = [s for s in script.program.segments if s.group == group]
    names = {v for s in segs for v in s.reads | s.components if v in ns} | {v for v in header_names(script.program.items) if v in ns}
    n = script.groups[group]
    sharded = sorted(v for v in names if n > 1 and isinstance(ns[v], Component) and "num_envs" in vars(ns[v]))
    objects = {v: ns[v] for v in sorted(names)}
    try:
        payload = cloudpickle.dumps(objects)
    except Exception as e:
        raise _cannot_travel(placement.graph, objects, group) from e
    return payload, pickle.dumps({s.index: s.module for s in segs}), sharded


def _cannot_travel(graph, objects: dict, group: str) -> FragmentError:
    """The error for objects a worker cannot receive: which one, why, and the first line that uses it."""
    for name, value in objects.items():
        try:
            cloudpickle.dumps(value)
        except Exception as e:
            line = next((s.lineno for s in graph.statements if name in s.reads or name in s.components), None)
            return FragmentError(
                f"`{name}` ({type(value).__name__}) cannot be sent to the workers of group {group!r}: {type(e).__name__}: {e}. "
                "What a distributed policy ships must pickle (cloudpickle): keep locks, open files, sockets and threads "
                "out of its attributes (create them lazily, or drop them in __getstate__), or run it under 'single'",
                line, graph.source.splitlines()[line - 1] if line else None)
    return FragmentError(f"the objects of group {group!r} cannot be sent to its workers (they pickle one by one, not together)")


def _held(script: Script) -> dict[str, list[str]]:
    """The components each group's statements use: what it sends back at the end."""
    return {g: sorted({c for s in script.program.segments if s.group == g for c in s.components}) for g in script.groups}


def _length(graph) -> int | None:
    """Iterations of the cell's iteration loop, when its iterable says (for the progress bar)."""
    loop = next((n for n in graph.tree.body if isinstance(n, ast.For)), None)
    if loop is None:
        return None
    try:
        iterable = eval(compile(ast.Expression(loop.iter), "<fragnb>", "eval"), dict(graph.namespace))
    except Exception:
        return None
    return len(iterable) if hasattr(iterable, "__len__") else None


def _absorb(target: Component, merged: Component) -> None:
    """Take ``merged``'s state into ``target`` in place: networks and optimisers load their state, so
    objects the notebook shares (one policy for actor and learner) stay shared."""
    import torch

    for name, value in vars(merged).items():
        current = vars(target).get(name)
        if isinstance(current, (torch.nn.Module, torch.optim.Optimizer)):
            current.load_state_dict(value.state_dict())
        else:
            setattr(target, name, value)


def _host(address: str) -> str:
    return address.split("://")[-1].rsplit(":", 1)[0]


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _join(run_id: str, rank: int, world: int, address: str, backend: str) -> int:
    from .collectives import join

    return join(run_id, rank, world, address, backend)


def _without_dask_frames(error: BaseException) -> BaseException:
    """An error from a worker, without the frames of Dask's machinery; its note (added on the
    worker) names the user's cell line and the replica."""
    return error.with_traceback(None) if getattr(error, "__notes__", None) else error
