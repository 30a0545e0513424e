"""Where distribution pays on a loop as the field writes it: CleanRL-style continuous PPO on MuJoCo's
HalfCheetah-v5 (a SyncVectorEnv of wrapped environments, the `Agent` with a state-independent log std,
GAE and 10 epochs of minibatches in the cell), plain Python against `coarse` and `async` with 2 actors.

Each distributed policy's env steps/s (loop seconds, the workers started before the clock) is printed
over plain Python's, beside Amdahl's bound from fragnb `single`'s own split of the same loop (the
fragments the policy replicates over the actors, and the rest) and the issue's target. `coarse` draws
each actor's actions from its own generator: an announced statistical run (the safety net says so
and it runs). Where fragnb refuses a policy for this loop, the row prints the refusal's first line.

    .venv/bin/python benchmarks/field_mujoco.py [--iterations 3] [--repeat 3]

Sizes: CleanRL's batch (2,048 steps, 32 minibatches, 10 epochs) over 4 environments of 512 steps,
so that 2 actors can share them (CleanRL's MuJoCo default is 1 environment of 2,048 steps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fragnb  # noqa: E402
from corpus.field import FIELD_BY_NAME  # noqa: E402

NUM_ENVS, NUM_STEPS = 4, 512
TARGETS = {"coarse": 1.15, "async": 1.3}  # issue 53


def setup(iterations: int) -> tuple[str, str]:
    loop = FIELD_BY_NAME["cleanrl_ppo_continuous"]
    sized = (
        loop.setup.replace("total_timesteps: int = 256", f"total_timesteps: int = {NUM_ENVS * NUM_STEPS * iterations}")
        .replace("num_steps: int = 32", f"num_steps: int = {NUM_STEPS}")
        .replace("num_minibatches: int = 4", "num_minibatches: int = 32")
        .replace("update_epochs: int = 2", "update_epochs: int = 10")
    )
    return sized, loop.cell


def namespace(setup_src: str) -> dict:
    ns: dict = {}
    exec(compile(setup_src, "<setup>", "exec"), ns)
    return ns


def plain(setup_src: str, cell: str) -> float:
    ns = namespace(setup_src)
    start = time.perf_counter()
    exec(compile(cell, "<cell>", "exec"), ns)
    return time.perf_counter() - start


def bound(setup_src: str, cell: str, policy: str, actors: int) -> float:
    """Amdahl's bound for ``policy`` with ``actors``: `single`'s fragment seconds, those the policy
    places in its replicated group divided among the actors."""
    ns = namespace(setup_src)
    graph = fragnb.capture(cell, ns, name="cheetah")
    seconds = fragnb.run(graph, "single", progress=False, plot=False).fragment_seconds
    placement = graph.place("coarse", actors=actors)
    shared = sum(t for f, t in seconds.items() if f in placement.fragments and placement.fragments[f].replicas > 1)
    total = sum(seconds.values())
    if policy == "async":  # the learner also overlaps the actors: the longer side bounds it
        return total / max(total - shared, shared / actors)
    return total / (total - shared + shared / actors)


def distributed(setup_src: str, cell: str, policy: str, actors: int) -> tuple[float, dict]:
    """The loop's seconds under ``policy``, and each group's idle share."""
    ns = namespace(setup_src)
    result = fragnb.run(fragnb.capture(cell, ns, name="cheetah"), policy, actors=actors, progress=False, plot=False)
    return result.seconds, result.idle()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*settotalmass.*")
    torch.set_num_threads(1)
    setup_src, cell = setup(args.iterations)
    steps = NUM_ENVS * NUM_STEPS * args.iterations
    base = statistics.median(plain(setup_src, cell) for _ in range(args.repeat))
    print(f"CleanRL-style PPO, HalfCheetah-v5, {steps} env steps, median of {args.repeat}")
    print(f"{'run':<22} {'loop s':>7} {'steps/s':>8} {'vs plain':>9} {'Amdahl':>7} {'target':>7}  idle")
    print(f"{'plain Python':<22} {base:>7.2f} {steps / base:>8.0f} {1:>8.2f}x")
    small = setup(1)[0]
    for policy, target in TARGETS.items():
        name = f"{policy} x2"
        try:
            distributed(small, cell, policy, 2)  # workers started and warm, off the clock
        except fragnb.FragmentError as e:
            print(f"{name:<22} refused: {str(e).splitlines()[0][:160]}")
            continue
        runs = [distributed(setup_src, cell, policy, 2) for _ in range(args.repeat)]
        t = statistics.median(r[0] for r in runs)
        idle = ", ".join(f"{g} {100 * statistics.median(r[1][g] for r in runs):.0f}%" for g in sorted(runs[0][1]))
        limit = bound(setup_src, cell, policy, 2)
        print(
            f"{name:<22} {t:>7.2f} {steps / t:>8.0f} {base / t:>8.2f}x {limit:>6.2f}x {'>=' + str(target) + 'x':>7}  {idle}"
        )
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
