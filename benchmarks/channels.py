"""Channel transports side by side: round-trip latency and bandwidth between two Dask worker processes.

fragnb's channels send values replica to replica over ZeroMQ (a Unix socket between processes of
one machine, TCP between machines). This measures, on a local two-worker Dask cluster, a ping-pong
of float32 tensors (64 B to 4 MiB) over:

- zmq: fragnb's ``ZmqChannels``, what channels use;
- gloo: ``torch.distributed`` point-to-point ``send``/``recv`` of a tensor;
- dask: one Dask task per message, each handed to the next task on the other worker as a
  dependency, as fragnb's previous executor did: every edge goes through the scheduler.

zmq and gloo ping-pong inside the two workers (one long-running task each), so the scheduler is not
in their loop. Dask's chain is submitted whole up front (its best case) and timed inside the tasks.
Bandwidth is one-way: 2 * size / round trip. gloo receives into a preallocated tensor; zmq hands the
receiver a fresh copy, and in a Dask worker (``MALLOC_TRIM_THRESHOLD_`` set by the nanny) each fresh
large buffer costs its page faults again.

    .venv/bin/python benchmarks/channels.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import sys
import time
import uuid

import distributed

SIZES = [64, 4 << 10, 256 << 10, 4 << 20]  # bytes
LARGE = 256 << 10  # bandwidth is only meaningful from here on: below, per-message overhead dominates
WARMUP = 10


def rounds_for(size: int, quick: bool) -> int:
    n = 500 if size <= 4 << 10 else 200 if size <= 256 << 10 else 50
    return max(n // 5, 10) if quick else n


def human(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"


# The two functions below run on the workers; each is one task that keeps its transport's state for
# the whole run, so nothing has to survive between tasks. Imports are inside: they run in the worker.


def zmq_pingpong(rank: int, run_id: str, sizes: list[int], quick: bool) -> dict[int, list[float]]:
    import torch
    from distributed import Variable

    from fragnb.runtime.net.channels import ZmqChannels

    me, peer = f"r{rank}", f"r{1 - rank}"
    ch = ZmqChannels(me, "127.0.0.1", b"benchmark-key")
    try:
        Variable(f"{run_id}-{me}").set(ch.address)
        ch.connect({me: ch.address, peer: Variable(f"{run_id}-{peer}").get(timeout=60)})
        rtts = {}
        for size in sizes:
            value = torch.zeros(size // 4)
            times = []
            for i in range(WARMUP + rounds_for(size, quick)):
                if rank == 0:
                    t0 = time.perf_counter()
                    ch.send([peer], "ping", value)
                    value = ch.recv(peer, "pong")
                    if i >= WARMUP:
                        times.append(time.perf_counter() - t0)
                else:
                    ch.send([peer], "pong", ch.recv(peer, "ping"))
            rtts[size] = times
        return rtts
    finally:
        ch.close()


def gloo_pingpong(rank: int, port: int, sizes: list[int], quick: bool) -> dict[int, list[float]]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        rtts = {}
        for size in sizes:
            buf = torch.zeros(size // 4)  # recv fills a preallocated tensor of the same shape
            times = []
            for i in range(WARMUP + rounds_for(size, quick)):
                if rank == 0:
                    t0 = time.perf_counter()
                    dist.send(buf, dst=1)
                    dist.recv(buf, src=1)
                    if i >= WARMUP:
                        times.append(time.perf_counter() - t0)
                else:
                    dist.recv(buf, src=0)
                    dist.send(buf, dst=0)
            rtts[size] = times
        return rtts
    finally:
        dist.destroy_process_group()


def dask_start(size: int) -> tuple:
    import torch

    return torch.zeros(size // 4), [time.perf_counter()]


def dask_hop(message: tuple) -> tuple:
    # Worker A's timestamps are one process's clock; the gap between two consecutive ones is a round trip.
    value, stamps = message
    return value, [*stamps, time.perf_counter()]


def run_pair(client: distributed.Client, workers: list[str], fn, *args) -> dict[int, list[float]]:
    """``fn(rank, *args)`` on both workers at once; rank 0's timings."""
    futures = [client.submit(fn, rank, *args, workers=[w], pure=False) for rank, w in enumerate(workers)]
    return client.gather(futures)[0]


def run_dask(client: distributed.Client, workers: list[str], sizes: list[int], quick: bool) -> dict[int, list[float]]:
    a, b = workers
    rounds = 20 if quick else 50
    warmup = 2
    rtts = {}
    for size in sizes:
        message = client.submit(dask_start, size, workers=[a], pure=False)
        for _ in range(warmup + rounds):
            message = client.submit(dask_hop, message, workers=[b], pure=False)
            message = client.submit(dask_hop, message, workers=[a], pure=False)
        stamps = message.result()[1][::2]  # A's: the start, then every second hop
        rtts[size] = [t1 - t0 for t0, t1 in zip(stamps[warmup:], stamps[warmup + 1 :])]
    return rtts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer round trips (about 5x)")
    args = parser.parse_args()

    start = time.perf_counter()
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = sorted(client.scheduler_info()["workers"])
        client.run(lambda: __import__("torch"))  # pay torch's import before timing anything
        results = {
            "zmq": run_pair(client, workers, zmq_pingpong, f"channels-bench-{uuid.uuid4().hex}", SIZES, args.quick),
            "gloo": run_pair(client, workers, gloo_pingpong, free_port(), SIZES, args.quick),
            "dask": run_dask(client, workers, SIZES, args.quick),
        }

    median = {(t, s): statistics.median(r) for t, by_size in results.items() for s, r in by_size.items()}
    labels = {"zmq": "zmq (fragnb channels)", "gloo": "gloo send/recv", "dask": "dask task per message"}
    print(f"{'transport':<24}{'size':>8}{'rounds':>8}{'median RTT us':>15}{'MB/s':>10}")
    for t in results:
        for s in SIZES:
            mbps = f"{2 * s / median[t, s] / 1e6:>10,.0f}" if s >= LARGE else f"{'-':>10}"
            print(f"{labels[t]:<24}{human(s):>8}{len(results[t][s]):>8}{median[t, s] * 1e6:>15,.1f}{mbps}")
    print()
    for other in ("gloo", "dask"):
        for s in SIZES:
            ratio = median[other, s] / median["zmq", s]
            better, worse = ("lower", "higher") if s < LARGE else ("more", "less")
            what = f"{ratio:.1f}x {better}" if ratio >= 1 else f"{1 / ratio:.1f}x {worse}"
            print(f"zmq vs {labels[other]}: {what} {'latency' if s < LARGE else 'bandwidth'} at {human(s)}")
    print(f"\n(whole run {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
