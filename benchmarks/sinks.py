"""What logging costs a distributed run, side by side: CleanRL-style PPO on CartPole at CleanRL's sizes
(4 environments, 128 steps per rollout) under `coarse` x2, logging as CleanRL does (every finished
episode's return and three losses per iteration to TensorBoard's real `SummaryWriter`, made by the
notebook: docs/guide/logging.md) against the same loop logging to a list (no sink: the values travel as a
variable), alternated, on a warm local cluster. Printed: each run's loop seconds; the median of each pair's
ratio against its target (logging to TensorBoard at most 5 % slower); and, as the pairs' spread on a 2-core
machine is as large as that target, the seconds spent in logging itself, timed where they are spent (the
replicas keeping their calls, on the workers; the notebook receiving and making them) as a share of the
loop's seconds, against the same target.

    .venv/bin/python benchmarks/sinks.py [--steps 40960] [--repeat 3]

The loop is tests/corpus/field.py's `cleanrl_ppo` (its `writer` a list there), its `writer.append((tag,
value, step))` written as `writer.add_scalar(tag, value, step)` for the logged runs.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
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


def _timing(cls, names, spent) -> None:
    """Time ``cls``'s methods ``names`` into ``spent``: the seconds logging takes where it is spent."""
    for name in names:
        method = getattr(cls, name)

        def timed_method(*args, _method=method, _name=name, **kwargs):
            begin = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - begin

        setattr(cls, name, timed_method)


def _time_replicas() -> None:
    """On a worker: time each call a replica's sink keeps (`Held._effect`'s call)."""
    from fragnb import sinks

    sinks.SPENT = collections.Counter()
    effect = sinks.Held._effect

    def timed_effect(self, method):
        call = effect(self, method)

        def timed_call(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                sinks.SPENT["keep"] += time.perf_counter() - begin

        return timed_call

    sinks.Held._effect = timed_effect


def _replicas_spent() -> float:
    from fragnb import sinks

    spent = sinks.SPENT["keep"]
    sinks.SPENT.clear()
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40960)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from fragnb import sinks
    from fragnb.runtime.cluster import clusters

    timed(2048, True)  # the cluster's workers start before the clock
    client = clusters._EMBEDDED["local"][1]
    client.run(_time_replicas)
    notebook: collections.Counter = collections.Counter()
    _timing(sinks.Logs, ("add", "upto", "end"), notebook)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    shares = []
    for i in range(args.repeat):
        for logged in (False, True) if i % 2 == 0 else (True, False):  # alternate which goes first
            notebook.clear()
            client.run(_replicas_spent)
            s, calls = timed(args.steps, logged)
            seconds[logged].append(s)
            line = f"repeat {i}: {'TensorBoard' if logged else 'a list':<12} {s:7.2f} s"
            if logged:
                # the workers run side by side: the busiest one's keeping is what the loop waits for
                kept = max(client.run(_replicas_spent).values())
                made = sum(notebook.values())
                shares.append((kept + made) / s)
                line += f" (logging: {kept:.3f} s keeping on a worker, {made:.3f} s in the notebook)"
            print(line + (f" ({calls} values)" if calls else ""))
    ratios = [t / f for t, f in zip(seconds[True], seconds[False])]
    ratio = statistics.median(ratios)
    print(
        f"logged to TensorBoard / to a list, coarse x2, median of {len(ratios)} pairs: {ratio:.3f}x "
        f"(pairs {min(ratios):.3f}-{max(ratios):.3f}x; target <= {TARGET:.2f}x: {'met' if ratio <= TARGET else 'missed'})"
    )
    share = statistics.median(shares)
    print(
        f"time spent logging / the loop's time: {share:.2%} "
        f"(target <= {TARGET - 1:.0%}: {'met' if share <= TARGET - 1 else 'missed'})"
    )
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
