"""A cluster as the prediction sees it: a few numbers (cores, latency, work per message, bandwidth, the
runtime's own costs), and the presets a prediction is made for without measuring one.

Data only: :mod:`fragnb.predict.model` does the arithmetic on it, :mod:`fragnb.predict.calibrate`
measures a real cluster into one, and :meth:`Cluster.refined` learns from a run. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..arguments import Accepts, check, instance, number, optional, whole

if TYPE_CHECKING:
    from .prediction import Prediction

__all__ = ["COLLECTIVE_BYTES", "Cluster", "PRESETS", "cluster_named"]

#: The all-reduce :attr:`Cluster.collective_s` times: 40 KB, a small network's gradients.
COLLECTIVE_BYTES = 40_000


@dataclass(frozen=True)
class Cluster:
    """What the model needs to know about a cluster.

    ``latency_s``: one message's time from a send to its receiver's wake-up; ``message_s``: the work a
    message costs its sender and receiver (pickling, signing, system calls); ``bandwidth``: bytes/s
    between two workers; ``gpu_speed``: how many times faster a GPU runs the batch-sized part of the
    network fragments (inference, learning) placed on it than one of these cores (what every call
    costs whatever its batch, the launch, it does not shorten).

    The runtime's own costs, outside the fragments' work and the values they pass: ``iteration_s``, what
    a worker group's program pays each iteration around its fragments (a progress event, the weights'
    version, the iteration's bookkeeping), and ``step_s``, what it pays per segment it walks in a loop
    driven step by step (``fine``: dispatching the segment, timing it). ``loaded_latency_s``: a message's
    latency when the placement's worker processes outnumber the cores, so that its receiver must wait
    for one (``None``: ``latency_s``). ``collective_s``: one all-reduce of :data:`COLLECTIVE_BYTES` between
    two worker processes as a run's replicas make it (through shared memory on one machine, else gloo), its
    mean with its tail (``None``: a ring of messages at ``latency_s`` and ``message_s``); the bytes of a
    larger network beyond it go at ``bandwidth``. ``spread``: how far
    :func:`~fragnb.predict.calibrate.calibrate`'s repeated measurements of this cluster strayed from
    their median, as a fraction: a prediction's range widens by it.

    Parameters
    ----------
    name : str
        Shown in predictions.
    workers : int
        Workers: machines (nodes), each with ``cores`` cores and ``gpus`` GPUs.
    cores : float
        Cores per worker (:func:`~fragnb.predict.calibrate.calibrate` measures fractions: cores that
        really run side by side).
    gpus : int
        GPUs per worker.
    latency_s, message_s, bandwidth, gpu_speed, iteration_s, step_s, loaded_latency_s, collective_s, spread
        As above.

    Examples
    --------
    >>> from fragnb.predict import PRESETS, Cluster
    >>> two = Cluster("two 16-core servers", workers=2, cores=16, latency_s=80e-6, bandwidth=1.25e9)
    >>> two.total_cores
    32
    >>> slow = two.scaled(2)  # a prediction's slow end: costs twice as long, half the bandwidth
    >>> slow.latency_s, slow.bandwidth
    (0.00016, 625000000.0)
    >>> list(PRESETS), PRESETS["laptop"].cores
    (['here', 'laptop', '8-gpu node', '64-gpu cluster'], 8)

    Predict for it with ``placement.predict(two, profile=p)``, or for a preset by its name
    (``placement.predict("laptop", profile=p)``).
    """

    name: str
    workers: int
    cores: float  # per worker (calibrate() measures fractions: cores that really run side by side)
    gpus: int = 0  # per worker
    latency_s: float = 50e-6
    message_s: float = 30e-6
    bandwidth: float = 1e9
    gpu_speed: float = 1.0
    iteration_s: float = 0.0
    step_s: float = 0.0
    loaded_latency_s: float | None = None
    collective_s: float | None = None
    spread: float = 0.0

    def __post_init__(self):
        check("Cluster", _ACCEPTS, **{name: getattr(self, name) for name in _ACCEPTS})

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores

    def refined(self, prediction: Prediction, result) -> Cluster:
        """This cluster with the runtime's costs set so that ``prediction`` (made on this cluster for the
        placement ``result`` ran) would have matched ``result``'s seconds per iteration: the next
        prediction on it learns from what ran. Only the runtime's terms move (they are what the model
        knows least); a run faster than the prediction without them leaves them at 0."""
        measured = result.seconds_per_iteration
        runtime = prediction.terms.get("runtime", 0.0)
        missing = measured - prediction.seconds_per_iteration
        if runtime > 0:
            factor = max(0.0, (runtime + missing) / runtime)
            iteration_s, step_s = self.iteration_s * factor, self.step_s * factor
        else:
            iteration_s, step_s = max(0.0, missing) / max(1, len(prediction.replicas)), self.step_s
        name = self.name if self.name.endswith("(refined)") else f"{self.name} (refined)"
        return replace(self, name=name, iteration_s=iteration_s, step_s=step_s)

    def scaled(self, factor: float) -> Cluster:
        """This cluster with every cost (latency, work per message, runtime's terms) ``factor`` times as
        long and the bandwidth ``factor`` times as small: a prediction's slow (> 1) or fast (< 1) end."""
        return replace(
            self,
            latency_s=self.latency_s * factor,
            loaded_latency_s=None if self.loaded_latency_s is None else self.loaded_latency_s * factor,
            collective_s=None if self.collective_s is None else self.collective_s * factor,
            message_s=self.message_s * factor,
            bandwidth=self.bandwidth / factor,
            iteration_s=self.iteration_s * factor,
            step_s=self.step_s * factor,
        )


_SECONDS = number(least=0)
#: What a :class:`Cluster` accepts: a description the model cannot use is refused as it is made.
_ACCEPTS = {
    "name": instance(str, "a name (a string)"),
    "workers": whole(1),
    "cores": number(above=0),
    "gpus": whole(0),
    "latency_s": _SECONDS,
    "message_s": _SECONDS,
    "bandwidth": number(above=0),
    "gpu_speed": number(above=0),
    "iteration_s": _SECONDS,
    "step_s": _SECONDS,
    "loaded_latency_s": optional(_SECONDS),
    "collective_s": optional(_SECONDS),
    # a prediction's fast end takes 1 - spread of every cost (fragnb.predict.profile.MAX_SPREAD)
    "spread": Accepts(lambda v: number(least=0).test(v) and v < 1, "a fraction, at least 0 and below 1"),
}

#: Cluster descriptions to predict for. ``"here"`` is this 2-core machine as its runs showed it: a step's
#: wait under ``fine`` costs more than two idle workers' round trip (:func:`fragnb.predict.calibrate.calibrate`
#: measured 170 us of latency, 110 us a message, 280 MB/s and 2.1 cores' worth on 2026-12-02), since
#: three busy processes share its two cores; calibrate the cluster you have for your own figures.
PRESETS = {
    # iteration_s: each coarse or async replica's process spent 9 ms of CPU per iteration beyond its
    # fragments' profile, a gpu_only one 2 ms (psutil, notebook 01's loop, 40 iterations, 2026-12-03), and
    # Cluster.refined() from notebook 10's coarse x2 run gave 6.9 ms. fine's per-step costs are in the
    # latency and message terms: calibrate() measured 33-170 us for an idle pair's round trip and about
    # 350 us for a step's wait with three busy processes on the two cores (fine x2), fitted to its runs.
    "here": Cluster(
        "this machine (2 cores)",
        1,
        2,
        latency_s=100e-6,
        loaded_latency_s=350e-6,
        message_s=120e-6,
        bandwidth=250e6,
        iteration_s=6e-3,
        # replicas of one machine all-reduce through shared memory: 40 KB took 27-44 us on average between two
        # idle workers (calibrate(), 2026-12-05) and 80 us at the median, 430 us at p90, beside other work
        # (benchmarks/allreduce.py); the mean with that tail is what a run's updates add up to. gloo's was
        # 1.6 ms (0.5-0.6 ms median, a tail of 4 ms in one of ten, 2026-12-03).
        collective_s=1.1e-4,
    ),
    "laptop": Cluster("a laptop (8 cores)", 1, 8, latency_s=60e-6, message_s=40e-6, bandwidth=2e9),
    "8-gpu node": Cluster(
        "an 8-GPU node (64 cores)", 1, 64, gpus=8, latency_s=30e-6, message_s=25e-6, bandwidth=10e9, gpu_speed=20.0
    ),
    "64-gpu cluster": Cluster(
        "8 nodes of 8 GPUs, 1,024 cores",
        8,
        128,
        gpus=8,
        latency_s=80e-6,
        message_s=25e-6,
        bandwidth=1.25e9,
        gpu_speed=20.0,
    ),
}


def cluster_named(cluster: Cluster | str) -> Cluster:
    """A :class:`Cluster` as given, or the preset of that name (an error lists the presets)."""
    if isinstance(cluster, Cluster):
        return cluster
    if cluster not in PRESETS:
        raise ValueError(
            f"no cluster preset {cluster!r}: the presets are {', '.join(map(repr, PRESETS))}, "
            f"or describe one with fragnb.predict.model.Cluster(name, workers, cores, ...)"
        )
    return PRESETS[cluster]
