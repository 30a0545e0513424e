"""Predict: a placement's throughput on a cluster described in a few numbers, before it runs there.

A pure model of the run's program (:func:`fragnb.plan.program.plan`): each segment of a worker group
costs its fragments' seconds under ``single`` (a :class:`~fragnb.predict.profile.Profile`), shared
by its replicas as far as the cluster has cores; each time one group must wait for another's values
costs a message's latency, the receiving end's work per message and the bytes over the bandwidth,
once an iteration or once a step where the loop is driven step by step (``fine``). Synchronous
groups take turns, so their costs add up; decoupled ones (``async``, ``srl``) run side by side, and an
iteration takes what the slowest of them, or the cores, allow. Data-parallel replicas all-reduce
their gradients at every optimizer step.

Scaling out is predicted the way MSRL's and SRL's figures measure it: each added replica brings the
environments one replica of the placement steps (``replicas=``), so the whole batch, the learner's
work and the data edges grow with the replica count, and the weights do not.

Every figure it returns is a prediction: ``benchmarks/predict.py`` compares them with measured runs.
The arithmetic is here; what it reads and returns is data of its own, re-exported here: the clusters
(:mod:`~fragnb.predict.cluster`: ``Cluster``, ``PRESETS``) and the predictions
(:mod:`~fragnb.predict.prediction`: ``Prediction``, ``Comparison``, ``Scaling``).
"""

from __future__ import annotations

from ..arguments import Accepts, check, either, instance, optional, whole
from ..plan.program import DrivenLoop, Segment, plan
from .cluster import COLLECTIVE_BYTES, PRESETS, Cluster, cluster_named
from .prediction import Comparison, Prediction, Scaling

__all__ = ["Cluster", "Comparison", "PRESETS", "Prediction", "Scaling", "predict", "scaling"]


#: What :func:`predict` accepts besides the placement.
ACCEPTS = {
    # what the model asks of a Profile (profile.py imports the runtime, which places: a circle from here)
    "profile": Accepts(
        lambda v: callable(getattr(v, "per_call_and_batch", None)), "a Profile, from fragnb.profile(graph)"
    ),
    "cluster": either(instance(Cluster, "a Cluster"), instance(str, f"a preset's name ({', '.join(PRESETS)})")),
    "replicas": optional(whole(1)),
}


def predict(placement, profile, cluster: Cluster | str = "here", replicas: int | None = None) -> Prediction:
    """Predict ``placement``'s iteration time and env steps/s on ``cluster`` (a :class:`Cluster` or a
    name in :data:`PRESETS`) from ``profile`` (:func:`fragnb.predict.profile.profile` of its graph).

    ``replicas``: predict for that many replicas of the placement's most replicated group instead
    (other replicated groups in proportion), each stepping the environments one replica steps in
    ``placement``: the batch grows with them, as when a cluster adds actors.

    Parameters
    ----------
    placement : Placement
        A graph placed under a policy (``graph.place("coarse", actors=2)``).
    profile : Profile
        The loop's costs under ``single``, from :func:`fragnb.profile`.
    cluster : Cluster or str
        The cluster, or the name of a preset (``"here"``, ``"laptop"``, ...).
    replicas : int, optional
        The replica count of the most replicated group to predict for, if not the placement's.

    Returns
    -------
    Prediction
        Seconds per iteration, env steps/s (with a range), each group's busy share, the bottleneck.

    Examples
    --------
    Notebook 01's PPO loop, small, with a profile made by hand (``fragnb.profile(graph)`` measures
    one) so that the figures are the same everywhere:

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> from fragnb.predict import Profile
    >>> seconds = {"env@cell": 0.0001, "actor@step": 0.004, "env@step": 0.003, "buffer@step": 0.0005,
    ...            "actor@it": 0.0002, "buffer@it": 0.0005, "learner": 0.008}
    >>> p = Profile(seconds, env_steps=32, vector_steps=8, updates=1, weight_bytes=36620)
    >>> from fragnb.predict import predict
    >>> alone = predict(graph.place("single"), p, "laptop")
    >>> coarse = predict(graph.place("coarse", actors=2), p, "laptop")
    >>> print(coarse)
    predicted for coarse (actors x2, learner x1) on a laptop (8 cores): ... env steps/s, ... ms per iteration;
    the bottleneck is 'learner' ...
    >>> coarse.env_steps_per_s > alone.env_steps_per_s, coarse.replicas
    (True, {'actors': 2, 'learner': 1})

    Each added actor brings the environments of one, so the batch grows with the replicas:

    >>> predict(graph.place("coarse", actors=2), p, "laptop", replicas=8).replicas
    {'actors': 8, 'learner': 1}
    """
    check("predict", ACCEPTS, profile=profile, cluster=cluster, replicas=replicas)
    cluster = cluster_named(cluster)
    model = _Model(placement, profile, cluster, replicas)
    seconds, busy, passing = model.iteration()
    bound = model.bound()
    seconds = max(seconds, bound)  # the walk never goes below it (tests/test_predict.py); the floor says so
    steps = profile.env_steps * model.scale
    share = min(1.0, passing / seconds) if seconds else 0.0
    ends = []
    for sign in (1, -1):  # slow end, fast end
        edge = _Model(
            placement, profile.scaled(1 + sign * profile.spread), cluster.scaled(1 + sign * cluster.spread), replicas
        )
        ends.append(steps / max(edge.iteration()[0], edge.bound(), 1e-12))
    return Prediction(
        placement.policy.name,
        cluster.name,
        dict(model.count),
        seconds,
        steps / seconds if seconds else 0.0,
        busy,
        share,
        _bottleneck(busy, share),
        dict(model.terms),
        bound,
        *ends,
    )


def scaling(
    graph,
    profile,
    cluster: Cluster | str = "here",
    policies=("coarse", "fine", "async", "multi_learner"),
    counts=tuple(2**i for i in range(11)),
    base: int = 2,
) -> Scaling:
    """Predict each policy at each replica count (1 to 1,024 by default) on ``cluster``, from its
    placement with ``base`` replicas (each added replica with a base replica's environments).

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop.
    profile : Profile
        Its costs under ``single``, from :func:`fragnb.profile`.
    cluster : Cluster or str
        The cluster, or the name of a preset.
    policies : tuple of str
        The policies to predict.
    counts : tuple of int
        The replica counts to predict each at.
    base : int
        The replica count each policy is placed with first.

    Returns
    -------
    Scaling
        One prediction per policy and count.

    Examples
    --------
    Notebook 01's PPO loop, small, with a profile made by hand (``fragnb.profile(graph)`` measures
    one) so that the figures are the same everywhere:

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> from fragnb.predict import Profile
    >>> seconds = {"env@cell": 0.0001, "actor@step": 0.004, "env@step": 0.003, "buffer@step": 0.0005,
    ...            "actor@it": 0.0002, "buffer@it": 0.0005, "learner": 0.008}
    >>> p = Profile(seconds, env_steps=32, vector_steps=8, updates=1, weight_bytes=36620)
    >>> from fragnb.predict import scaling
    >>> curves = scaling(graph, p, "laptop", policies=("coarse", "fine"), counts=(1, 2, 4, 8, 16))
    >>> curves.counts, [len(c) for c in curves.curves.values()]
    ([1, 2, 4, 8, 16], [5, 5])
    >>> curves.stops_gaining("coarse"), curves.overtakes("fine", "coarse")
    (8, None)
    >>> for finding in curves.findings():
    ...     print(finding)
    coarse stops gaining past 8 replicas, where the bottleneck is 'learner' ...
    fine stops gaining past 2 replicas, where the bottleneck is 'learner' ...
    fine does not overtake coarse up to 16 replicas on this cluster

    In a notebook ``curves.plot()`` draws them.
    """
    cluster = cluster_named(cluster)
    curves = {}
    for policy in policies:
        parameters = graph.place(policy).policy.parameters  # its defaults: which parameter counts the replicas
        placement = graph.place(policy, **{next(p for p in ("actors", "learners") if p in parameters): base})
        curves[policy] = [predict(placement, profile, cluster, replicas=n) for n in counts]
    return Scaling(cluster.name, list(counts), curves)


class _Model:
    def __init__(self, placement, profile, cluster: Cluster, replicas: int | None = None):
        self.placement, self.profile, self.cluster = placement, profile, cluster
        # A decoupled policy bounded at staleness 0 (AReaL's η = 0) waits for the newest weights before
        # every rollout: its sides take turns, as a synchronous policy's groups do.
        self.overlaps = (
            not placement.policy.mode.in_step
            and {**placement.policy.options, **placement.params}.get("max_staleness", 1) != 0
        )
        graph = placement.graph
        self.program = plan(placement)
        self.count = {g: n for g, (n, _) in placement.groups.items()}
        #: how many times the placement's whole batch the prediction steps (replicas added with their environments)
        self.scale = 1.0
        replicated = [g for g in self.count if not isinstance(placement.policy.replicas.get(g, 1), int)]
        if replicas is not None and replicated:
            self.scale = replicas / max(self.count[g] for g in replicated)
            self.count.update({g: max(1, round(self.count[g] * self.scale)) for g in replicated})
        if placement.policy.mode.whole_copies():  # each replica steps a whole batch of its own, none shared
            self.scale = max(self.count.values())
        per_fragment: dict[str, int] = {}
        self.fragment = {}
        for s in graph.statements:
            name = graph.fragment_of(s).name
            self.fragment[s.index] = name
            per_fragment[name] = per_fragment.get(name, 0) + 1
        #: ``single`` runs the cell itself in the notebook, which its profile measured: no runtime around it
        self.runtime = placement.policy.mode.on_workers()
        #: worker processes the run uses (srl's ring replicas are threads of one); more than the cores, and
        #: a message's receiver may have to wait for one
        self.processes = sum(-(-n // placement.colocated.get(g, 1)) for g, n in self.count.items())
        loaded = cluster.loaded_latency_s is not None and self.processes > cluster.total_cores
        self.latency = cluster.loaded_latency_s if loaded else cluster.latency_s
        self.terms: dict[str, float] = {}
        gpu = set(placement.policy.gpu_groups) if cluster.gpus else set()
        self.stmt_seconds = {}  # statement -> (seconds every call costs, seconds the whole batch adds) per iteration
        for i, name in self.fragment.items():
            fixed, batch = profile.per_call_and_batch(name)
            on_gpu = placement.fragments[name].group in gpu and graph.fragment(name).role in ("actor", "learner")
            speed = cluster.gpu_speed if on_gpu else 1.0
            self.stmt_seconds[i] = (fixed / per_fragment[name], batch * self.scale / per_fragment[name] / speed)

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
        return self.latency + messages * c.message_s + nbytes / c.bandwidth

    def allreduce(self) -> float:
        """Seconds per iteration the replicas' all-reduces take: one per optimizer step (a whole-cell
        replica's, with the header; two where the cell steps several optimizers: the header says which)."""
        n = max(self.count.values())
        if n < 2 or not self.placement.averaged:
            return 0.0
        c = self.cluster
        rounds = self.profile.updates * (
            2 if self.placement.policy.mode.whole_copies() and self.profile.optimizers > 1 else 1
        )
        if c.collective_s is not None:  # measured for two at COLLECTIVE_BYTES; each added replica adds a step each way
            beyond = max(0, self.profile.weight_bytes - COLLECTIVE_BYTES)
            return rounds * (c.collective_s * (n - 1) + 2 * (n - 1) * beyond / n / c.bandwidth)
        share = 2 * (n - 1) * self.profile.weight_bytes / n / c.bandwidth  # a ring: 2 (n - 1) steps of a 1/n share
        return rounds * (2 * (n - 1) * (self.latency + c.message_s) + share)

    # -- the program -----------------------------------------------------------------------------
    def iteration(self) -> tuple[float, dict[str, float], float]:
        """Seconds per iteration, each group's busy share, and the seconds of it spent passing values."""
        body = self.body()
        busy: dict[str, float] = dict.fromkeys(self.count, 0.0)
        self.terms = {}
        if self.placement.policy.mode.in_step:
            self.passing = allreduce = self.allreduce()
            self._term("passing values", allreduce)
            seconds = self.walk(body, busy, per_iteration=True) + allreduce + self.iteration_runtime(self.count, busy)
            return seconds, {g: min(1.0, b / seconds) for g, b in busy.items()} if seconds else busy, self.passing
        # decoupled: the driver's group and the others each walk their own part, side by side
        home = self.placement.home
        parts, passing, terms = {}, {}, {}
        for side in ("home", "free"):
            mine = [g for g in self.count if (g == home) == (side == "home")]
            side_busy = dict.fromkeys(self.count, 0.0)
            self.passing = 0.0
            self.terms = {}
            parts[side] = self.walk(body, side_busy, per_iteration=True, only=set(mine))
            parts[side] += self.iteration_runtime(mine, side_busy)
            passing[side], terms[side] = self.passing, self.terms
            for g in mine:
                busy[g] = side_busy[g]
        ring = max(self.placement.colocated.values(), default=1)
        parts["free"] = parts["free"] / ring + sum(busy[g] for g in self.count if g != home) * (1 - 1 / ring)
        cpu = sum(
            fixed * self.count[self.placement.fragments[self.fragment[i]].group] + batch
            for i, (fixed, batch) in self.stmt_seconds.items()
        )
        cpu += sum(self.count.values()) * self.cluster.iteration_s if self.runtime else 0.0  # every replica pays it
        cpu /= max(1, self.cluster.total_cores)
        seconds = max(parts["home"], parts["free"], cpu) if self.overlaps else max(parts["home"] + parts["free"], cpu)
        bound = max(parts, key=parts.get)
        self.terms = terms[bound] if parts[bound] >= cpu else {"work: all groups on the cores": cpu}
        return (
            seconds,
            {g: min(1.0, b / seconds) for g, b in busy.items()},
            passing[bound] if parts[bound] >= cpu else 0.0,
        )

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
            self._term(f"work: {seg.group}", seconds)
            if self.runtime and not per_iteration:  # the walker dispatches and times the segment every step
                seconds += steps * self.cluster.step_s
                self._term("runtime", steps * self.cluster.step_s)
            busy[seg.group] += seconds
            total += seconds
            crossing = self.crossing(before, seg)
            if crossing is not None:
                seconds = steps * self.handoff(before.group, seg.group, crossing / steps)
                self.passing += seconds
                self._term("passing values", seconds)
                total += seconds
        return total

    def body(self) -> list:
        """The items an iteration walks: the iteration loop's body (or the cell's segments without one)."""
        loop = next((i for i in self.program.items if isinstance(i, DrivenLoop)), None)
        return loop.body if loop else [i for i in self.program.items if isinstance(i, Segment)]

    def iterated(self) -> set[int]:
        """The statements an iteration runs (a driven loop's inside it included)."""
        found, pending = set(), list(self.body())
        while pending:
            item = pending.pop()
            if isinstance(item, DrivenLoop):
                pending.extend(item.body)
            else:
                found.update(item.statements)
        return found

    def iteration_runtime(self, groups, busy: dict[str, float]) -> float:
        """What the runtime costs ``groups``' programs each iteration around their fragments, one after
        another (they take turns on the critical path)."""
        if not self.runtime:
            return 0.0
        for g in groups:
            busy[g] += self.cluster.iteration_s
        seconds = len(groups) * self.cluster.iteration_s
        self._term("runtime", seconds)
        return seconds

    def _term(self, name: str, seconds: float) -> None:
        if seconds:
            self.terms[name] = self.terms.get(name, 0.0) + seconds

    def bound(self) -> float:
        """Amdahl's bound: the fewest seconds per iteration the work allows, with nothing passed and no
        runtime. A synchronous placement's groups take turns, each replicated one sharing its batch among
        the replicas the cores run at once; a decoupled one's sides overlap. Never below the work of all
        replicas spread over every core."""
        cores = max(1.0, self.cluster.total_cores)
        inside = self.iterated()
        group_of = {i: self.placement.fragments[self.fragment[i]].group for i in inside}
        lower: dict[str, float] = {}
        for i, (fixed, batch) in ((i, self.stmt_seconds[i]) for i in inside):
            g = group_of[i]
            lower[g] = lower.get(g, 0.0) + fixed + batch / min(self.count[g], cores)
        cpu = sum(
            fixed * self.count[group_of[i]] + batch for i, (fixed, batch) in self.stmt_seconds.items() if i in inside
        )
        cpu /= cores
        if self.placement.policy.mode.in_step:
            return max(sum(lower.values()), cpu)
        home = self.placement.home
        sides = (
            sum(t for g, t in lower.items() if g == home),
            sum(t for g, t in lower.items() if g != home) / max(self.placement.colocated.values(), default=1),
        )
        return max(*sides, cpu) if self.overlaps else max(sum(sides), cpu)

    def crossing(self, sender: Segment, receiver: Segment) -> int | None:
        """Bytes per iteration the placement's edges carry from one segment's fragments to the
        other's (whole values to every receiving replica for a broadcast or versioned pull), or
        None if no edge crosses between them."""
        if sender.group == receiver.group:
            return None
        src = {self.fragment[i] for i in sender.statements}
        dst = {self.fragment[i] for i in receiver.statements}
        edges = [e for e in self.placement.edges if e.src in src and e.dst in dst and e.operator.crosses]
        if not edges:
            return None
        return sum(
            self.profile.edge_bytes.get((e.src, e.dst, e.kind), 0)
            * (self.count[receiver.group] if e.operator.to_each else self.scale)  # weights: whole to every receiver
            for e in edges
        )


def _bottleneck(busy: dict[str, float], passing: float) -> str:
    """The bottleneck in words: passing values, where that takes more of the iteration than any
    group works, else the busiest group and who waits for it most."""
    if not busy:
        return ""
    group = max(busy, key=busy.get)
    if passing > busy[group]:
        return f"the bottleneck is communication: {passing:.0%} of the iteration passes values (the busiest group, {group!r}, works {busy[group]:.0%})"
    others = {g: 1 - b for g, b in busy.items() if g != group}
    if not others:
        rest = f"; {passing:.0%} passes values" if passing >= 0.05 else ""
        return f"{group!r} works {busy[group]:.0%} of the time (nothing else to wait for{rest})"
    waiting = max(others, key=others.get)
    return f"the bottleneck is {group!r} (busy {busy[group]:.0%}): {waiting!r} waits {others[waiting]:.0%} of the time"
