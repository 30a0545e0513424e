"""A tiny all-reduce between two replicas on this machine: shared memory (fragnb.runtime.net.shm) against gloo over
loopback, in one interleaved run (issue "Distribution that pays, third step": median <= 100 us, gloo ~900 us).

Two processes join a group as a run's replicas do (collectives.join, with the shared-memory group beside gloo's),
then all-reduce the same tensors through each in turn: a 3-value header (what data_parallel's step rounds send
first), 40 KB (a small network's gradients) and 4 MB. Prints the median and the 90th percentile of each, in
microseconds, beside the target.

    .venv/bin/python benchmarks/allreduce.py [--rounds 500]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import time
import uuid

import torch

from fragnb.runtime.net import collectives, shm

SIZES = {
    "header (3 x float64)": (3, torch.float64),
    "40 KB (10,000 x float32)": (10_000, torch.float32),
    "4 MB (1M x float32)": (1_000_000, torch.float32),
}
TARGET_US = 100.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replica(rank: int, run: str, address: str, rounds: int, out) -> None:
    torch.set_num_threads(1)
    collectives.join(run, rank, 2, address, "gloo", shared=run)
    groups = {"gloo": collectives.Gloo(), "shared memory": collectives.group_of(run)}
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for label, (n, dtype) in SIZES.items():
            t = torch.ones(n, dtype=dtype)
            for _ in range(10):  # warm
                for g in groups.values():
                    g.all_reduce(t)
            for _ in range(rounds if n < 100_000 else max(10, rounds // 20)):
                for name, g in groups.items():  # interleaved: both see the same machine
                    start = time.perf_counter()
                    g.all_reduce(t)
                    times.setdefault((label, name), []).append(time.perf_counter() - start)
        out.put((rank, times))
    finally:
        collectives.leave(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    if not shm.available():
        print("no /dev/shm here: the replicas keep gloo")
        return 0
    ctx = multiprocessing.get_context("fork")
    run, out, address = f"bench-{uuid.uuid4().hex[:8]}", ctx.Queue(), f"tcp://127.0.0.1:{_port()}"
    procs = [ctx.Process(target=_replica, args=(r, run, address, args.rounds, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(60)
    times = results[0]
    print(f"{'all-reduce of':<26} {'through':<14} {'median':>9} {'p90':>9}")
    for label in SIZES:
        for name in ("gloo", "shared memory"):
            ts = sorted(times[label, name])
            median, p90 = statistics.median(ts) * 1e6, ts[int(0.9 * len(ts))] * 1e6
            target = (
                f"  (target <= {TARGET_US:.0f} us)" if name == "shared memory" and label.startswith("header") else ""
            )
            print(f"{label:<26} {name:<14} {median:>7.0f} us {p90:>7.0f} us{target}")
        ratio = statistics.median(times[label, "gloo"]) / statistics.median(times[label, "shared memory"])
        print(f"{'':<26} {'':<14} shared memory {ratio:.1f}x faster")
    print("left in /dev/shm:", [p.name for p in shm._DIR.glob("fragnb-*")] or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
