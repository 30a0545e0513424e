"""Seeds side by side against one after another: N seeds of notebook 01's loop (to its 150k
environment steps), as plain Python runs them in a shell loop (each seed's setup and loop in this
process, one after another) and as ``fragnb.sweep`` runs them on the cluster's workers, side by side
(one per core); then the same for the CleanRL-style loop of ``tests/corpus/field.py``. Prints both
times, the speed-up beside the target, and whether every seed's final weights are the same both ways.

    .venv/bin/python benchmarks/seeds.py [--seeds 4] [--iterations 146] [--cleanrl-seeds 8]
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time
from pathlib import Path

import torch

import fragnb
from fragnb.notebook import load_canonical

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
#: Target: four seeds on two cores at least 1.7x faster side by side than one after another.
TARGET = 1.7


def setup_source(iterations: int) -> str:
    """Notebook 01's setup, its ``seed = 0`` line left to the sweep, with ``iterations`` set."""
    tree = ast.parse(load_canonical(NOTEBOOK).setup)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "seed")]
    return ast.unparse(tree) + f"\niterations = {iterations}\n"


def compare(title: str, cell: str, setup: fragnb.Setup, seeds: list[int], network: str) -> bool:
    """Time ``seeds`` one after another here and side by side on the cluster; print; whether every
    seed's ``network`` ended with the same weights both ways."""
    start = time.perf_counter()
    plain = {}
    for seed in seeds:
        ns = setup.namespace(seed)
        exec(compile(cell, "<cell>", "exec"), ns)
        plain[seed] = ns[network].state_dict()
    one_after_another = time.perf_counter() - start

    start = time.perf_counter()
    result = fragnb.sweep(cell, setup, seeds=seeds, progress=False, plot=False)
    side_by_side = time.perf_counter() - start
    same = not result.failed and all(
        all(v.equal(plain[r.seed][k]) for k, v in r.values[network].state_dict().items()) for r in result.runs
    )
    speedup = one_after_another / side_by_side
    print(
        f"{title}, {len(seeds)} seeds on {os.cpu_count()} cores:\n"
        f"  plain Python, one after another: {one_after_another:.1f} s\n"
        f"  fragnb.sweep, side by side:      {side_by_side:.1f} s  ({speedup:.2f}x faster; target >= {TARGET}: "
        f"{'met' if speedup >= TARGET else 'missed'})\n"
        f"  every seed's final weights the same both ways: {same}",
        flush=True,
    )
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=146, help="146: notebook 01's 150k environment steps")
    parser.add_argument("--cleanrl-seeds", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cell = load_canonical(NOTEBOOK).body
    setup = fragnb.Setup("nb01", source=setup_source(args.iterations))
    short = fragnb.Setup("nb01", source=setup_source(1))
    fragnb.sweep(cell, short, seeds=[0, 1], progress=False, plot=False)  # workers up, code imported
    same = compare(f"notebook 01's PPO, {args.iterations} iterations", cell, setup, list(range(args.seeds)), "policy")
    if args.cleanrl_seeds:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from corpus.field import FIELD_BY_NAME

        loop = FIELD_BY_NAME["cleanrl_ppo"]
        source = loop.setup.replace("args = Args()", "args = Args(seed=seed)")
        source = source.replace("total_timesteps: int = 192", "total_timesteps: int = 20480")
        source = source.replace("num_steps: int = 16", "num_steps: int = 128")
        same &= compare(
            "CleanRL-style PPO, CartPole-v1, 20,480 steps",
            loop.cell,
            fragnb.Setup("cleanrl", source=source),
            list(range(args.cleanrl_seeds)),
            "agent",
        )
    fragnb.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
