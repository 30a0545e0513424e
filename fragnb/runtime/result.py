"""RunResult: what a run did, under any policy, and how its replicas' records make one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .records import Records
from .worker.report import ORDERS, Finals

if TYPE_CHECKING:
    from .job import Job

__all__ = ["RunResult", "first_solved"]


@dataclass
class RunResult:
    """What a run did.

    Attributes
    ----------
    graph, policy : str
        Names of the graph and of the distribution policy.
    iterations : int
        Training iterations completed.
    seconds : float
        Wall-clock time of the loop (for distributed runs, after the workers received their components).
    env_steps : int
        Environment steps taken.
    fragment_seconds : dict
        Wall-clock seconds spent in each fragment.
    curve : list of (int, float, float)
        One entry per finished episode: environment steps so far, return, seconds since start.
    client_bytes, transfer_bytes : int
        Distributed runs: bytes the notebook received while the loop ran (progress events), and
        bytes the replicas sent each other over channels, worker to worker.
    iteration_seconds : list of float
        Wall-clock duration of each training iteration.

    Examples
    --------
    What :func:`fragnb.run` returns (and keeps as ``graph.last_run``):

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> result = fragnb.run(graph, progress=False, plot=False)
    >>> result.graph, result.policy, result.iterations, result.env_steps
    ('ppo', 'single', 2, 64)
    >>> sorted(result.fragment_seconds) == sorted(f.name for f in graph.fragments)
    True
    >>> len(result.iteration_seconds), result.stopped
    (2, '')

    The learning curve has one ``(env steps, return, seconds)`` entry per finished episode:

    >>> [(steps, ret) for steps, ret, seconds in result.curve]
    [(64, 16.0)]
    >>> result.returns, result.mean_return()
    ([16.0], 16.0)
    >>> print(result)
    ppo under 'single': 2 iterations, 64 env steps in ... s (... steps/s); mean return of last 20 episodes ...
      ...

    In a notebook ``result.plot()`` draws the learning curve.
    """

    graph: str
    policy: str
    iterations: int = 0
    seconds: float = 0.0
    env_steps: int = 0
    fragment_seconds: dict[str, float] = field(default_factory=dict)
    curve: list[tuple[int, float, float]] = field(default_factory=list, repr=False)
    client_bytes: int = 0
    transfer_bytes: int = 0
    iteration_seconds: list[float] = field(default_factory=list, repr=False)
    #: Seconds the safety net took (its first iterations both ways, on copies; 0 when off).
    check_seconds: float = 0.0
    #: Distributed runs: seconds from the cluster's call to the loop's start (starting workers if
    #: needed, shipping each replica its objects and code, starting their programs).
    setup_seconds: float = 0.0
    #: Distributed runs: the worker processes its replicas ran in (fewer than replicas where a group's
    #: replicas shared processes as threads).
    processes: int = 0
    #: Each replica's timeline: (replica, fragment or what it waits for, "busy" or "wait", start, end), seconds since the start.
    intervals: list[tuple[str, str, str, float, float]] = field(default_factory=list, repr=False)
    #: Distributed runs: messages the replicas sent each other over channels.
    messages: int = 0
    #: Distributed runs: the versions of weights the replicas loaded, summed over them, by the transfer
    #: that moved them as the drawing names it (``"learner -> actors: broadcast (policy weights)"``).
    moved: dict[str, int] = field(default_factory=dict, repr=False)
    #: Each crossing edge as drawn (its transfer) -> seconds its receiving group's replicas waited for the sending
    #: group, on the mean (the consumer's wait a relaxed edge takes away: fragnb.policies.relaxing).
    edge_waits: dict[str, float] = field(default_factory=dict, repr=False)
    #: Why the run ended before its loop did ("" when the loop ran out): the stop condition, or the loop's own `break`.
    stopped: str = ""
    #: Decoupled policies (async, srl): per learner iteration, the staleness of each trajectory it
    #: trained on (its version minus the version of the weights that produced it).
    staleness: list[list[int]] = field(default_factory=list, repr=False)
    #: Decoupled policies: trajectories dropped as staler than ``max_staleness``, and trajectories the
    #: actors produced that the learner never took (in flight when it stopped).
    dropped: int = 0
    unconsumed: int = 0
    #: async with ``samples_per_insert``: learner iterations that sampled the replay buffer before a new
    #: trajectory arrived (Ape-X's learner running ahead of insertion, within the bound).
    ahead: int = 0
    #: Decoupled policies: how many replicas had a trajectory waiting each time the learner took one.
    queue_depth: list[int] = field(default_factory=list, repr=False)
    #: Environments one inference call serves (each replica of the actor fragments, e.g. srl's policy workers).
    inference_batch: int | None = None
    #: Workers the run lost, each of which made it start again (``run(restarts=...)``), and from where.
    lost_workers: list[str] = field(default_factory=list, repr=False)
    #: Synchronous distributed runs: iterations between checkpoints (0: none), the seconds they cost
    #: (the slowest replica keeping its own, plus the notebook fetching them all), and the last one's bytes.
    checkpoint_every: int = 0
    checkpoint_seconds: float = 0.0
    checkpoint_bytes: int = 0
    #: The checkpoint a run went on from (``resume=``), written by a run of an earlier kernel: where, and after
    #: which iteration; empty for a run that started at its beginning.
    resumed_from: str = ""
    #: ``async``: trajectories lost with an actor's worker (the one each lost actor was producing; the
    #: run goes on with the other actors, see ``lost_workers``).
    lost_trajectories: int = 0
    #: ``"exact"`` (plain Python's values) or ``"statistical"`` (global random draws in replicated
    #: statements: plain Python's algorithm with other random numbers); ``draws`` names their lines.
    #: ``"rounding"``: plain Python's values within float rounding, not to the bit (a statement computes
    #: its rows otherwise on a share; the run named it before it started): a long run drifts from plain
    #: Python's trajectory as another seed's would.
    #: ``"unchecked"``: the safety net was skipped (``check=False``), so the draws were not looked for;
    #: ``"data-parallel"``: every replica runs the whole loop on its own numbers (``multi_learner``).
    guarantee: str = "exact"
    draws: list[str] = field(default_factory=list, repr=False)
    #: Whole-cell policies (``data_parallel``): what each replica's cell assigned, by replica (the
    #: notebook holds replica 0's): each replica's own lists of returns or losses, say.
    replica_values: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: What the run recorded of the fragments ``record=`` named (:class:`~fragnb.runtime.records.Records`;
    #: None: it recorded nothing): see :meth:`replay`.
    records: Any = field(default=None, repr=False)

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.seconds if self.seconds else 0.0

    @property
    def returns(self) -> list[float]:
        return [r for _, r, _ in self.curve]

    def mean_return(self, last: int = 20) -> float:
        """Mean return of the last ``last`` finished episodes (NaN before any)."""
        tail = self.returns[-last:]
        return sum(tail) / len(tail) if tail else float("nan")

    @property
    def seconds_per_iteration(self) -> float:
        """Median duration of an iteration after the first (which pays for warm-up)."""
        steady = sorted(self.iteration_seconds[1:] or self.iteration_seconds)
        return steady[len(steady) // 2] if steady else float("nan")

    def solved_at(self, threshold: float = 475.0, window: int = 20) -> tuple[int, float] | None:
        """(env steps, seconds) when the mean of the last ``window`` returns first reached ``threshold``."""
        i = first_solved(self.returns, threshold, window)
        return None if i is None else self.curve[i][::2]

    def plot(self):
        """The learning curve as a matplotlib ``Figure`` (decoupled policies: with the staleness per learner iteration below)."""
        from ..ui.live import learning_curve

        ages = [sum(per) / len(per) for per in self.staleness if per]
        return learning_curve([(s, r) for s, r, _ in self.curve], f"{self.graph} ({self.policy})", staleness=ages)

    def replay(self, fragment: str, iteration: int, replica: int = 0) -> list[dict[str, Any]]:
        """Run ``fragment``'s statements again in this kernel, as replica ``replica`` of its group ran them in
        ``iteration`` (counted from 0), each on the values it read then (recorded with ``record=[fragment]``),
        and return what each left: equal to ``records.outputs(fragment, iteration, replica)``."""
        if self.records is None:
            raise LookupError(
                f"this run of {self.graph!r} recorded nothing: run it with record=[{fragment!r}] "
                f"(the magic: --record {fragment})"
            )
        return self.records.replay(fragment, iteration, replica)

    def busy(self) -> dict[str, float]:
        """Each worker group's share of its recorded time spent working rather than waiting for
        another group (its replicas together; from :attr:`intervals`): what a prediction's ``busy``
        predicts."""
        work: dict[str, list[float]] = {}
        for replica, _, kind, a, b in self.intervals:
            shares = work.setdefault(_group(replica), [0.0, 0.0])
            shares[kind != "busy"] += b - a
        return {g: w / (w + idle) if w + idle else 0.0 for g, (w, idle) in work.items()}

    def timeline(self, start: float = 0.0, end: float | None = None):
        """When each replica worked on which fragment and when it waited for another group, as a
        Gantt-style matplotlib ``Figure`` (seconds ``start`` to ``end`` of the loop; all by default)."""
        from ..ui.live import timeline

        end = float("inf") if end is None else end
        shown = [
            (r, label, kind, max(a, start), min(b, end))
            for r, label, kind, a, b in self.intervals
            if b > start and a < end
        ]
        return timeline(shown, f"{self.graph} ({self.policy}): what each replica does")

    def trace(self, path) -> dict:
        """Write :attr:`intervals` as a Chrome trace (the JSON that Perfetto, ui.perfetto.dev, and
        chrome://tracing open): a process per worker group, a thread per replica, a slice for each
        fragment it ran and each wait for another group (category "busy" or "wait"). Returns the JSON
        written, a dict; ``path`` None writes nothing."""
        import json

        groups = sorted({_group(replica) for replica, *_ in self.intervals})
        replicas = sorted({replica for replica, *_ in self.intervals})
        pid = {g: i + 1 for i, g in enumerate(groups)}
        tid = {r: i + 1 for i, r in enumerate(replicas)}

        names = [{"ph": "M", "name": "process_name", "pid": pid[g], "tid": 0, "args": {"name": g}} for g in groups] + [
            {"ph": "M", "name": "thread_name", "pid": pid[_group(r)], "tid": tid[r], "args": {"name": r}}
            for r in replicas
        ]
        slices = [
            {
                "ph": "X",
                "name": label,
                "cat": kind,
                "pid": pid[_group(replica)],
                "tid": tid[replica],
                "ts": round(a * 1e6, 3),
                "dur": round((b - a) * 1e6, 3),
                **({"cname": "grey"} if kind != "busy" else {}),
            }
            for replica, label, kind, a, b in self.intervals
        ]
        trace = {
            "traceEvents": names + slices,
            "displayTimeUnit": "ms",
            "otherData": {"graph": self.graph, "policy": self.policy, "iterations": self.iterations},
        }
        if path is not None:
            Path(path).write_text(json.dumps(trace))
        return trace

    def idle(self) -> dict[str, float]:
        """Each worker group's share of its recorded time spent waiting for another group: 1 - :meth:`busy`
        (verl's trainer and rollout idle ratios, which it sizes its pools by)."""
        return {g: 1.0 - share for g, share in self.busy().items()}

    def __str__(self) -> str:
        lines = [
            f"{self.graph} under {self.policy!r}: {self.iterations} iterations, {self.env_steps} env steps "
            f"in {self.seconds:.2f} s ({self.env_steps_per_s:,.0f} steps/s); "
            + (
                f"mean return of last 20 episodes {self.mean_return():.1f}"
                if self.curve
                else "no episode returns recorded"
            )
        ]
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        if self.resumed_from:
            lines.append(f"  resumed from {self.resumed_from}")
        for lost in self.lost_workers:
            lines.append(f"  {lost}")
        if self.lost_trajectories:
            lines.append(f"  trajectories lost in flight with their actors' workers: {self.lost_trajectories}")
        if self.staleness:
            ages = [a for per in self.staleness for a in per]
            lines.append(
                f"  staleness: mean {sum(ages) / len(ages):.2f}, max {max(ages)} versions over {len(ages)} trajectories; "
                f"{self.dropped} dropped as too stale, {self.unconsumed} unconsumed at the end; "
                f"{sum(self.queue_depth) / max(len(self.queue_depth), 1):.1f} replicas waiting per trajectory taken; "
                f"{self.inference_batch} environments per inference call"
            )
        for edge, waited in self.edge_waits.items():
            lines.append(
                f"  {edge}: its receivers waited {waited:.2f} s ({100 * waited / (self.seconds or 1):.0f} % of the run)"
            )
        if self.ahead:
            lines.append(
                f"  {self.ahead} learner iterations sampled the replay ahead of insertion (samples_per_insert)"
            )
        total = sum(self.fragment_seconds.values()) or 1.0
        for name, sec in sorted(self.fragment_seconds.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<14} {sec:8.3f} s  {100 * sec / total:5.1f} %")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    @classmethod
    def of_replicas(cls, job: Job, finals: dict[str, Finals], start: float, **measured) -> RunResult:
        """The run of ``job`` as its replicas recorded it (``finals``: what each sent back, by name), with
        what was learnt before it (the guarantee, the safety net's seconds). Times are the wall-clock
        times the replicas took (comparable across machines), relative to ``start``; ``measured`` adds
        what the notebook measured itself (client bytes, checkpoints)."""
        script, before = job.script, job.preflight
        episodes = sorted((e for f in finals.values() for e in f.episodes), key=ORDERS[script.mode.episode_order()])
        lead = finals[script.leader]
        iterations = lead.iterations
        ticks = [start] + [max(f.ticks[k] for f in finals.values() if len(f.ticks) > k) for k in range(iterations)]
        end = max([ticks[-1]] + [b for f in finals.values() for *_, b in f.intervals])
        fragments = sorted({name for f in finals.values() for name in f.seconds})
        return cls(
            job.placement.graph.name,
            job.placement.policy.name,
            iterations,
            end - start,
            env_steps=sum(f.steps for f in finals.values()),
            fragment_seconds={name: max(f.seconds.get(name, 0.0) for f in finals.values()) for name in fragments},
            curve=[(steps, ret, t - start) for t, _, steps, ret in episodes],
            transfer_bytes=sum(f.bytes_sent for f in finals.values()),
            iteration_seconds=[b - a for a, b in zip(ticks, ticks[1:])],
            intervals=[
                (name, label, kind, a - start, b - start)
                for name, f in finals.items()
                for label, kind, a, b in f.intervals
            ],
            messages=sum(f.messages_sent for f in finals.values()),
            moved=_summed([f.moved for f in finals.values()]),
            edge_waits=_edge_waits(script, finals),
            stopped=lead.stopped,
            staleness=lead.staleness,
            dropped=lead.dropped,
            ahead=lead.ahead,
            unconsumed=sum(
                finals[peer].iterations - taken for peer, taken in lead.taken.items() if not finals[peer].lost
            ),
            lost_trajectories=sum(1 for f in finals.values() if f.lost),
            queue_depth=lead.depth,
            check_seconds=before.seconds,
            guarantee=before.guarantee,
            draws=list(before.draws),
            # whole copies: each replica's own values are the user's to look at (the notebook holds replica 0's)
            replica_values={name: f.variables for name, f in finals.items()} if script.mode.whole_copies() else {},
            records=_records(job, finals),
            **measured,
        )


def _edge_waits(script, finals: dict[str, Finals]) -> dict[str, float]:
    """Per crossing transfer, the mean seconds its receiving group's replicas waited for its sending group."""
    out = {}
    for t in script.transfers:
        if t.src == t.dst:
            continue
        waits = [
            sum(b - a for label, kind, a, b in f.intervals if kind == "wait" and label == f"waits for {t.src}")
            for name, f in finals.items()
            if _group(name) == t.dst
        ]
        out[str(t)] = sum(waits) / len(waits) if waits else 0.0
    return out


def _records(job: Job, finals: dict[str, Finals]):
    """What the replicas recorded, together (None where the run recorded nothing)."""
    recording = job.script.recording
    if recording is None or not recording.fragments:
        return None
    calls = [c for f in finals.values() for c in f.records]
    return Records(calls, sum(f.records_dropped for f in finals.values()), recording.bytes, job.placement.graph)


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for each in counts:
        for key, n in each.items():
            out[key] = out.get(key, 0) + n
    return out


def _group(replica: str) -> str:
    """The worker group of a timeline's row (``actors[1]`` -> ``actors``; ``main`` is its own)."""
    return replica.rpartition("[")[0] or replica


def first_solved(returns: list[float], threshold: float = 475.0, window: int = 20) -> int | None:
    """Index of the first episode at which the mean of the last ``window`` returns reaches ``threshold``."""
    total = 0.0
    for i, r in enumerate(returns):
        total += r - (returns[i - window] if i >= window else 0.0)
        if i + 1 >= window and total / window >= threshold:
            return i
    return None
