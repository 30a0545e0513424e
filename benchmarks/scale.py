"""What distribution costs, and how the control plane grows with replicas, on notebook 01's loop.

Three tables, in one run, on the embedded LocalCluster (workers started before any clock):

1. **Worker cost**: ``gpu_only`` with one replica on the CPU is ``single``'s computation fused in
   one Dask worker, with no communication: its ratio to ``single`` is what running in a worker costs
   (target <= 1.1).
2. **Every DP with 2 replicas** against ``single``: loop seconds for the same iterations, each run
   paired with a ``single`` run just before it (this machine's speed drifts by a third within
   minutes: a ratio of neighbours is what is comparable), the median ratio of ``--repeat`` pairs,
   next to issue 20's targets. For each DP, the share of its replicas' time spent waiting for another
   group, from the run's timeline: what says why a target is missed.
3. **Replica count** under ``coarse``, ``fine`` and ``async``: per run, seconds outside the loop (placing
   replicas, shipping objects, starting programs, merging back), the loop, the safety net, messages
   per iteration and the workers' memory (RSS, MB each), for 1, 2, 4 ... replicas; and how long the
   cluster took to grow to that many workers.

    .venv/bin/python benchmarks/scale.py [--iterations 12] [--repeat 3] [--replicas 1 2 4 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import fragnb
from fragnb import capture, run
from fragnb.notebook import load_canonical
from fragnb.runtime.clusters import connect

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"

#: Issue 20's targets: loop time with 2 replicas over ``single``'s, on CartPole and 2 cores.
TARGETS = {"gpu_only": ({}, 1.1), "coarse": ({"actors": 2}, 1.2), "async": ({"actors": 2}, 1.1), "fine": ({"actors": 2}, 2.0),
           "multi_learner": ({"learners": 2}, 2.0), "srl": ({"actors": 2}, 3.0)}
COUNT = {"coarse": "actors", "fine": "actors", "async": "actors"}


def timed(cell, policy: str, iterations: int, check: bool = False, **params) -> tuple[fragnb.RunResult, float]:
    """One run of notebook 01's cell for ``iterations`` iterations; the result and its wall seconds."""
    ns = cell.namespace(0)
    ns["iterations"] = iterations
    graph = capture(cell.body, ns, name="ppo")
    start = time.perf_counter()
    kw = {} if policy == "single" else {"check": check}
    result = run(graph, policy, progress=False, plot=False, **kw, **params)
    return result, time.perf_counter() - start


def waiting(result) -> float:
    """The share of the replicas' recorded time spent waiting for another group."""
    busy = sum(b - a for _, _, kind, a, b in result.intervals if kind == "busy")
    wait = sum(b - a for _, _, kind, a, b in result.intervals if kind == "wait")
    return wait / (busy + wait) if busy + wait else 0.0


def policies(cell, iterations: int, repeat: int) -> None:
    print(f"\n1-2. loop seconds for {iterations} iterations, each policy's run over the single run just before it "
          f"(median of {repeat} pairs)")
    print(f"{'policy':<26} {'loop s':>7} {'single s':>9} {'ratio':>6} {'target':>7} {'met':>4} {'waiting':>8} {'msgs/it':>8}")
    for policy, (params, target) in TARGETS.items():
        timed(cell, policy, 1, **params)  # its workers started, its code imported
        pairs = []
        for _ in range(repeat):
            base, _ = timed(cell, "single", iterations)
            r, _ = timed(cell, policy, iterations, **params)
            pairs.append((r.seconds / base.seconds, r, base.seconds))
        ratio, r, base_s = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        name = f"{policy} ({', '.join(f'{k}={v}' for k, v in params.items()) or '1 replica, CPU'})"
        print(f"{name:<26} {r.seconds:>7.2f} {base_s:>9.2f} {ratio:>5.2f}x {target:>6.1f}x {'yes' if ratio <= target else 'no':>4} "
              f"{waiting(r):>7.0%} {r.messages / max(r.iterations, 1):>8.0f}", flush=True)


def memory_mb(client) -> float:
    """Mean resident memory of the cluster's workers, in MB."""
    import psutil

    rss = client.run(lambda: psutil.Process().memory_info().rss)
    return statistics.mean(rss.values()) / 1e6


def replicas(cell, iterations: int, counts: list[int]) -> None:
    print(f"\n3. replica count ({iterations} iterations; overhead: wall seconds outside the loop and the safety net)")
    print(f"{'policy':<8} {'replicas':>8} {'workers up s':>12} {'overhead s':>10} {'loop s':>7} {'net s':>6} "
          f"{'msgs/it':>8} {'MB/worker':>9}")
    for n in counts:
        fragnb.shutdown()  # the cluster grows from nothing to this run's workers, on the clock
        start = time.perf_counter()
        client, _ = connect(None, n + 1)
        up = time.perf_counter() - start
        for policy in COUNT:
            timed(cell, policy, 1, **{COUNT[policy]: n})
            r, wall = timed(cell, policy, iterations, check=True, **{COUNT[policy]: n})
            print(f"{policy:<8} {n:>8} {up:>12.1f} {wall - r.seconds - r.check_seconds:>10.2f} {r.seconds:>7.2f} "
                  f"{r.check_seconds:>6.2f} {r.messages / max(r.iterations, 1):>8.0f} {memory_mb(client):>9.0f}", flush=True)
            up = 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cell = load_canonical(NOTEBOOK)
    began = time.perf_counter()
    policies(cell, args.iterations, args.repeat)
    replicas(cell, max(2, args.iterations // 3), args.replicas)
    fragnb.shutdown()
    print(f"\n(whole run {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
