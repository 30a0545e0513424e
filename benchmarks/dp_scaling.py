"""Distribution policies side by side: scaling of `coarse` and per-iteration overhead of each DP.

1. Scaling: env steps/s of `coarse` with 1 vs 2 actor workers, on Gymnasium's Acrobot-v1 through
   the adapter (each step is real Python/numpy work: RK4 integration), running notebook 01's loop
   unchanged.
2. Overhead: seconds per iteration of each DP vs `single` on notebook 01's CartPole setup, where a
   step costs microseconds, so the ratio is what distribution itself costs.

    .venv/bin/python benchmarks/dp_scaling.py [--iterations 6]

Each figure is the best of two runs (noise on a shared 2-core machine only adds time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import fragnb
from fragnb import capture, run
from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import GymnasiumEnv
from fragnb.notebook import load_canonical

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"


def acrobot_namespace(iterations: int) -> dict:
    config = PPOConfig(num_envs=32, num_steps=64)
    env = GymnasiumEnv("Acrobot-v1", num_envs=config.num_envs, seed=0)
    policy = ActorCritic(env.obs_shape[0], env.num_actions)
    return {
        "config": config,
        "env": env,
        "policy": policy,
        "iterations": iterations,
        "actor": PPOActor(policy, config.num_envs, seed=0),
        "buffer": RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape),
        "learner": PPOLearner(policy, config, seed=0),
    }


def measure(cell, make_ns, policy: str, iterations: int, repeat: int = 2, **params):
    """The run with the least seconds per iteration in steady state (median over iterations after
    the first) of ``repeat`` runs: this machine's noise only ever adds time."""
    runs = [
        run(capture(cell.body, make_ns(iterations + 1), name="ppo"), policy, progress=False, plot=False, **params)
        for _ in range(repeat)
    ]
    return min(runs, key=lambda r: r.seconds_per_iteration)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    args = parser.parse_args()
    cell = load_canonical(NOTEBOOK)

    def cartpole(n):
        ns = cell.namespace(0)
        ns["iterations"] = n
        return ns

    steps = 32 * 64
    print("1. coarse on Acrobot-v1 (32 envs x 64 steps per iteration)")
    single = measure(cell, acrobot_namespace, "single", args.iterations).seconds_per_iteration
    one = measure(cell, acrobot_namespace, "coarse", args.iterations, actors=1).seconds_per_iteration
    two = measure(cell, acrobot_namespace, "coarse", args.iterations, actors=2).seconds_per_iteration
    print(f"   single          {steps / single:>9,.0f} env steps/s")
    print(f"   coarse actors=1 {steps / one:>9,.0f} env steps/s")
    print(f"   coarse actors=2 {steps / two:>9,.0f} env steps/s   ratio 2 vs 1 actors: {one / two:.2f}x")

    print("\n2. seconds per iteration on CartPole (notebook 01's PPOConfig: 32 envs x 32 steps), ratio to single;")
    print("   channel traffic between replicas, and what distribution adds per environment step")
    base = measure(cell, cartpole, "single", args.iterations).seconds_per_iteration
    print(f"   {'single':<14}{base:>8.3f} s   1.00")
    for policy, params in [("coarse", {"actors": 2}), ("fine", {"actors": 2}), ("multi_learner", {"learners": 2})]:
        r = measure(cell, cartpole, policy, args.iterations, **params)
        sec = r.seconds_per_iteration
        print(
            f"   {policy:<14}{sec:>8.3f} s   {sec / base:.2f}   {r.messages / r.iterations:>5.0f} messages/iteration  "
            f"{r.transfer_bytes / r.seconds / 1e6:>6.2f} MB/s  +{(sec - base) / 32 * 1e3:.2f} ms per step"
        )
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
