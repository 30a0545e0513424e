"""Profile: what a placement's prediction needs from the loop, measured once under ``single`` on copies.

Each fragment's seconds per iteration, the environment steps and optimizer steps of an iteration, the
bytes each edge carries (:func:`fragnb.measure`) and the bytes of the learner's weights. The notebook's
objects and generators are untouched, and so is the graph: the profile is returned, and a prediction
takes it as an argument (``placement.predict(cluster, profile=p)``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..arguments import check, optional, whole
from ..runtime.job import Job, Silent
from ..runtime.local import InNotebook, aside, copies, torch_threads
from ..runtime.measure import measure
from ..shards import shard, splits

__all__ = ["Profile", "profile", "spread"]


@dataclass(frozen=True)
class Profile:
    """One loop's costs under ``single``, per training iteration.

    Parameters
    ----------
    seconds : dict
        Fragment to its seconds per iteration.
    env_steps : int
        Environment steps per iteration.
    vector_steps : int
        Steps of the batch of environments per iteration (the inner loop's iterations).
    updates : int
        Optimizer steps per iteration (each an all-reduce under data-parallel policies).
    weight_bytes : int
        Bytes of the parameters an optimizer steps.
    edge_bytes : Mapping
        ``(src, dst, kind)`` to bytes per iteration, as :func:`fragnb.measure` returns them.
    half : dict, optional
        Fragment to its seconds with half the environments, where the cell runs so.
    spread : float
        How far its iterations' seconds strayed from their median, as a fraction.

    Examples
    --------
    :func:`fragnb.profile` measures one; a profile made by hand predicts what a loop with those costs
    would do (here notebook 01's PPO loop, small, with 4 environments and 8 steps per iteration):

    >>> from fragnb.predict import Profile
    >>> seconds = {"env@cell": 0.0001, "actor@step": 0.004, "env@step": 0.003, "buffer@step": 0.0005,
    ...            "actor@it": 0.0002, "buffer@it": 0.0005, "learner": 0.008}
    >>> p = Profile(seconds, env_steps=32, vector_steps=8, updates=1, weight_bytes=36620)
    >>> round(p.iteration_seconds, 4)
    0.0163
    >>> p.scaled(2).seconds["learner"]
    0.016

    Without a measurement on half the environments, all of a fragment's time is the batch's:

    >>> p.per_call_and_batch("learner")
    (0.0, 0.008)
    """

    seconds: dict[str, float]  # fragment -> seconds
    env_steps: int
    vector_steps: int  # steps of the batch of environments (the inner loop's iterations)
    updates: int  # optimizer steps (each an all-reduce under data-parallel policies)
    weight_bytes: int  # the parameters an optimizer steps
    edge_bytes: Mapping = field(default_factory=dict)  # (src, dst, kind) -> bytes: fragnb.measure's EdgeSizes
    #: fragment -> seconds with half the environments (each split component's first half), where the
    #: cell runs so: what a fragment's time owes to the batch's size, and what to each call
    half: dict[str, float] | None = None
    #: how far its iterations' seconds strayed from their median, as a fraction: a prediction's range
    spread: float = 0.0
    #: how many optimizers the cell steps (a whole-cell replica meets the others once a step with one, twice with more)
    optimizers: int = 1

    def scaled(self, factor: float) -> Profile:
        """This profile with every fragment ``factor`` times as long: a prediction's slow or fast end."""
        half = None if self.half is None else {f: t * factor for f, t in self.half.items()}
        return replace(self, seconds={f: t * factor for f, t in self.seconds.items()}, half=half)

    def per_call_and_batch(self, fragment: str) -> tuple[float, float]:
        """A fragment's seconds per iteration as (what every call costs whatever its batch, what the
        whole batch adds): a replica with a share ``k`` of the environments takes ``a + b * k``."""
        whole = self.seconds.get(fragment, 0.0)
        if self.half is None or fragment not in self.half:
            return 0.0, whole
        batch = min(whole, max(0.0, 2 * (whole - self.half[fragment])))
        return whole - batch, batch

    @property
    def iteration_seconds(self) -> float:
        return sum(self.seconds.values())


#: What :func:`profile` accepts besides the graph.
ACCEPTS = {"iterations": whole(1), "threads": optional(whole(1))}


def profile(graph, iterations: int = 3, threads: int | None = 1) -> Profile:
    """Run ``iterations`` of the cell under ``single`` on copies of its objects and measure it; the
    first iteration (imports, allocation) is left out where there are more. Hand it to the predictions:
    ``placement.predict(cluster, profile=p)``, ``scaling(graph, p, cluster)``; its ``edge_bytes`` label
    placements too (``placement.measured(p.edge_bytes)``). The graph is left as it was.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop whose namespace holds its components.
    iterations : int
        Iterations to time.
    threads : int or None
        torch's intra-op threads while it times the loop, put back afterwards: 1, as ``fragnb.run`` runs
        ``single`` and as every worker runs its replicas, so that the profile times the loop the predictions are
        about; ``None`` keeps torch's setting. On a machine other programs share, all cores' threads wait for
        each other and can time a small network's update several times slower than one thread runs it.

    Returns
    -------
    Profile
        Each fragment's seconds, and the env steps, optimizer steps and bytes of an iteration.

    Examples
    --------
    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> p = fragnb.profile(graph)
    >>> p.env_steps, p.vector_steps, p.updates, p.weight_bytes
    (32, 8, 1, 36620)
    >>> sorted(p.seconds) == sorted(f.name for f in graph.fragments)
    True
    >>> "stats" in globals()  # it ran on copies: nothing assigned here
    False
    >>> print(graph.place("coarse", actors=2).predict("laptop", profile=p))
    predicted for coarse (actors x2, learner x1) on a laptop (8 cores): ... env steps/s, ... ms per iteration; ...
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    check("profile", ACCEPTS, iterations=iterations, threads=threads)
    edge_bytes = measure(graph)
    stepped: dict[int, int] = {}  # id(optimizer) -> steps
    sizes: dict[int, int] = {}

    def count(optimizer, args, kwargs):
        stepped[id(optimizer)] = stepped.get(id(optimizer), 0) + 1
        sizes[id(optimizer)] = sum(p.numel() * p.element_size() for g in optimizer.param_groups for p in g["params"])

    hook = register_optimizer_step_post_hook(count)
    try:
        with torch_threads(threads):
            result = _timed(graph, copies(graph), iterations)
    finally:
        hook.remove()
    done = max(result.iterations, 1)
    half = None
    try:  # the same cell on half of every split component: a loop sized from the whole batch may not run so
        ns = copies(graph)
        for name in [n for n in graph.inputs if n in ns and splits(ns[n])]:
            ns[name] = shard(ns[name], 0, 2)
        with torch_threads(threads):
            halved = _timed(graph, ns, iterations)
        half = _per_iteration(halved)
    except Exception:
        pass
    envs = max(1, _num_envs(graph))
    steps = result.env_steps // done
    return Profile(
        _per_iteration(result),
        steps,
        steps // envs,
        sum(stepped.values()) // done,
        sum(sizes.values()),
        edge_bytes,
        half,
        spread(result.iteration_seconds[1:] or result.iteration_seconds),
        max(1, len(stepped)),
    )


#: The widest spread a measurement reports: a prediction's fast end takes ``1 - spread`` of every cost, so a
#: sample that strayed further (another process held the cores for a while: 3.1 measured beside a test run)
#: says only that the range is wide, and the fast end stays a cost.
MAX_SPREAD = 0.9


def spread(samples: list[float]) -> float:
    """How far ``samples`` stray from their median at most, as a fraction of it (0 for fewer than two), at
    most :data:`MAX_SPREAD`."""
    if len(samples) < 2:
        return 0.0
    middle = statistics.median(samples)
    return min(MAX_SPREAD, max(abs(x - middle) for x in samples) / middle) if middle > 0 else 0.0


def _timed(graph, ns: dict, iterations: int):
    with aside(graph):
        # a silent view, not fragnb.ui's: profiling shows nothing, and needs no later layer (nor tqdm) to run
        job = Job(graph.place("single"), None, ns, live=Silent, until=lambda curve, done, steps: done >= iterations)
        return InNotebook().execute(job)


def _per_iteration(result) -> dict[str, float]:
    """Fragment seconds per iteration, leaving out the first (imports, allocation) where there are more."""
    done = max(result.iterations, 1)
    first = result.iteration_seconds[0] if result.iteration_seconds and done > 1 else 0.0
    scale = (result.seconds - first) / result.seconds / (done - 1) if first else 1 / done
    return {f: s * scale for f, s in result.fragment_seconds.items()}


def _num_envs(graph) -> int:
    from ..shards import num_envs

    counts = [num_envs(graph.namespace[c]) for c, role in graph.components.items() if role == "env"]
    return next((n for n in counts if n), 1)
