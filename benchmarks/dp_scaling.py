"""Distribution policies side by side: scaling of `coarse` and per-iteration overhead of each DP.

1. Scaling: env steps/s of `coarse` with 1 vs 2 actor workers, on Gymnasium's Acrobot-v1 through
   the adapter (each step is real Python/numpy work: RK4 integration), running notebook 01's loop
   unchanged.
2. Overhead: seconds per iteration of each DP vs `single` on notebook 01's CartPole setup, where a
   step costs microseconds, so the ratio is what distribution itself costs.

    .venv/bin/python benchmarks/dp_scaling.py [--iterations 6]
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
        "config": config, "env": env, "policy": policy, "iterations": iterations,
        "actor": PPOActor(policy, config.num_envs, seed=0),
        "buffer": RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape),
        "learner": PPOLearner(policy, config, seed=0),
    }


def measure(cell, make_ns, policy: str, iterations: int, **params) -> float:
    """Seconds per iteration in steady state (median over iterations after the first)."""
    ns = make_ns(iterations + 1)
    return run(capture(cell.body, ns, name="ppo"), policy, progress=False, plot=False, **params).seconds_per_iteration


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
    single = measure(cell, acrobot_namespace, "single", args.iterations)
    one = measure(cell, acrobot_namespace, "coarse", args.iterations, actors=1)
    two = measure(cell, acrobot_namespace, "coarse", args.iterations, actors=2)
    print(f"   single          {steps / single:>9,.0f} env steps/s")
    print(f"   coarse actors=1 {steps / one:>9,.0f} env steps/s")
    print(f"   coarse actors=2 {steps / two:>9,.0f} env steps/s   ratio 2 vs 1 actors: {one / two:.2f}x")

    print("\n2. seconds per iteration on CartPole (notebook 01's PPOConfig: 32 envs x 32 steps), ratio to single")
    base = measure(cell, cartpole, "single", args.iterations)
    print(f"   {'single':<14}{base:>8.3f} s   1.00")
    for policy, params in [("coarse", {"actors": 2}), ("fine", {"actors": 2}), ("multi_learner", {"learners": 2})]:
        sec = measure(cell, cartpole, policy, args.iterations, **params)
        print(f"   {policy:<14}{sec:>8.3f} s   {sec / base:.2f}")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
