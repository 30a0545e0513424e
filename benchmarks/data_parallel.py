"""What `data_parallel` gives an off-policy loop as the field writes it: env steps/s of the PyTorch DQN
tutorial (one environment, an episode per iteration) and of CleanRL's dqn.py (a vector env of one
environment, one env step per iteration, as its defaults make it), and of CleanRL's ppo.py at its sizes
(4 environments, 128 steps a rollout) as plain Python against
`data_parallel` with 2 replicas, each stepping its own environment, in one run.

    .venv/bin/python benchmarks/data_parallel.py [--episodes 60] [--steps 3000] [--repeat 3]

The loops are tests/corpus/field.py's `dqn_tutorial`, `cleanrl_dqn` and `cleanrl_ppo`, longer. The cluster is warm
(its workers started before the clock); env steps count every replica's. Medians of ``--repeat``
runs, the two ways alternating. One torch thread, as fragnb runs by default. The ideal on 2 cores is
2x: two replicas each stepping as fast as plain Python, with nothing spent on averaging gradients.
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

#: What issue "Distribution that pays, third step" asks of each loop, env steps/s over plain Python's.
TARGETS = {"DQN tutorial": 1.0, "CleanRL dqn.py (num_envs=1)": 0.6, "CleanRL ppo.py (4 envs x 128)": 1.3}


def loops(episodes: int, steps: int) -> dict[str, tuple[str, str, callable]]:
    """name -> (setup, cell, env steps a namespace's run took)."""
    tutorial = FIELD_BY_NAME["dqn_tutorial"]
    cleanrl = FIELD_BY_NAME["cleanrl_dqn"]
    ppo = FIELD_BY_NAME["cleanrl_ppo"]
    ppo_setup = ppo.setup.replace("total_timesteps: int = 192", f"total_timesteps: int = {steps * 4}").replace(
        "num_steps: int = 16", "num_steps: int = 128"
    )
    cleanrl_setup = (
        cleanrl.setup.replace("num_envs: int = 4", "num_envs: int = 1")
        .replace("total_timesteps: int = 40", f"total_timesteps: int = {steps}")
        .replace("buffer_size: int = 64", "buffer_size: int = 10000")
        .replace("batch_size: int = 4", "batch_size: int = 32")
        .replace("learning_starts: int = 8", "learning_starts: int = 100")
        .replace("train_frequency: int = 2", "train_frequency: int = 10")
    )
    return {
        "DQN tutorial": (
            tutorial.setup,
            tutorial.cell.replace("for i_episode in range(4):", f"for i_episode in range({episodes}):"),
            lambda values: sum(values["episode_durations"]),
        ),
        "CleanRL dqn.py (num_envs=1)": (cleanrl_setup, cleanrl.cell, lambda values: steps),
        "CleanRL ppo.py (4 envs x 128)": (ppo_setup, ppo.cell, lambda values: values["global_step"]),
    }


def plain(setup: str, cell: str, steps_of) -> tuple[float, int, float]:
    ns: dict = {}
    exec(compile(setup, "<setup>", "exec"), ns)
    start = time.perf_counter()
    exec(compile(cell, "<cell>", "exec"), ns)
    seconds = time.perf_counter() - start
    return seconds, steps_of(ns), seconds


def data_parallel(setup: str, cell: str, steps_of) -> tuple[float, int, float]:
    """Wall seconds (shipping each replica its objects and code included), env steps of every
    replica, and the seconds of the loop alone (RunResult.seconds)."""
    ns: dict = {}
    exec(compile(setup, "<setup>", "exec"), ns)
    graph = fragnb.capture(cell, ns, name="loop")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fragnb.run(graph, "data_parallel", replicas=2, progress=False, plot=False)
    seconds = time.perf_counter() - start
    return seconds, sum(steps_of(values) for values in result.replica_values.values()), result.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    table = loops(args.episodes, args.steps)
    data_parallel(*loops(2, 50)["DQN tutorial"])  # start the workers before the clock
    print(
        f"{'loop':<28} {'plain env steps/s':>17} {'data_parallel x2: wall':>23} {'loop only':>10}  ratio (wall / loop)  target"
    )
    for name, (setup, cell, steps_of) in table.items():
        rates: dict[str, list[tuple[float, float]]] = {"plain": [], "dp": []}
        for r in range(args.repeat):
            order = (("plain", plain), ("dp", data_parallel))
            for key, run in order if r % 2 == 0 else order[::-1]:
                seconds, steps, loop = run(setup, cell, steps_of)
                rates[key].append((steps / seconds, steps / loop))
        p = statistics.median(w for w, _ in rates["plain"])
        wall, loop = (statistics.median(x[i] for x in rates["dp"]) for i in (0, 1))
        print(
            f"{name:<28} {p:>17,.0f} {wall:>23,.0f} {loop:>10,.0f}  {wall / p:>5.2f}x / {loop / p:.2f}x"
            f"      >= {TARGETS[name]:.1f}x (2x ideal on 2 cores)"
        )
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
