"""What checkpoints cost a synchronous run, side by side: the same loop under `coarse` (2 actors)
with no checkpoints, one after every iteration, and one every 10 (fragnb's default).

Two loops: notebook 01's PPO (small state: two networks, an optimiser, a rollout buffer) and
notebook 08's DQN (a replay buffer that outlives iterations: the checkpoint grows with it).

    .venv/bin/python benchmarks/checkpoints.py [--iterations 30]

Each figure is the best of two runs (noise on a shared 2-core machine only adds time). The
overhead is the run's seconds over the run without checkpoints, minus 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algorithms import dqn_cartpole, ppo_cartpole  # noqa: E402

import fragnb  # noqa: E402
from fragnb import capture, run  # noqa: E402

EVERY = (0, 1, 10)


def measure(loop, iterations: int, every: int, repeat: int = 2):
    """The fastest of ``repeat`` runs of ``iterations`` iterations under coarse."""
    results = []
    for _ in range(repeat):
        cell, ns = loop(0, 1)
        ns["iterations"] = iterations
        results.append(
            run(capture(cell, ns, name="loop"), "coarse", actors=2, progress=False, plot=False, checkpoint_every=every)
        )
    return min(results, key=lambda r: r.seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    print(
        f"{'loop':<14} {'every':>5} {'seconds':>8} {'s/iter':>7} {'ckpt s':>7} {'per ckpt':>9} {'MB each':>8} {'overhead':>9}"
    )
    for label, loop in (("PPO CartPole", ppo_cartpole), ("DQN CartPole", dqn_cartpole)):
        base = None
        for every in EVERY:
            r = measure(loop, args.iterations, every)
            base = base or r.seconds
            count = args.iterations // every if every else 0
            per = r.checkpoint_seconds / count if count else 0.0
            print(
                f"{label:<14} {every or '-':>5} {r.seconds:>8.2f} {r.seconds / r.iterations:>7.3f} {r.checkpoint_seconds:>7.3f} "
                f"{per * 1000:>7.1f}ms {r.checkpoint_bytes / 1e6:>8.2f} {r.seconds / base - 1:>+9.1%}"
            )
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
