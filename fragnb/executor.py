"""Executor: drive a placed graph on a Dask cluster and bring the results back into the notebook.

The notebook process submits tasks and reads only small reports (finished episodes, step counts);
trajectories and weights flow between workers as Dask task dependencies, never through it.
"""

from __future__ import annotations

import ast
import itertools
import linecache
import pickle
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import torch

from . import replica
from .clusters import ClusterError, connect, shutdown
from .components import Component, Env, role_of
from .live import LiveProgress
from .policies import Placement
from .program import Program, Segment, graph_writes, plan

__all__ = ["Outcome", "run_distributed"]


@dataclass
class Outcome:
    """What a distributed run measured; runtime turns it into a RunResult."""

    iterations: int
    seconds: float
    env_steps: int
    fragment_seconds: dict[str, float]
    curve: list[tuple[int, float, float]]
    client_bytes: int
    transfer_bytes: int
    iteration_seconds: list[float]


@dataclass
class _Latest:
    """Where a variable's latest value lives: the sending group's segment outputs, under ``key``."""

    group: str
    key: str
    outputs: list
    version: int


@dataclass(frozen=True)
class _Weights:
    """A network held by components in two groups: ``source`` (in the owner group) is broadcast to
    ``target`` (a component of ``group``) before that group next uses it."""

    source: str  # "weights:learner:policy"
    owner: str
    owner_comp: str
    target: str  # "weights:actor:policy"
    group: str
    target_comp: str


@dataclass
class _Driver:
    placement: Placement
    client: Any
    num_envs: int | None
    weights: list[_Weights]
    program: Program
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    slots: dict = field(default_factory=dict)  # (group, replica) -> worker address
    latest: dict = field(default_factory=dict)  # variable or weights key -> _Latest
    last_writer: dict = field(default_factory=dict)  # variable -> group that assigned it last
    last_task: dict = field(default_factory=dict)  # (group, replica) -> its latest future
    loaded: dict = field(default_factory=dict)  # (group, weights target) -> version it holds
    scalars: dict = field(default_factory=dict)  # values of the loops the driver iterates
    curve: list = field(default_factory=list)
    env_steps: dict = field(default_factory=dict)
    client_bytes: int = 0
    iterations: int = 0
    start: float = field(default_factory=time.perf_counter)
    ticks: list = field(default_factory=list)  # when each iteration's reports arrived
    limit: int | None = None  # iterations to run (the safety net's check runs the first only)

    # -- set-up -------------------------------------------------------------------------------
    def start_replicas(self, segments: list[Segment]) -> None:
        """Ship each group its objects (cloudpickle) and code; shard components per replica."""
        placement, client, ns = self.placement, self.client, self.placement.graph.namespace
        workers = sorted(client.scheduler_info()["workers"])
        for g, (n, _) in placement.groups.items():
            if placement.policy.collectives and n > len(workers):
                raise ClusterError(f"{n} replicas of {g!r} each need a worker of their own for the process group; the cluster has {len(workers)}")
        addresses = iter(workers * (1 + sum(n for n, _ in placement.groups.values()) // len(workers)))
        self.slots = {(g, i): next(addresses) for g, (n, _) in placement.groups.items() for i in range(n)}
        futures = []
        for g, (n, device) in placement.groups.items():
            segs = [s for s in segments if s.group == g]
            names = sorted({v for s in segs for v in s.reads | s.components if v in ns})
            payload = cloudpickle.dumps({v: ns[v] for v in names})
            codes = pickle.dumps({s.index: s.module for s in segs})
            sharded = [v for v in names if n > 1 and isinstance(ns[v], Component) and "num_envs" in vars(ns[v])]
            source = (f"<fragment {placement.graph.name}>", placement.graph.source)
            futures += [self.submit(g, i, replica.init_replica, self.run_id, g, i, n, device, payload, codes, sharded, source, self.strict)
                        for i in range(n)]
        self.gather(futures)
        if placement.policy.collectives:
            self.join_process_groups()

    def join_process_groups(self) -> None:
        for g, (n, device) in self.placement.groups.items():
            if n < 2:
                continue
            host = self.slots[(g, 0)].split("://")[-1].rsplit(":", 1)[0]
            (port,) = self.gather([self.submit(g, 0, _free_port, host)])
            backend = "nccl" if device == "cuda" else "gloo"
            self.gather([self.submit(g, i, _join, self.run_id, i, n, f"tcp://{host}:{port}", backend) for i in range(n)])

    def gather(self, futures: list) -> list:
        """Results of ``futures``; a replica's worker that disappears is an error, not a hang (its
        pinned tasks would otherwise wait for it forever, and its state is gone with it)."""
        if isinstance(self.client, _InProcess):
            return list(futures)
        while True:
            try:
                for future in futures:
                    future.result(timeout=2.0)
                return self.client.gather(futures)
            except TimeoutError:
                pass
            alive = set(self.client.scheduler_info()["workers"])
            lost = sorted({f"{g}[{i}] on {w}" for (g, i), w in self.slots.items() if w not in alive})
            if lost:
                raise ClusterError(f"lost the worker of replica {', '.join(lost)} during the run; its state is gone, "
                                   "so the run stops (a worker can die when it runs out of memory)")

    def submit(self, group: str, index: int, fn, *args):
        return self.client.submit(fn, *args, workers=[self.slots[(group, index)]], allow_other_workers=False, pure=False)

    # -- the loop -----------------------------------------------------------------------------
    def execute(self, items: list, live_factory=None) -> None:
        graph = self.placement.graph
        for item in items:
            if isinstance(item, Segment):
                self.run_segment(item)
                continue
            iterable = eval(compile(ast.Expression(item.node.iter), f"<fragment {graph.name}>", "eval"), graph.namespace, self.scalars)
            if self.limit is not None and live_factory:
                iterable = list(itertools.islice(iterable, self.limit))
            live = live_factory(iterable) if live_factory else None
            try:
                for value in iterable:
                    if live is not None and self.stopped():
                        break
                    _bind(item.node.target, value, self.scalars)
                    self.execute(item.body)
                    if live is not None:  # the iteration loop: report progress, stay at most one iteration ahead
                        self.iterations += 1
                        self.collect()
                        self.ticks.append(time.perf_counter())
                        live.update([(s, r) for s, r, _ in self.curve], sum(self.env_steps.values()))
            finally:
                if live is not None:
                    live.close([(s, r) for s, r, _ in self.curve])

    def run_segment(self, seg: Segment) -> None:
        n = self.placement.groups[seg.group][0]
        kinds, origin = self.program.kinds, self.program.origin
        inputs = {var: (v.key, v.outputs, kinds.get(var, "sharded"), origin.get(var, ""))
                  for var in sorted(seg.reads) if (v := self.latest.get(var)) and v.group != seg.group}
        for w in self.weights:
            v = self.latest.get(w.source)
            if v and w.group == seg.group and w.target_comp in seg.components and self.loaded.get((seg.group, w.target)) != v.version:
                inputs[w.target] = (w.source, v.outputs, "replicated", f"the weights of {w.owner_comp}")
                self.loaded[(seg.group, w.target)] = v.version
        replays = {key: (self.latest[key].outputs, {v: (kinds.get(v, "sharded"), origin.get(v, "")) for v in names})
                   for key, names in seg.replays.items()}
        exports = sorted(seg.exports | {w.source for w in self.weights if w.owner == seg.group and w.owner_comp in seg.components})
        scalars = {k: v for k, v in self.scalars.items() if k in seg.reads}
        outputs = [self.submit(seg.group, i, replica.run_segment, self.run_id, seg.group, i, seg.index, scalars, inputs, self.num_envs,
                               exports, self.last_task.get((seg.group, i)), replays) for i in range(n)]
        for i, future in enumerate(outputs):
            self.last_task[(seg.group, i)] = future
        for key in exports:
            old = self.latest.get(key)
            self.latest[key] = _Latest(seg.group, key, outputs, old.version + 1 if old else 1)
        for var in seg.writes:
            self.last_writer[var] = seg.group

    def stopped(self) -> bool:
        """Whether a stop flag (`break`, a `while` condition) holds, read from the replicas that assign it."""
        for flag in self.placement.graph.stop_flags:
            g = self.last_writer.get(flag)
            if g is None:
                continue
            n = self.placement.groups[g][0]
            parts = self.gather([self.submit(g, i, replica.value, self.run_id, g, i, flag, self.last_task[(g, i)]) for i in range(n)])
            if replica.combine(flag, parts, 0, 1, None, self.program.kinds.get(flag, "replicated"), self.program.origin.get(flag, ""), self.strict):
                return True
        return False

    def collect(self) -> None:
        """Each replica's new episodes, read after its latest task (a few hundred bytes)."""
        keys = list(self.last_task)
        reports = self.gather([self.submit(g, i, replica.report, self.run_id, g, i, self.last_task[(g, i)]) for g, i in keys])
        self.client_bytes += len(pickle.dumps(reports))
        new = []
        for key, (episodes, steps) in zip(keys, reports):
            self.env_steps[key] = steps
            new += [(ep.time, ep.env_id, ep.step * batch, ep.ret) for ep, batch in episodes]
        self.curve += [(steps, ret, t - self.start) for t, _, steps, ret in sorted(new)]

    # -- results back into the notebook ----------------------------------------------------------
    def finish(self, segments: list[Segment]) -> dict:
        graph = self.placement.graph
        variables = sorted(graph_writes(graph))
        held = {g: sorted({c for s in segments if s.group == g for c in s.components}) for g in self.placement.groups}
        futures = {(g, i): self.submit(g, i, replica.finish_replica, self.run_id, g, i, variables, held[g], self.last_task.get((g, i)))
                   for g, (n, _) in self.placement.groups.items() for i in range(n)}
        return dict(zip(futures, self.gather(list(futures.values()))))

    def merge(self, finals: dict) -> None:
        """Variables from the group that assigned them last (gathered over replicas); components
        merged from their shards and loaded in place, learners last so their networks win."""
        ns, groups = self.placement.graph.namespace, self.placement.groups

        def parts(g: str, section: str, name: str) -> list:
            return [finals[(g, i)][section][name] for i in range(groups[g][0])]

        for var in sorted(graph_writes(self.placement.graph)):
            if var in self.scalars and var not in self.last_writer:
                ns[var] = self.scalars[var]
            elif var in self.last_writer:
                g = self.last_writer[var]
                if var not in finals[(g, 0)]["variables"]:
                    ns.pop(var, None)  # the cell deleted it (`del`)
                    continue
                kind, origin = self.program.kinds.get(var, "sharded"), self.program.origin.get(var, "")
                ns[var] = replica.combine(var, parts(g, "variables", var), 0, 1, None, kind, origin, self.strict)
        comps = [(c, g) for g in groups for c in finals[(g, 0)]["components"]]
        for name, g in sorted(comps, key=lambda cg: role_of(ns[cg[0]]) == "learner"):
            shards = parts(g, "components", name)
            _absorb(ns[name], type(shards[0]).merge(shards) if len(shards) > 1 else shards[0])

    @property
    def strict(self) -> bool:
        return self.placement.exact

    def forget(self) -> None:
        try:
            self.client.run(replica.drop_run, self.run_id)
        except Exception:  # the cluster may already be gone; nothing is left to forget then
            pass


def run_distributed(placement: Placement, cluster, progress: bool, plot: bool) -> Outcome:
    """Run ``placement`` on ``cluster``; leave the notebook namespace as plain execution would."""
    graph = placement.graph
    client, owned = connect(cluster, sum(n for n, _ in placement.groups.values()))
    d = _driver(placement, client)
    items, segments = d.program.items, d.program.segments
    filename = f"<fragment {graph.name}>"
    linecache.cache[filename] = (len(graph.source), None, graph.source.splitlines(True), filename)
    moved_before = _transfer_bytes(client)
    title = f"{graph.name} ({placement.policy.name})"
    try:
        d.start_replicas(segments)
        d.start = time.perf_counter()  # time the loop, not the workers' set-up
        d.ticks = [d.start]
        d.execute(items, lambda it: LiveProgress(len(it) if hasattr(it, "__len__") else None, title, progress, plot))
        finals = d.finish(segments)
    except BaseException as e:
        if owned:
            shutdown()  # replicas may be mid-task or blocked in a collective: end their processes
        else:
            d.forget()
        raise _without_dask_frames(e) from None
    seconds = time.perf_counter() - d.start
    d.merge(finals)
    d.forget()
    frag_seconds = {f.name: max(fin["seconds"].get(f.name, 0.0) for fin in finals.values()) for f in graph.fragments}
    return Outcome(d.iterations, seconds, sum(d.env_steps.values()), frag_seconds, d.curve, d.client_bytes,
                   _transfer_bytes(client) - moved_before, [b - a for a, b in zip(d.ticks, d.ticks[1:])])


class _InProcess:
    """Stands in for a Dask client: every replica lives in this process and each task runs when it
    is submitted, so results stand in for futures. The safety net runs the driver on it."""

    def __init__(self, workers: int):
        self.workers = {f"inprocess://{i}": {} for i in range(workers)}

    def scheduler_info(self) -> dict:
        return {"workers": self.workers}

    def submit(self, fn, *args, **kwargs):
        return fn(*args)

    def run(self, fn, *args):
        return {"inprocess": fn(*args)}


class _Silent:
    """Progress that shows nothing: the safety net runs quietly."""

    def __init__(self, *args):
        pass

    def update(self, *args):
        pass

    def close(self, *args):
        pass


def simulate(placement: Placement, iterations: int) -> Program:
    """Run the first ``iterations`` iterations of ``placement`` with every replica in this process,
    through the same driver and replica code as a Dask run; leave the results in the graph's namespace."""
    d = _driver(placement, _InProcess(sum(n for n, _ in placement.groups.values())), limit=iterations)
    try:
        d.start_replicas(d.program.segments)
        d.execute(d.program.items, _Silent)
        d.merge(d.finish(d.program.segments))
    finally:
        replica.drop_run(d.run_id)
    return d.program


def _driver(placement: Placement, client, limit: int | None = None) -> _Driver:
    graph = placement.graph
    program = plan(placement)
    env = next((v for v in map(graph.namespace.get, graph.components) if isinstance(v, Env)), None)
    return _Driver(placement, client, env.num_envs if env else None, _shared_weights(placement, program.segments), program, limit=limit)


def _bind(target: ast.expr, value, scalars: dict) -> None:
    if isinstance(target, ast.Name):
        scalars[target.id] = value
        return
    names: dict = {}
    assign = ast.Module([ast.Assign([target], ast.Name("_value", ast.Load()), lineno=1, col_offset=0)], [])
    exec(compile(ast.fix_missing_locations(assign), "<fragnb>", "exec"), {"_value": value}, names)
    scalars.update(names)


def _shared_weights(placement: Placement, segments: list[Segment]) -> list[_Weights]:
    """Networks held by components in two groups; the group of a learner holding one owns it."""
    ns = placement.graph.namespace
    holders: dict[int, list[tuple[str, str, str]]] = {}
    for seg in segments:
        for comp in sorted(seg.components):
            for attr, value in vars(ns[comp]).items():
                if isinstance(value, torch.nn.Module) and (comp, attr, seg.group) not in holders.setdefault(id(value), []):
                    holders[id(value)].append((comp, attr, seg.group))
    out = []
    for entries in holders.values():
        comp, attr, owner = next((e for e in entries if role_of(ns[e[0]]) == "learner"), entries[0])
        out += [_Weights(f"weights:{comp}:{attr}", owner, comp, f"weights:{c}:{a}", g, c) for c, a, g in entries if g != owner]
    return out


def _absorb(target: Component, merged: Component) -> None:
    """Take ``merged``'s state into ``target`` in place: networks and optimisers load their state, so
    objects the notebook shares (one policy for actor and learner) stay shared."""
    for name, value in vars(merged).items():
        current = vars(target).get(name)
        if isinstance(current, (torch.nn.Module, torch.optim.Optimizer)):
            current.load_state_dict(value.state_dict())
        else:
            setattr(target, name, value)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _join(run_id: str, rank: int, world: int, address: str, backend: str) -> int:
    from .collectives import join

    return join(run_id, rank, world, address, backend)


def _transfer_bytes(client) -> int:
    """Bytes the workers have sent each other so far."""
    try:
        return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())
    except Exception:
        return 0


def _without_dask_frames(error: BaseException) -> BaseException:
    """An error from a worker, without the frames of Dask's machinery; its note (added on the
    worker) names the user's cell line and the replica."""
    return error.with_traceback(None) if getattr(error, "__notes__", None) else error
