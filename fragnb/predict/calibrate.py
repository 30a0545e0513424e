"""Calibrate: describe a cluster for predictions by measuring it, in a few seconds.

Two of its worker processes exchange messages over fragnb's channels (what replicas use): a small
message's round trip, a burst of small messages (the work each costs beyond the latency), and 1 MiB
messages (bandwidth), and an all-reduce between the two as a run's replicas make it (through shared memory
where they share a machine, else gloo). Then every worker runs the same torch workload alone and all at once: how many
of them really run side by side (on this 2-core machine, fewer than the worker count).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

from ..runtime.attempt import host_of as _host
from ..runtime.cluster import clusters
from .cluster import COLLECTIVE_BYTES, PRESETS, Cluster
from .profile import MAX_SPREAD, spread

__all__ = ["calibrate", "side_by_side"]

BURST = 100
#: Seconds :func:`_workload` takes alone on the machine the ``"here"`` preset describes (2026-12-03).
WORKLOAD_HERE_S = 0.077
LARGE = 1 << 20


def calibrate(cluster=None, name: str | None = None, rounds: int = 200) -> Cluster:
    """Measure ``cluster`` (as :func:`fragnb.run` takes it; fragnb's own by default) and describe it as
    a :class:`~fragnb.predict.model.Cluster`: its worker processes as workers of one core each, scaled
    by how fast they run side by side."""
    client, _ = clusters.connect(cluster, workers=2)
    workers = sorted(clusters.workers(client))
    if len(workers) < 2:
        raise clusters.ClusterError(f"calibrating needs two worker processes; the cluster has {len(workers)}")
    run_id, key = (
        f"fragnb-calibrate-{uuid.uuid4().hex}",
        os.urandom(16),
    )  # the key reaches the two through Dask, as a run's does
    pair = [
        client.submit(_exchange, rank, run_id, key, _host(w), rounds, workers=[w], pure=False)
        for rank, w in enumerate(workers[:2])
    ]
    small, burst, large, jitter = client.gather(pair)[0]
    message_s = max(0.0, (burst - small) / BURST)
    latency_s = max(1e-6, small / 2 - message_s)
    bandwidth = LARGE / max(1e-9, large / 2 - latency_s - message_s)
    port = _free_port(_host(workers[0]))
    collective_s = client.gather(
        [
            client.submit(
                _allreduce,
                rank,
                f"{run_id}-collective",
                f"tcp://{_host(workers[0])}:{port}",
                _host(workers[0]) == _host(workers[1]),
                workers=[w],
                pure=False,
            )
            for rank, w in enumerate(workers[:2])
        ]
    )[0]
    client.gather(
        [client.submit(_workload, 100, workers=[w], pure=False) for w in workers]
    )  # torch imported, caches warm
    # The fastest of three runs alone: one slow run alone (a page fault, a busy neighbour) would make the
    # workers look faster side by side than alone, 2.7 cores' worth out of two workers (seen in CI).
    runs = [client.submit(_workload, workers=[workers[0]], pure=False).result() for _ in range(3)]
    alone = min(runs)
    together = client.gather([client.submit(_workload, workers=[w], pure=False) for w in workers])
    machines = dict(client.gather([client.submit(_machine, workers=[w], pure=False) for w in workers]))
    cores = side_by_side(alone, together, machines)
    # The runtime's own costs are Python and torch work on a worker: the preset's, scaled by how long the
    # same workload takes here against the machine they were measured on (a message's work would not
    # do: the preset's is what a busy machine showed, calibrate() measures an idle pair).
    here = PRESETS["here"]
    speed = alone / WORKLOAD_HERE_S
    return Cluster(
        name or f"measured: {len(workers)} workers, {cores:.1f} cores' worth",
        workers=1,
        cores=round(cores, 2),
        latency_s=latency_s,
        # A step's wait when the placement's processes outnumber the cores: an idle pair's round trip
        # cannot show it (with one or two other workers computing beside the pair, its round trip stayed
        # within the idle one's spread, 180-390 us against 380-410 us, 2026-12-03), so the preset's, scaled.
        loaded_latency_s=max(latency_s, here.loaded_latency_s * speed),
        message_s=message_s,
        collective_s=collective_s,
        bandwidth=bandwidth,
        iteration_s=here.iteration_s * speed,
        step_s=here.step_s * speed,
        spread=min(MAX_SPREAD, max(jitter, spread(runs))),
    )


def side_by_side(alone: float, together: list[float], machines: dict[str, float]) -> float:
    """The cores' worth of workers that ran a workload in ``together`` seconds each, all at once, where one
    ran it in ``alone`` seconds by itself: each worker's speed beside the others (at most 1), summed, and
    never more than the cores of the machines they run on (``machines``: each host's cores).

    The cap is not a formality: a run alone slowed by a busy neighbour makes every worker look as fast
    beside the others as alone, and four workers on this 2-core machine were once counted 2.85 cores'
    worth, so the model let replicas run side by side that in fact took turns (2026-12-05)."""
    return min(sum(min(1.0, alone / t) for t in together), float(sum(machines.values())))


def _machine() -> tuple[str, float]:
    """On a worker: its host and the cores it may use there (affinity within a container's quota)."""
    import socket

    from ..runtime.cluster.budget import limit

    return socket.gethostname(), limit().cores


def _exchange(rank: int, run_id: str, key: bytes, host: str, rounds: int) -> tuple[float, float, float, float]:
    """On two workers: median seconds of a small round trip, of a burst of small messages answered
    once, and of a 1 MiB round trip, and the small round trips' spread (rank 0's)."""
    import torch
    from distributed import Variable

    from ..runtime.net.channels import ZmqChannels

    me, peer = f"r{rank}", f"r{1 - rank}"
    ch = ZmqChannels(me, host, key)
    try:
        Variable(f"{run_id}-{me}").set(ch.address)
        ch.connect({me: ch.address, peer: Variable(f"{run_id}-{peer}").get(timeout=60)})
        timings, small = [], []
        for count, value in ((1, torch.zeros(16)), (BURST, torch.zeros(16)), (1, torch.zeros(LARGE // 4))):
            times = []
            for _ in range(10 + (rounds if count == 1 else rounds // 10)):
                if rank == 0:
                    start = time.perf_counter()
                    for _ in range(count):
                        ch.send([peer], "ping", value)
                    ch.recv(peer, "pong")
                    times.append(time.perf_counter() - start)
                else:
                    for _ in range(count):
                        got = ch.recv(peer, "ping")
                    ch.send([peer], "pong", got)
            timings.append(statistics.median(times[10:]) if rank == 0 else 0.0)
            small = small or times[10:]
        if rank != 0:
            return (*timings, 0.0)
        q1, middle, q3 = statistics.quantiles(small, n=4)
        return (*timings, (q3 - q1) / 2 / middle)  # how far a typical small round trip strays from the median
    finally:
        ch.close()


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _allreduce(rank: int, run_id: str, address: str, shared: bool, rounds: int = 100) -> float:
    """On two workers: the mean seconds of an all-reduce of COLLECTIVE_BYTES (a small network's gradients) in the group
    of the two, as a run's replicas make one (through shared memory where they share a machine; the mean: a
    run's updates add up its tail, one in ten taking several milliseconds on gloo here)."""
    import torch

    from ..runtime.net import collectives

    collectives.join(run_id, rank, 2, address, "gloo", shared=run_id if shared else None)
    try:
        group = collectives.group_of(run_id)
        t = torch.zeros(COLLECTIVE_BYTES // 4)
        for _ in range(10):
            group.all_reduce(t)
        start = time.perf_counter()
        for _ in range(rounds):
            group.all_reduce(t)
        return (time.perf_counter() - start) / rounds
    finally:
        collectives.leave(run_id)


def _workload(steps: int = 3000) -> float:
    """Seconds ``steps`` small torch operations take on this worker (:data:`WORKLOAD_HERE_S` here), as a replica does them."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(64, 64)
    start = time.perf_counter()
    for _ in range(steps):
        a = torch.tanh(a @ a)
    return time.perf_counter() - start
