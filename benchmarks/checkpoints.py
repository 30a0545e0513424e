"""What checkpoints cost a synchronous run, side by side: the same loop under `coarse` (2 actors)
with no checkpoints, one after every iteration, one every 10 (fragnb's default), and one every 10 also
written to disk (`checkpoint_dir=`: a run that outlives its kernel), whose time beside the run that keeps
them in memory alone is printed against its target (at most 5 % more).

Two loops: notebook 01's PPO (small state: two networks, an optimiser, a rollout buffer) and
notebook 08's DQN (a replay buffer that outlives iterations: the checkpoint grows with it).

    .venv/bin/python benchmarks/checkpoints.py [--iterations 30]

Each figure is the best of two runs (noise on a shared 2-core machine only adds time). The
overhead is the run's seconds over the run without checkpoints, minus 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from algorithms import dqn_cartpole, ppo_cartpole  # noqa: E402

import fragnb  # noqa: E402
from fragnb import capture, run  # noqa: E402

#: (every, on disk): none, every iteration, fragnb's default, and the default written to a directory too
SETTINGS = ((0, False), (1, False), (10, False), (10, True))
#: the most a run that writes its checkpoints to disk may take beside one that keeps them in memory
DISK_TARGET = 1.05


def measure(loop, iterations: int, every: int, disk: bool, repeat: int = 2):
    """The fastest of ``repeat`` runs of ``iterations`` iterations under coarse."""
    results = []
    for _ in range(repeat):
        cell, ns = loop(0, 1)
        ns["iterations"] = iterations
        with tempfile.TemporaryDirectory() as where:
            options = dict(checkpoint_every=every, checkpoint_dir=where if disk else None)
            results.append(
                run(capture(cell, ns, name="loop"), "coarse", actors=2, progress=False, plot=False, **options)
            )
    return min(results, key=lambda r: r.seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    print(
        f"{'loop':<14} {'every':>10} {'seconds':>8} {'s/iter':>7} {'ckpt s':>7} {'per ckpt':>9} {'MB each':>8} {'overhead':>9}"
    )
    for label, loop in (("PPO CartPole", ppo_cartpole), ("DQN CartPole", dqn_cartpole)):
        base = None
        seconds = {}
        for every, disk in SETTINGS:
            r = measure(loop, args.iterations, every, disk)
            base = base or r.seconds
            seconds[every, disk] = r.seconds
            count = args.iterations // every if every else 0
            per = r.checkpoint_seconds / count if count else 0.0
            print(
                f"{label:<14} {every or '-':>5}{'+disk' if disk else '':<5} {r.seconds:>8.2f} {r.seconds / r.iterations:>7.3f} "
                f"{r.checkpoint_seconds:>7.3f} {per * 1000:>7.1f}ms {r.checkpoint_bytes / 1e6:>8.2f} {r.seconds / base - 1:>+9.1%}"
            )
        ratio = seconds[10, True] / seconds[10, False]
        verdict = "met" if ratio <= DISK_TARGET else "missed"
        print(f"{label:<14} on disk / in memory, every 10: {ratio:.2f}x (target <= {DISK_TARGET:.2f}x: {verdict})")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
