"""What logging costs a distributed run, side by side: CleanRL-style PPO on CartPole at CleanRL's sizes
(4 environments, 128 steps per rollout) under `coarse` x2, logging as CleanRL does (every finished
episode's return and three losses per iteration to TensorBoard's real `SummaryWriter`, made by the
notebook: docs/guide/logging.md) against the same loop logging to a list (no sink: the values travel as a
variable), alternated, on a warm local cluster. Printed: each run's loop seconds, and the ratio of the
medians against its target (logging to TensorBoard at most 5 % slower).

    .venv/bin/python benchmarks/sinks.py [--steps 40960] [--repeat 3]

The loop is tests/corpus/field.py's `cleanrl_ppo` (its `writer` a list there), its `writer.append((tag,
value, step))` written as `writer.add_scalar(tag, value, step)` for the logged runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fragnb  # noqa: E402
from corpus.field import FIELD_BY_NAME  # noqa: E402

#: the most a run logging to TensorBoard may take beside the same run logging to a list
TARGET = 1.05


def loop(steps: int, logdir: str | None) -> tuple[str, str]:
    """The setup and cell at CleanRL's sizes; with ``logdir``, logging to a SummaryWriter there."""
    base = FIELD_BY_NAME["cleanrl_ppo"]
    setup = base.setup.replace("total_timesteps: int = 192", f"total_timesteps: int = {steps}")
    setup = setup.replace("num_steps: int = 16", "num_steps: int = 128")
    cell = base.cell
    if logdir is not None:
        setup = setup.replace(
            "writer = []  # stands in for TensorBoard's SummaryWriter: (tag, value, step)",
            f"from torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter({logdir!r})",
        )
        cell = cell.replace("writer.append((", "writer.add_scalar(*(")
    return setup, cell


def timed(steps: int, logged: bool) -> tuple[float, int]:
    """The seconds of one coarse x2 run (from its replicas' start: the safety net is before), and the values it kept."""
    with tempfile.TemporaryDirectory() as where:
        setup, cell = loop(steps, where if logged else None)
        ns: dict = {}
        exec(compile(setup, "<setup>", "exec"), ns)
        result = fragnb.run(
            fragnb.capture(cell, ns, name="cleanrl_ppo"), "coarse", actors=2, progress=False, plot=False
        )
        calls = 0
        if logged:
            ns["writer"].close()
        else:
            calls = len(ns["writer"])
        return result.seconds, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40960)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    timed(2048, True)  # the cluster's workers start before the clock
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.repeat):
        for logged in (False, True) if i % 2 == 0 else (True, False):  # alternate which goes first
            s, calls = timed(args.steps, logged)
            seconds[logged].append(s)
            print(
                f"repeat {i}: {'TensorBoard' if logged else 'a list':<12} {s:7.2f} s"
                + (f" ({calls} values)" if calls else "")
            )
    ratio = statistics.median(seconds[True]) / statistics.median(seconds[False])
    verdict = "met" if ratio <= TARGET else "missed"
    print(f"logged to TensorBoard / to a list, coarse x2: {ratio:.3f}x (target <= {TARGET:.2f}x: {verdict})")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
