"""What distribution costs, and how the control plane grows with replicas, on notebook 01's loop.

Four tables, in one run, on the embedded LocalCluster (workers started before any clock):

1. **Worker cost**: ``gpu_only`` with one replica on the CPU is ``single``'s computation fused in
   one Dask worker, with no communication: its ratio to ``single`` is what running in a worker costs
   (target <= 1.1).
2. **Every DP with 2 replicas** against ``single``: loop seconds for the same iterations, each run
   paired with a ``single`` run just before it (this machine's speed drifts by a third within
   minutes: a ratio of neighbours is what is comparable), the median ratio of ``--repeat`` pairs,
   next to issue 20's targets. For each DP, the share of its replicas' time spent waiting for another
   group, from the run's timeline: what says why a target is missed.
3. **Replica count** under ``coarse``, ``fine`` and ``async``, 1 to 64 replicas on 64 environments: the
   worker processes the run used (beyond :func:`~fragnb.runtime.cluster.clusters.local_workers` a group's
   replicas share processes as threads), how long the fresh cluster took to grow to them, the
   seconds before the loop (``RunResult.setup_seconds``: shipping objects, starting programs), the
   loop, the safety net (at most 4 replicas a group, whatever the count), messages per iteration,
   the peak memory of a worker process, and what each added replica costs in processes already
   running (summed peaks against the last smaller count on as many processes).
4. **HalfCheetah** (a CPU-heavy environment, where distribution should pay even on 2 cores): env
   steps/s of ``coarse`` and ``async`` with 2 actors over ``single``'s, paired as in 2 (target >= 1.6x).

    .venv/bin/python benchmarks/scale.py [--iterations 12] [--repeat 3] [--replicas 1 2 4 8 16 32 64] [--only-replicas]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

import fragnb
from fragnb import capture, run
from fragnb.notebook import load_canonical
from fragnb.runtime.cluster.clusters import connect, local_workers

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"

#: Issue 20's targets: loop time with 2 replicas over ``single``'s, on CartPole and 2 cores.
TARGETS = {
    "gpu_only": ({}, 1.1),
    "coarse": ({"actors": 2}, 1.2),
    "async": ({"actors": 2}, 1.1),
    "fine": ({"actors": 2}, 2.0),
    "multi_learner": ({"learners": 2}, 2.0),
    "srl": ({"actors": 2}, 3.0),
}
COUNT = {"coarse": "actors", "fine": "actors", "async": "actors"}


def timed(
    cell, policy: str, iterations: int, envs: int | None = None, check: bool = False, **params
) -> tuple[fragnb.RunResult, float]:
    """One run of notebook 01's cell for ``iterations`` iterations (on ``envs`` environments, if given);
    the result and its wall seconds."""
    if envs is not None:
        cell = dataclasses.replace(cell, setup=cell.setup.replace("PPOConfig()", f"PPOConfig(num_envs={envs})"))
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
    print(
        f"\n1-2. loop seconds for {iterations} iterations, each policy's run over the single run just before it "
        f"(median of {repeat} pairs)"
    )
    print(
        f"{'policy':<26} {'loop s':>7} {'single s':>9} {'ratio':>6} {'target':>7} {'met':>4} {'waiting':>8} {'msgs/it':>8}"
    )
    for policy, (params, target) in TARGETS.items():
        timed(cell, policy, 1, **params)  # its workers started, its code imported
        pairs = []
        for _ in range(repeat):
            base, _ = timed(cell, "single", iterations)
            r, _ = timed(cell, policy, iterations, **params)
            pairs.append((r.seconds / base.seconds, r, base.seconds))
        ratio, r, base_s = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        name = f"{policy} ({', '.join(f'{k}={v}' for k, v in params.items()) or '1 replica, CPU'})"
        print(
            f"{name:<26} {r.seconds:>7.2f} {base_s:>9.2f} {ratio:>5.2f}x {target:>6.1f}x {'yes' if ratio <= target else 'no':>4} "
            f"{waiting(r):>7.0%} {r.messages / max(r.iterations, 1):>8.0f}",
            flush=True,
        )


def cheetah(iterations: int, repeat: int) -> None:
    """Env steps/s on HalfCheetah (a CPU-heavy environment), ``coarse`` and ``async`` with 2 actors
    against a ``single`` run just before each (issue 20's target: >= 1.6x)."""
    try:
        import mujoco  # noqa: F401  (the `mujoco` extra)
        from algorithms import ppo_halfcheetah
    except ImportError as e:
        print(f"\n4. HalfCheetah: skipped ({e}; `pip install 'fragnb[mujoco]'`)")
        return
    print(
        f"\n4. HalfCheetah-v5 (8 environments x 256 steps an iteration, {iterations} iterations): env steps/s "
        f"over the single run just before it (median of {repeat} pairs)"
    )
    print(
        f"{'policy':<18} {'steps/s':>8} {'single':>8} {'ratio':>6} {'target':>7} {'met':>4} {'bound':>6} {'waiting':>8}"
    )

    def steps_per_s(policy, **params):
        cell, ns = ppo_halfcheetah(0, 8 * 256 * iterations)
        graph = capture(cell, ns, name="cheetah")
        r = run(graph, policy, progress=False, plot=False, **({} if policy == "single" else {"check": False}), **params)
        return r.env_steps / r.seconds, r, graph

    for policy in ("coarse", "async"):
        steps_per_s(policy, actors=2)  # its workers started, its code imported
        pairs = []
        for _ in range(repeat):
            base, alone, graph = steps_per_s("single")
            rate, r, _ = steps_per_s(policy, actors=2)
            pairs.append((rate / base, rate, base, r, bound(graph, alone, policy)))
        ratio, rate, base, r, best = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        print(
            f"{policy + ' (actors=2)':<18} {rate:>8.0f} {base:>8.0f} {ratio:>5.2f}x {1.6:>6.1f}x {'yes' if ratio >= 1.6 else 'no':>4} "
            f"{best:>5.2f}x {waiting(r):>7.0%}",
            flush=True,
        )
    print(
        "   bound: the most 2 actors can gain on 2 cores given single's split between the actors' fragments (rollout) "
        "and the rest: coarse overlaps only the actors (Amdahl), async also the learner with them"
    )


def bound(graph, alone, policy: str, actors: int = 2) -> float:
    """The speed-up over ``single`` that ``policy`` could reach with no cost of communication, from the
    share of ``single``'s time in the fragments its actors run."""
    groups = {f: p.group for f, p in graph.place(policy, actors=actors).fragments.items()}
    total = sum(alone.fragment_seconds.values())
    rollout = sum(sec for f, sec in alone.fragment_seconds.items() if groups.get(f) == "actors") / total
    return 1 / max(rollout / actors, 1 - rollout) if policy == "async" else 1 / (1 - rollout + rollout / actors)


def peak_mb(client) -> dict[str, float]:
    """Each worker's peak resident memory so far, in MB (the cluster is fresh for each replica count)."""
    import resource

    return client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)


def replicas(cell, iterations: int, counts: list[int], envs: int) -> None:
    print(
        f"\n3. replica count ({iterations} iterations, {envs} environments; a fresh cluster for each count, at most "
        f"{local_workers()} worker processes here, beyond which a group's replicas share processes as threads)"
    )
    print(
        "   setup: seconds from the cluster's call to the loop's start (shipping objects, starting programs); "
        "net: the safety net (at most 4 replicas a group); memory: after the three policies' runs"
    )
    print(
        f"{'policy':<8} {'replicas':>8} {'procs':>5} {'workers up s':>12} {'setup s':>8} {'loop s':>7} {'net s':>6} {'msgs/it':>8}"
    )
    before: tuple[int, int, float] | None = None  # (replicas, workers, summed peak MB) of the last count
    for n in counts:
        fragnb.shutdown()  # the cluster grows from nothing to this run's workers, on the clock
        start = time.perf_counter()
        client, _ = connect(None, min(n + 1, local_workers()))
        up = time.perf_counter() - start
        for policy in COUNT:
            timed(cell, policy, 1, envs, **{COUNT[policy]: n})
            r, _ = timed(cell, policy, iterations, envs, check=True, **{COUNT[policy]: n})
            print(
                f"{policy:<8} {n:>8} {r.processes:>5} {up:>12.1f} {r.setup_seconds:>8.2f} {r.seconds:>7.2f} "
                f"{r.check_seconds:>6.2f} {r.messages / max(r.iterations, 1):>8.0f}",
                flush=True,
            )
            up = 0.0
        peaks = peak_mb(client)
        total = sum(peaks.values())
        # what each replica added to as many processes: against the last smaller count on as many workers
        added = (
            f", {(total - before[2]) / (n - before[0]):.1f} MB per added replica"
            if before and before[1] == len(peaks)
            else ""
        )
        print(f"{'':<8} {n:>8} replicas: peak {max(peaks.values()):.0f} MB per worker process{added}")
        before = (n, len(peaks), total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument(
        "--envs", type=int, default=64, help="environments in table 3 (each replica count must divide it)"
    )
    parser.add_argument("--only-replicas", action="store_true", help="table 3 alone")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cell = load_canonical(NOTEBOOK)
    began = time.perf_counter()
    if not args.only_replicas:
        policies(cell, args.iterations, args.repeat)
    replicas(cell, max(2, args.iterations // 3), args.replicas, args.envs)
    if not args.only_replicas:
        cheetah(max(2, args.iterations // 4), args.repeat)
    fragnb.shutdown()
    print(f"\n(whole run {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
