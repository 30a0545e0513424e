"""RL for language models: GRPO on a tiny transformer, colocated, split and asynchronous, in one run.

The loop is ``tests/corpus/llm.py``'s (notebook 11's): 2-digit addition with partial credit, ``--prompts``
prompts x 8 completions of 4 tokens an iteration, after a supervised warm-up. Placements, with the
field's names: ``single`` is verl's colocated engine (one process alternates generation and training);
``coarse`` splits rollout workers from the trainer (verl's split pools, OpenRLHF); ``async`` with
``max_staleness`` 0, 1, 4 is AReaL's bound on how many versions old a rollout's weights may be.

Each placement runs each seed once (workers started and code imported by a run before), and prints the
median over seeds of: seconds per iteration, tokens sampled per second (every prompt's 4 positions), the
rollout side's and the trainer's idle ratios (verl's ``rollouter/idle_ratio`` and
``trainer/idle_ratio``), mean staleness, and the seconds until the mean reward of 10 iterations first
reaches ``--level``; beside them the prediction from one profile under ``single`` on the ``here``
preset (tokens/s and idle ratios) and its error. The target is a prediction within 25 %.

    .venv/bin/python benchmarks/llm.py [--iterations 40] [--seeds 0 1 2] [--prompts 64] [--level 0.68]
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
from fragnb.predict.model import predict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from corpus.llm import grpo  # noqa: E402

MAX_NEW_TOKENS = 4
PLACEMENTS = [
    ("colocated (single)", "single", {}),
    ("split 1+1 (coarse)", "coarse", {"actors": 1}),
    ("split 2+1 (coarse)", "coarse", {"actors": 2}),
    ("async, bound 0", "async", {"actors": 2, "max_staleness": 0}),
    ("async, bound 1", "async", {"actors": 2, "max_staleness": 1}),
    ("async, bound 4", "async", {"actors": 2, "max_staleness": 4}),
]


def graph_for(seed: int, iterations: int, prompts: int):
    loop = grpo(prompts=prompts, group=8, iterations=iterations, warm_up=200, seed=seed)
    return capture(loop.cell, loop.namespace(), name="grpo")


def time_to(level: float, rewards: list[float], seconds_per_iteration: float, window: int = 10) -> float:
    """Seconds of loop until the mean of ``window`` iterations' rewards first reaches ``level`` (nan: never),
    at the run's mean seconds per iteration."""
    for i in range(window - 1, len(rewards)):
        if sum(rewards[i + 1 - window : i + 1]) / window >= level:
            return (i + 1) * seconds_per_iteration
    return float("nan")


def measure(policy: str, params: dict, seed: int, iterations: int, prompts: int, level: float) -> dict:
    graph = graph_for(seed, iterations, prompts)
    kw = {} if policy == "single" else {"check": False}
    r = run(graph, policy, progress=False, plot=False, **kw, **params)
    rewards = graph.namespace["rewards"]
    idle = r.idle()
    ages = [a for per in r.staleness for a in per]
    return {
        "s/it": r.seconds / r.iterations,
        "tokens/s": r.env_steps * MAX_NEW_TOKENS / r.seconds,
        "rollout idle": idle.get("actors", idle.get("main", 0.0)),
        "trainer idle": idle.get("learner", idle.get("main", 0.0)),
        "staleness": sum(ages) / len(ages) if ages else 0.0,
        "to level": time_to(level, rewards, r.seconds / r.iterations),
        "reward": sum(rewards[-10:]) / 10,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--prompts", type=int, default=64, help="prompts an iteration (8 completions each)")
    parser.add_argument(
        "--level", type=float, default=0.68, help="mean reward of 10 iterations to time (about 0.62 after the warm-up)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    warm = graph_for(0, 2, args.prompts)
    run(warm, "coarse", actors=2, progress=False, plot=False, check=False)  # workers up, code imported
    profile = fragnb.profile(graph_for(0, 6, args.prompts))
    print(
        f"GRPO, {args.prompts} prompts x 8 completions x {MAX_NEW_TOKENS} tokens an iteration, {args.iterations} "
        f"iterations, seeds {args.seeds}; profile under single: {profile.iteration_seconds * 1e3:.0f} ms an iteration"
    )
    print(
        f"{'placement':<20} {'s/it':>6} {'tokens/s':>9} {'predicted':>9} {'error':>6} "
        f"{'rollout idle':>12} {'predicted':>9} {'trainer idle':>12} {'predicted':>9} {'staleness':>9} "
        f"{'s to ' + str(args.level):>9} {'reward':>7}"
    )
    errors = []
    for name, policy, params in PLACEMENTS:
        rows = [measure(policy, params, s, args.iterations, args.prompts, args.level) for s in args.seeds]
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        guess = predict(graph_for(0, args.iterations, args.prompts).place(policy, **params), profile, "here")
        tokens = guess.env_steps_per_s * MAX_NEW_TOKENS
        error = tokens / m["tokens/s"] - 1
        errors.append(error)
        busy = guess.busy
        rollout = 1 - busy.get("actors", busy.get("main", 1.0))
        trainer = 1 - busy.get("learner", busy.get("main", 1.0))
        print(
            f"{name:<20} {m['s/it']:>6.3f} {m['tokens/s']:>9,.0f} {tokens:>9,.0f} {error:>+6.0%} "
            f"{m['rollout idle']:>12.0%} {rollout:>9.0%} {m['trainer idle']:>12.0%} {trainer:>9.0%} "
            f"{m['staleness']:>9.2f} {m['to level']:>9.1f} {m['reward']:>7.3f}",
            flush=True,
        )
    within = sum(abs(e) <= 0.25 for e in errors)
    print(f"\ntokens/s predicted within 25 %: {within} of {len(errors)} (target: all)")
    print(f"took {time.perf_counter() - start:.0f} s")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
