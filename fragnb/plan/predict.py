"""Predict: a placement's throughput on a cluster described in a few numbers, before it runs there.

A pure model of the run's program (:func:`fragnb.plan.program.plan`): each segment of a worker group
costs its fragments' seconds under ``single`` (a :class:`~fragnb.runtime.profile.Profile`), shared
by its replicas as far as the cluster has cores; each time one group must wait for another's values
costs a message's latency, the receiving end's work per message and the bytes over the bandwidth,
once an iteration or once a step where the loop is driven step by step (``fine``). Synchronous
groups take turns, so their costs add up; decoupled ones (``async``, ``srl``) run side by side, and an
iteration takes what the slowest of them, or the cores, allow. Data-parallel replicas all-reduce
their gradients at every optimizer step.

Every figure it returns is a prediction: ``benchmarks/predict.py`` compares them with measured runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program import DrivenLoop, Segment, plan

__all__ = ["Cluster", "PRESETS", "Prediction", "predict"]


@dataclass(frozen=True)
class Cluster:
    """What the model needs to know about a cluster.

    ``latency_s``: one message's time from a send to its receiver's wake-up; ``message_s``: the work a
    message costs its sender and receiver (pickling, signing, system calls); ``bandwidth``: bytes/s
    between two workers; ``gpu_speed``: how many times faster a GPU runs the learner's fragments than
    one of these cores."""

    name: str
    workers: int
    cores: int  # per worker
    gpus: int = 0  # per worker
    latency_s: float = 50e-6
    message_s: float = 30e-6
    bandwidth: float = 1e9
    gpu_speed: float = 1.0

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores


#: Cluster descriptions to predict for; ``"here"`` is this machine, calibrated by
#: :func:`fragnb.runtime.calibrate.here` (its figures below are this 2-core machine's).
PRESETS = {
    "here": Cluster("this machine (2 cores)", 1, 2, latency_s=350e-6, message_s=120e-6, bandwidth=250e6),
    "laptop": Cluster("a laptop (8 cores)", 1, 8, latency_s=60e-6, message_s=40e-6, bandwidth=2e9),
    "8-gpu node": Cluster("an 8-GPU node (64 cores)", 1, 64, gpus=8, latency_s=30e-6, message_s=25e-6, bandwidth=10e9, gpu_speed=20.0),
    "64-gpu cluster": Cluster("8 nodes of 8 GPUs, 1,024 cores", 8, 128, gpus=8, latency_s=80e-6, message_s=25e-6, bandwidth=1.25e9,
                              gpu_speed=20.0),
}


@dataclass
class Prediction:
    """A placement's predicted throughput on a cluster (a prediction, not a measurement)."""

    policy: str
    cluster: str
    seconds_per_iteration: float
    env_steps_per_s: float
    busy: dict[str, float] = field(default_factory=dict)  # worker group -> share of the iteration it works
    bottleneck: str = ""

    def __str__(self) -> str:
        return (f"predicted for {self.policy} on {self.cluster}: {self.env_steps_per_s:,.0f} env steps/s, "
                f"{self.seconds_per_iteration * 1e3:.0f} ms per iteration; {self.bottleneck}")


def predict(placement, profile, cluster: Cluster | str = "here") -> Prediction:
    """Predict ``placement``'s iteration time and env steps/s on ``cluster`` (a :class:`Cluster` or a
    name in :data:`PRESETS`) from ``profile`` (:func:`fragnb.runtime.profile.profile` of its graph)."""
    cluster = PRESETS[cluster] if isinstance(cluster, str) else cluster
    model = _Model(placement, profile, cluster)
    seconds, busy = model.iteration()
    return Prediction(placement.policy.name, cluster.name, seconds, profile.env_steps / seconds if seconds else 0.0, busy,
                      _bottleneck(busy, placement))


class _Model:
    def __init__(self, placement, profile, cluster: Cluster):
        self.placement, self.profile, self.cluster = placement, profile, cluster
        graph = placement.graph
        self.program = plan(placement)
        self.count = {g: n for g, (n, _) in placement.groups.items()}
        per_fragment: dict[str, int] = {}
        self.fragment = {}
        for s in graph.statements:
            name = graph.fragment_of(s).name
            self.fragment[s.index] = name
            per_fragment[name] = per_fragment.get(name, 0) + 1
        gpu = set(placement.policy.gpu_groups) if cluster.gpus else set()
        self.stmt_seconds = {}  # statement -> (seconds every call costs, seconds the whole batch adds) per iteration
        for i, name in self.fragment.items():
            fixed, batch = profile.per_call_and_batch(name)
            speed = cluster.gpu_speed if placement.fragments[name].group in gpu and graph.fragment(name).role == "learner" else 1.0
            self.stmt_seconds[i] = (fixed / per_fragment[name] / speed, batch / per_fragment[name] / speed)

    # -- work ------------------------------------------------------------------------------------
    def work(self, seg: Segment) -> float:
        """Seconds per iteration the segment takes: each replica pays every call and its share of the
        batch; replicas beyond the cores take turns."""
        n = self.count[seg.group]
        one = sum(fixed + batch / n for fixed, batch in (self.stmt_seconds[i] for i in seg.statements))
        return one * max(1.0, n / self.cluster.total_cores)

    def handoff(self, sender: str, receiver: str, nbytes: int) -> float:
        """A wait of ``receiver`` for ``sender``'s values: every replica of the larger side sends or
        takes a message at the other end, one after another."""
        c = self.cluster
        messages = max(self.count[sender], self.count[receiver])
        return c.latency_s + messages * c.message_s + nbytes / c.bandwidth

    def allreduce(self) -> float:
        n = max(self.count.values())
        if n < 2 or not self.placement.policy.collectives:
            return 0.0
        c = self.cluster  # a ring all-reduce: 2 (n - 1) steps of a 1/n share
        return self.profile.updates * 2 * (n - 1) * (c.latency_s + c.message_s + self.profile.weight_bytes / n / c.bandwidth)

    # -- the program -----------------------------------------------------------------------------
    def iteration(self) -> tuple[float, dict[str, float]]:
        loop = next((i for i in self.program.items if isinstance(i, DrivenLoop)), None)
        body = loop.body if loop else [i for i in self.program.items if isinstance(i, Segment)]
        busy: dict[str, float] = dict.fromkeys(self.count, 0.0)
        if not self.placement.policy.decoupled:
            seconds = self.walk(body, busy, per_iteration=True) + self.allreduce()
            return seconds, {g: min(1.0, b / seconds) for g, b in busy.items()} if seconds else busy
        # decoupled: the driver's group and the others each walk their own part, side by side
        home = self.placement.home
        parts = {}
        for side in ("home", "free"):
            mine = [g for g in self.count if (g == home) == (side == "home")]
            side_busy = dict.fromkeys(self.count, 0.0)
            parts[side] = self.walk(body, side_busy, per_iteration=True, only=set(mine))
            for g in mine:
                busy[g] = side_busy[g]
        ring = max(self.placement.colocated.values(), default=1)
        parts["free"] = parts["free"] / ring + sum(busy[g] for g in self.count if g != home) * (1 - 1 / ring)
        cpu = sum(fixed * self.count[self.placement.fragments[self.fragment[i]].group] + batch
                  for i, (fixed, batch) in self.stmt_seconds.items()) / max(1, self.cluster.total_cores)
        seconds = max(parts["home"], parts["free"], cpu)
        return seconds, {g: min(1.0, b / seconds) for g, b in busy.items()}

    def walk(self, items: list, busy: dict[str, float], per_iteration: bool, only: set[str] | None = None) -> float:
        """Seconds of ``items`` per iteration: segments' work in turn, and a handoff wherever a group
        reads what another wrote since it last ran (a driven loop's, once a step)."""
        steps = 1 if per_iteration else max(1, self.profile.vector_steps)
        total = 0.0
        segments = [i for i in items if isinstance(i, Segment)]
        for item in items:
            if isinstance(item, DrivenLoop):
                total += self.walk(item.body, busy, per_iteration=False, only=only)
        wrap = segments[-1:] + segments  # the first segment reads what the last wrote an iteration (or step) before
        for before, seg in zip(wrap, segments):
            if only is not None and seg.group not in only:
                continue
            seconds = self.work(seg)
            busy[seg.group] += seconds
            total += seconds
            crossing = self.crossing(before, seg)
            if crossing is not None:
                total += steps * self.handoff(before.group, seg.group, crossing / steps)
        return total

    def crossing(self, sender: Segment, receiver: Segment) -> int | None:
        """Bytes per iteration the placement's edges carry from one segment's fragments to the
        other's (whole values to every receiving replica for a broadcast or versioned pull), or
        None if no edge crosses between them."""
        if sender.group == receiver.group:
            return None
        src = {self.fragment[i] for i in sender.statements}
        dst = {self.fragment[i] for i in receiver.statements}
        edges = [e for e in self.placement.edges if e.src in src and e.dst in dst and e.operator != "local"]
        if not edges:
            return None
        whole = ("broadcast", "versioned pull")
        return sum(self.profile.edge_bytes.get((e.src, e.dst, e.kind), 0) * (self.count[receiver.group] if e.operator in whole else 1)
                   for e in edges)


def _bottleneck(busy: dict[str, float], placement) -> str:
    if not busy:
        return ""
    group = max(busy, key=busy.get)
    others = {g: 1 - b for g, b in busy.items() if g != group}
    if not others:
        return f"{group} works {busy[group]:.0%} of the time (nothing else to wait for)"
    waiting = max(others, key=others.get)
    return f"the bottleneck is {group!r} (busy {busy[group]:.0%}): {waiting!r} waits {others[waiting]:.0%} of the time"
