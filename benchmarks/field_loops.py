"""What `%%fragment` costs a loop as the field writes it: CleanRL-style PPO on CartPole (Gymnasium vector
env, an `nn.Module` agent, `torch.optim.Adam`, preallocated storage, GAE and minibatch epochs in the
cell) as plain Python against the same cell under fragnb's `single`, interleaved, in one process;
then under `coarse`, `fine` and `async` with 2 replicas on a warm local cluster (the workers started before the
clock), each run's wall time split into the safety net, the loop and the rest, with each group's idle
share (its time waiting for another group).

    .venv/bin/python benchmarks/field_loops.py [--steps 40960] [--repeat 5] [--distributed-repeat 3]

The loop is tests/corpus/field.py's `cleanrl_ppo` at CleanRL's own sizes (4 environments, 128
steps per rollout, 4 epochs of 4 minibatches). Each repeat runs both ways, alternating which goes
first; the ratio is of the medians. One torch thread, as fragnb runs by default.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fragnb  # noqa: E402
from corpus.field import FIELD_BY_NAME  # noqa: E402

#: each distributed run's policy and its loop time's target over plain Python's (issue 53: fine <= 2x). async's
#: actors step ahead of the learner by its staleness bound, so its loop time covers more steps than plain Python's.
ROWS = (("coarse", 1.3), ("fine", 2.0), ("async", None))


def setup(steps: int) -> tuple[str, str]:
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    sized = loop.setup.replace("total_timesteps: int = 192", f"total_timesteps: int = {steps}")
    sized = sized.replace("num_steps: int = 16", "num_steps: int = 128")
    return sized, loop.cell


def plain(setup_src: str, cell: str) -> float:
    ns: dict = {}
    exec(compile(setup_src, "<setup>", "exec"), ns)
    start = time.perf_counter()
    exec(compile(cell, "<cell>", "exec"), ns)
    return time.perf_counter() - start


def single(setup_src: str, cell: str) -> float:
    ns: dict = {}
    exec(compile(setup_src, "<setup>", "exec"), ns)
    graph = fragnb.capture(cell, ns, name="cleanrl_ppo")  # capture is part of what the user waits for
    start = time.perf_counter()
    fragnb.run(graph, "single", progress=False, plot=False)
    return time.perf_counter() - start


def distributed(setup_src: str, cell: str, policy: str) -> tuple[float, float, float, dict]:
    """The run's wall seconds, its safety net's, its loop's, and each group's idle share."""
    ns: dict = {}
    exec(compile(setup_src, "<setup>", "exec"), ns)
    graph = fragnb.capture(cell, ns, name="cleanrl_ppo")
    start = time.perf_counter()
    result = fragnb.run(graph, policy, actors=2, progress=False, plot=False)
    return time.perf_counter() - start, result.check_seconds, result.seconds, result.idle()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40960, help="environment steps per run")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--distributed-repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    setup_src, cell = setup(args.steps)
    ns = _namespace(setup_src)
    start = time.perf_counter()
    fragnb.capture(cell, ns, name="cleanrl_ppo")
    capture_s = time.perf_counter() - start
    times: dict[str, list[float]] = {"plain Python": [], "fragnb single": []}
    for i in range(args.repeat):
        order = [("plain Python", plain), ("fragnb single", single)]
        for name, fn in order if i % 2 == 0 else order[::-1]:
            times[name].append(fn(setup_src, cell))
    base = statistics.median(times["plain Python"])
    print(
        f"CleanRL-style PPO, CartPole-v1, {args.steps} env steps, median of {args.repeat} (capture: {capture_s * 1000:.0f} ms)"
    )
    print(f"{'run':<15} {'seconds':>8} {'steps/s':>9} {'vs plain':>9}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<15} {t:>8.2f} {args.steps / t:>9.0f} {t / base:>8.3f}x")
    if args.distributed_repeat:
        small = setup(4 * 128 * 2)[0]
        for policy, _ in ROWS:
            distributed(small, cell, policy)  # starts the workers, off the clock
        print(
            f"{'run (2 replicas)':<16} {'wall s':>7} {'loop s':>7} {'loop vs plain':>14} {'target':>7} "
            f"{'safety net s':>13} {'rest s':>7}  idle"
        )
        for policy, target in ROWS:
            runs = [distributed(setup_src, cell, policy) for _ in range(args.distributed_repeat)]
            t, net, loop = (statistics.median(r[k] for r in runs) for k in range(3))
            idle = ", ".join(f"{g} {100 * statistics.median(r[3][g] for r in runs):.0f}%" for g in sorted(runs[0][3]))
            print(
                f"{policy:<16} {t:>7.2f} {loop:>7.2f} {loop / base:>13.2f}x {'<=' + str(target) + 'x' if target else '':>7} "
                f"{net:>13.2f} {t - net - loop:>7.2f}  {idle}"
            )
        print("(safety net target <= 1.5 s; rest: the cluster's call, shipping, starting the replicas, merging)")
        fragnb.shutdown()
    return 0


def _namespace(setup_src: str) -> dict:
    ns: dict = {}
    exec(compile(setup_src, "<setup>", "exec"), ns)
    return ns


if __name__ == "__main__":
    sys.exit(main())
