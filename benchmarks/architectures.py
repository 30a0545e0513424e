"""Every distribution policy side by side, and the sweeps the SRL and IMPALA papers show.

1. Time to solve and env steps/s of all seven DPs on notebook 01's loop, unchanged (CartPole,
   mean return of the last 20 episodes >= 475; median over seeds).
2. SRL sweep: actor workers x ring size x policy workers, with per-worker-type throughput (env
   steps/s per actor worker, inference calls/s per policy worker, samples/s the trainer consumes)
   and the share of time actor workers wait for inference.
3. async: staleness bound vs throughput, sample efficiency and time to solve, with and without V-trace.
4. torch.compile on the fused step's parts (environment step, policy forward), eager vs compiled.

    .venv/bin/python benchmarks/architectures.py [--seeds 3] [--sweep-iterations 12]

On a 2-core machine every DP with workers shares the same two cores with the notebook, so the
distributed figures measure overhead and overlap, not added compute.
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

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
SOLVED = 475.0
DPS = [
    ("single", {}),
    ("coarse", {"actors": 2}),
    ("fine", {"actors": 2}),
    ("multi_learner", {"learners": 2}),
    ("async", {"actors": 2, "max_staleness": 1}),
    ("srl", {"actors": 2, "policy_workers": 1, "ring": 2}),
    ("gpu_only", {"learners": 1}),
]


def solve(cell, policy: str, seed: int, vtrace: bool = False, **params):
    """One run of notebook 01's loop until solved (or its iterations run out)."""
    ns = cell.namespace(seed)
    ns["learner"].config.vtrace = vtrace
    return run(
        capture(cell.body, ns, name="ppo"),
        policy,
        progress=False,
        plot=False,
        until=lambda r: r.mean_return() >= SOLVED,
        **params,
    )


def iterations(cell, policy: str, count: int, **params):
    ns = cell.namespace(0)
    ns["iterations"] = count
    return run(capture(cell.body, ns, name="ppo"), policy, progress=False, plot=False, **params)


def median_solve(cell, policy, seeds, **params):
    runs = [solve(cell, policy, seed, **params) for seed in seeds]
    times = [r.solved_at()[1] if r.solved_at() else float("inf") for r in runs]
    return statistics.median(times), statistics.median(r.env_steps_per_s for r in runs), runs


def busy_share(result, group: str, kind: str) -> float:
    """Share of the loop's time the replicas of ``group`` spent in intervals of ``kind``."""
    rows = {r for r, *_ in result.intervals if r.split("[")[0] == group}
    spent = sum(b - a for r, _, k, a, b in result.intervals if r in rows and k == kind)
    return spent / (len(rows) * result.seconds) if rows and result.seconds else 0.0


def compiled(fn, *args, reps: int = 300) -> tuple[float, float, float]:
    """(eager us, compiled us, compile s) per call of ``fn``."""

    def per_call(f):
        for _ in range(20):
            f(*args)
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            f(*args)
        sync()
        return (time.perf_counter() - start) / reps * 1e6

    def sync():  # GPU kernels run asynchronously: time them to their end
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    eager = per_call(fn)
    start = time.perf_counter()
    fast = torch.compile(fn)
    fast(*args)
    took = time.perf_counter() - start
    return eager, per_call(fast), took


def compare_compiled(sizes, device: str) -> None:
    """Print eager vs compiled time per call of CartPole's step and the policy's forward, on ``device``."""
    from fragnb.algos.ppo import ActorCritic
    from fragnb.envs import CartPole

    for n in sizes:
        env, net = CartPole(n, seed=0).to(device), ActorCritic(4, 2).to(device)
        env.reset()
        actions, obs = torch.ones(n, dtype=torch.int64, device=device), torch.zeros(n, 4, device=device)
        e, c, took = compiled(env._step, actions)
        print(f"   {n:>5} envs  env step   {e:>7.0f} us eager  {c:>7.0f} us compiled  ({took:.1f} s to compile)")
        with torch.no_grad():
            e, c, took = compiled(lambda x, net=net: (net.logits(x), net.value(x)), obs)
        print(f"   {n:>5} envs  policy     {e:>7.0f} us eager  {c:>7.0f} us compiled  ({took:.1f} s to compile)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sweep-iterations", type=int, default=12)
    parser.add_argument("--skip-compile", action="store_true", help="skip part 4 (compiling takes ~20 s on 2 cores)")
    args = parser.parse_args()
    cell = load_canonical(NOTEBOOK)
    seeds = range(args.seeds)
    torch.set_num_threads(1)

    print(f"1. every DP on notebook 01's loop: time to solve (median of seeds 0-{args.seeds - 1}), env steps/s")
    base = None
    for policy, params in DPS:
        seconds, rate, _ = median_solve(cell, policy, seeds, **params)
        base = base or seconds
        print(
            f"   {policy:<14}{str(params):<52}{seconds:>7.2f} s  {seconds / base:>5.2f}x single   {rate:>8,.0f} steps/s"
        )

    print(f"\n2. srl sweep ({args.sweep_iterations} learner iterations each; 32 envs x 32 steps per iteration)")
    print(
        f"   {'actors':>6} {'ring':>4} {'policy':>6}  {'steps/s':>8}  {'per actor worker':>16}  {'inference/s per policy worker':>29}"
        f"  {'samples/s trainer':>17}  {'actors waiting':>14}"
    )
    for actors in (1, 2):
        for ring in (1, 2):
            for policy_workers in (1, 2):
                if actors % policy_workers and policy_workers % actors:
                    continue
                r = iterations(
                    cell, "srl", args.sweep_iterations, actors=actors, ring=ring, policy_workers=policy_workers
                )
                calls = r.env_steps / r.inference_batch / r.seconds / policy_workers
                samples = r.iterations * 32 * 32 / r.seconds
                print(
                    f"   {actors:>6} {ring:>4} {policy_workers:>6}  {r.env_steps_per_s:>8,.0f}  {r.env_steps_per_s / actors:>16,.0f}  "
                    f"{calls:>29,.0f}  {samples:>17,.0f}  {busy_share(r, 'actors', 'wait'):>13.0%}"
                )

    print(
        f"\n3. async (2 actors): staleness bound vs throughput and time to solve (median of seeds 0-{args.seeds - 1})"
    )
    for staleness in (0, 1, 2, 4):
        for vtrace in (False, True):
            seconds, rate, runs = median_solve(cell, "async", seeds, actors=2, max_staleness=staleness, vtrace=vtrace)
            ages = [a for r in runs for per in r.staleness for a in per]
            dropped = sum(r.dropped for r in runs)
            steps = statistics.median(r.solved_at()[0] if r.solved_at() else float("inf") for r in runs)
            print(
                f"   max_staleness={staleness} vtrace={vtrace!s:<5}  {rate:>8,.0f} steps/s  mean staleness {statistics.mean(ages):.2f}  "
                f"dropped {dropped:>3}  solved after {steps:>8,.0f} steps, {seconds:.2f} s"
            )

    if not args.skip_compile:
        print("\n4. torch.compile on the fused step's parts (1 thread): eager vs compiled, per call")
        compare_compiled((32, 4096), "cpu")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
