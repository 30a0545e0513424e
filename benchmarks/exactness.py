"""What exactness costs: seconds per iteration of `coarse` x4 and x8 (and `fine` x4) on notebook 01's loop,
with the replicas' row-wise ops on the whole batch's shape (fragnb/rows.py, every exact run) and without
(the shard's own shape: what fragnb ran before, which rounds differently at some replica counts), side by
side in one run on one warm cluster, and how far each ends from `single`'s weights.

    .venv/bin/python benchmarks/exactness.py [--iterations 30] [--repeat 3]

Target (issue 66): exactness at most 10 % slower per iteration (ratio <= 1.10). Each figure is the
median over steady iterations of the best of ``--repeat`` runs, the two variants alternating, so that
load on the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

import fragnb
from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import CartPole
from fragnb.notebook import load_canonical
from fragnb.plan import script as plan_script

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
TARGET = 1.10


def setup(iterations: int, seed: int = 0) -> dict:
    """Notebook 01's setup cell, at its own sizes (32 environments x 32 steps)."""
    torch.manual_seed(seed)
    config = PPOConfig()
    env = CartPole(num_envs=config.num_envs, seed=seed)
    policy = ActorCritic(obs_dim=4, num_actions=2)
    return {
        "config": config,
        "env": env,
        "policy": policy,
        "actor": PPOActor(policy, num_envs=config.num_envs, seed=seed),
        "buffer": RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma, config.gae_lambda),
        "learner": PPOLearner(policy, config, seed=seed),
        "iterations": iterations,
    }


class _ShardShapes:
    """Plans every run as fragnb did before issue 66: each replica computes on its shard's own shape."""

    def __enter__(self):
        self.of = plan_script.Script.of.__func__

        def of(cls, *args, **kwargs):
            return dataclasses.replace(self.of(cls, *args, **kwargs), whole_rows=False)

        plan_script.Script.of = classmethod(of)

    def __exit__(self, *exc):
        plan_script.Script.of = classmethod(self.of)


def one(body: str, iterations: int, policy: str, actors: int, whole: bool):
    ns = setup(iterations)
    graph = fragnb.capture(body, ns, name="ppo")
    if whole:
        result = fragnb.run(graph, policy, actors=actors, progress=False, plot=False)
    else:
        with _ShardShapes():
            result = fragnb.run(graph, policy, actors=actors, progress=False, plot=False)
    return result, ns["policy"].state_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    body = load_canonical(NOTEBOOK).body
    ns = setup(args.iterations)
    fragnb.run(fragnb.capture(body, ns, name="ppo"), progress=False, plot=False)
    plain = ns["policy"].state_dict()
    print(f"notebook 01's loop, {args.iterations} iterations of 32 environments x 32 steps; best of {args.repeat}")
    print(f"{'run':<12}{'shard shape s/it':>18}{'whole shape s/it':>18}{'ratio':>8}{'target':>8}   max |w - single|")
    worst = 0.0
    for policy, actors in (("coarse", 4), ("coarse", 8), ("fine", 4)):
        best = {True: None, False: None}
        for _ in range(args.repeat):
            for whole in (False, True):
                result, weights = one(body, args.iterations, policy, actors, whole)
                diff = max((weights[k] - plain[k]).abs().max().item() for k in plain)
                if best[whole] is None or result.seconds_per_iteration < best[whole][0]:
                    best[whole] = (result.seconds_per_iteration, diff, result.guarantee)
        ratio = best[True][0] / best[False][0]
        worst = max(worst, ratio)
        print(
            f"{policy + ' x' + str(actors):<12}{best[False][0]:>18.4f}{best[True][0]:>18.4f}{ratio:>8.2f}"
            f"{'<=' + format(TARGET, '.2f'):>8}   {best[False][1]:.2g} ({best[False][2]}) -> "
            f"{best[True][1]:.2g} ({best[True][2]})"
        )
    print(f"worst ratio {worst:.2f} (target <= {TARGET:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
