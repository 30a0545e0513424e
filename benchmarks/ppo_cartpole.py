"""PPO on CartPole: plain Python vs `%%fragment --run` (single policy), side by side, three seeds.

Runs notebook 01's canonical cell both ways for each seed, in alternating order, and prints
time-to-solve (mean return of the last 20 episodes >= 475) and env steps/s with their ratios
(fragment / plain; the target is <= 1.02 for time and >= 0.98 for throughput).

    .venv/bin/python benchmarks/ppo_cartpole.py [--seeds 0 1 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from fragnb import capture, run
from fragnb.notebook import load_canonical
from fragnb.runtime import first_solved

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"


def plain(cell, seed: int) -> dict:
    ns = cell.namespace(seed)
    code = compile(cell.body, "<plain>", "exec")
    start = time.perf_counter()
    exec(code, ns)
    seconds = time.perf_counter() - start
    return _measure(ns, start, seconds)


def fragment(cell, seed: int) -> dict:
    ns = cell.namespace(seed)
    graph = capture(cell.body, ns, name=cell.name)
    start = time.perf_counter()
    run(graph, progress=True, plot=False)  # what `%%fragment NAME --run` does outside a notebook
    seconds = time.perf_counter() - start
    return _measure(ns, start, seconds)


def _measure(ns: dict, start: float, seconds: float) -> dict:
    env = ns["env"]
    episodes = sorted(env.episodes, key=lambda e: (e.step, e.env_id))
    i = first_solved([e.ret for e in episodes])
    return {
        "seconds": seconds,
        "steps_per_s": env.env_steps / seconds,
        "solve_steps": None if i is None else episodes[i].step * env.num_envs,
        "solve_s": None if i is None else episodes[i].time - start,
        "weights": torch.cat([p.flatten() for p in ns["learner"].policy.parameters()]),
    }


def _median(measurements: list[dict]) -> dict:
    """The run with the median total time (its solve time and throughput come with it)."""
    return sorted(measurements, key=lambda m: m["seconds"])[len(measurements) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode per seed, alternating order; the median counts")
    args = parser.parse_args()
    cell = load_canonical(NOTEBOOK)
    torch.set_num_threads(1)  # two modes measured alike, no thread contention noise

    rows, ok = [], True
    for seed in args.seeds:
        runs = {"plain": [], "fragment": []}
        for r in range(args.repeats):
            order = ("plain", "fragment") if r % 2 == 0 else ("fragment", "plain")
            for mode in order:
                runs[mode].append((plain if mode == "plain" else fragment)(cell, seed))
        p, f = _median(runs["plain"]), _median(runs["fragment"])
        same = torch.equal(p["weights"], f["weights"]) and p["solve_steps"] == f["solve_steps"]
        solved = p["solve_steps"] is not None and p["solve_steps"] <= 150_000
        ok &= same and solved
        rows.append((seed, p, f, same))

    print(f"\n{'seed':>4} {'solved at':>10} {'plain solve s':>14} {'frag solve s':>13} {'ratio':>6} "
          f"{'plain steps/s':>14} {'frag steps/s':>13} {'ratio':>6}  same result")
    for seed, p, f, same in rows:
        solve_ratio = f["solve_s"] / p["solve_s"] if p["solve_s"] else float("nan")
        print(f"{seed:>4} {str(p['solve_steps']):>10} {p['solve_s'] or float('nan'):>14.2f} {f['solve_s'] or float('nan'):>13.2f} "
              f"{solve_ratio:>6.3f} {p['steps_per_s']:>14,.0f} {f['steps_per_s']:>13,.0f} {f['steps_per_s'] / p['steps_per_s']:>6.3f}  {same}")
    time_ratio = statistics.mean(f["seconds"] / p["seconds"] for _, p, f, _ in rows)
    solve_ratio = statistics.mean(f["solve_s"] / p["solve_s"] for _, p, f, _ in rows if p["solve_s"])
    print(f"\nmean ratio fragment/plain: time-to-solve {solve_ratio:.3f}, total time {time_ratio:.3f} (target <= 1.02)")
    print("every seed solved within 150k steps with identical results" if ok else "FAILED: a seed did not solve or results differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
